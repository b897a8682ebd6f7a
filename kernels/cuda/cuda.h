/* The CUDA backend's kernels: the context a kernel launches in, and the
 * table of CUDA kernels the daemon looks up by op name.
 *
 * DESIGN
 * This header is plain C (usable from the daemon's C and from CUDA C++);
 * CUDA types travel as void pointers so that C code needs no CUDA header.
 * A CUDA kernel receives the same opd_kcall_t as the CPU kernels, after the
 * same generic checks and shape rule, with every tensor view's `data` a
 * DEVICE pointer to C-contiguous memory (copy's input may be strided).
 * Kernels launch asynchronously on ctx->stream and never synchronize or
 * call cudaMalloc; scratch comes from ctx->workspace (see
 * opd__cuda_workspace). Only when a call needs more scratch than the
 * workspace holds (conv2d's im2col of a large image, nms's IoU mask for
 * many boxes) does the kernel take it with cudaMallocAsync on the stream
 * and give it back with cudaFreeAsync behind its own launches: both are
 * stream-ordered and do not block the host.
 *
 * Returns: 0, or a negative OPD_E* with call->err set (without the op
 * name): OPD_EBACKEND "cuda: <cudaGetErrorString> (file:line)" for a CUDA
 * or cuBLASLt failure seen at launch time, OPD_ELIMIT for a size the
 * kernel does not handle. Errors of the asynchronous work itself surface
 * later, at the daemon's completion check on the stream.
 *
 * Workspace layout: the first min(workspace_bytes, OPD_CUDA_LT_WORKSPACE)
 * bytes are cuBLASLt's; the rest is the op's scratch (im2col columns, nms
 * sort buffers and mask). OPD_CUDA_WORKSPACE_DEFAULT is what the daemon
 * should allocate per stream (two streams must not share a workspace).
 */
#ifndef OPD_KERNELS_CUDA_H
#define OPD_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/kernel.h"

/* cuBLASLt's share of the workspace (NVIDIA recommends 32 MiB on Hopper). */
#define OPD_CUDA_LT_WORKSPACE ((size_t)32 << 20)
/* Suggested workspace per stream: cuBLASLt's share + 96 MiB of scratch. */
#define OPD_CUDA_WORKSPACE_DEFAULT ((size_t)128 << 20)

typedef struct opd_cuda_ctx {
  void *stream;                    /* cudaStream_t the kernel launches on */
  void *cublaslt;                  /* cublasLtHandle_t (one per device) */
  void *workspace;                 /* device scratch for cuBLASLt / im2col /
                                      nms, 256-byte aligned; may be NULL */
  size_t workspace_bytes;          /* its size */
  int device;                      /* CUDA device index (current device) */
} opd_cuda_ctx_t;

typedef struct opd_cuda_kernel {
  const char *op;                  /* "softmax" */
  uint32_t dtypes;                 /* OPD_DT(...) mask of the float inputs
                                      the kernel takes */
  int (*run)(opd_kcall_t *call, const opd_cuda_ctx_t *ctx);
} opd_cuda_kernel_t;

/* The CUDA kernel of op `op`, or NULL if it has none. */
const opd_cuda_kernel_t *opd__cuda_kernel_find(const char *op);

/* Bytes of op scratch (beyond cuBLASLt's share) the call would like, for
 * a call that passed its shape rule: 0 for most ops; conv2d's general path:
 * im2col columns of one image; nms: sort buffers + the N x ceil(N/64) IoU
 * mask. A smaller workspace still works (see DESIGN: cudaMallocAsync). */
size_t opd__cuda_workspace(const opd_kcall_t *call);

/* The kernels, one per op (kernels/<op>/cuda.cu). */

#define X(name) int opd__##name##_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx);
OPD_BUILTIN_OPS(X)
#undef X

/* conv2d's variants, for tests and benchmarks (kernels/conv2d/cuda.cu says
 * which geometry and dtype AUTO gives to which): OPD_CONV_AUTO is what
 * opd__conv2d_cuda runs; OPD_CONV_DIRECT3X3 returns OPD_EINVAL for other
 * geometries than 3x3 stride 1 dilation 1; OPD_CONV_IGEMM (implicit GEMM:
 * tensor cores for float16 / bfloat16, FFMA for float32) returns
 * OPD_EINVAL for sizes past its int32 indexing, or float16 / bfloat16 on
 * a GPU older than sm_80. */
enum { OPD_CONV_AUTO = 0, OPD_CONV_DIRECT3X3 = 1, OPD_CONV_IM2COL = 2, OPD_CONV_IGEMM = 3 };
int opd__conv2d_cuda_variant(opd_kcall_t *call, const opd_cuda_ctx_t *ctx,
                             int variant);

#ifdef __cplusplus
}
#endif

#endif /* OPD_KERNELS_CUDA_H */
