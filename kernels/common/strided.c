/* The strided drivers in front of the element-wise and row-wise CPU
 * kernels (kernels/common/strided.h).
 *
 * DESIGN
 * Element-wise (opd__ew_strided): the tensors are put in output 0's
 * shape (a broadcast input gets stride 0), dims of extent 1 dropped, the
 * dims sorted by output 0's strides (its memory order is the walk's),
 * neighbours merged where every tensor is contiguous across them. The
 * last dim L is the tile's row; the tile's other dim K is the one along
 * which a transposed input is unit-stride (moved next to L), else the
 * dim before L. Tiles are TILE_BYTES per tensor: a transposed input is
 * read in 16 x (up to 16K / 16) blocks (16 float32: one cache line per
 * column), gathered with the copy family's 8 x 8 register transposes
 * (kernels/copy/copy.h), while the output's block stays one contiguous
 * run its kernel writes directly. When every tensor is unit-stride along
 * a row of at least ROW_DIRECT elements (a step over rows, a slice of
 * wider rows), each tile is a piece of one row and no tensor is copied.
 *
 * Row-wise (opd__rows_strided): a tile is a block of consecutive rows
 * along the last batch dim (the dims outside the normalized ones), about
 * TILE_BYTES of x; x's block is gathered when it is not contiguous (a
 * transpose: 8 x 8 register transposes again), the output's block written
 * through the buffer when it is not; rows that are contiguous in both
 * tensors and at least ROW_DIRECT long go one kernel call per row, with
 * no copy. A weight or bias that is strided is copied once per call (it
 * is one row).
 *
 * The per-thread buffer is kept between calls (the kernel threads live as
 * long as the daemon) up to BUF_KEEP bytes; a larger one is freed after
 * its tiles. Tiles run the kernel with a serial exec: the parallelism is
 * over tiles, spread over call->exec (a best-effort run's view included).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/kutil.h"
#include "kernels/common/strided.h"
#include "kernels/copy/copy.h"

#define TILE_BYTES ((int64_t)64 << 10) /* per tensor: a few fit in L2 */
#define ROW_DIRECT 256                 /* contiguous rows this long: no copy */
#define BUF_KEEP ((size_t)1 << 20)     /* per-thread buffer kept */
#define MAXT OPD_MAX_TENSORS
#define MAXR OPD_MAX_RANK

static void serial_for(const opd_exec_t *ex, int64_t n, int64_t grain,
                       opd_range_fn fn, void *arg) {
  (void)ex, (void)grain;
  if (n > 0) fn(arg, 0, n);
}

/* The tiles' exec: each tile's kernel runs on the thread of its tile. */
static const opd_exec_t serial = {serial_for, 1, NULL};

int opd__kview_contiguous(const opd_tview_t *v) {
  int64_t expect = 1;
  for (int i = v->rank - 1; i >= 0; i--) {
    if (v->shape[i] == 1) continue;
    if (v->shape[i] == 0) return 1; /* no element: any strides */
    if (v->strides[i] != expect) return 0;
    expect *= v->shape[i];
  }
  return 1;
}

static int call_contiguous(const opd_kcall_t *call) {
  for (int i = 0; i < call->n_in; i++)
    if (!opd__kview_contiguous(&call->in[i])) return 0;
  for (int i = 0; i < call->n_out; i++)
    if (!opd__kview_contiguous(&call->out[i])) return 0;
  return 1;
}

/* ---- the per-thread buffer --------------------------------------------- */

static _Thread_local char *tl_buf;   /* this thread's tile buffer */
static _Thread_local size_t tl_cap;  /* its bytes */
static _Thread_local int tl_busy;    /* a driver holds it */

/* A buffer of `bytes` (64-byte aligned) for one range of tiles: the
 * thread's own, or a private one (*own = 1) if the thread's is held;
 * NULL when memory is short. */
