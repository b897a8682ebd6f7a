/* The CUDA backend's kernels: what they share beyond the public ABI.
 *
 * DESIGN
 * This header is plain C (usable from the daemon's C and from CUDA C++).
 * The context a CUDA kernel launches in (opd_cuda_ctx_t), its calling
 * convention, the workspace layout and the error codes are part of the
 * operator ABI, include/opd/op.h; each op's CUDA kernel, the dtypes it
 * takes and its scratch needs are fields of the op's row (kernels/<op>/op.c,
 * or a family's kernels/<family>/ops.c, names opd__<op>_cuda, defined in
 * the folder's cuda.cu). There is no
 * table of CUDA kernels besides the rows.
 *
 * OPD_CUDA_WORKSPACE_DEFAULT is what a caller that keeps one workspace per
 * stream should allocate (two streams must not share a workspace).
 */
#ifndef OPD_KERNELS_CUDA_H
#define OPD_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/kernel.h"

/* Suggested workspace per stream: cuBLASLt's share + 96 MiB of scratch. */
#define OPD_CUDA_WORKSPACE_DEFAULT ((size_t)128 << 20)

/* conv2d's variants, for tests and benchmarks (kernels/conv2d/cuda.cu says
 * which geometry and dtype AUTO gives to which): OPD_CONV_AUTO is what
 * opd__conv2d_cuda runs; OPD_CONV_DIRECT3X3 and OPD_CONV_WINOGRAD
 * (Winograd F(2x2, 3x3), float intermediates) return OPD_EINVAL for other
 * geometries than 3x3 stride 1 dilation 1; OPD_CONV_IGEMM (implicit GEMM:
 * tensor cores for float16 / bfloat16, FFMA for float32) returns
 * OPD_EINVAL for sizes past its int32 indexing, or float16 / bfloat16 on
 * a GPU older than sm_80. */
enum {
  OPD_CONV_AUTO = 0,
  OPD_CONV_DIRECT3X3 = 1,
  OPD_CONV_IM2COL = 2,
  OPD_CONV_IGEMM = 3,
  OPD_CONV_WINOGRAD = 4,
  OPD_CONV_GROUPED = 5,            /* direct, any groups (AUTO's only choice
                                      for groups > 1; the others refuse
                                      them with OPD_EINVAL) */
};
int opd__conv2d_cuda_variant(opd_kcall_t *call, const opd_cuda_ctx_t *ctx,
                             int variant);

/* Programmatic dependent launch (sm_90 and later): the daemon's launch
 * thread says, before an op's launch, whether its kernel may go on the
 * stream as a dependent launch (the one-thread wait kernel before it
 * triggers as soon as the client's word is there, so the op's blocks start
 * without a launch's gap, and wait with griddepcontrol.wait for the wait
 * kernel's end). A kernel that takes it (kernels/unary/cuda.cu:
 * griddepcontrol.wait first, then launch_dependents) says so with
 * opd__cuda_pdl_took(); the daemon then writes the flag word with a
 * one-thread dependent kernel that starts while the op runs and stores
 * once it has ended, instead of a memset after it
 * (daemon/backend/cuda/flag.h). Ops that do not take it are launched as
 * before. The offer is the launching thread's (kernels/cuda/pdl.cu). */
void opd__cuda_pdl_offer(int on);
int opd__cuda_pdl_offered(void);
void opd__cuda_pdl_took(void);
int opd__cuda_pdl_taken(void);          /* and clears it */

#ifdef __cplusplus
}
#endif

#endif /* OPD_KERNELS_CUDA_H */
