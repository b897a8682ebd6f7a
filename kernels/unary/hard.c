/* The piecewise-linear members of the unary family on the CPU: hardtanh,
 * hardsigmoid and hardswish (rows: ops.c), float32 and float64 (float16
 * and bfloat16 through float32: kernels/common/cast.h).
 *
 * DESIGN
 * All three are one clamp: c = min(max(x + shift, lo), hi), then
 * y = c / div (hardtanh: shift 0, lo and hi its attributes, div 1;
 * hardsigmoid: c = clamp(x + 3, 0, 6), y = c / 6) or y = x * c / div
 * (hardswish), torch's CPU formulas in torch's order of operations, so
 * float32 results equal torch's bit for bit. A NaN fails both comparisons
 * and passes through, as torch's. One range function serves both variants
 * (cpu_ref is cpu_fast on one thread): the loop is branch-free and
 * vectorizes as written.
 * Test: build/tests/ops, suite hard (against the formulas in double).
 */
#include "kernels/common/cast.h"
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"

OPD_OP_DECLARE(hardtanh);
OPD_OP_DECLARE(hardsigmoid);
OPD_OP_DECLARE(hardswish);

typedef struct hard {
  double shift, lo, hi, div;       /* c = clamp(x + shift, lo, hi) */
  int mul;                         /* y = x * c / div, else c / div */
} hard_t;

typedef struct hard_job {
  hard_t h;
  const void *x;                   /* input (numel) */
  void *y;                         /* output, may be x */
} hard_job_t;

#define HARD_LOOP(T)                                                       \
  do {                                                                     \
    const T *x = j->x;                                                     \
    T *y = j->y;                                                           \
    const T shift = (T)j->h.shift, lo = (T)j->h.lo, hi = (T)j->h.hi,       \
            div = (T)j->h.div;                                             \
    for (int64_t i = b; i < e; i++) {                                      \
      T v = x[i], c = v + shift;                                           \
      c = c < lo ? lo : c;                                                 \
      c = c > hi ? hi : c;                                                 \
      y[i] = (j->h.mul ? v * c : c) / div;                                 \
    }                                                                      \
  } while (0)

OPD_FAST static void hard_range(void *arg, int64_t b, int64_t e) {
  const hard_job_t *j = arg;
  HARD_LOOP(float);
}

static void hard64_range(void *arg, int64_t b, int64_t e) {
  const hard_job_t *j = arg;
  HARD_LOOP(double);
}

static int hard_run(opd_kcall_t *call, hard_t h, int64_t grain) {
  hard_job_t j = {h, call->in[0].data, call->out[0].data};
  int d64 = call->in[0].dtype == OPD_DTYPE_FLOAT64;
  call->exec->parallel_for(call->exec, call->in[0].numel, grain,
                           d64 ? hard64_range : hard_range, &j);
  return 0;
}

static hard_t hardtanh_of(const opd_kcall_t *call) {
  hard_t h = {0, -1, 1, 1, 0};
  if (call->attr[0].type == OPD_ATTR_FLOAT) h.lo = call->attr[0].f;
  if (call->attr[1].type == OPD_ATTR_FLOAT) h.hi = call->attr[1].f;
  return h;
}

static const hard_t HARDSIGMOID = {3, 0, 6, 6, 0};
static const hard_t HARDSWISH = {3, 0, 6, 6, 1};

static int hardtanh64(opd_kcall_t *call) {
  return hard_run(call, hardtanh_of(call), OPD_GRAIN_ELEMS);
}
static int hardsigmoid64(opd_kcall_t *call) {
  return hard_run(call, HARDSIGMOID, OPD_GRAIN_ELEMS);
}
static int hardswish64(opd_kcall_t *call) {
  return hard_run(call, HARDSWISH, OPD_GRAIN_ELEMS);
}

/* The entry points: cpu_fast over call->exec, cpu_ref on one range. */
#define HARD_ENTRY(name, hval)                                             \
  int opd__##name##_cpu_fast(opd_kcall_t *call) {                          \
    OPD_CAST_DISPATCH(call, opd__##name##_cpu_fast, name##64);             \
    return hard_run(call, hval, OPD_GRAIN_ELEMS);                          \
  }                                                                        \
  int opd__##name##_cpu_ref(opd_kcall_t *call) {                           \
    OPD_CAST_DISPATCH(call, opd__##name##_cpu_ref, name##64);              \
    hard_job_t j = {hval, call->in[0].data, call->out[0].data};            \
    hard_range(&j, 0, call->in[0].numel);                                  \
    return 0;                                                              \
  }

HARD_ENTRY(hardtanh, hardtanh_of(call))
HARD_ENTRY(hardsigmoid, HARDSIGMOID)
HARD_ENTRY(hardswish, HARDSWISH)
