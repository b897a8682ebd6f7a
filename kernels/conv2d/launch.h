/* conv2d's CUDA variants as the router (cuda.cu) and the launchers
 * (launch.cu) share them: the launchers, and the scratch geometry both
 * need (inline here, so no object calls the other back).
 *
 * DESIGN
 * Each launcher runs one variant on a planned, non-empty call whose
 * variant applies (the router checks), in the call's dtype: 0, or an
 * OPD_E* code with call->err set.
 */
#ifndef OPD_KERNELS_CONV2D_LAUNCH_H
#define OPD_KERNELS_CONV2D_LAUNCH_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/cuda.h"
extern "C" {
#include "kernels/conv2d/plan.h"
}

#define IG_BM 64                   /* igemm: output channels per block (tc and
                                      L/M) */

int opd__conv2d_run_direct(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, const conv_plan_t *p);
int opd__conv2d_run_im2col(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, const conv_plan_t *p);
/* tile: OPD_IGEMM_TILE_L / M / S (kernels/conv2d/igemm.h) */
int opd__conv2d_run_igemm(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, const conv_plan_t *p,
                          int tile);
int opd__conv2d_run_winograd(opd_kcall_t *call, const opd_cuda_ctx_t *ctx,
                             const conv_plan_t *p);
/* any groups (grouped.cu) */
int opd__conv2d_run_grouped(opd_kcall_t *call, const opd_cuda_ctx_t *ctx,
                            const conv_plan_t *p);

/* 1x1, stride 1, no padding: x itself is the GEMM's columns. */
static inline bool is_pointwise(const conv_plan_t *p) {
  return p->R == 1 && p->S == 1 && p->sh == 1 && p->sw == 1 && p->ph == 0 && p->pw == 0 &&
         p->pb == 0 && p->pr == 0;
}

/* ---- winograd's scratch ---------------------------------------------------
 * V (16 x K x C floats) once, then per chunk of images U (16 x C x Tpad)
 * and M (16 x K x Tpad), each 256-byte aligned; a chunk is as many images
 * as fit in WINO_CHUNK_BYTES (at least one), so that ResNet-18's layers at
 * batch 8 are one GEMM call and the GEMM reads U back from L2. */
#define WINO_CHUNK_BYTES ((size_t)64 << 20)

static inline size_t round256(int64_t b) { return ((size_t)b + 255) & ~(size_t)255; }

/* output tiles (2x2) of one image */
static inline int64_t wino_tiles(const conv_plan_t *p) { return ((p->P + 1) / 2) * ((p->Q + 1) / 2); }

static inline int64_t wino_pitch(const conv_plan_t *p, int64_t nb) {
  return (nb * wino_tiles(p) + 3) & ~(int64_t)3;
}

static inline size_t wino_bytes(const conv_plan_t *p, int64_t nb) {
  int64_t tp = wino_pitch(p, nb), f = (int64_t)sizeof(float);
  return round256(16 * p->K * p->C * f) + round256(16 * p->C * tp * f) +
         round256(16 * p->K * tp * f);
}

/* Images per chunk: the most (up to N) whose scratch fits in WINO_CHUNK_BYTES. */
static inline int64_t wino_chunk(const conv_plan_t *p) {
  int64_t per = 16 * (p->C + p->K) * wino_tiles(p) * (int64_t)sizeof(float);
  int64_t avail = (int64_t)WINO_CHUNK_BYTES - (int64_t)wino_bytes(p, 0) - 16 * 4096;
  int64_t nb = per > 0 && avail > per ? avail / per : 1;
  return nb < p->N ? nb : p->N;
}

#endif /* OPD_KERNELS_CONV2D_LAUNCH_H */
