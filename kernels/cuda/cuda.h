/* The CUDA backend's kernels: what they share beyond the public ABI.
 *
 * DESIGN
 * This header is plain C (usable from the daemon's C and from CUDA C++).
 * The context a CUDA kernel launches in (opd_cuda_ctx_t), its calling
 * convention, the workspace layout and the error codes are part of the
 * operator ABI, include/opd/op.h; each op's CUDA kernel, the dtypes it
 * takes and its scratch needs are fields of the op's row (kernels/<op>/op.c
 * names opd__<op>_cuda, defined in kernels/<op>/cuda.cu). There is no
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
};
int opd__conv2d_cuda_variant(opd_kcall_t *call, const opd_cuda_ctx_t *ctx,
                             int variant);

/* A session's flag allocation (2 MiB of device memory, mapped by its
 * client), in 32-bit words: the daemon's word at 0 (FLAG runs write their
 * request id there after their work), the client's word of slot s at
 * s * OPD_CUDA_SLOT_WORDS for s in 1..OPD_RUN_WORD_SLOTS-1 (the client's
 * stream writes a WORD run's id there before it), the sticky word (a wait
 * of the session gave up). The first OPD_CUDA_FLAG_ZERO bytes are zeroed
 * before a client sees the allocation. */
#define OPD_CUDA_SLOT_WORDS (OPD_STREAM_SLOT_BYTES / 4)
#define OPD_CUDA_STICKY_WORD (64 * OPD_CUDA_SLOT_WORDS)
#define OPD_CUDA_FLAG_ZERO (4 * (OPD_CUDA_STICKY_WORD + OPD_CUDA_SLOT_WORDS))

/* A device's timeout board: pinned host memory, mapped on the device; a
 * wait for a client's word that gave up appends ((sid << 32) | want) at
 * rec[n++ % OPD_CUDA_BOARD_RECS]. */
#define OPD_CUDA_BOARD_RECS 255
typedef struct {
  unsigned n, pad;
  unsigned long long rec[OPD_CUDA_BOARD_RECS];
} opd_cuda_board_t;

/* Stores value to *word (device memory) on stream after its earlier work
 * (kernels/cuda/flag.cu: cuMemsetD32Async, else a one-thread kernel): 0 or
 * the cudaError_t / CUresult of the failure. */
int opd__cuda_set_flag(void *stream, unsigned *word, unsigned value);
/* 1: opd__cuda_set_flag writes with cuMemsetD32Async; 0: with a kernel. */
int opd__cuda_set_flag_how(void);
/* Makes stream wait (on the GPU) until *word - want >= 0 (signed, so it
 * wraps), or give up after timeout_ns (or at once when *sticky is set):
 * then *sticky = 1 and (sid, want) goes on board (device pointer). The
 * cudaError_t of the launch. */
int opd__cuda_wait_word(void *stream, const unsigned *word, unsigned want,
                        unsigned *sticky, opd_cuda_board_t *board, unsigned sid,
                        unsigned long long timeout_ns, unsigned long long *stamps);

/* Programmatic dependent launch (sm_90 and later; kernels/cuda/flag.cu):
 * the daemon's launch thread says, before an op's launch, whether its
 * kernel may go on the stream as a dependent launch (the one-thread wait
 * kernel before it triggers as soon as the client's word is there, so the
 * op's blocks start without a launch's gap, and wait with
 * griddepcontrol.wait for the wait kernel's end). A kernel that takes it
 * (kernels/cuda/unary.cuh: griddepcontrol.wait first, then
 * launch_dependents) says so with opd__cuda_pdl_took(); the daemon then
 * writes the flag word with opd__cuda_set_flag_pdl, a one-thread dependent
 * kernel that starts while the op runs and stores once it has ended,
 * instead of a memset after it. Off: OPD_PDL=0 in the daemon's
 * environment. Ops that do not take it are launched as before. */
void opd__cuda_pdl_offer(int on);
int opd__cuda_pdl_offered(void);
void opd__cuda_pdl_took(void);
int opd__cuda_pdl_taken(void);          /* and clears it */
int opd__cuda_pdl_enabled(int cc_major); /* OPD_PDL, and sm_90 or later */
int opd__cuda_set_flag_pdl(void *stream, unsigned *word, unsigned value,
                           unsigned long long *stamps);
/* stamps (both): NULL, or the run's entry of the daemon's GPU timestamps
 * (OPD_GPU_STAMPS, include/opd/protocol.h): {wait start, word seen} by
 * the wait, {flag store, value} by the flag kernel. */

#ifdef __cplusplus
}
#endif

#endif /* OPD_KERNELS_CUDA_H */
