/* conv2d on the CPU by Winograd F(2x2, 3x3): 3x3 kernels, stride 1,
 * dilation 1, one group, any padding.
 *
 *   x (N, C, H, W), weight (K, C, 3, 3), bias (K) -> y (N, K, P, Q)
 *
 * DESIGN
 * Each 2x2 tile of output pixels comes from a 4x4 patch of input: with
 * U = G g G^T (the weights, (16, K, C), transformed once per call) and
 * V = B^T d B (each patch, per channel), the tile is A^T [U . V] A, and
 * the 16 elementwise products summed over channels are 16 GEMMs
 * M_e (K, T) = U_e (K, C) @ V_e (C, T) over T tiles at once: 16 multiply-
 * adds per tile and channel pair instead of 36 (2.25x fewer). A block is
 * a run of tile rows of one image, T tiles chosen so that V (16, C, T)
 * and M (16, K, T) stay within ~1.5 MiB (L2); blocks are spread over
 * call->exec, each chunk with its own V and M, each GEMM a single-threaded
 * OpenBLAS call (opd__sgemm_ld). The input transform reads 4 rows of a
 * zero-padded copy of the patch rows, so it has no bounds checks; the
 * output transform writes the 2x2 tiles, clipped at odd P or Q, plus the
 * bias.
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
 *   G   = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
 *   A^T = [1 1 1 0; 0 1 -1 -1]
 * Rounding: the transforms add at most 4 terms twice; against the direct
 * sum the error stays within conv2d's tests' 1e-5 + 1e-4|ref|.
 * Test: build/tests/ops, suite conv2d (winograd_matches_ref).
 */
#include "kernels/conv2d/wino.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/common/gemm.h"
#include "kernels/common/kutil.h"

/* V and M of a block, at most, in bytes; but at least one tile row. */
#define BLOCK_BYTES (3 << 19)

int opd__conv2d_wino_fits(const conv_plan_t *p) {
  return p->R == 3 && p->S == 3 && p->sh == 1 && p->sw == 1 && p->dh == 1 &&
         p->dw == 1 && p->G == 1 && p->C >= OPD_WINO_CMIN &&
         p->K >= OPD_WINO_CMIN && p->P >= 2 && p->Q >= 2;
}

typedef struct wino_job {
  const conv_plan_t *p;            /* geometry */
  const float *x, *bias;           /* x (N, C, H, W), bias (K) or NULL */
  const float *U;                  /* transformed weights (16, K, C) */
  float *y;                        /* y (N, K, P, Q) */
  int64_t TH, TW;                  /* tile rows and columns per image */
  int64_t rows;                    /* tile rows per block */
  int64_t blocks;                  /* blocks per image */
  int nomem;                       /* a chunk found no memory */
} wino_job_t;

/* U (16, K, C) = G g G^T for each (k, c), g = w[k, c] (3, 3). */
static void weights(const float *w, int64_t K, int64_t C, float *U) {
  for (int64_t k = 0; k < K; k++)
    for (int64_t c = 0; c < C; c++) {
      const float *g = w + (k * C + c) * 9;
      float t[4][3], u[4][4];
      for (int j = 0; j < 3; j++) {
        t[0][j] = g[j];
        t[1][j] = 0.5f * (g[j] + g[3 + j] + g[6 + j]);
        t[2][j] = 0.5f * (g[j] - g[3 + j] + g[6 + j]);
        t[3][j] = g[6 + j];
      }
      for (int i = 0; i < 4; i++) {
        u[i][0] = t[i][0];
        u[i][1] = 0.5f * (t[i][0] + t[i][1] + t[i][2]);
        u[i][2] = 0.5f * (t[i][0] - t[i][1] + t[i][2]);
        u[i][3] = t[i][2];
      }
      for (int e = 0; e < 16; e++) U[(e * K + k) * C + c] = u[e / 4][e % 4];
    }
}

/* V (16, C, T) for tile rows [ty0, ty0 + nty) of image xn (C, H, W), T =
 * nty * TW: patch rows copied into pad (4 rows of 2 TW + 2, zeros outside
 * the image), then B^T d B per tile. */
OPD_FAST static void input_tf(const wino_job_t *j, const float *xn, int64_t ty0,
                              int64_t nty, float *pad, float *V) {
  const conv_plan_t *p = j->p;
  int64_t TW = j->TW, PW = 2 * TW + 2, T = nty * TW, C = p->C;
  for (int64_t c = 0; c < C; c++)
    for (int64_t ty = ty0; ty < ty0 + nty; ty++) {
      for (int r = 0; r < 4; r++) {
        int64_t ih = 2 * ty - p->ph + r;
        float *dst = pad + r * PW;
        memset(dst, 0, (size_t)PW * sizeof(float));
        if (ih < 0 || ih >= p->H) continue;
        int64_t c0 = p->pw, n = p->W; /* input col iw lands at iw + pw */
        if (c0 + n > PW) n = PW - c0;
        if (n > 0) memcpy(dst + c0, xn + (c * p->H + ih) * p->W, (size_t)n * sizeof(float));
      }
      float *v = V + c * T + (ty - ty0) * TW;
      const float *r0 = pad, *r1 = pad + PW, *r2 = pad + 2 * PW, *r3 = pad + 3 * PW;
      for (int64_t tx = 0; tx < TW; tx++) {
        float d[4][4], t[4][4];
        for (int i = 0; i < 4; i++) {
          d[0][i] = r0[2 * tx + i];
          d[1][i] = r1[2 * tx + i];
          d[2][i] = r2[2 * tx + i];
          d[3][i] = r3[2 * tx + i];
        }
        for (int i = 0; i < 4; i++) { /* B^T d */
          t[0][i] = d[0][i] - d[2][i];
          t[1][i] = d[1][i] + d[2][i];
          t[2][i] = d[2][i] - d[1][i];
          t[3][i] = d[1][i] - d[3][i];
        }
        for (int i = 0; i < 4; i++) { /* (B^T d) B */
          v[(4 * i + 0) * C * T + tx] = t[i][0] - t[i][2];
          v[(4 * i + 1) * C * T + tx] = t[i][1] + t[i][2];
          v[(4 * i + 2) * C * T + tx] = t[i][2] - t[i][1];
          v[(4 * i + 3) * C * T + tx] = t[i][1] - t[i][3];
        }
      }
    }
}