static char *buf_take(size_t bytes, int *own) {
  bytes = (bytes + 63) & ~(size_t)63;
  *own = tl_busy;
  if (*own) return aligned_alloc(64, bytes ? bytes : 64);
  if (bytes > tl_cap) {
    free(tl_buf);
    tl_buf = aligned_alloc(64, bytes);
    tl_cap = tl_buf != NULL ? bytes : 0;
    if (tl_buf == NULL) return NULL;
  }
  tl_busy = 1;
  return tl_buf;
}

static void buf_give(char *buf, int own) {
  if (own) {
    free(buf);
    return;
  }
  tl_busy = 0;
  if (tl_cap > BUF_KEEP) {
    free(tl_buf);
    tl_buf = NULL;
    tl_cap = 0;
  }
}

/* A view of `rank` dims at data. */
static void mkview(opd_tview_t *v, void *data, int32_t dtype, int rank,
                   const int64_t *shape, const int64_t *strides) {
  v->data = data;
  v->dtype = dtype;
  v->rank = rank;
  v->numel = 1;
  for (int d = 0; d < rank; d++) {
    v->shape[d] = shape[d];
    v->strides[d] = strides[d];
    v->numel *= shape[d];
  }
}

/* The C-contiguous view of v's shape at data. */
static void contig_like(opd_tview_t *dst, const opd_tview_t *v, void *data) {
  int64_t st[MAXR], s = 1;
  for (int d = v->rank - 1; d >= 0; d--) {
    st[d] = s;
    s *= v->shape[d];
  }
  mkview(dst, data, v->dtype, v->rank, v->shape, st);
}

/* Records the first failure of a tile. */
static void fail(_Atomic int *rc, char *err, const char *msg, int code) {
  int zero = 0;
  if (atomic_compare_exchange_strong(rc, &zero, code))
    snprintf(err, 256, "%s", msg);
}

/* ---- element-wise ------------------------------------------------------ */

typedef struct ew_plan {
  opd_kcall_t *call;               /* the whole call */
  opd_cpu_fn fn;                   /* its contiguous kernel */
  int nt;                          /* tensors: inputs, then outputs */
  int rank;                        /* walk dims, >= 1; K = rank-2, L = rank-1 */
  int64_t shape[MAXR];             /* their extents */
  int64_t st[MAXT][MAXR];          /* each tensor's strides (0: broadcast) */
  char *base[MAXT];                /* each tensor's first element */
  size_t esz[MAXT];                /* its element bytes */
  int32_t dtype[MAXT];             /* its dtype */
  int64_t tk, tl;                  /* a tile's extents along K and L */
  int rows;                        /* 1: the kernel runs on each tile row */
  size_t pitch[MAXT];              /* bytes between rows of a buffer */
  int64_t nkb, nlb;                /* tiles along K and L */
  _Atomic int rc;                  /* the first failure */
  char err[256];                   /* its message */
} ew_plan_t;

static opd_tview_t *tensor(opd_kcall_t *call, int t) {
  return t < call->n_in ? &call->in[t] : &call->out[t - call->n_in];
}

/* Whether the mk x ml block at strides (sk, sl) is contiguous. */
static int block_contig(int64_t mk, int64_t ml, int64_t sk, int64_t sl) {
  if (ml == 1) return mk == 1 || sk == 1;
  return sl == 1 && (mk == 1 || sk == ml);
}

/* Tile row kk's pointer of tensor t: in memory when t is unit-stride
 * along L (or the block is contiguous), else in its buffer. */
