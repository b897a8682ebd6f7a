/* The element-wise strided driver in front of the unary and binary CPU
 * kernels (kernels/common/strided.h); the row-wise one is strided_rows.c.
 *
 * DESIGN
 * The tensors are put in output 0's shape (a broadcast input gets stride
 * 0), dims of extent 1 dropped, the dims sorted by output 0's strides
 * (its memory order is the walk's) and neighbours merged where every
 * tensor is contiguous across them. The last dim L is the tiles' rows;
 * their other dim K is the one along which a transposed input is
 * unit-stride (moved next to L), else the dim before L. A tile is
 * TILE_BYTES of the widest dtype: 16 x (up to 16K / 16) when an input is
 * transposed (16 float32 along K: one cache line per column read),
 * gathered with the copy family's 8 x 8 register transposes
 * (kernels/copy/copy.h).
 *   Rows of at least ROW_DIRECT elements: the kernel runs on each row of
 * the tile, in memory for every tensor unit-stride along L (an output in
 * its place, a slice of wider rows, a stride-0 broadcast of rows), else
 * in the tensor's buffer, whose rows are a cache line longer than they
 * need: rows a multiple of 4 KiB apart make the transposes' stores alias
 * the loads after them, 3x slower (2-core VM, 2026-12-07,
 * bench/results/2026-12-07-vm-strided-2.txt). When every tensor is
 * unit-stride along L, a tile is a piece of one row and nothing is
 * copied.
 *   Shorter rows: the kernel runs once on the whole tile, each tensor in
 * memory where the tile is contiguous there, else in its buffer.
 * Outputs in a buffer are scattered after the kernel, so a failed tile
 * leaves the output's later tiles as they were.
 */
#include <stdatomic.h>
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

/* Tiles [b, e): tile i is block (i / nlb) % nkb along K and i % nlb
 * along L at the outer multi-index i / nlb / nkb. */
OPD_FAST static void ew_range(void *arg, int64_t b, int64_t e) {
  ew_plan_t *p = arg;
  opd_kcall_t *call = p->call;
  opd_kcall_t sub = *call;
  sub.exec = &opd__tile_serial;
  size_t off[MAXT], need = 0;
  for (int t = 0; t < p->nt; t++) {
    off[t] = need;
    need += (size_t)p->tk * p->pitch[t];
  }
  int own;
  char *buf = opd__tile_buf_take(need, &own);
  if (buf == NULL) {
    opd__tile_fail(&p->rc, p->err, "out of memory for a strided tile", OPD_ENOMEM);
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
        opd__tile_view(&src, ptr[t], p->dtype[t], 2, tshape, ss);
        opd__tile_view(&dst, buf + off[t], p->dtype[t], 2, tshape, ds);
        opd__copy_views_cpu(&opd__tile_serial, &dst, &src);
      }
    }
    /* the kernel: on each row of the tile (rows), or on the whole tile */
    int64_t calls = p->rows ? mk : 1, m = p->rows ? ml : mk * ml, one = 1;
    for (int t = 0; t < p->nt; t++) /* the views; each call moves data */
      opd__tile_view(tensor(&sub, t), NULL, p->dtype[t], 1, &m, &one);
    for (int64_t kk = 0; kk < calls; kk++) {
      for (int t = 0; t < p->nt; t++)
        tensor(&sub, t)->data = direct[t] ? ptr[t] + kk * sk[t] * (int64_t)p->esz[t]
                                          : buf + off[t] + (size_t)kk * p->pitch[t];
      sub.err[0] = '\0';
      int rc = p->fn(&sub);
      if (rc != 0) {
        opd__tile_fail(&p->rc, p->err, sub.err, rc);
        goto out;
      }
    }
    for (int t = call->n_in; t < p->nt; t++) { /* scatter the outputs' */
      if (direct[t]) continue;
      opd_tview_t src, dst;
      int64_t ss[2] = {p->rows ? (int64_t)(p->pitch[t] / p->esz[t]) : ml, 1};
      int64_t ds[2] = {sk[t], p->st[t][L]};
      opd__tile_view(&src, buf + off[t], p->dtype[t], 2, tshape, ss);
      opd__tile_view(&dst, ptr[t], p->dtype[t], 2, tshape, ds);
      opd__copy_views_cpu(&opd__tile_serial, &dst, &src);
    }
  }
out:
  opd__tile_buf_give(buf, own);
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
  if (opd__call_contiguous(call)) return fn(call);
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
