/* The binary family's integer kernels on the CPU (add, sub, mul of int8,
 * uint8, int32, int64; semantics: kernels/binary/int.h).
 *
 * DESIGN
 * Output rows (last dim) spread over call->exec, each operand read
 * through broadcast strides (0 along stretched dims), the arithmetic in
 * uint64_t (wraparound, as torch) and stored truncated to the dtype.
 * One variant serves cpu_ref and cpu_fast: the loop is plain enough for
 * the compiler's vectorizer where the strides are 1.
 * Test: build/tests/ops, suite binary_int (tests/ops/test_binary_int.c).
 */
#include <string.h>

#include "kernels/binary/int.h"
#include "kernels/common/kutil.h"

enum { I_ADD, I_SUB, I_MUL };

typedef struct ijob {
  int op;                          /* I_ADD, I_SUB, I_MUL */
  uint64_t al;                     /* alpha (add / sub), two's complement */
  int32_t dtype;                   /* the operands' and output's dtype */
  const opd_tview_t *o;            /* output view (shape) */
  const void *a, *b;               /* operands */
  void *out;                       /* output */
  int64_t len;                     /* elements of an output row */
  int64_t sa[OPD_MAX_RANK];        /* a's broadcast strides */
  int64_t sb[OPD_MAX_RANK];        /* b's broadcast strides */
} ijob_t;

#define ROWS(T)                                                                 \
  for (int64_t r = b; r < e; r++) {                                             \
    int64_t ia = 0, ib = 0, q = r;                                              \
    for (int d = o->rank - 2; d >= 0; d--) {                                    \
      int64_t k = q % o->shape[d];                                              \
      q /= o->shape[d];                                                         \
      ia += k * j->sa[d];                                                       \
      ib += k * j->sb[d];                                                       \
    }                                                                           \
    const T *x = (const T *)j->a + ia, *y = (const T *)j->b + ib;               \
    T *po = (T *)j->out + r * n;                                                \
    for (int64_t i = 0; i < n; i++) {                                           \
      uint64_t u = (uint64_t)(int64_t)x[i * ta], v = (uint64_t)(int64_t)y[i * tb]; \
      po[i] = (T)(j->op == I_MUL ? u * v : j->op == I_ADD ? u + j->al * v         \
                                                          : u - j->al * v);       \
    }                                                                           \
  }

static void run_rows(void *arg, int64_t b, int64_t e) {
  const ijob_t *j = arg;
  const opd_tview_t *o = j->o;
  int last = o->rank - 1;
  int64_t n = j->len, ta = last >= 0 ? j->sa[last] : 0, tb = last >= 0 ? j->sb[last] : 0;
  switch (j->dtype) {
    case OPD_DTYPE_INT8: ROWS(int8_t) break;
    case OPD_DTYPE_UINT8: ROWS(uint8_t) break;
    case OPD_DTYPE_INT32: ROWS(int32_t) break;
    default: ROWS(int64_t) break;
  }
}

int opd__binary_int_cpu(opd_kcall_t *call) {
  const opd_tview_t *a = &call->in[0], *b = &call->in[1], *o = &call->out[0];
  if (!OPD_BIN_IS_INT(o->dtype))
    return opd__kerr(call, OPD_EDTYPE, "no integer kernel for %s",
                     opd__kdtype_name(o->dtype));
  if (o->numel == 0) return 0;
  const char *name = call->op->name;
  ijob_t j = {.op = strcmp(name, "mul") == 0 ? I_MUL : strcmp(name, "sub") == 0 ? I_SUB : I_ADD,
              .al = 1, .dtype = o->dtype, .o = o, .a = a->data, .b = b->data,
              .out = o->data, .len = o->rank > 0 ? o->shape[o->rank - 1] : 1};
  if (j.op != I_MUL && call->op->n_attrs >= 1)
    j.al = (uint64_t)(int64_t)call->attr[0].f;   /* integral: the shape rule checked */
  opd__bcast_strides(a->shape, a->rank, o->rank, j.sa);
  opd__bcast_strides(b->shape, b->rank, o->rank, j.sb);
  call->exec->parallel_for(call->exec, o->numel / j.len, opd__row_grain(j.len), run_rows, &j);
  return 0;
}
