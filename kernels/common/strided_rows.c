/* The row-wise strided driver in front of the norm family's CPU kernels
 * (kernels/common/strided.h).
 *
 * DESIGN
 * The dims outside the normalized ones are the batch dims, merged where
 * x and the output are both contiguous across them; a tile is a block of
 * consecutive rows along the last of them, about TILE_BYTES of x (16 rows
 * of 1024 float32). x's block is gathered into the thread's buffer when
 * it is not contiguous (a transpose: 8 x 8 register transposes), the
 * output's block written through the buffer when it is not. Rows of at
 * least ROW_DIRECT elements: the kernel runs on each row, in memory where
 * a tensor's rows are contiguous (an out= slice of wider rows, a step
 * over rows, a stride-0 broadcast: nothing copied), else in the buffer,
 * whose rows are padded by a cache line (see strided.c); shorter rows:
 * once on the block. A weight or bias that is strided is copied once per
 * call (it is one row). A softmax whose x and output share one dense
 * layout (a permutation of contiguous: softmax of x.transpose(1, 2) into
 * a result laid out alike) runs once on their memory in that layout's
 * order, its dim renumbered: the kernel's own other-dim path, no copy.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/kutil.h"
#include "kernels/common/strided.h"
#include "kernels/common/tile.h"
#include "kernels/copy/copy.h"

#define TILE_BYTES OPD_TILE_BYTES
#define ROW_DIRECT OPD_ROW_DIRECT
#define MAXT OPD_MAX_TENSORS
#define MAXR OPD_MAX_RANK

typedef struct rows_plan {
  opd_kcall_t *call;               /* the whole call */
  opd_cpu_fn fn;                   /* its contiguous kernel */
  int dim_attr;                    /* attribute set to -1 in tiles, or -1 */
  int k;                           /* normalized dims */
  int lead;                        /* 1: tiles have a leading rows dim */
  int64_t rshape[MAXR];            /* the normalized dims' extents */
  int64_t rowlen;                  /* their product */
  int nb;                          /* batch dims (merged), >= 1 */
  int64_t bshape[MAXR];            /* their extents; the last is J */
  int64_t bst[2][MAXR];            /* batch strides of x (0), out (1) */
  int64_t rst[2][MAXR];            /* normalized dims' strides */
  char *base[2];                   /* x's, out's first element */
  size_t esz[2];                   /* element bytes */
  int32_t dtype[2];                /* dtypes */
  int64_t tb, ntb;                 /* rows per tile along J, tiles along J */
  int rows;                        /* 1: the kernel runs on each row */
  int row_contig[2];               /* x's, out's rows are contiguous */
  size_t pitch[2];                 /* bytes between rows of a buffer */
  opd_tview_t side[MAXT];          /* inputs after x, contiguous */
  _Atomic int rc;                  /* the first failure */
  char err[256];                   /* its message */
} rows_plan_t;

OPD_FAST static void rows_range(void *arg, int64_t b, int64_t e) {
  rows_plan_t *p = arg;
  opd_kcall_t *call = p->call;
  opd_kcall_t sub = *call;
  sub.exec = &opd__tile_serial;
  if (p->dim_attr >= 0) sub.attr[p->dim_attr].i = -1;
  for (int i = 1; i < call->n_in; i++) sub.in[i] = p->side[i];
  size_t off1 = (size_t)p->tb * p->pitch[0];
  int own;
  char *buf = opd__tile_buf_take(off1 + (size_t)p->tb * p->pitch[1], &own);
  if (buf == NULL) {
    opd__tile_fail(&p->rc, p->err, "out of memory for a strided tile", OPD_ENOMEM);
    return;
  }
  char *tbuf[2] = {buf, buf + off1};
  const int J = p->nb - 1, r = p->lead + p->k;
  for (int64_t i = b; i < e && atomic_load_explicit(&p->rc, memory_order_relaxed) == 0; i++) {
    int64_t j0 = i % p->ntb * p->tb, o = i / p->ntb;
    int64_t m = p->bshape[J] - j0 < p->tb ? p->bshape[J] - j0 : p->tb;
    int64_t shape[MAXR];
    shape[0] = m;
    memcpy(shape + p->lead, p->rshape, sizeof(int64_t) * (size_t)p->k);
    opd_tview_t blk[2], bv[2]; /* the block in memory, in the buffer */
    int direct[2];
    for (int t = 0; t < 2; t++) {
      int64_t at = j0 * p->bst[t][J], rem = o, st[MAXR], cs[MAXR], c = 1;
      for (int d = J - 1; d >= 0; d--) {
        at += rem % p->bshape[d] * p->bst[t][d];
        rem /= p->bshape[d];
      }
      st[0] = p->bst[t][J];
      memcpy(st + p->lead, p->rst[t], sizeof(int64_t) * (size_t)p->k);
      opd__tile_view(&blk[t], p->base[t] + at * (int64_t)p->esz[t], p->dtype[t], r, shape, st);
      for (int d = r - 1; d >= p->lead; d--) cs[d] = c, c *= shape[d];
      cs[0] = (int64_t)(p->pitch[t] / p->esz[t]);
      opd__tile_view(&bv[t], tbuf[t], p->dtype[t], r, shape, cs);
      direct[t] = p->rows ? p->row_contig[t] : opd__kview_contiguous(&blk[t]);
      if (t == 0 && !direct[0]) opd__copy_views_cpu(&opd__tile_serial, &bv[0], &blk[0]);
    }
    /* the kernel: on each row (rows), or on the block */
    int64_t calls = p->rows ? m : 1;
    for (int t = 0; t < 2; t++) { /* the views; each row moves data */
      opd_tview_t *v = t == 0 ? &sub.in[0] : &sub.out[0];
      opd__tile_contig_like(v, direct[t] ? &blk[t] : &bv[t], NULL);
      if (p->rows && p->lead) { /* one row */
        v->numel /= v->shape[0];
        v->shape[0] = 1;
      }
    }
    for (int64_t kk = 0; kk < calls; kk++) {
      for (int t = 0; t < 2; t++) {
        const opd_tview_t *from = direct[t] ? &blk[t] : &bv[t];
        (t == 0 ? &sub.in[0] : &sub.out[0])->data =
            (char *)from->data + kk * from->strides[0] * (int64_t)p->esz[t];
      }
      sub.err[0] = '\0';
      int rc = p->fn(&sub);
      if (rc != 0) {
        opd__tile_fail(&p->rc, p->err, sub.err, rc);
        goto out;
      }
    }
    if (!direct[1]) opd__copy_views_cpu(&opd__tile_serial, &blk[1], &bv[1]);
  }
out:
  opd__tile_buf_give(buf, own);
}

