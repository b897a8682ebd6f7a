/* conv2d's depthwise kernel on the CPU (depthwise.h): groups == C, so each
 * output channel k reads the one input channel k / (K/C).
 *
 * DESIGN
 * A GEMM per group would be (K/C x R*S) @ (R*S x P*Q) with an im2col pass
 * as large as the output times R*S: all overhead. Instead, per output
 * plane (n, k) and output row: the row starts as the bias, then each tap
 * (r, s) adds weight[k, 0, r, s] times the input row it reads, over the
 * output columns whose tap lies inside the image (the range found once
 * per tap, as im2col does, so the inner loop has no branch and
 * vectorizes at stride 1). The output row stays in L1 across the R*S
 * taps. float accumulation, as the GEMM path's. Planes are spread over
 * call->exec.
 * Test: build/tests/ops, suite conv2d (depthwise cases against cpu_ref)
 */
#include "kernels/conv2d/depthwise.h"

#include "kernels/common/kutil.h"

typedef struct dw_job {
  const conv_plan_t *p;            /* geometry */
  const float *x, *w, *bias;       /* x (N, C, H, W), w (K, 1, R, S) */
  float *y;                        /* (N, K, P, Q) */
} dw_job_t;

/* Output planes [b, e), plane i = (n, k) = (i / K, i % K). */
OPD_FAST static void dw_planes(void *arg, int64_t b, int64_t e) {
  const dw_job_t *j = arg;
  const conv_plan_t *p = j->p;
  int64_t mult = p->K / p->C; /* output channels per input channel */
  for (int64_t i = b; i < e; i++) {
    int64_t n = i / p->K, k = i % p->K;
    const float *xc = j->x + (n * p->C + k / mult) * p->H * p->W;
    const float *wk = j->w + k * p->R * p->S;
    float bv = j->bias ? j->bias[k] : 0.0f;
    float *dst = j->y + i * p->P * p->Q;
    for (int64_t op = 0; op < p->P; op++, dst += p->Q) {
      for (int64_t q = 0; q < p->Q; q++) dst[q] = bv;
      for (int64_t r = 0; r < p->R; r++) {
        int64_t ih = op * p->sh - p->ph + r * p->dh;
        if (ih < 0 || ih >= p->H) continue;
        const float *src = xc + ih * p->W;
        for (int64_t s = 0; s < p->S; s++) {
          float wv = wk[r * p->S + s];
          int64_t off = s * p->dw - p->pw;
          int64_t q0 = conv_first_q(0, off, p->sw, p->Q);
          int64_t q1 = conv_first_q(p->W, off, p->sw, p->Q);
          if (p->sw == 1) {
            const float *sp = src + q0 + off;
            float *dp = dst + q0;
            for (int64_t q = 0; q < q1 - q0; q++) dp[q] += wv * sp[q];
          } else {
            for (int64_t q = q0; q < q1; q++) dst[q] += wv * src[q * p->sw + off];
          }
        }
      }
    }
  }
}

int opd__conv2d_cpu_depthwise(opd_kcall_t *call, const conv_plan_t *p) {
  int64_t planes = p->N * p->K, per = p->P * p->Q * p->R * p->S;
  if (planes == 0 || p->P * p->Q == 0) return 0;
  dw_job_t j = {p, call->in[0].data, call->in[1].data,
                p->has_bias ? call->in[2].data : NULL, call->out[0].data};
  call->exec->parallel_for(call->exec, planes,
                           opd__row_grain(per > 0 ? per : 1), dw_planes, &j);
  return 0;
}
