/* linear on the CPU: out (M, N) = act(x (M, K) @ weight (N, K)^T + bias),
 * float32 and float64 (plan: linear.h).
 *
 * Variants:
 *   cpu_ref   a dot product per output in double, bias and activation in
 *             double, rounded once (the truth)
 *   cpu_fast  the shared GEMM (kernels/common/gemm.h: its own GEMV on
 *             call->exec for batch 1, the trading shape, and 4..9; its AVX-512 /
 *             AVX2 tiles on call->exec for batches 10..64, with the bias
 *             and relu applied as each tile is stored; OpenBLAS sgemm
 *             otherwise, plain float loops with BLAS=0), then one fused
 *             bias + activation pass over the output rows where the
 *             tiles did not do it (8 lanes, the activations of
 *             kernels/common/act.h, as the unary ops), spread over
 *             call->exec
 * Activations (the reference in double): relu x < 0 ? 0 : x (NaN
 * passes); gelu 0.5x erfc(-x/sqrt2); gelu_tanh x / (1 + e^(-2u)),
 * u = sqrt(2/pi)(x + 0.044715x^3) (0.5x(1+tanh u) without its
 * cancellation); silu x / (1 + e^(-x)). x = -inf gives NaN in the gelu
 * forms and silu, as torch 1.13 does.
 * float64 (both variants): opd__dgemm (OpenBLAS dgemm, or plain loops
 * with BLAS=0), then bias and the activation as the reference's, in
 * double; float16 / bfloat16 run the float32 kernels on converted copies
 * (kernels/common/cast.h).
 * K == 0 gives act(bias) (act(0) without bias); M == 0 or N == 0 writes
 * nothing.
 * Test: build/tests/ops, suite linear (tests/ops/test_linear.c).
 */
#include <math.h>

#include "kernels/common/act.h"
#include "kernels/common/cast.h"
#include "kernels/common/cpu.h"
#include "kernels/common/gemm.h"
#include "kernels/common/kutil.h"
#include "kernels/linear/linear.h"

OPD_OP_DECLARE(linear);

#define SQRT1_2 0.70710678118654752440
#define SQRT_2_PI 0.79788456080286535588 /* sqrt(2/pi) */

static double act_ref(opd_act_t act, double v) {
  switch (act) {
    case OPD_ACT_RELU:
      return v < 0 ? 0.0 : v;
    case OPD_ACT_GELU:
      return 0.5 * v * erfc(-v * SQRT1_2);
    case OPD_ACT_GELU_TANH: {
      double u = SQRT_2_PI * (v + 0.044715 * v * v * v);
      double e = exp(-2.0 * fabs(u)); /* in [0, 1]: never overflows */
      return u >= 0 ? v / (1.0 + e) : v * e / (1.0 + e);
    }
    case OPD_ACT_SILU:
      return v / (1.0 + exp(-v));
    default:
      return v;
  }
}

/* float64: the product by opd__dgemm, then bias and act per element. */
static int linear64(opd_kcall_t *call) {
  linear_plan_t p;
  int rc = opd__linear_plan(call, &p, NULL);
  if (rc) return rc;
  const double *b = p.has_bias ? call->in[2].data : NULL;
  double *y = call->out[0].data;
  opd__dgemm(1, p.M, p.N, p.K, call->in[0].data, call->in[1].data, y);
  for (int64_t m = 0; m < p.M; m++)
    for (int64_t n = 0; n < p.N; n++)
      y[m * p.N + n] = act_ref(p.act, y[m * p.N + n] + (b ? b[n] : 0.0));
  return 0;
}

int opd__linear_cpu_ref(opd_kcall_t *call) {
  OPD_CAST_DISPATCH(call, opd__linear_cpu_ref, linear64);
  linear_plan_t p;
  int rc = opd__linear_plan(call, &p, NULL);
  if (rc) return rc;
  const float *x = call->in[0].data, *w = call->in[1].data;
  const float *b = p.has_bias ? call->in[2].data : NULL;
  float *y = call->out[0].data;
  for (int64_t m = 0; m < p.M; m++)
    for (int64_t n = 0; n < p.N; n++) {
      double s = b ? b[n] : 0.0;
      for (int64_t k = 0; k < p.K; k++)
        s += (double)x[m * p.K + k] * w[n * p.K + k];
      y[m * p.N + n] = (float)act_ref(p.act, s);
    }
  return 0;
}

