/* The attention family's sizes (sdpa, rope, swiglu), shared by the shape
 * rules (ops.c) and the kernels (cpu.c, pointwise.c, cuda.cu,
 * pointwise.cu).
 *
 * DESIGN
 * A call that passed its op's shape rule reads its sizes from the views;
 * the functions here do that in one place, so that a rule and its kernels
 * never disagree on what a shape means. sdpa sees every call as N = B*H
 * independent (Tq, D) x (Tk, D) attentions (rank 3 [N, T, D] is B = N,
 * H = 1); the mask, broadcast to [B, H, Tq, Tk], is read through four
 * strides, 0 on a broadcast dim, so that it is never expanded in memory.
 */
#ifndef OPD_KERNELS_ATTN_H
#define OPD_KERNELS_ATTN_H

#include <math.h>

#include "kernels/common/kutil.h" /* opd__bcast_strides */
#include "kernels/kernel.h"

/* The index helpers below run in the CUDA kernels too. */
#ifdef __CUDACC__
#define OPD_ATTN_HD __host__ __device__
#else
#define OPD_ATTN_HD
#endif

/* What sdpa's optional input 3 is. */
enum { SDPA_MASK_NONE = 0, SDPA_MASK_BOOL = 1, SDPA_MASK_FLOAT = 2 };

typedef struct sdpa_dims {
  int64_t N;                       /* attentions: B*H (rank 4) or N (rank 3) */
  int64_t H;                       /* heads per batch item (1 for rank 3) */
  int64_t Tq, Tk;                  /* query and key lengths */
  int64_t D, Dv;                   /* q/k head dim, v (and out) head dim */
  float scale;                     /* applied to q.k (1/sqrt(D) by default) */
  int causal;                      /* key j > query i is masked (top-left) */
  int mask;                        /* SDPA_MASK_* */
  int64_t mb, mh, mq, mk;          /* mask strides in elements for batch
                                      item, head, query, key; 0: broadcast */
} sdpa_dims_t;

/* The sizes of a call that passed sdpa's shape rule (attrs: causal,
 * scale). */
static inline sdpa_dims_t opd__sdpa_dims(const opd_kcall_t *call) {
  const opd_tview_t *q = &call->in[0], *k = &call->in[1], *v = &call->in[2];
  sdpa_dims_t d;
  int r = q->rank;
  d.H = r == 4 ? q->shape[1] : 1;
  d.N = q->shape[0] * d.H;
  d.Tq = q->shape[r - 2];
  d.Tk = k->shape[r - 2];
  d.D = q->shape[r - 1];
  d.Dv = v->shape[r - 1];
  d.causal = call->attr[0].i != 0;
  d.scale = call->attr[1].f != 0.0
                ? (float)call->attr[1].f
                : (d.D > 0 ? (float)(1.0 / sqrt((double)d.D)) : 1.0f);
  d.mask = SDPA_MASK_NONE;
  d.mb = d.mh = d.mq = d.mk = 0;
  if (call->n_in > 3) {
    const opd_tview_t *m = &call->in[3];
    int64_t s[4] = {0, 0, 0, 0};
    d.mask = m->dtype == OPD_DTYPE_BOOL ? SDPA_MASK_BOOL : SDPA_MASK_FLOAT;
    if (r == 4) {
      opd__bcast_strides(m->shape, m->rank, 4, s);
    } else {
      opd__bcast_strides(m->shape, m->rank, 3, s + 1); /* [N, Tq, Tk] */
      s[0] = s[1];                                     /* N is the batch */
      s[1] = 0;
    }
    d.mb = s[0];
    d.mh = s[1];
    d.mq = s[2];
    d.mk = s[3];
  }
  return d;
}

/* Offset of attention n's mask row 0, key 0. */
OPD_ATTN_HD static inline int64_t opd__sdpa_mask_base(const sdpa_dims_t *d, int64_t n) {
  return (n / d->H) * d->mb + (n % d->H) * d->mh;
}

/* The CUDA sdpa kernels (cuda.cu): AUTO picks sdpa_wmma where it fits
 * (float16 / bfloat16, D and Dv multiples of 16 up to 64, sm_80+), else
 * the CUDA-core kernel; CORES and WMMA force one (WMMA refuses, with
 * OPD_ELIMIT, a call it does not fit). For tests and benchmarks; the row's
 * kernel is AUTO. */
enum { OPD_SDPA_AUTO = 0, OPD_SDPA_CORES = 1, OPD_SDPA_WMMA = 2 };
int opd__sdpa_cuda_variant(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, int variant);

/* rope: x (..., T, D) as rows of D; cos / sin broadcast to x's shape,
 * read through strides (0 on a broadcast dim). */
typedef struct rope_dims {
  int rank;                        /* x's rank */
  int64_t shape[OPD_MAX_RANK];     /* x's shape */
  int64_t cs[OPD_MAX_RANK];        /* cos / sin strides over x's shape */
  int64_t rows, D;                 /* numel / D, last dim */
} rope_dims_t;

static inline rope_dims_t opd__rope_dims(const opd_kcall_t *call) {
  const opd_tview_t *x = &call->in[0], *c = &call->in[1];
  rope_dims_t d;
  d.rank = x->rank;
  for (int i = 0; i < x->rank; i++) d.shape[i] = x->shape[i];
  opd__bcast_strides(c->shape, c->rank, x->rank, d.cs);
  d.D = x->rank > 0 ? x->shape[x->rank - 1] : 1;
  d.rows = d.D > 0 ? x->numel / d.D : 0;
  return d;
}

/* Offset into cos / sin of row `row` of x (element 0 of its last dim). */
OPD_ATTN_HD static inline int64_t opd__rope_row_off(const rope_dims_t *d, int64_t row) {
  int64_t off = 0;
  for (int i = d->rank - 2; i >= 0; i--) {
    int64_t e = d->shape[i];
    off += (row % e) * d->cs[i];
    row /= e;
  }
  return off;
}

#endif /* OPD_KERNELS_ATTN_H */