/* Whether dims [d0, d0 + k) of strides st over shape are C-contiguous. */
static int dims_contig(const int64_t *shape, const int64_t *st, int d0, int k) {
  int64_t expect = 1;
  for (int d = d0 + k - 1; d >= d0; d--) {
    if (shape[d] == 1) continue;
    if (st[d] != expect) return 0;
    expect *= shape[d];
  }
  return 1;
}

/* A softmax-like call (its dim in an attribute, k == 1) whose x and
 * output share one dense layout (a permutation of contiguous): the views
 * in that layout's order, C-contiguous, the dim renumbered; fn once on
 * them (its own dim != -1 path). 1 when it ran (*rc its result), 0 when
 * the layouts do not allow it. */
static int rows_permuted(opd_kcall_t *call, int d0, int dim_attr,
                         opd_cpu_fn fn, int *rc) {
  const opd_tview_t *x = &call->in[0], *y = &call->out[0];
  if (call->n_in != 1 || call->n_out != 1 ||
      memcmp(x->strides, y->strides, sizeof(int64_t) * (size_t)x->rank) != 0)
    return 0;
  int order[MAXR];
  for (int d = 0; d < x->rank; d++) { /* by stride, largest first, stable */
    int j = d;
    for (; j > 0 && x->strides[order[j - 1]] < x->strides[d]; j--) order[j] = order[j - 1];
    order[j] = d;
  }
  opd_kcall_t *c = malloc(sizeof *c);
  if (c == NULL) return 0;
  *c = *call;
  int nd = 0;
  for (int j = 0; j < x->rank; j++) {
    int d = order[j];
    if (d == d0) nd = j;
    c->in[0].shape[j] = x->shape[d], c->in[0].strides[j] = x->strides[d];
  }
  if (!opd__kview_contiguous(&c->in[0])) {
    free(c);
    return 0;
  }
  opd__tile_contig_like(&c->in[0], &c->in[0], x->data);
  opd__tile_contig_like(&c->out[0], &c->in[0], y->data);
  c->out[0].dtype = y->dtype;
  c->attr[dim_attr].i = nd;
  *rc = fn(c);
  if (*rc != 0) snprintf(call->err, sizeof call->err, "%s", c->err);
  free(c);
  return 1;
}

int opd__rows_dense(const opd_kcall_t *call, int d0, int64_t *outer,
                    int64_t *C, int64_t *inner) {
  const opd_tview_t *x = &call->in[0], *y = &call->out[0];
  if (call->n_out != 1 ||
      memcmp(x->strides, y->strides, sizeof(int64_t) * (size_t)x->rank) != 0)
    return 0;
  opd_tview_t v = *x; /* x's dims in memory order */
  int order[MAXR], nd = 0;
  for (int d = 0; d < x->rank; d++) {
    int j = d;
    for (; j > 0 && x->strides[order[j - 1]] < x->strides[d]; j--) order[j] = order[j - 1];
    order[j] = d;
  }
  *outer = *inner = 1;
  for (int j = 0; j < x->rank; j++) {
    v.shape[j] = x->shape[order[j]], v.strides[j] = x->strides[order[j]];
    if (order[j] == d0) nd = j;
  }
  if (!opd__kview_contiguous(&v)) return 0;
  for (int j = 0; j < x->rank; j++)
    if (j < nd) *outer *= v.shape[j];
    else if (j > nd) *inner *= v.shape[j];
  *C = x->shape[d0];
  return 1;
}

