/* The unary family on the CPU (relu, gelu, silu, sigmoid, tanh): y = f(x) elementwise over any
 * shape, float32 and float64 (float16 and bfloat16 through float32:
 * kernels/common/cast.h) (rows: ops.c).
 *
 * DESIGN
 * The ops share their schema and shape rule (ops.c), their CUDA body
 * (cuda.cu) and, here, the layout of the fast kernels: one vectorizable
 * range function over the flat tensor, chunked over call->exec with
 * OPD_GRAIN_ELEMS; each op's section below says its formulas and
 * variants. A new op of the family: its row in ops.c, its section here,
 * its functor in cuda.cu. Every entry point starts with OPD_CAST_DISPATCH:
 * float64 runs the float64 section at the end (the references' formulas
 * in double), float16 / bfloat16 the float32 kernels on converted copies.
 */
#include <math.h>
#include <string.h>

#include "kernels/common/act.h"
#include "kernels/common/cast.h"
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/common/rowred.h"

OPD_OP_DECLARE(relu);
OPD_OP_DECLARE(gelu);
OPD_OP_DECLARE(silu);
OPD_OP_DECLARE(sigmoid);
OPD_OP_DECLARE(tanh);

#define SQRT1_2 0.70710678118654752440
#define SQRT_2_PI 0.79788456080286535588 /* sqrt(2/pi) */

/* The family's formulas in double, the truth: the float32 references
 * round them once, the float64 kernels (the last section) store them. */
typedef enum { U_RELU, U_GELU, U_GELU_TANH, U_SILU, U_SIGMOID, U_TANH } unary_op_t;

static double formula(unary_op_t op, double v) {
  switch (op) {
    case U_RELU: return v < 0 ? 0.0 : v;
    case U_GELU: return 0.5 * v * erfc(-v * SQRT1_2);
    case U_GELU_TANH: {
      double u = SQRT_2_PI * (v + 0.044715 * v * v * v);
      double e = exp(-2.0 * fabs(u)); /* in [0, 1]: never overflows */
      return u >= 0 ? v / (1.0 + e) : v * e / (1.0 + e);
    }
    case U_SILU: return v / (1.0 + exp(-v));
    case U_SIGMOID: return 1.0 / (1.0 + exp(-v));
    default: return tanh(v);
  }
}

/* The float64 kernels (the last section). */
static int relu64(opd_kcall_t *call);
static int gelu64(opd_kcall_t *call);
static int silu64(opd_kcall_t *call);
static int sigmoid64(opd_kcall_t *call);
static int tanh64(opd_kcall_t *call);

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
  OPD_CAST_DISPATCH(call, opd__relu_cpu_ref, relu64);
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
  OPD_CAST_DISPATCH(call, opd__relu_cpu_fast, relu64);
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
 *             erfc(|x|/sqrt2) = e^(-x^2/2) t Q(t), t = 1/(1 + q|x|)
 *             (kernels/common/act.h: a fitted polynomial, relative error
 *             < 4.2e-6 for every float x), written so the small
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
 *             tanh, below -13.2 for erf, where e^(-x^2/2) leaves float's
 *             normal range) come out 0; x = -inf gives NaN, +inf +inf, NaN
 *             NaN in both forms, as torch 1.13.
 * Test: build/tests/ops, suites gelu (fast within 1e-6 + 1e-5|ref|) and
 * numerics (|x| up to FLT_MAX, denormals, inf, NaN)
 */

typedef struct gelu_job {
  const float *x;                  /* input (numel) */
  float *y;                        /* output, may be x */
} gelu_job_t;

static int is_tanh(const opd_kcall_t *call) {
  return call->attr[0].type == OPD_ATTR_STR &&
         strcmp(call->attr[0].s, "tanh") == 0;
}

int opd__gelu_cpu_ref(opd_kcall_t *call) {
  OPD_CAST_DISPATCH(call, opd__gelu_cpu_ref, gelu64);
  const float *x = call->in[0].data;
  float *y = call->out[0].data;
  unary_op_t op = is_tanh(call) ? U_GELU_TANH : U_GELU;
  for (int64_t i = 0; i < call->in[0].numel; i++) y[i] = (float)formula(op, x[i]);
  return 0;
}

/* fp-contract=fast (both forms): the x86-64-v3 clone fuses the polynomials'
 * and the exponential's multiply-adds into FMAs: 1.4-1.5x (erf) and
 * 1.2-1.35x (tanh) the elements per second on the 2-core VM
 * (bench_cpu_ops, 2026-12-05), within the same bounds of the tests. */
/* The loops prefetch x 1 KiB ahead: with this much arithmetic per element
 * the hardware prefetch fell behind (gelu from memory 1.23 ns/element
 * without, 0.81 with; in cache 0.64; one core of the 2-vCPU VM,
 * 2026-12-07). */
