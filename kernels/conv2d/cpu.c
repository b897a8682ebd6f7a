/* conv2d on the CPU, any groups (Cg = C/G input and Kg = K/G output
 * channels per group).
 *
 * Variants:
 *   cpu_ref   direct 7-deep loop, double accumulation (truth)
 *   cpu_fast  depthwise (one input channel per group, Cg = 1): the direct
 *             kernel of depthwise.c. 3x3, stride 1, dilation 1, one group,
 *             C and K >= 16: Winograd F(2x2, 3x3) (wino_cpu.c). Else in tiles of output rows of one
 *             image and group, spread over call->exec: im2col of the
 *             tile into a per-chunk col (Cg*R*S, T), T pixels, about
 *             TILE_BYTES (so it stays in L2 for the sgemm), then y's tile
 *             (Kg, T) = weight_g (Kg, Cg*R*S) @ col by one single-threaded
 *             OpenBLAS sgemm (opd__sgemm_ld) writing y in place, the bias
 *             pre-filled into the tile and added through beta = 1. A 1x1
 *             kernel with stride 1 and no padding skips im2col: col is
 *             x_ng's columns.
 * Built with OPD_NO_BLAS (make BLAS=0: the GPU machine has no OpenBLAS),
 * cpu_fast is cpu_ref, but for depthwise.
 * Test: build/tests/ops, suite conv2d
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/cpu.h"
#include "kernels/common/gemm.h"
#include "kernels/common/kutil.h"
#include "kernels/conv2d/depthwise.h"
#include "kernels/conv2d/plan.h"
#include "kernels/conv2d/wino.h"

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
/* A tile's columns, col (Cg*R*S, T), in about this many bytes, but at
 * least TILE_MIN pixels: col is written by im2col and read back by the
 * sgemm's packing while it is in L2 (the whole image's columns, 7.2 MB for
 * 64 channels of 56x56, went through memory), and each sgemm packs all of
 * the group's weights again, which a tile of few pixels would repeat too
 * often. */
#define TILE_BYTES (1 << 20)
#define TILE_MIN 256

typedef struct conv_job {
  const conv_plan_t *p;            /* geometry */
  const float *x, *w, *bias;       /* x (N, C, H, W), w (K, Cg, R, S), bias (K) or NULL */
  float *y;                        /* y (N, K, P, Q) */
  int64_t nh;                      /* output rows per tile */
  int64_t tiles_h;                 /* tiles per image and group */
  int direct;                      /* 1x1, stride 1, no padding: cols are x */
  int nomem;                       /* a chunk found no memory for its col */
} conv_job_t;

/* col (Cg*R*S, np*Q) for output rows [p0, p0 + np) of the group's
 * channels xg (Cg, H, W): row (c, r, s) holds x[c, p*sh-ph+r*dh,
 * q*sw-pw+s*dw] over (p, q), zero outside the image. */
OPD_FAST static void im2col_tile(const conv_plan_t *p, const float *xg, int64_t p0,
                                 int64_t np, float *col) {
  int64_t CRS = p->C / p->G * p->R * p->S;
  for (int64_t row = 0; row < CRS; row++) {
    int64_t s = row % p->S, r = row / p->S % p->R, c = row / (p->S * p->R);
    float *dst = col + row * np * p->Q;
    int64_t off = s * p->dw - p->pw;
    int64_t q0 = conv_first_q(0, off, p->sw, p->Q);
    int64_t q1 = conv_first_q(p->W, off, p->sw, p->Q);
    if (q1 < q0) q1 = q0;
    for (int64_t op = p0; op < p0 + np; op++, dst += p->Q) {
      int64_t ih = op * p->sh - p->ph + r * p->dh;
      if (ih < 0 || ih >= p->H) {
        memset(dst, 0, (size_t)p->Q * sizeof(float));
        continue;
      }
      const float *src = xg + (c * p->H + ih) * p->W; /* the input row */
      for (int64_t q = 0; q < q0; q++) dst[q] = 0;
      if (p->sw == 1)
        memcpy(dst + q0, src + q0 + off, (size_t)(q1 - q0) * sizeof(float));
      else
        for (int64_t q = q0; q < q1; q++) dst[q] = src[q * p->sw + off];
      for (int64_t q = q1; q < p->Q; q++) dst[q] = 0;
    }
  }
}

