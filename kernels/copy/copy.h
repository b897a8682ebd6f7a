/* The copy family's contract beyond the op row: copying one strided view
 * into another, for the daemon's generic strided path (daemon/run/strided.c:
 * the gather of a strided input before a kernel that needs C-contiguous
 * tensors, the scatter of its contiguous result into a strided out=).
 *
 * DESIGN
 * Both views have the same shape and element size; each may have any
 * non-negative strides (stride 0 included in src: a broadcast dim), and
 * dst's elements are distinct (the daemon refuses an output whose elements
 * overlap). Dims are dropped where their extent is 1 and merged where both
 * views are contiguous across them, so a contiguous-to-contiguous copy is
 * one memcpy (CPU) or one cudaMemcpyAsync (CUDA) and a transpose is a
 * 2-D loop. The copy op's kernels are this with dst contiguous.
 */
#ifndef OPD_KERNELS_COPY_H
#define OPD_KERNELS_COPY_H

#include "opd/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = src[i] for every multi-index i, parallel over ex: 0, or
 * OPD_EINVAL when the shapes or element sizes differ (nothing copied). */
int opd__copy_views_cpu(const opd_exec_t *ex, const opd_tview_t *dst,
                        const opd_tview_t *src);

/* The same queued on stream (a cudaStream_t): 0, or the cudaError_t of the
 * launch (nonzero; OPD_EINVAL, negative, for shapes or sizes that differ).
 * Never synchronizes or allocates: it may be captured into a CUDA graph. */
int opd__copy_views_cuda(void *stream, const opd_tview_t *dst,
                         const opd_tview_t *src);
#ifdef __cplusplus
}
#endif

#endif /* OPD_KERNELS_COPY_H */