#define GELU_AHEAD 256
__attribute__((optimize("fp-contract=fast")))
OPD_FAST static void gelu_erf_range(void *arg, int64_t b, int64_t e) {
  const gelu_job_t *j = arg;
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    __builtin_prefetch(j->x + i + GELU_AHEAD);
    opd__v8_store(j->y + i, opd__v8_gelu(opd__v8_load(j->x + i)));
  }
  for (; i < e; i++) j->y[i] = opd__gelu1(j->x[i]);
}

__attribute__((optimize("fp-contract=fast")))
OPD_FAST static void gelu_tanh_range(void *arg, int64_t b, int64_t e) {
  const gelu_job_t *j = arg;
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    __builtin_prefetch(j->x + i + GELU_AHEAD);
    opd__v8_store(j->y + i, opd__v8_gelu_tanh(opd__v8_load(j->x + i)));
  }
  for (; i < e; i++) j->y[i] = opd__gelu_tanh1(j->x[i]);
}

int opd__gelu_cpu_fast(opd_kcall_t *call) {
  OPD_CAST_DISPATCH(call, opd__gelu_cpu_fast, gelu64);
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

/* The reference of an elementwise op of this section: formula(op, x[i])
 * in double, rounded once. */
#define ELT_REF(name, op)                                                  \
  int opd__##name##_cpu_ref(opd_kcall_t *call) {                           \
    OPD_CAST_DISPATCH(call, opd__##name##_cpu_ref, name##64);              \
    const float *x = call->in[0].data;                                     \
    float *y = call->out[0].data;                                          \
    for (int64_t i = 0; i < call->in[0].numel; i++)                        \
      y[i] = (float)formula(op, x[i]);                                     \
    return 0;                                                              \
  }

ELT_REF(silu, U_SILU)
ELT_REF(sigmoid, U_SIGMOID)
ELT_REF(tanh, U_TANH)

/* The range function of an elementwise op of this section: 8 lanes of
 * opd__v8_<name>, the tail through opd__<name>1 (kernels/common/act.h). */
#define ELT_RANGE(name)                                                    \
  __attribute__((optimize("fp-contract=fast")))                            \
  OPD_FAST static void name##_range(void *arg, int64_t b, int64_t e) {     \
    const elt_job_t *j = arg;                                              \
    int64_t i = b;                                                         \
    for (; i + 8 <= e; i += 8)                                             \
      opd__v8_store(j->y + i, opd__v8_##name(opd__v8_load(j->x + i)));     \
    for (; i < e; i++) j->y[i] = opd__##name##1(j->x[i]);                  \
  }

ELT_RANGE(silu)
ELT_RANGE(sigmoid)
ELT_RANGE(tanh)

/* The fast entry point of an elementwise op of this section. */
#define ELT_FAST(name)                                                     \
  int opd__##name##_cpu_fast(opd_kcall_t *call) {                          \
    OPD_CAST_DISPATCH(call, opd__##name##_cpu_fast, name##64);             \
    elt_job_t j = {call->in[0].data, call->out[0].data};                   \
    call->exec->parallel_for(call->exec, call->in[0].numel,                \
                             OPD_GRAIN_ELEMS / 4, name##_range, &j);       \
    return 0;                                                              \
  }

ELT_FAST(silu)
ELT_FAST(sigmoid)
ELT_FAST(tanh)

/* ---- float64, every op of the family: the formulas (formula()) in
 * double (relu: x < 0 ? 0 : x; gelu's two forms without cancellation;
 * silu, sigmoid, tanh), elements spread over call->exec.
 * Test: build/tests/ops, suite dtypes64 (against long double).
 */

typedef struct u64_job {
  unary_op_t op;                   /* the function */
  const double *x;                 /* input (numel) */
  double *y;                       /* output, may be x */
} u64_job_t;

static void u64_range(void *arg, int64_t b, int64_t e) {
  const u64_job_t *j = arg;
  for (int64_t i = b; i < e; i++) j->y[i] = formula(j->op, j->x[i]);
}

static int u64_run(opd_kcall_t *call, unary_op_t op) {
  u64_job_t j = {op, call->in[0].data, call->out[0].data};
  call->exec->parallel_for(call->exec, call->in[0].numel, OPD_GRAIN_ELEMS / 4,
                           u64_range, &j);
  return 0;
}

static int relu64(opd_kcall_t *call) { return u64_run(call, U_RELU); }
static int gelu64(opd_kcall_t *call) {
  return u64_run(call, is_tanh(call) ? U_GELU_TANH : U_GELU);
}
static int silu64(opd_kcall_t *call) { return u64_run(call, U_SILU); }
static int sigmoid64(opd_kcall_t *call) { return u64_run(call, U_SIGMOID); }
static int tanh64(opd_kcall_t *call) { return u64_run(call, U_TANH); }
