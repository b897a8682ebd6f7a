/* The unary family on the CPU (relu, gelu, silu, sigmoid, tanh): y = f(x) elementwise over any
 * shape, float32 (rows: ops.c).
 *
 * DESIGN
 * The ops share their schema and shape rule (ops.c), their CUDA body
 * (cuda.cu) and, here, the layout of the fast kernels: one vectorizable
 * range function over the flat tensor, chunked over call->exec with
 * OPD_GRAIN_ELEMS; each op's section below says its formulas and
 * variants. A new op of the family: its row in ops.c, its section here,
 * its functor in cuda.cu.
 */
#include <math.h>
#include <string.h>

#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/common/rowred.h"

OPD_OP_DECLARE(relu);
OPD_OP_DECLARE(gelu);
OPD_OP_DECLARE(silu);
OPD_OP_DECLARE(sigmoid);
OPD_OP_DECLARE(tanh);

/* ---- relu on the CPU: y = x < 0 ? 0 : x (NaN passes through, as in torch).
 *
 * Variants:
 *   cpu_ref   scalar loop
 *   cpu_fast  vectorized loop (O3 + AVX2 clone), chunks over call->exec
 * Test: build/tests/ops, suite relu
 */

typedef struct relu_job {
  const float *x;                  /* input (numel) */
  float *y;                        /* output, may be x */
} relu_job_t;

int opd__relu_cpu_ref(opd_kcall_t *call) {
  const float *x = call->in[0].data;
  float *y = call->out[0].data;
  for (int64_t i = 0; i < call->in[0].numel; i++) y[i] = x[i] < 0 ? 0.0f : x[i];
  return 0;
}

OPD_FAST static void relu_range(void *arg, int64_t b, int64_t e) {
  const relu_job_t *j = arg;
  const float *x = j->x;
  float *y = j->y;
  for (int64_t i = b; i < e; i++) y[i] = x[i] < 0 ? 0.0f : x[i];
}

int opd__relu_cpu_fast(opd_kcall_t *call) {
  relu_job_t j = {call->in[0].data, call->out[0].data};
  call->exec->parallel_for(call->exec, call->in[0].numel, OPD_GRAIN_ELEMS,
                           relu_range, &j);
  return 0;
}

/* ---- gelu on the CPU.
 *
 * Variants:
 *   cpu_ref   the formulas of F.gelu evaluated in double, rounded once to
 *             float (the truth), in forms without cancellation or
 *             overflow, so exact for every float32 x:
 *               none: 0.5 x erfc(-x/sqrt2)  (= 0.5 x (1 + erf(x/sqrt2)),
 *                     whose 1 + erf is 0 in double below x ~ -8.3)
 *               tanh: x / (1 + e^(-2u)) for u >= 0, x e^(2u) / (1 + e^(2u))
 *                     below (= 0.5 x (1 + tanh u), whose 1 + tanh u is 0
 *                     in double below x ~ -6)
 *             x = -inf gives NaN (-inf * 0) in both forms, +inf gives
 *             +inf, NaN gives NaN: torch 1.13's values
 *   cpu_fast  float, branch-free, vectorizable: the exact form through
 *             erfc (Numerical Recipes' Chebyshev fit, relative error
 *             < 1.2e-7, with opd__expf_fast), written so the small
 *             outputs for negative x keep their relative accuracy:
 *               x < 0:  y = 0.5 x erfc(|x|/sqrt2)
 *               x >= 0: y = 0.5 x (2 - erfc(x/sqrt2))
 *             the tanh form as y = x * sigmoid(2u) = x / (1 + e^(-2u)),
 *             u = sqrt(2/pi)(x + 0.044715 x^3), which equals
 *             0.5x(1+tanh(u)) without its cancellation for negative x;
 *             e^(-2u) is +inf where opd__expf_fast saturates (-2u > 88.3,
 *             x below ~-10.04: opd__v8_expf_inf), so y = x / inf = -0
 *             there (it was x / (1 + 2.4e38): -1.4 at x = -3.4e38, -inf
 *             at -inf), at no extra cost.
 *             Float range: exact to ~1e-7 relative for every finite x;
 *             results below ~5e-38 in magnitude (x in [-10.9, -10.04] for
 *             tanh, [-14, -13.1] for erf, where opd__expf_fast flushes
 *             e^(< -87.3)) come out 0; x = -inf gives NaN, +inf +inf, NaN
 *             NaN in both forms, as torch 1.13.
 * Test: build/tests/ops, suites gelu (fast within 1e-6 + 1e-5|ref|) and
 * numerics (|x| up to FLT_MAX, denormals, inf, NaN)
 */

