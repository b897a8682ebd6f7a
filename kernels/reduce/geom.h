/* The reduce family's geometry: which elements of x each output reduces,
 * shared by the shape rule, the CPU kernels and the CUDA kernel.
 *
 * DESIGN
 * A reduction over any set of dims of a C-contiguous x is an output
 * index space (the kept dims) times a reduced index space (the reduced
 * dims): element (o, r) of x is at koff(o) + roff(r). Dims of extent 1
 * are dropped and neighbours of the same kind (both kept or both
 * reduced) merged first, so the common cases come out as one or two
 * dims per side (sum over the last dim: kept [rows], reduced [C] of
 * stride 1). Plain C, static inline: the .cu file includes it too.
 */
#ifndef OPD_KERNELS_REDUCE_GEOM_H
#define OPD_KERNELS_REDUCE_GEOM_H

#include <stdint.h>

#include "opd/op.h"
#include "opd/protocol.h"

#ifdef __CUDACC__
#define OPD_RED_HD __host__ __device__
#else
#define OPD_RED_HD
#endif

typedef struct opd_red_geom {
  int nk;                          /* kept dims after merging */
  int nr;                          /* reduced dims after merging */
  int64_t kshape[OPD_MAX_RANK];    /* kept extents, outermost first */
  int64_t kstride[OPD_MAX_RANK];   /* their strides in x (elements) */
  int64_t rshape[OPD_MAX_RANK];    /* reduced extents, outermost first */
  int64_t rstride[OPD_MAX_RANK];   /* their strides in x */
  int64_t nout;                    /* outputs: product of kshape */
  int64_t nred;                    /* elements per output: product of
                                      rshape (1 when nr == 0) */
} opd_red_geom_t;

/* The set of dims `n` ints `dims` name for x of `rank` dims, as a bit mask
 * (every dim when n == 0; negative dims count from the end; a 0-d x takes
 * 0 and -1, as torch). Returns 0, or -1 with *bad = the index in dims of a
 * dim out of range, or -2 with *bad = the index of a dim given twice. */
static inline int opd__red_mask(const int64_t *dims, int n, int rank,
                                uint32_t *mask, int *bad) {
  int r = rank > 0 ? rank : 1;
  *mask = 0;
  if (n == 0) {
    *mask = rank > 0 ? (uint32_t)((1u << rank) - 1) : 0;
    return 0;
  }
  for (int i = 0; i < n; i++) {
    int64_t d = dims[i] < 0 ? dims[i] + r : dims[i];
    *bad = i;
    if (d < 0 || d >= r) return -1;
    if (rank == 0) continue;
    if ((*mask >> d) & 1) return -2;
    *mask |= 1u << d;
  }
  return 0;
}

/* The number of dims a `dims` attribute names: 0 (all) for the default,
 * a single INT64_MIN. */
static inline int opd__red_ndims(const opd_attr_val_t *dims) {
  return dims->n == 1 && dims->ints[0] == INT64_MIN ? 0 : dims->n;
}

/* Fills g for x of `rank` dims `shape` (C-contiguous) reduced over the
 * dims whose bit is set in `mask`. */
static inline void opd__red_geom(opd_red_geom_t *g, const int64_t *shape,
                                 int rank, uint32_t mask) {
  int64_t stride[OPD_MAX_RANK], s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    stride[d] = s;
    s *= shape[d];
  }
  g->nk = g->nr = 0;
  g->nout = g->nred = 1;
  int last = -1; /* kind of the previous dim kept: 0 kept, 1 reduced */
  for (int d = 0; d < rank; d++) {
    g->nout *= (mask >> d) & 1 ? 1 : shape[d];
    g->nred *= (mask >> d) & 1 ? shape[d] : 1;
    if (shape[d] == 1) continue;
    int red = (mask >> d) & 1;
    int64_t *ext = red ? g->rshape : g->kshape;
    int64_t *str = red ? g->rstride : g->kstride;
    int *n = red ? &g->nr : &g->nk;
    if (last == red && *n > 0) { /* merge with the previous dim */
      ext[*n - 1] *= shape[d];
      str[*n - 1] = stride[d];
    } else {
      ext[*n] = shape[d];
      str[*n] = stride[d];
      (*n)++;
    }
    last = red;
  }
}

/* Offset in x of output o's first element. */
OPD_RED_HD static inline int64_t opd__red_koff(const opd_red_geom_t *g, int64_t o) {
  int64_t off = 0;
  for (int d = g->nk - 1; d >= 0; d--) {
    off += (o % g->kshape[d]) * g->kstride[d];
    o /= g->kshape[d];
  }
  return off;
}

/* Offset of reduced element r from its output's first element. */
OPD_RED_HD static inline int64_t opd__red_roff(const opd_red_geom_t *g, int64_t r) {
  int64_t off = 0;
  for (int d = g->nr - 1; d >= 0; d--) {
    off += (r % g->rshape[d]) * g->rstride[d];
    r /= g->rshape[d];
  }
  return off;
}

/* g for call (x = in[0], dims = attr[0]; the shape rule passed). */
static inline void opd__red_call_geom(const opd_kcall_t *call,
                                      opd_red_geom_t *g) {
  const opd_tview_t *x = &call->in[0];
  uint32_t mask = 0;
  int bad;
  opd__red_mask(call->attr[0].ints, opd__red_ndims(&call->attr[0]), x->rank,
                &mask, &bad);
  opd__red_geom(g, x->shape, x->rank, mask);
}

#endif /* OPD_KERNELS_REDUCE_GEOM_H */
