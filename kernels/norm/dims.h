/* The norm family's dims: which elements form one normalized row, shared
 * by the rows' shape rules (ops.c) and both backends (cpu.c, cuda.cu).
 *
 * DESIGN
 * softmax and log_softmax normalize along one dim of x: seen as (outer,
 * C, inner), element (o, c, i) at (o C + c) inner + i; inner == 1 is the
 * last dim, the rows the row kernels handle. layernorm and rmsnorm
 * normalize over the trailing dims of normalized_shape, which is
 * weight's shape when there is a weight, else the last `ndims` dims; x
 * being C-contiguous, those are rows of their product. Plain C, static
 * inline, so the .cu file includes it too.
 */
#ifndef OPD_KERNELS_NORM_DIMS_H
#define OPD_KERNELS_NORM_DIMS_H

#include <stdint.h>

#include "opd/op.h"

/* x as (outer, C, inner) around dim (negative from the end; a 0-d x is
 * (1, 1, 1)). dim must be in range (the shape rule checked it). */
static inline void opd__sm_geom(const opd_tview_t *x, int64_t dim,
                                int64_t *outer, int64_t *C, int64_t *inner) {
  *outer = *C = *inner = 1;
  if (x->rank == 0) return;
  int d = (int)(dim < 0 ? dim + x->rank : dim);
  for (int k = 0; k < x->rank; k++) {
    if (k < d) *outer *= x->shape[k];
    else if (k == d) *C = x->shape[k];
    else *inner *= x->shape[k];
  }
}

/* Number of trailing dims a norm call normalizes over: weight's rank when
 * given (input 1), else the `ndims` attribute (attr 1). */
static inline int opd__norm_ndims(const opd_kcall_t *call) {
  return call->n_in > 1 ? call->in[1].rank : (int)call->attr[1].i;
}

/* Elements of one normalized row: the product of the trailing dims. */
static inline int64_t opd__norm_len(const opd_kcall_t *call) {
  const opd_tview_t *x = &call->in[0];
  int64_t n = 1;
  for (int k = x->rank - opd__norm_ndims(call); k < x->rank; k++)
    n *= x->shape[k];
  return n;
}

#endif /* OPD_KERNELS_NORM_DIMS_H */