#define SQRT1_2 0.70710678118654752440
#define SQRT_2_PI 0.79788456080286535588 /* sqrt(2/pi) */

typedef struct gelu_job {
  const float *x;                  /* input (numel) */
  float *y;                        /* output, may be x */
} gelu_job_t;

static int is_tanh(const opd_kcall_t *call) {
  return call->attr[0].type == OPD_ATTR_STR &&
         strcmp(call->attr[0].s, "tanh") == 0;
}

int opd__gelu_cpu_ref(opd_kcall_t *call) {
  const float *x = call->in[0].data;
  float *y = call->out[0].data;
  int64_t n = call->in[0].numel;
  if (is_tanh(call)) {
    for (int64_t i = 0; i < n; i++) {
      double v = x[i], u = SQRT_2_PI * (v + 0.044715 * v * v * v);
      double e = exp(-2.0 * fabs(u)); /* in [0, 1]: never overflows */
      y[i] = (float)(u >= 0 ? v / (1.0 + e) : v * e / (1.0 + e));
    }
  } else {
    for (int64_t i = 0; i < n; i++) {
      double v = x[i];
      y[i] = (float)(0.5 * v * erfc(-v * SQRT1_2));
    }
  }
  return 0;
}

/* erfc(z) for z >= 0 (Numerical Recipes erfcc). */
static inline float erfc_pos(float z) {
  float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  return t * opd__expf_fast(p - z * z);
}

/* erfc_pos on 8 lanes. */
OPD_V8 opd_v8f erfc_pos8(opd_v8f z) {
  opd_v8f t = 1.0f / (1.0f + 0.5f * z);
  opd_v8f p = opd__v8_splat(0.17087277f);
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  return t * opd__v8_expf(p - z * z);
}

static inline float gelu_erf1(float v) {
  float c = erfc_pos(fabsf(v) * (float)SQRT1_2);
  return 0.5f * v * (v < 0 ? c : 2.0f - c);
}

/* e^t that is +inf past opd__expf_fast's saturation (t > 88.3). */
static inline float exp_inf(float t) {
  return t > 88.3f ? INFINITY : opd__expf_fast(t);
}

static inline float gelu_tanh1(float v) {
  float u = (float)SQRT_2_PI * (v + 0.044715f * v * v * v);
  return v / (1.0f + exp_inf(-2.0f * u));
}

/* fp-contract=fast (both forms): the x86-64-v3 clone fuses the polynomials'
 * and the exponential's multiply-adds into FMAs: 1.4-1.5x (erf) and
 * 1.2-1.35x (tanh) the elements per second on the 2-core VM
 * (bench_cpu_ops, 2026-12-05), within the same bounds of the tests. */
__attribute__((optimize("fp-contract=fast")))
OPD_FAST static void gelu_erf_range(void *arg, int64_t b, int64_t e) {
  const gelu_job_t *j = arg;
  const opd_v8u absmask = (opd_v8u){0} + 0x7fffffffu;
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    opd_v8f v = opd__v8_load(j->x + i);
    opd_v8f z = (opd_v8f)((opd_v8u)v & absmask) * (float)SQRT1_2;
    opd_v8f c = erfc_pos8(z);
    opd__v8_store(j->y + i, 0.5f * v * opd__v8_sel(v < 0.0f, c, 2.0f - c));
  }
  for (; i < e; i++) j->y[i] = gelu_erf1(j->x[i]);
}

__attribute__((optimize("fp-contract=fast")))
OPD_FAST static void gelu_tanh_range(void *arg, int64_t b, int64_t e) {
  const gelu_job_t *j = arg;
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    opd_v8f v = opd__v8_load(j->x + i);
    opd_v8f u = (float)SQRT_2_PI * (v + 0.044715f * v * v * v);
    opd__v8_store(j->y + i, v / (1.0f + opd__v8_expf_inf(-2.0f * u)));
  }
  for (; i < e; i++) j->y[i] = gelu_tanh1(j->x[i]);
}

int opd__gelu_cpu_fast(opd_kcall_t *call) {
  gelu_job_t j = {call->in[0].data, call->out[0].data};
  call->exec->parallel_for(call->exec, call->in[0].numel, OPD_GRAIN_ELEMS / 4,
                           is_tanh(call) ? gelu_tanh_range : gelu_erf_range,
                           &j);
  return 0;
}

