/* The views behind permute, slice and expand: each op's output is x seen
 * through other extents, strides and a first element, then gathered into
 * a contiguous tensor by the copy op's kernels.
 *
 * DESIGN
 * One function per op computes that view from the call (x and the op's
 * attributes). The op's shape rule (kernels/shape/ops.c) calls it to
 * check the attributes and to state the output's shape, and its kernels
 * (cpu.c, cuda.cu) call it again to find what to gather, so the rule and
 * the kernels can never disagree on what an attribute means. The view
 * starts from x's own strides: a strided x (OPD_OPF_STRIDED) composes.
 */
#ifndef OPD_KERNELS_SHAPE_VIEW_H
#define OPD_KERNELS_SHAPE_VIEW_H

#include "kernels/kernel.h"

/* Each fills *v with the view of call->in[0] that the op gathers: shape,
 * strides (in elements), numel, dtype, and data (x's data moved to the
 * view's first element; NULL when x's is, as in a shape rule). Returns 0,
 * or OPD_EATTR / OPD_ESHAPE with call->err naming what was wrong (*v is
 * then undefined). Attributes are read in the order of the op's row. */

/* permute: dims (INTS), a permutation of x's dims (negative count from
 * the end): v.shape[i] = x.shape[dims[i]]. */
int opd__permute_view(opd_kcall_t *call, opd_tview_t *v);
/* slice: dim, start, end, step (INTs): Python's x[..., start:end:step, ...]
 * on dim (start/end negative from the end, clamped to [0, n]; step >= 1). */
int opd__slice_view(opd_kcall_t *call, opd_tview_t *v);
/* expand: shape (INTS) of rank >= x's, right aligned: -1 keeps x's extent,
 * a dim of x of extent 1 repeats (stride 0), new leading dims repeat. */
int opd__expand_view(opd_kcall_t *call, opd_tview_t *v);

/* The view the gathered output is: v's dtype and shape, C-contiguous, at
 * `data`. */
opd_tview_t opd__dense_view(const opd_tview_t *v, void *data);

#endif /* OPD_KERNELS_SHAPE_VIEW_H */