OPD_FAST static void ew_range(void *arg, int64_t b, int64_t e) {
  ew_plan_t *p = arg;
  opd_kcall_t *call = p->call;
  opd_kcall_t sub = *call;
  sub.exec = &serial;
  size_t off[MAXT], need = 0;
  for (int t = 0; t < p->nt; t++) {
    off[t] = need;
    need += (size_t)p->tk * p->pitch[t];
  }
  int own;
  char *buf = buf_take(need, &own);
  if (buf == NULL) {
    fail(&p->rc, p->err, "out of memory for a strided tile", OPD_ENOMEM);
    return;
  }
  const int K = p->rank - 2, L = p->rank - 1;
  for (int64_t i = b; i < e && atomic_load_explicit(&p->rc, memory_order_relaxed) == 0; i++) {
    int64_t lb = i % p->nlb, kb = i / p->nlb % p->nkb, o = i / p->nlb / p->nkb;
    int64_t l0 = lb * p->tl, ml = p->shape[L] - l0 < p->tl ? p->shape[L] - l0 : p->tl;
    int64_t k0 = 0, mk = 1;
    if (K >= 0) {
      k0 = kb * p->tk;
      mk = p->shape[K] - k0 < p->tk ? p->shape[K] - k0 : p->tk;
    }
    int64_t tshape[2] = {mk, ml};
    char *ptr[MAXT];
    int direct[MAXT];
    int64_t sk[MAXT];
    for (int t = 0; t < p->nt; t++) {
      int64_t at = l0 * p->st[t][L], rem = o;
      sk[t] = K >= 0 ? p->st[t][K] : 0;
      at += k0 * sk[t];
      for (int d = K - 1; d >= 0; d--) {
        at += rem % p->shape[d] * p->st[t][d];
        rem /= p->shape[d];
      }
      ptr[t] = p->base[t] + at * (int64_t)p->esz[t];
      direct[t] = p->rows ? p->st[t][L] == 1
                          : block_contig(mk, ml, sk[t], p->st[t][L]);
      if (!direct[t] && t < call->n_in) { /* gather the input's block */
        opd_tview_t src, dst;
        int64_t ss[2] = {sk[t], p->st[t][L]};
        int64_t ds[2] = {p->rows ? (int64_t)(p->pitch[t] / p->esz[t]) : ml, 1};
        mkview(&src, ptr[t], p->dtype[t], 2, tshape, ss);
        mkview(&dst, buf + off[t], p->dtype[t], 2, tshape, ds);
        opd__copy_views_cpu(&serial, &dst, &src);
      }
    }
    /* the kernel: on each row of the tile (rows), or on the whole tile */
    int64_t calls = p->rows ? mk : 1, m = p->rows ? ml : mk * ml, one = 1;
    for (int64_t kk = 0; kk < calls; kk++) {
      for (int t = 0; t < p->nt; t++) {
        char *at = direct[t] ? ptr[t] + kk * sk[t] * (int64_t)p->esz[t]
                             : buf + off[t] + (size_t)kk * p->pitch[t];
        mkview(tensor(&sub, t), at, p->dtype[t], 1, &m, &one);
      }
      sub.err[0] = '\0';
      int rc = p->fn(&sub);
      if (rc != 0) {
        fail(&p->rc, p->err, sub.err, rc);
        goto out;
      }
    }
    for (int t = call->n_in; t < p->nt; t++) { /* scatter the outputs' */
      if (direct[t]) continue;
      opd_tview_t src, dst;
      int64_t ss[2] = {p->rows ? (int64_t)(p->pitch[t] / p->esz[t]) : ml, 1};
      int64_t ds[2] = {sk[t], p->st[t][L]};
      mkview(&src, buf + off[t], p->dtype[t], 2, tshape, ss);
      mkview(&dst, ptr[t], p->dtype[t], 2, tshape, ds);
      opd__copy_views_cpu(&serial, &dst, &src);
    }
  }
out:
  buf_give(buf, own);
}

/* Swaps walk dims a and b of every tensor. */
static void swap_dims(ew_plan_t *p, int a, int b) {
  int64_t s = p->shape[a];
  p->shape[a] = p->shape[b], p->shape[b] = s;
  for (int t = 0; t < p->nt; t++) {
    s = p->st[t][a];
    p->st[t][a] = p->st[t][b], p->st[t][b] = s;
  }
}

