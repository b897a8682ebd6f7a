/* The libm members of the unary family on the CPU: neg, abs, exp, log,
 * sqrt, rsqrt, sin, cos (rows: ops.c), float32 and float64 (float16 and
 * bfloat16 through float32: kernels/common/cast.h).
 *
 * DESIGN
 * Each is one C expression of x per element (FORMULAS below: float32
 * through libm's float functions, within an ulp or two of torch's
 * vectorized ones; float64 through the double ones). One range function
 * per op and dtype, elements spread over call->exec; cpu_ref runs the
 * same range on one thread. What they are for: the pieces of models
 * written out in torch (T5's layer norm as x * rsqrt(mean(x^2) + eps),
 * rotary tables as cos/sin of positions, -x), which torch.compile's
 * lowering sends as they are.
 * Test: build/tests/ops, suite math (against the double formulas).
 */
#include <math.h>

#include "kernels/common/cast.h"
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"

/* X(name, float32 expression of v, float64 expression of v) */
#define MATH_OPS(X)                                  \
  X(neg, -v, -v)                                     \
  X(abs, fabsf(v), fabs(v))                          \
  X(exp, expf(v), exp(v))                            \
  X(log, logf(v), log(v))                            \
  X(sqrt, sqrtf(v), sqrt(v))                         \
  X(rsqrt, 1.0f / sqrtf(v), 1.0 / sqrt(v))           \
  X(sin, sinf(v), sin(v))                            \
  X(cos, cosf(v), cos(v))

typedef struct math_job {
  const void *x;                   /* input (numel) */
  void *y;                         /* output, may be x */
} math_job_t;

#define MATH_DEFINE(name, f32, f64)                                        \
  OPD_OP_DECLARE(name);                                                    \
  OPD_FAST static void name##_range(void *arg, int64_t b, int64_t e) {     \
    const math_job_t *j = arg;                                             \
    const float *x = j->x;                                                 \
    float *y = j->y;                                                       \
    for (int64_t i = b; i < e; i++) {                                      \
      float v = x[i];                                                      \
      y[i] = f32;                                                          \
    }                                                                      \
  }                                                                        \
  static void name##64_range(void *arg, int64_t b, int64_t e) {            \
    const math_job_t *j = arg;                                             \
    const double *x = j->x;                                                \
    double *y = j->y;                                                      \
    for (int64_t i = b; i < e; i++) {                                      \
      double v = x[i];                                                     \
      y[i] = f64;                                                          \
    }                                                                      \
  }                                                                        \
  static int name##64(opd_kcall_t *call) {                                 \
    math_job_t j = {call->in[0].data, call->out[0].data};                  \
    call->exec->parallel_for(call->exec, call->in[0].numel,                \
                             OPD_GRAIN_ELEMS / 4, name##64_range, &j);     \
    return 0;                                                              \
  }                                                                        \
  int opd__##name##_cpu_fast(opd_kcall_t *call) {                          \
    OPD_CAST_DISPATCH(call, opd__##name##_cpu_fast, name##64);             \
    math_job_t j = {call->in[0].data, call->out[0].data};                  \
    call->exec->parallel_for(call->exec, call->in[0].numel,                \
                             OPD_GRAIN_ELEMS / 4, name##_range, &j);       \
    return 0;                                                              \
  }                                                                        \
  int opd__##name##_cpu_ref(opd_kcall_t *call) {                           \
    OPD_CAST_DISPATCH(call, opd__##name##_cpu_ref, name##64);              \
    math_job_t j = {call->in[0].data, call->out[0].data};                  \
    name##_range(&j, 0, call->in[0].numel);                                \
    return 0;                                                              \
  }

MATH_OPS(MATH_DEFINE)