int opd__rows_strided(opd_kcall_t *call, int d0, int k, int dim_attr,
                      opd_cpu_fn fn) {
  if (opd__call_contiguous(call)) return fn(call);
  const opd_tview_t *x = &call->in[0], *y = &call->out[0];
  if (x->numel == 0) return 0;
  int prc;
  if (dim_attr >= 0 && k == 1 && rows_permuted(call, d0, dim_attr, fn, &prc))
    return prc;
  rows_plan_t *p = malloc(sizeof *p);
  if (p == NULL) return opd__kerr(call, OPD_ENOMEM, "out of memory for a strided plan");
  int rc = 0;
  void *copies[MAXT] = {0};
  p->call = call;
  p->fn = fn;
  p->dim_attr = dim_attr;
  p->k = k;
  p->lead = k < x->rank;
  p->rowlen = 1;
  const opd_tview_t *xy[2] = {x, y};
  for (int t = 0; t < 2; t++) {
    p->base[t] = xy[t]->data;
    p->dtype[t] = xy[t]->dtype;
    p->esz[t] = opd__dtype_size(xy[t]->dtype);
  }
  for (int d = 0; d < k; d++) {
    p->rshape[d] = x->shape[d0 + d];
    p->rowlen *= p->rshape[d];
    for (int t = 0; t < 2; t++) p->rst[t][d] = xy[t]->strides[d0 + d];
  }
  p->nb = 0; /* the batch dims, merged where both tensors allow */
  for (int d = 0; d < x->rank; d++) {
    if ((d >= d0 && d < d0 + k) || x->shape[d] == 1) continue;
    int j = p->nb - 1;
    if (j >= 0 && p->bst[0][j] == x->strides[d] * x->shape[d] &&
        p->bst[1][j] == y->strides[d] * x->shape[d]) {
      p->bshape[j] *= x->shape[d];
      p->bst[0][j] = x->strides[d], p->bst[1][j] = y->strides[d];
      continue;
    }
    p->bshape[p->nb] = x->shape[d];
    p->bst[0][p->nb] = x->strides[d], p->bst[1][p->nb] = y->strides[d];
    p->nb++;
  }
  if (p->nb == 0) {
    p->nb = 1;
    p->bshape[0] = 1;
    p->bst[0][0] = p->bst[1][0] = 0;
  }
  for (int i = 1; i < call->n_in; i++) { /* weight, bias: contiguous */
    const opd_tview_t *v = &call->in[i];
    if (opd__kview_contiguous(v)) {
      p->side[i] = *v;
      continue;
    }
    copies[i] = malloc((size_t)v->numel * opd__dtype_size(v->dtype) + 1);
    if (copies[i] == NULL) {
      rc = opd__kerr(call, OPD_ENOMEM, "out of memory for a copy of input %d", i);
      goto done;
    }
    opd__tile_contig_like(&p->side[i], v, copies[i]);
    opd__copy_views_cpu(call->exec, &p->side[i], v);
  }
  int J = p->nb - 1;
  size_t emax = p->esz[0] > p->esz[1] ? p->esz[0] : p->esz[1];
  int64_t tb = TILE_BYTES / (int64_t)emax / (p->rowlen > 0 ? p->rowlen : 1);
  if (tb < 1) tb = 1;
  if (tb >= 8) tb -= tb % 8;
  int rows_contig = 1, blocks_contig = 1;
  for (int t = 0; t < 2; t++) {
    p->row_contig[t] = dims_contig(x->shape, xy[t]->strides, d0, k);
    rows_contig &= p->row_contig[t];
    blocks_contig &= p->bst[t][J] == p->rowlen;
  }
  if (rows_contig && !blocks_contig && p->rowlen >= ROW_DIRECT) tb = 1;
  if (!p->lead || tb > p->bshape[J]) tb = p->lead ? p->bshape[J] : 1;
  /* rows of at least ROW_DIRECT: the kernel runs on each, in memory where
     it is contiguous, else in a buffer whose rows are a cache line longer
     than they need (see ew_range) */
  p->rows = p->rowlen >= ROW_DIRECT;
  for (int t = 0; t < 2; t++)
    p->pitch[t] = (size_t)p->rowlen * p->esz[t] + (p->rows ? 64 : 0);
  p->tb = tb;
  p->ntb = (p->bshape[J] + tb - 1) / tb;
  int64_t tiles = p->ntb;
  for (int d = 0; d < J; d++) tiles *= p->bshape[d];
  atomic_init(&p->rc, 0);
  call->exec->parallel_for(call->exec, tiles, 1, rows_range, p);
  rc = atomic_load(&p->rc);
  if (rc != 0) snprintf(call->err, sizeof call->err, "%s", p->err);
done:
  for (int i = 0; i < MAXT; i++) free(copies[i]);
  free(p);
  return rc;
}
