/* The compare family on the CPU (eq, ne, lt, le, gt, ge; rows: ops.c):
 * output rows (last dim) over call->exec, each operand read through
 * broadcast strides, compared in its own type (float16 / bfloat16 as
 * float32), written as bool 0 / 1.
 *
 * Variants: cpu_ref and cpu_fast are this one body (a plain loop the
 * compiler vectorizes where the strides are 1).
 * Test: build/tests/ops, suite compare (tests/ops/test_compare.c).
 */
#include <string.h>

#include "kernels/common/cast.h"
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/compare/compare.h"

typedef struct cjob {
  int op;                          /* CMP_* */
  int32_t dtype;                   /* a's and b's */
  const opd_tview_t *o;            /* output view (shape) */
  const void *a, *b;               /* operands */
  uint8_t *out;                    /* output, bool */
  int64_t len;                     /* elements of an output row */
  int64_t sa[OPD_MAX_RANK];        /* a's broadcast strides */
  int64_t sb[OPD_MAX_RANK];        /* b's */
} cjob_t;

#define CMP(x, y)                                                          \
  (j->op == CMP_EQ ? (x) == (y) : j->op == CMP_NE ? (x) != (y)             \
   : j->op == CMP_LT ? (x) < (y) : j->op == CMP_LE ? (x) <= (y)             \
   : j->op == CMP_GT ? (x) > (y) : (x) >= (y))

/* The row loop over elements stored as S, compared as T (LOAD converts). */
#define ROWS(S, T, LOAD)                                                   \
  for (int64_t i = 0; i < n; i++) {                                        \
    T x = LOAD(((const S *)j->a)[ia + i * ta]);                            \
    T y = LOAD(((const S *)j->b)[ib + i * tb]);                            \
    po[i] = (uint8_t)CMP(x, y);                                            \
  }
#define ID(v) (v)

static void run_rows(void *arg, int64_t b, int64_t e) {
  const cjob_t *j = arg;
  const opd_tview_t *o = j->o;
  int last = o->rank - 1;
  int64_t n = j->len, ta = last >= 0 ? j->sa[last] : 0, tb = last >= 0 ? j->sb[last] : 0;
  for (int64_t r = b; r < e; r++) {
    int64_t ia = 0, ib = 0, q = r;
    for (int d = o->rank - 2; d >= 0; d--) {
      int64_t k = q % o->shape[d];
      q /= o->shape[d];
      ia += k * j->sa[d];
      ib += k * j->sb[d];
    }
    uint8_t *po = j->out + r * n;
    switch (j->dtype) {
      case OPD_DTYPE_FLOAT32: ROWS(float, float, ID) break;
      case OPD_DTYPE_FLOAT64: ROWS(double, double, ID) break;
      case OPD_DTYPE_FLOAT16: ROWS(uint16_t, float, opd__f16_to_f32) break;
      case OPD_DTYPE_BFLOAT16: ROWS(uint16_t, float, opd__bf16_to_f32) break;
      case OPD_DTYPE_INT8: ROWS(int8_t, int8_t, ID) break;
      case OPD_DTYPE_INT32: ROWS(int32_t, int32_t, ID) break;
      case OPD_DTYPE_INT64: ROWS(int64_t, int64_t, ID) break;
      default: ROWS(uint8_t, uint8_t, ID) break;   /* uint8, bool */
    }
  }
}

static int compare_run(opd_kcall_t *call, int op) {
  const opd_tview_t *a = &call->in[0], *b = &call->in[1], *o = &call->out[0];
  if (o->numel == 0) return 0;
  cjob_t j = {.op = op, .dtype = a->dtype, .o = o, .a = a->data, .b = b->data,
              .out = o->data, .len = o->rank > 0 ? o->shape[o->rank - 1] : 1};
  opd__bcast_strides(a->shape, a->rank, o->rank, j.sa);
  opd__bcast_strides(b->shape, b->rank, o->rank, j.sb);
  call->exec->parallel_for(call->exec, o->numel / j.len, opd__row_grain(j.len), run_rows, &j);
  return 0;
}

#define COMPARE_KERNELS(name, op)                                                    \
  OPD_OP_DECLARE(name);                                                              \
  int opd__##name##_cpu_ref(opd_kcall_t *call) { return compare_run(call, op); }     \
  int opd__##name##_cpu_fast(opd_kcall_t *call) { return compare_run(call, op); }

COMPARE_KERNELS(eq, CMP_EQ)
COMPARE_KERNELS(ne, CMP_NE)
COMPARE_KERNELS(lt, CMP_LT)
COMPARE_KERNELS(le, CMP_LE)
COMPARE_KERNELS(gt, CMP_GT)
COMPARE_KERNELS(ge, CMP_GE)