/* The walk's dims (see DESIGN); returns whether an input is transposed
 * against output 0 (unit-stride along K, not L). */
static int ew_dims(ew_plan_t *p) {
  opd_kcall_t *call = p->call;
  const opd_tview_t *o = &call->out[0];
  int n = 0, oi = call->n_in;
  for (int d = 0; d < o->rank; d++) {
    if (o->shape[d] == 1) continue;
    p->shape[n] = o->shape[d];
    for (int t = 0; t < p->nt; t++) {
      const opd_tview_t *v = tensor(call, t);
      int dv = d - (o->rank - v->rank);
      p->st[t][n] = dv >= 0 && v->shape[dv] != 1 ? v->strides[dv] : 0;
    }
    n++;
  }
  p->rank = n;
  for (int d = 1; d < n; d++) /* output 0's memory order, stable */
    for (int k = d; k > 0 && p->st[oi][k - 1] < p->st[oi][k]; k--) swap_dims(p, k - 1, k);
  int m = 0;
  for (int d = 0; d < n; d++) {
    int merge = m > 0;
    for (int t = 0; merge && t < p->nt; t++)
      merge = p->st[t][m - 1] == p->st[t][d] * p->shape[d];
    if (merge) {
      p->shape[m - 1] *= p->shape[d];
      for (int t = 0; t < p->nt; t++) p->st[t][m - 1] = p->st[t][d];
      continue;
    }
    if (m != d) {
      p->shape[m] = p->shape[d];
      for (int t = 0; t < p->nt; t++) p->st[t][m] = p->st[t][d];
    }
    m++;
  }
  if (m == 0) { /* one element */
    m = 1;
    p->shape[0] = 1;
    for (int t = 0; t < p->nt; t++) p->st[t][0] = 0;
  }
  p->rank = m;
  int L = m - 1;
  if (m < 2) return 0;
  for (int t = 0; t < p->nt; t++) {
    if (p->st[t][L] == 1 || p->st[t][L] == 0) continue;
    for (int d = L - 1; d >= 0; d--) {
      if (p->st[t][d] != 1) continue;
      for (int k = d; k < L - 1; k++) swap_dims(p, k, k + 1); /* to K */
      return 1;
    }
  }
  return 0;
}

int opd__ew_strided(opd_kcall_t *call, opd_cpu_fn fn) {
  if (call_contiguous(call)) return fn(call);
  if (call->out[0].numel == 0) return 0;
  ew_plan_t *p = malloc(sizeof *p);
  if (p == NULL) return opd__kerr(call, OPD_ENOMEM, "out of memory for a strided plan");
  p->call = call;
  p->fn = fn;
  p->nt = call->n_in + call->n_out;
  size_t emax = 1;
  for (int t = 0; t < p->nt; t++) {
    const opd_tview_t *v = tensor(call, t);
    p->base[t] = v->data;
    p->dtype[t] = v->dtype;
    p->esz[t] = opd__dtype_size(v->dtype);
    if (p->esz[t] > emax) emax = p->esz[t];
  }
  int transposed = ew_dims(p);
  const int K = p->rank - 2, L = p->rank - 1;
  int64_t T = TILE_BYTES / (int64_t)emax, nL = p->shape[L];
  int64_t nK = K >= 0 ? p->shape[K] : 1;
  int unit = 1;
  for (int t = 0; t < p->nt; t++) unit &= p->st[t][L] == 1;
  if (unit && nL >= ROW_DIRECT) { /* pieces of rows, never copied */
    p->tl = nL < T ? nL : T;
    p->tk = 1;
  } else {
    int64_t kmin = transposed ? 16 : 1;
    p->tl = nL < T / kmin ? nL : T / kmin;
    p->tk = T / p->tl < nK ? T / p->tl : nK;
    if (p->tk < 1) p->tk = 1;
    if (p->tk >= 8) p->tk -= p->tk % 8;
  }
  /* rows of at least ROW_DIRECT: the kernel runs on each, in memory where
     a tensor is unit-stride along L, else in its buffer, whose rows are a
     cache line longer than they need (rows a multiple of 4 KiB apart make
     the transposes' stores alias the loads after them: 3x slower, 2-core
     VM, 2026-12-07) */
  p->rows = p->tl >= ROW_DIRECT;
  for (int t = 0; t < p->nt; t++)
    p->pitch[t] = (size_t)p->tl * p->esz[t] + (p->rows ? 64 : 0);
  p->nlb = (nL + p->tl - 1) / p->tl;
  p->nkb = (nK + p->tk - 1) / p->tk;
  int64_t tiles = p->nlb * p->nkb;
  for (int d = 0; d < K; d++) tiles *= p->shape[d];
  atomic_init(&p->rc, 0);
  call->exec->parallel_for(call->exec, tiles, 1, ew_range, p);
  int rc = atomic_load(&p->rc);
  if (rc != 0) snprintf(call->err, sizeof call->err, "%s", p->err);
  free(p);
  return rc;
}