typedef struct lin_job {
  const linear_plan_t *p;          /* the plan */
  const float *b;                  /* bias (N) or NULL */
  float *y;                        /* out (M, N): the GEMM's result */
} lin_job_t;

/* y[0..n) = f(y + b) (b NULL: no bias), 8 lanes at a time. */
#define EPI_LOOP(f8, f1)                                                   \
  do {                                                                     \
    int64_t n_ = 0;                                                        \
    for (; n_ + 8 <= N; n_ += 8) {                                         \
      opd_v8f v_ = opd__v8_load(y + n_);                                   \
      if (b) v_ += opd__v8_load(b + n_);                                   \
      opd__v8_store(y + n_, f8(v_));                                       \
    }                                                                      \
    for (; n_ < N; n_++) y[n_] = f1(y[n_] + (b ? b[n_] : 0.0f));           \
  } while (0)

OPD_V8 opd_v8f v8_id(opd_v8f v) { return v; }
OPD_V8 float id1(float v) { return v; }
OPD_V8 opd_v8f v8_relu(opd_v8f v) {
  return opd__v8_sel(v < 0.0f, opd__v8_splat(0.0f), v);
}
OPD_V8 float relu1(float v) { return v < 0 ? 0.0f : v; }

/* Rows [r0, r1) of y: y = act(y + b), in place, through the activations
 * the unary ops use (kernels/common/act.h: the same bits). */
__attribute__((optimize("fp-contract=fast")))
OPD_FAST static void epilogue(void *arg, int64_t r0, int64_t r1) {
  const lin_job_t *j = arg;
  const float *b = j->b;
  int64_t N = j->p->N;
  for (int64_t r = r0; r < r1; r++) {
    float *y = j->y + r * N;
    switch (j->p->act) {
      case OPD_ACT_RELU: EPI_LOOP(v8_relu, relu1); break;
      case OPD_ACT_GELU: EPI_LOOP(opd__v8_gelu, opd__gelu1); break;
      case OPD_ACT_GELU_TANH: EPI_LOOP(opd__v8_gelu_tanh, opd__gelu_tanh1); break;
      case OPD_ACT_SILU: EPI_LOOP(opd__v8_silu, opd__silu1); break;
      default: EPI_LOOP(v8_id, id1); break;
    }
  }
}

int opd__linear_cpu_fast(opd_kcall_t *call) {
  OPD_CAST_DISPATCH(call, opd__linear_cpu_fast, linear64);
  linear_plan_t p;
  int rc = opd__linear_plan(call, &p, NULL);
  if (rc) return rc;
  if (p.M == 0 || p.N == 0) return 0;
  if (!opd__gemm_fits(p.M, p.N, p.K)) return opd__linear_cpu_ref(call);
  lin_job_t j = {&p, p.has_bias ? call->in[2].data : NULL, call->out[0].data};
  if (p.K == 0)
    memset(j.y, 0, (size_t)(p.M * p.N) * sizeof(float));
  else if (p.M == 1 || (p.M >= OPD_GEMV_ROWS_MMIN && p.M < OPD_GEMM_WT_MMIN))
    /* batch 1 and 4..9: the GEMV on call->exec's threads */
    opd__sgemv_rows_t(call->exec, p.M, p.N, p.K, call->in[0].data, call->in[1].data, 0.0f, j.y);
  else if (opd__sgemm_wt(call->exec, p.M, p.N, p.K, call->in[0].data, call->in[1].data,
                         j.b, p.act == OPD_ACT_RELU, j.y)) {
    if (p.act == OPD_ACT_NONE || p.act == OPD_ACT_RELU) return 0; /* fused */
    j.b = NULL; /* added by the tiles */
  } else
    opd__sgemm_ex(call->exec, 1, p.M, p.N, p.K, call->in[0].data, call->in[1].data, 0.0f,
                  j.y);
  if (j.b || p.act != OPD_ACT_NONE) /* rows of 8-lane loops */
    call->exec->parallel_for(call->exec, p.M, opd__row_grain(p.N), epilogue, &j);
  return 0;
}
