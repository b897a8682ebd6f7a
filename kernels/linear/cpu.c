/* linear on the CPU: out (M, N) = act(x (M, K) @ weight (N, K)^T + bias),
 * float32 (plan: linear.h).
 *
 * Variants:
 *   cpu_ref   a dot product per output in double, bias and activation in
 *             double, rounded once (the truth)
 *   cpu_fast  the shared GEMM (kernels/common/gemm.h: OpenBLAS sgemv for
 *             batch 1, the trading shape, sgemm otherwise; its plain float
 *             kernel with BLAS=0), then one fused bias + activation pass
 *             over the output rows, spread over call->exec
 * Activations (both variants): relu x < 0 ? 0 : x (NaN passes); gelu
 * 0.5x erfc(-x/sqrt2); gelu_tanh x / (1 + e^(-2u)), u = sqrt(2/pi)(x +
 * 0.044715x^3) (0.5x(1+tanh u) without its cancellation); silu
 * x / (1 + e^(-x)). x = -inf gives NaN in the gelu forms and silu, as
 * torch 1.13 does.
 * K == 0 gives act(bias) (act(0) without bias); M == 0 or N == 0 writes
 * nothing.
 * Test: build/tests/ops, suite linear (tests/ops/test_linear.c).
 */
#include <math.h>

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

int opd__linear_cpu_ref(opd_kcall_t *call) {
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

/* Rows [r0, r1) of y: y = act(y + b), in place. */
OPD_FAST static void epilogue(void *arg, int64_t r0, int64_t r1) {
  const lin_job_t *j = arg;
  const float *b = j->b;
  int64_t N = j->p->N;
  opd_act_t act = j->p->act;
  for (int64_t r = r0; r < r1; r++) {
    float *y = j->y + r * N;
    if (b)
      for (int64_t n = 0; n < N; n++) y[n] += b[n];
    switch (act) {
      case OPD_ACT_RELU:
        for (int64_t n = 0; n < N; n++) y[n] = y[n] < 0 ? 0.0f : y[n];
        break;
      case OPD_ACT_GELU:
        for (int64_t n = 0; n < N; n++)
          y[n] = 0.5f * y[n] * erfcf(-y[n] * (float)SQRT1_2);
        break;
      case OPD_ACT_GELU_TANH:
        for (int64_t n = 0; n < N; n++) {
          float v = y[n], u = (float)SQRT_2_PI * (v + 0.044715f * v * v * v);
          y[n] = v / (1.0f + expf(-2.0f * u));
        }
        break;
      case OPD_ACT_SILU:
        for (int64_t n = 0; n < N; n++) y[n] = y[n] / (1.0f + expf(-y[n]));
        break;
      default:
        break;
    }
  }
}

int opd__linear_cpu_fast(opd_kcall_t *call) {
  linear_plan_t p;
  int rc = opd__linear_plan(call, &p, NULL);
  if (rc) return rc;
  if (p.M == 0 || p.N == 0) return 0;
  if (!opd__gemm_fits(p.M, p.N, p.K)) return opd__linear_cpu_ref(call);
  lin_job_t j = {&p, p.has_bias ? call->in[2].data : NULL, call->out[0].data};
  if (p.K == 0)
    memset(j.y, 0, (size_t)(p.M * p.N) * sizeof(float));
  else
    opd__sgemm(1, p.M, p.N, p.K, call->in[0].data, call->in[1].data, 0.0f, j.y);
  if (j.b || p.act != OPD_ACT_NONE)
    call->exec->parallel_for(call->exec, p.M, opd__row_grain(p.N), epilogue, &j);
  return 0;
}
