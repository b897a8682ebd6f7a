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
 * taps. 3x3 (MobileNet's case) instead copies the input plane into a
 * zero-bordered scratch plane (the padding made real) and sums its 9
 * taps in one pass per output row with no edge cases: on small images
 * (14x14) the per-tap ranges and edge columns cost more than the
 * products. float accumulation, as the GEMM path's. Planes are
 * spread over call->exec, each chunk with its own scratch plane.
 * Test: build/tests/ops, suite conv2d (depthwise cases against cpu_ref)
 */
#include "kernels/conv2d/depthwise.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/common/kutil.h"

#define PAD_L1_FLOATS 8192        /* 32 KiB: a scratch plane within L1 */

typedef struct dw_job {
  const conv_plan_t *p;            /* geometry */
  const float *x, *w, *bias;       /* x (N, C, H, W), w (K, 1, R, S) */
  float *y;                        /* (N, K, P, Q) */
} dw_job_t;

/* Output row dst (Q) of plane (x channel xc, weights wk) at output row op,
 * tap by tap: each adds its weight times the input row it reads over the
 * output columns whose tap lies inside the image. Any geometry. */
OPD_FAST static void row_taps(const conv_plan_t *p, const float *xc,
                              const float *wk, float bv, int64_t op,
                              float *dst) {
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

/* 3x3 on a padded plane (rows s0, s1, s2 of it, every tap inside):
 * dst[q] for q in [0, Q) as one pass of 9 products per output, no
 * read-modify-write of dst per tap and no edge cases; column stride 1
 * vectorizes as it is, stride sw through strided loads. */
OPD_FAST static void row_3x3(const float *s0, const float *s1,
                             const float *s2, int64_t dw, int64_t sw,
                             const float *wk, float bv, int64_t Q,
                             float *dst) {
  float w0 = wk[0], w1 = wk[1], w2 = wk[2], w3 = wk[3], w4 = wk[4],
        w5 = wk[5], w6 = wk[6], w7 = wk[7], w8 = wk[8];
  const float *a1 = s0 + dw, *a2 = s0 + 2 * dw, *b1 = s1 + dw,
              *b2 = s1 + 2 * dw, *c1 = s2 + dw, *c2 = s2 + 2 * dw;
  if (sw == 1) {
    for (int64_t q = 0; q < Q; q++)
      dst[q] = bv + w0 * s0[q] + w1 * a1[q] + w2 * a2[q] + w3 * s1[q] +
               w4 * b1[q] + w5 * b2[q] + w6 * s2[q] + w7 * c1[q] + w8 * c2[q];
    return;
  }
  for (int64_t q = 0, i = 0; q < Q; q++, i += sw)
    dst[q] = bv + w0 * s0[i] + w1 * a1[i] + w2 * a2[i] + w3 * s1[i] +
             w4 * b1[i] + w5 * b2[i] + w6 * s2[i] + w7 * c1[i] + w8 * c2[i];
}

/* Plane xc (H, W) into pad (Hp, Wp) at row ph, column pw; pad's borders
 * stay as they are (zeros, written once). */
static void fill_pad(const conv_plan_t *p, const float *xc, float *pad,
                     int64_t Wp) {
  for (int64_t h = 0; h < p->H; h++)
    memcpy(pad + (h + p->ph) * Wp + p->pw, xc + h * p->W,
           (size_t)p->W * sizeof(float));
}

/* Output planes [b, e), plane i = (n, k) = (i / K, i % K). 3x3
 * (MobileNet's case) with column stride 1, or a stride on a small plane,
 * copies each input plane once into a zero-bordered scratch plane and
 * runs row_3x3 on it (when the scratch cannot be had: row_taps); the
 * rest runs row_taps. */
static void dw_planes(void *arg, int64_t b, int64_t e) {
  const dw_job_t *j = arg;
  const conv_plan_t *p = j->p;
  int64_t mult = p->K / p->C; /* output channels per input channel */
  int64_t Hp = p->H + p->ph + p->pb, Wp = p->W + p->pw + p->pr;
  float *pad = NULL;
  /* with a column stride, only while the scratch plane fits in L1: a
   * larger one costs a pass through L2 that the strided taps of row_taps,
   * reading x directly, do not */
  if (p->R == 3 && p->S == 3 && (p->sw == 1 || Hp * Wp <= PAD_L1_FLOATS))
    pad = calloc((size_t)(Hp * Wp), sizeof(float));
  int64_t filled = -1; /* the input plane pad holds */
  for (int64_t i = b; i < e; i++) {
    int64_t n = i / p->K, k = i % p->K, xi = n * p->C + k / mult;
    const float *xc = j->x + xi * p->H * p->W;
    const float *wk = j->w + k * p->R * p->S;
    float bv = j->bias ? j->bias[k] : 0.0f;
    float *dst = j->y + i * p->P * p->Q;
    if (pad && filled != xi) {
      fill_pad(p, xc, pad, Wp);
      filled = xi;
    }
    for (int64_t op = 0; op < p->P; op++, dst += p->Q) {
      if (pad) {
        const float *s0 = pad + op * p->sh * Wp;
        row_3x3(s0, s0 + p->dh * Wp, s0 + 2 * p->dh * Wp, p->dw, p->sw, wk,
                bv, p->Q, dst);
      } else {
        row_taps(p, xc, wk, bv, op, dst);
      }
    }
  }
  free(pad);
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