/* ---- row-wise ---------------------------------------------------------- */

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
  sub.exec = &serial;
  if (p->dim_attr >= 0) sub.attr[p->dim_attr].i = -1;
  for (int i = 1; i < call->n_in; i++) sub.in[i] = p->side[i];
  size_t off1 = (size_t)p->tb * p->pitch[0];
  int own;
  char *buf = buf_take(off1 + (size_t)p->tb * p->pitch[1], &own);
  if (buf == NULL) {
    fail(&p->rc, p->err, "out of memory for a strided tile", OPD_ENOMEM);
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
      mkview(&blk[t], p->base[t] + at * (int64_t)p->esz[t], p->dtype[t], r, shape, st);
      for (int d = r - 1; d >= p->lead; d--) cs[d] = c, c *= shape[d];
      cs[0] = (int64_t)(p->pitch[t] / p->esz[t]);
      mkview(&bv[t], tbuf[t], p->dtype[t], r, shape, cs);
      direct[t] = p->rows ? p->row_contig[t] : opd__kview_contiguous(&blk[t]);
      if (t == 0 && !direct[0]) opd__copy_views_cpu(&serial, &bv[0], &blk[0]);
    }
    /* the kernel: on each row (rows), or on the block */
    int64_t calls = p->rows ? m : 1;
    for (int64_t kk = 0; kk < calls; kk++) {
      for (int t = 0; t < 2; t++) {
        opd_tview_t *v = t == 0 ? &sub.in[0] : &sub.out[0];
        const opd_tview_t *from = direct[t] ? &blk[t] : &bv[t];
        contig_like(v, from, (char *)from->data +
                                 kk * from->strides[0] * (int64_t)p->esz[t]);
        if (p->rows && p->lead) { /* one row */
          v->numel /= v->shape[0];
          v->shape[0] = 1;
        }
      }
      sub.err[0] = '\0';
      int rc = p->fn(&sub);
      if (rc != 0) {
        fail(&p->rc, p->err, sub.err, rc);
        goto out;
      }
    }
    if (!direct[1]) opd__copy_views_cpu(&serial, &blk[1], &bv[1]);
  }
out:
  buf_give(buf, own);
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
  contig_like(&c->in[0], &c->in[0], x->data);
  contig_like(&c->out[0], &c->in[0], y->data);
  c->out[0].dtype = y->dtype;
  c->attr[dim_attr].i = nd;
  *rc = fn(c);
  if (*rc != 0) snprintf(call->err, sizeof call->err, "%s", c->err);
  free(c);
  return 1;
}

int opd__rows_strided(opd_kcall_t *call, int d0, int k, int dim_attr,
                      opd_cpu_fn fn) {
  if (call_contiguous(call)) return fn(call);
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
    contig_like(&p->side[i], v, copies[i]);
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
