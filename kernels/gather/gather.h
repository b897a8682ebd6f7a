/* gather's addressing, shared by its CPU and CUDA kernels
 * (kernels/gather/op.c says what the op is).
 *
 * DESIGN
 * Both kernels walk out (index's shape, contiguous) flat. For element i the
 * coordinates come from index's extents; x's element is at
 * sum_d coord[d] * xs[d] with coord[dim] replaced by index[i], xs x's
 * contiguous strides. gather_plan_t holds what both need, by value (the
 * CUDA kernel takes it as an argument).
 */
#ifndef OPD_KERNELS_GATHER_H
#define OPD_KERNELS_GATHER_H

#include <stdint.h>

#include "opd/protocol.h"

#ifdef __CUDACC__
#define GATHER_FN static __host__ __device__ inline
#else
#define GATHER_FN static inline
#endif

typedef struct gather_plan {
  int rank;                        /* index's rank (>= 1: a 0-d one is [1]) */
  int dim;                         /* the dim indexed, in [0, rank) */
  int64_t ishape[OPD_MAX_RANK];    /* index's (and out's) extents */
  int64_t xs[OPD_MAX_RANK];        /* x's contiguous strides, in elements */
  int64_t n;                       /* x's extent on dim */
} gather_plan_t;

/* The plan of x (xshape, xrank) and index (ishape) along dim (resolved,
 * in [0, max(rank, 1))). */
GATHER_FN void gather_plan(gather_plan_t *p, const int64_t *xshape, const int64_t *ishape,
                           int rank, int dim) {
  p->rank = rank ? rank : 1;
  p->dim = dim;
  int64_t s = 1;
  for (int d = p->rank - 1; d >= 0; d--) {
    int64_t xe = rank ? xshape[d] : 1;
    p->ishape[d] = rank ? ishape[d] : 1;
    p->xs[d] = s;
    s *= xe;
    if (d == dim) p->n = xe;
  }
}

/* x's element offset for out's flat element i whose index value is v. */
GATHER_FN int64_t gather_offset(const gather_plan_t *p, int64_t i, int64_t v) {
  int64_t off = 0;
  for (int d = p->rank - 1; d >= 0; d--) {
    int64_t e = p->ishape[d], c = i % e;
    i /= e;
    off += (d == p->dim ? v : c) * p->xs[d];
  }
  return off;
}

#endif /* OPD_KERNELS_GATHER_H */
