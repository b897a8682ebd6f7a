/* conv2d on the CPU, any groups (Cg = C/G input and Kg = K/G output
 * channels per group).
 *
 * Variants:
 *   cpu_ref   direct 7-deep loop, double accumulation (truth)
 *   cpu_fast  depthwise (one input channel per group, Cg = 1): the direct
 *             kernel of depthwise.c. Else per image and group: im2col into
 *             cols (Cg*R*S, P*Q) with its rows spread over call->exec, then
 *             y_ng (Kg, P*Q) = weight_g (Kg, Cg*R*S) @ cols with OpenBLAS
 *             cblas_sgemm (threaded by OpenBLAS), the bias pre-filled into
 *             y_n and added through beta = 1. A 1x1 kernel with stride 1
 *             and no padding skips im2col: cols is x_ng.
 * Built with OPD_NO_BLAS (make BLAS=0: the GPU machine has no OpenBLAS),
 * cpu_fast is cpu_ref, but for depthwise.
 * Test: build/tests/ops, suite conv2d
 */
#ifndef OPD_NO_BLAS
#include <cblas.h>
#endif
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/conv2d/depthwise.h"
#include "kernels/conv2d/plan.h"

OPD_OP_DECLARE(conv2d);

int opd__conv2d_cpu_ref(opd_kcall_t *call) {
  conv_plan_t p;
  int rc = opd__conv2d_plan(call, &p);
  if (rc) return rc;
  const float *x = call->in[0].data, *w = call->in[1].data;
  const float *bias = p.has_bias ? call->in[2].data : NULL;
  float *y = call->out[0].data;
  int64_t Cg = p.C / p.G, Kg = p.K / p.G;
  for (int64_t n = 0; n < p.N; n++)
    for (int64_t k = 0; k < p.K; k++)
      for (int64_t op = 0; op < p.P; op++)
        for (int64_t oq = 0; oq < p.Q; oq++) {
          double acc = bias ? bias[k] : 0.0;
          for (int64_t c = k / Kg * Cg; c < (k / Kg + 1) * Cg; c++)
            for (int64_t r = 0; r < p.R; r++) {
              int64_t ih = op * p.sh - p.ph + r * p.dh;
              if (ih < 0 || ih >= p.H) continue;
              for (int64_t s = 0; s < p.S; s++) {
                int64_t iw = oq * p.sw - p.pw + s * p.dw;
                if (iw < 0 || iw >= p.W) continue;
                acc += (double)x[((n * p.C + c) * p.H + ih) * p.W + iw] *
                       w[((k * Cg + c % Cg) * p.R + r) * p.S + s];
              }
            }
          y[((n * p.K + k) * p.P + op) * p.Q + oq] = (float)acc;
        }
  return 0;
}

#ifdef OPD_NO_BLAS
int opd__conv2d_cpu_fast(opd_kcall_t *call) {
  conv_plan_t p;
  int rc = opd__conv2d_plan(call, &p);
  if (rc) return rc;
  if (p.G > 1 && p.C == p.G) return opd__conv2d_cpu_depthwise(call, &p);
  return opd__conv2d_cpu_ref(call);
}
#else
typedef struct im2col_job {
  const conv_plan_t *p;            /* geometry */
  const float *x;                  /* one group of one image (Cg, H, W) */
  float *col;                      /* (Cg*R*S, P*Q) */
} im2col_job_t;

/* Rows [b, e) of cols; row (c, r, s) holds x[c, p*sh-ph+r*dh, q*sw-pw+s*dw]
 * over (p, q), zero outside the image. */
OPD_FAST static void im2col_rows(void *arg, int64_t b, int64_t e) {
  const im2col_job_t *j = arg;
  const conv_plan_t *p = j->p;
  int64_t PQ = p->P * p->Q;
  for (int64_t row = b; row < e; row++) {
    int64_t s = row % p->S, r = row / p->S % p->R, c = row / (p->S * p->R);
    float *dst = j->col + row * PQ;
    int64_t off = s * p->dw - p->pw;
    int64_t q0 = conv_first_q(0, off, p->sw, p->Q);
    int64_t q1 = conv_first_q(p->W, off, p->sw, p->Q);
    if (q1 < q0) q1 = q0;
    for (int64_t op = 0; op < p->P; op++, dst += p->Q) {
      int64_t ih = op * p->sh - p->ph + r * p->dh;
      if (ih < 0 || ih >= p->H) {
        memset(dst, 0, (size_t)p->Q * sizeof(float));
        continue;
      }
      const float *src = j->x + (c * p->H + ih) * p->W; /* the input row */
      for (int64_t q = 0; q < q0; q++) dst[q] = 0;
      if (p->sw == 1)
        memcpy(dst + q0, src + q0 + off, (size_t)(q1 - q0) * sizeof(float));
      else
        for (int64_t q = q0; q < q1; q++) dst[q] = src[q * p->sw + off];
      for (int64_t q = q1; q < p->Q; q++) dst[q] = 0;
    }
  }
}

int opd__conv2d_cpu_fast(opd_kcall_t *call) {
  conv_plan_t p;
  int rc = opd__conv2d_plan(call, &p);
  if (rc) return rc;
  if (p.G > 1 && p.C == p.G) return opd__conv2d_cpu_depthwise(call, &p);
  int64_t Cg = p.C / p.G, Kg = p.K / p.G;
  int64_t PQ = p.P * p.Q, CRS = Cg * p.R * p.S;
  if (PQ > INT_MAX || CRS > INT_MAX || p.K > INT_MAX)
    return opd__conv2d_cpu_ref(call); /* beyond BLAS's int sizes */
  if (p.N == 0 || p.K == 0 || PQ == 0) return 0;
  const float *x = call->in[0].data, *w = call->in[1].data;
  const float *bias = p.has_bias ? call->in[2].data : NULL;
  float *y = call->out[0].data;
  int direct = p.R == 1 && p.S == 1 && p.sh == 1 && p.sw == 1 && p.ph == 0 &&
               p.pw == 0 && p.pb == 0 && p.pr == 0;
  float *col = NULL;
  if (!direct && CRS > 0) {
    col = malloc((size_t)(CRS * PQ) * sizeof(float));
    if (!col)
      return opd__kerr(call, OPD_ENOMEM,
                       "cannot allocate %lld bytes for im2col",
                       (long long)(CRS * PQ * (int64_t)sizeof(float)));
  }
  for (int64_t n = 0; n < p.N; n++) {
    const float *xn = x + n * p.C * p.H * p.W;
    float *yn = y + n * p.K * PQ;
    for (int64_t k = 0; k < p.K; k++) {
      float v = bias ? bias[k] : 0.0f;
      for (int64_t i = 0; i < PQ; i++) yn[k * PQ + i] = v;
    }
    if (CRS == 0) continue;
    for (int64_t g = 0; g < p.G; g++) {
      const float *cols = xn + g * Cg * p.H * p.W; /* the group's channels */
      if (!direct) {
        im2col_job_t j = {&p, cols, col};
        call->exec->parallel_for(call->exec, CRS, opd__row_grain(PQ),
                                 im2col_rows, &j);
        cols = col;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)Kg,
                  (blasint)PQ, (blasint)CRS, 1.0f, w + g * Kg * CRS,
                  (blasint)CRS, cols, (blasint)PQ, 1.0f, yn + g * Kg * PQ,
                  (blasint)PQ);
    }
  }
  free(col);
  return 0;
}
#endif /* OPD_NO_BLAS */
