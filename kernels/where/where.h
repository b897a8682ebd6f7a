/* where's geometry, shared by its CPU and CUDA kernels: the output's
 * extents and each input's broadcast strides over them.
 *
 * DESIGN
 * The shape rule (op.c) has already checked that cond, x and y broadcast
 * to out; a stride of 0 repeats an input along a dim it lacks or has
 * extent 1 on (kernels/common/kutil.h, opd__bcast_strides).
 */
#ifndef OPD_KERNELS_WHERE_H
#define OPD_KERNELS_WHERE_H

#include "kernels/common/kutil.h"

typedef struct where_geom {
  int rank;                        /* out's rank */
  int64_t shape[OPD_MAX_RANK];     /* out's extents */
  int64_t sc[OPD_MAX_RANK];        /* cond's strides over them, elements */
  int64_t sx[OPD_MAX_RANK];        /* x's */
  int64_t sy[OPD_MAX_RANK];        /* y's */
} where_geom_t;

/* Fills g from a call that passed where's shape rule. */
static inline void opd__where_geom(const opd_kcall_t *call, where_geom_t *g) {
  const opd_tview_t *o = &call->out[0];
  g->rank = o->rank;
  for (int d = 0; d < o->rank; d++) g->shape[d] = o->shape[d];
  opd__bcast_strides(call->in[0].shape, call->in[0].rank, o->rank, g->sc);
  opd__bcast_strides(call->in[1].shape, call->in[1].rank, o->rank, g->sx);
  opd__bcast_strides(call->in[2].shape, call->in[2].rank, o->rank, g->sy);
}

#endif /* OPD_KERNELS_WHERE_H */