/* y's tiles from M (16, K, T): A^T m A (+ bias), clipped to P x Q. */
OPD_FAST static void output_tf(const wino_job_t *j, const float *M, int64_t ty0,
                               int64_t nty, float *yn) {
  const conv_plan_t *p = j->p;
  int64_t TW = j->TW, T = nty * TW, K = p->K;
  for (int64_t k = 0; k < K; k++) {
    float b = j->bias ? j->bias[k] : 0.0f;
    const float *m = M + k * T;
    for (int64_t ty = ty0; ty < ty0 + nty; ty++) {
      int64_t oh = 2 * ty, t0 = (ty - ty0) * TW;
      float *y0 = yn + (k * p->P + oh) * p->Q, *y1 = y0 + p->Q;
      int two = oh + 1 < p->P;
      for (int64_t tx = 0; tx < TW; tx++) {
        float s[4][4], t[2][4];
        for (int e = 0; e < 16; e++) s[e / 4][e % 4] = m[e * K * T + t0 + tx];
        for (int i = 0; i < 4; i++) { /* A^T s */
          t[0][i] = s[0][i] + s[1][i] + s[2][i];
          t[1][i] = s[1][i] - s[2][i] - s[3][i];
        }
        int64_t ow = 2 * tx;
        y0[ow] = t[0][0] + t[0][1] + t[0][2] + b;
        if (ow + 1 < p->Q) y0[ow + 1] = t[0][1] - t[0][2] - t[0][3] + b;
        if (two) {
          y1[ow] = t[1][0] + t[1][1] + t[1][2] + b;
          if (ow + 1 < p->Q) y1[ow + 1] = t[1][1] - t[1][2] - t[1][3] + b;
        }
      }
    }
  }
}

/* Blocks [b, e): block i is image i / blocks, tile rows from i % blocks *
 * rows. One V, M and pad for the chunk. */
static void wino_blocks(void *arg, int64_t b, int64_t e) {
  wino_job_t *j = arg;
  const conv_plan_t *p = j->p;
  int64_t C = p->C, K = p->K, Tmax = j->rows * j->TW;
  float *V = malloc(sizeof(float) * (size_t)(16 * (C + K) * Tmax + 4 * (2 * j->TW + 2)));
  if (!V) {
    __atomic_store_n(&j->nomem, 1, __ATOMIC_RELAXED);
    return;
  }
  float *M = V + 16 * C * Tmax, *pad = M + 16 * K * Tmax;
  for (int64_t i = b; i < e; i++) {
    int64_t n = i / j->blocks, ty0 = i % j->blocks * j->rows;
    int64_t nty = j->TH - ty0 < j->rows ? j->TH - ty0 : j->rows, T = nty * j->TW;
    const float *xn = j->x + n * C * p->H * p->W;
    input_tf(j, xn, ty0, nty, pad, V);
    for (int q = 0; q < 16; q++) /* M_q (K, T) = U_q (K, C) @ V_q (C, T) */
      opd__sgemm_ld(0, K, T, C, j->U + q * K * C, C, V + q * C * T, T, 0.0f,
                    M + q * K * T, T);
    output_tf(j, M, ty0, nty, j->y + n * K * p->P * p->Q);
  }
  free(V);
}

int opd__conv2d_cpu_wino(opd_kcall_t *call, const conv_plan_t *p) {
  int64_t C = p->C, K = p->K;
  wino_job_t j = {.p = p, .x = call->in[0].data,
                  .bias = p->has_bias ? call->in[2].data : NULL,
                  .y = call->out[0].data, .TH = (p->P + 1) / 2,
                  .TW = (p->Q + 1) / 2};
  float *U = malloc(sizeof(float) * (size_t)(16 * K * C));
  if (!U)
    return opd__kerr(call, OPD_ENOMEM, "cannot allocate %lld bytes for Winograd weights",
                     (long long)(16 * K * C * (int64_t)sizeof(float)));
  weights(call->in[1].data, K, C, U);
  j.U = U;
  /* tile rows per block: V and M within BLOCK_BYTES; then fewer where that
     leaves under two blocks per thread */
  int64_t tiles = BLOCK_BYTES / (int64_t)sizeof(float) / (16 * (C + K));
  j.rows = tiles / j.TW > 1 ? tiles / j.TW : 1;
  if (j.rows > j.TH) j.rows = j.TH;
  int64_t want = 2 * (int64_t)call->exec->nthreads;
  if (p->N * ((j.TH + j.rows - 1) / j.rows) < want) {
    int64_t per = (want + p->N - 1) / p->N;
    j.rows = (j.TH + per - 1) / per;
  }
  j.blocks = (j.TH + j.rows - 1) / j.rows;
  call->exec->parallel_for(call->exec, p->N * j.blocks, 1, wino_blocks, &j);
  free(U);
  if (j.nomem)
    return opd__kerr(call, OPD_ENOMEM, "cannot allocate a Winograd block of %lld bytes",
                     (long long)(16 * (C + K) * j.rows * j.TW * (int64_t)sizeof(float)));
  return 0;
}
