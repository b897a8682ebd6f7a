/* What the strided drivers share (kernels/common/tile.h), and
 * opd__kview_contiguous (kernels/common/strided.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/strided.h"
#include "kernels/common/tile.h"

#define BUF_KEEP ((size_t)1 << 20) /* per-thread buffer kept */
#define MAXR OPD_MAX_RANK

static void serial_for(const opd_exec_t *ex, int64_t n, int64_t grain,
                       opd_range_fn fn, void *arg) {
  (void)ex, (void)grain;
  if (n > 0) fn(arg, 0, n);
}

/* The tiles' exec: each tile's kernel runs on the thread of its tile. */
const opd_exec_t opd__tile_serial = {serial_for, 1, NULL};

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

int opd__call_contiguous(const opd_kcall_t *call) {
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
char *opd__tile_buf_take(size_t bytes, int *own) {
  bytes = bytes ? (bytes + 63) & ~(size_t)63 : 64; /* never NULL for 0 */
  *own = tl_busy;
  if (*own) return aligned_alloc(64, bytes);
  if (bytes > tl_cap) {
    free(tl_buf);
    tl_buf = aligned_alloc(64, bytes);
    tl_cap = tl_buf != NULL ? bytes : 0;
    if (tl_buf == NULL) return NULL;
  }
  tl_busy = 1;
  return tl_buf;
}

void opd__tile_buf_give(char *buf, int own) {
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
void opd__tile_view(opd_tview_t *v, void *data, int32_t dtype, int rank,
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
void opd__tile_contig_like(opd_tview_t *dst, const opd_tview_t *v, void *data) {
  int64_t st[MAXR], s = 1;
  for (int d = v->rank - 1; d >= 0; d--) {
    st[d] = s;
    s *= v->shape[d];
  }
  opd__tile_view(dst, data, v->dtype, v->rank, v->shape, st);
}

/* Records the first failure of a tile. */
void opd__tile_fail(_Atomic int *rc, char *err, const char *msg, int code) {
  int zero = 0;
  if (atomic_compare_exchange_strong(rc, &zero, code))
    snprintf(err, 256, "%s", msg);
}