/* Tiles [b, e): tile i is image i / (G tiles_h), group i / tiles_h % G,
 * output rows from i % tiles_h * nh. Each: y's tile (Kg, np*Q) (row
 * stride P*Q) = the bias (or beta 0 without one), then += w_g (Kg, CRS) @
 * col (CRS, np*Q) by one single-threaded sgemm. One col for the chunk. */
static void conv_tiles(void *arg, int64_t b, int64_t e) {
  conv_job_t *j = arg;
  const conv_plan_t *p = j->p;
  int64_t Cg = p->C / p->G, Kg = p->K / p->G, PQ = p->P * p->Q;
  int64_t CRS = Cg * p->R * p->S;
  float *col = NULL;
  if (!j->direct && CRS > 0) {
    col = malloc((size_t)(CRS * j->nh * p->Q) * sizeof(float));
    if (!col) {
      __atomic_store_n(&j->nomem, 1, __ATOMIC_RELAXED);
      return;
    }
  }
  for (int64_t i = b; i < e; i++) {
    int64_t n = i / (p->G * j->tiles_h), g = i / j->tiles_h % p->G;
    int64_t p0 = i % j->tiles_h * j->nh;
    int64_t np = p->P - p0 < j->nh ? p->P - p0 : j->nh, T = np * p->Q;
    const float *xg = j->x + (n * p->C + g * Cg) * p->H * p->W;
    float *yt = j->y + (n * p->K + g * Kg) * PQ + p0 * p->Q;
    if (j->bias || CRS == 0)
      for (int64_t k = 0; k < Kg; k++) {
        float v = j->bias ? j->bias[g * Kg + k] : 0.0f;
        for (int64_t t = 0; t < T; t++) yt[k * PQ + t] = v;
      }
    if (CRS == 0) continue;
    const float *cols = xg + p0 * p->Q; /* direct: x_g is (Cg, P*Q) */
    int64_t ldb = PQ;
    if (!j->direct) {
      im2col_tile(p, xg, p0, np, col);
      cols = col;
      ldb = T;
    }
    opd__sgemm_ld(0, Kg, T, CRS, j->w + g * Kg * CRS, CRS, cols, ldb,
                  j->bias ? 1.0f : 0.0f, yt, PQ);
  }
  free(col);
}

int opd__conv2d_cpu_fast(opd_kcall_t *call) {
  conv_plan_t p;
  int rc = opd__conv2d_plan(call, &p);
  if (rc) return rc;
  if (p.G > 1 && p.C == p.G) return opd__conv2d_cpu_depthwise(call, &p);
  int64_t Cg = p.C / p.G, PQ = p.P * p.Q, CRS = Cg * p.R * p.S;
  if (PQ > INT_MAX || CRS > INT_MAX || p.K > INT_MAX)
    return opd__conv2d_cpu_ref(call); /* beyond BLAS's int sizes */
  if (p.N == 0 || p.K == 0 || PQ == 0) return 0;
  if (opd__conv2d_wino_fits(&p)) return opd__conv2d_cpu_wino(call, &p);
  conv_job_t j = {.p = &p, .x = call->in[0].data, .w = call->in[1].data,
                  .bias = p.has_bias ? call->in[2].data : NULL,
                  .y = call->out[0].data};
  j.direct = p.R == 1 && p.S == 1 && p.sh == 1 && p.sw == 1 && p.ph == 0 &&
             p.pw == 0 && p.pb == 0 && p.pr == 0;
  /* rows per tile: col within TILE_BYTES, at least TILE_MIN pixels; then
     fewer where that leaves under two tiles per thread */
  int64_t px = TILE_BYTES / (int64_t)sizeof(float) / (CRS > 0 ? CRS : 1);
  if (px < TILE_MIN) px = TILE_MIN;
  j.nh = px / p.Q > 1 ? px / p.Q : 1;
  if (j.nh > p.P) j.nh = p.P;
  int64_t want = 2 * (int64_t)call->exec->nthreads, items = p.N * p.G;
  if (items * ((p.P + j.nh - 1) / j.nh) < want) {
    int64_t th = (want + items - 1) / items;
    j.nh = (p.P + th - 1) / th;
  }
  j.tiles_h = (p.P + j.nh - 1) / j.nh;
  call->exec->parallel_for(call->exec, items * j.tiles_h, 1, conv_tiles, &j);
  if (j.nomem)
    return opd__kerr(call, OPD_ENOMEM, "cannot allocate %lld bytes for im2col",
                     (long long)(CRS * j.nh * p.Q * (int64_t)sizeof(float)));
  return 0;
}
#endif /* OPD_NO_BLAS */