/* ---- silu, sigmoid, tanh on the CPU.
 *
 * Variants:
 *   cpu_ref   the formula in double, rounded once (the truth):
 *               silu x / (1 + e^-x), sigmoid 1 / (1 + e^-x), tanh tanh(x)
 *             silu(-inf) is NaN (-inf / inf), as torch 1.13's
 *   cpu_fast  float, branch-free, vectorized (8 lanes), e^t through
 *             opd__v8_expf_inf (+inf past 88.3, so that silu(-inf) is
 *             NaN and sigmoid of a large negative x is 0 as in the
 *             reference); tanh as Cephes' tanhf: |x| < 0.625 the odd
 *             polynomial x + x^3 P(x^2), else sign(x)(1 - 2 / (e^2|x| + 1))
 *             (no cancellation in either range)
 * Test: build/tests/ops, suite unary (fast within 1e-6 + 1e-5|ref|).
 */

typedef struct elt_job {
  const float *x;                  /* input (numel) */
  float *y;                        /* output, may be x */
} elt_job_t;

/* The reference of an elementwise op of this section: y = f(v), v = x[i]
 * in double, rounded once. */
#define ELT_REF(name, f)                                                   \
  int opd__##name##_cpu_ref(opd_kcall_t *call) {                           \
    const float *x = call->in[0].data;                                     \
    float *y = call->out[0].data;                                          \
    for (int64_t i = 0; i < call->in[0].numel; i++) {                      \
      double v = x[i];                                                     \
      y[i] = (float)(f);                                                   \
    }                                                                      \
    return 0;                                                              \
  }

ELT_REF(silu, v / (1.0 + exp(-v)))
ELT_REF(sigmoid, 1.0 / (1.0 + exp(-v)))
ELT_REF(tanh, tanh(v))

__attribute__((optimize("fp-contract=fast")))
OPD_FAST static void silu_range(void *arg, int64_t b, int64_t e) {
  const elt_job_t *j = arg;
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    opd_v8f v = opd__v8_load(j->x + i);
    opd__v8_store(j->y + i, v / (1.0f + opd__v8_expf_inf(-v)));
  }
  for (; i < e; i++) j->y[i] = j->x[i] / (1.0f + exp_inf(-j->x[i]));
}

__attribute__((optimize("fp-contract=fast")))
OPD_FAST static void sigmoid_range(void *arg, int64_t b, int64_t e) {
  const elt_job_t *j = arg;
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    opd_v8f v = opd__v8_load(j->x + i);
    opd__v8_store(j->y + i, 1.0f / (1.0f + opd__v8_expf_inf(-v)));
  }
  for (; i < e; i++) j->y[i] = 1.0f / (1.0f + exp_inf(-j->x[i]));
}

/* Cephes tanhf's polynomial for |x| < 0.625: x + x^3 P(x^2). */
#define TANH_POLY(x, s)                                                    \
  (((((-5.70498872745e-3f * (s) + 2.06390887954e-2f) * (s) -              \
      5.37397155531e-2f) * (s) + 1.33314422036e-1f) * (s) -               \
    3.33332819422e-1f) * (s) * (x) + (x))

static inline float tanh1(float v) {
  float a = fabsf(v);
  if (a < 0.625f) return TANH_POLY(v, v * v);
  return copysignf(1.0f - 2.0f / (exp_inf(2.0f * a) + 1.0f), v);
}

__attribute__((optimize("fp-contract=fast")))
OPD_FAST static void tanh_range(void *arg, int64_t b, int64_t e) {
  const elt_job_t *j = arg;
  const opd_v8u absmask = (opd_v8u){0} + 0x7fffffffu;
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    opd_v8f v = opd__v8_load(j->x + i);
    opd_v8f a = (opd_v8f)((opd_v8u)v & absmask);
    opd_v8f big = 1.0f - 2.0f / (opd__v8_expf_inf(2.0f * a) + 1.0f);
    big = (opd_v8f)(((opd_v8u)big & absmask) | ((opd_v8u)v & ~absmask));
    opd__v8_store(j->y + i, opd__v8_sel(a < 0.625f, TANH_POLY(v, v * v), big));
  }
  for (; i < e; i++) j->y[i] = tanh1(j->x[i]);
}

/* The fast entry point of an elementwise op of this section. */
#define ELT_FAST(name)                                                     \
  int opd__##name##_cpu_fast(opd_kcall_t *call) {                          \
    elt_job_t j = {call->in[0].data, call->out[0].data};                   \
    call->exec->parallel_for(call->exec, call->in[0].numel,                \
                             OPD_GRAIN_ELEMS / 4, name##_range, &j);       \
    return 0;                                                              \
  }

ELT_FAST(silu)
ELT_FAST(sigmoid)
ELT_FAST(tanh)
