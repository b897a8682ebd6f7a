/* conv2d's implicit-GEMM variant with a chosen tile, for tests and benches
 * (kernels/conv2d/cuda.cu describes the kernels). Plain C. */
#ifndef OPD_KERNELS_CONV2D_IGEMM_H
#define OPD_KERNELS_CONV2D_IGEMM_H

#include "kernels/cuda/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tiles (output channels x output pixels per block), largest first. */
enum {
  OPD_IGEMM_TILE_AUTO = 0,         /* by size: what OPD_CONV_IGEMM runs */
  OPD_IGEMM_TILE_L = 1,            /* 64 x 128 (float32 and half types) */
  OPD_IGEMM_TILE_M = 2,            /* 64 x 64 */
  OPD_IGEMM_TILE_S = 3,            /* float32 32 x 64; half types 64 x 32 */
};

/* Runs conv2d with the implicit-GEMM kernel and tile `tile`. Returns 0,
 * the plan's error, or OPD_EINVAL (with call->err) when the call is past
 * the kernel's int32 indexing, the dtype is a half type and the GPU is
 * older than sm_80, or `tile` is unknown. */
int opd__conv2d_cuda_igemm(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, int tile);

#ifdef __cplusplus
}
#endif

#endif /* OPD_KERNELS_CONV2D_IGEMM_H */
