/* embedding on the CPU: every index checked, then one row copied per
 * index.
 *
 * Variants:
 *   cpu_ref   indices checked, then rows copied one by one
 *   cpu_fast  indices checked, then rows copied over call->exec
 * Test: build/tests/ops, suite embedding
 */
#include <string.h>

#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"

OPD_OP_DECLARE(embedding);

/* Index i of the indices tensor t (int32 or int64). */
static int64_t index_at(const opd_tview_t *t, int64_t i) {
  return t->dtype == OPD_DTYPE_INT32 ? ((const int32_t *)t->data)[i]
                                     : ((const int64_t *)t->data)[i];
}

/* 0 when every index is in [0, V), else OPD_EINVAL naming the first one
 * that is not. */
static int check(opd_kcall_t *call) {
  const opd_tview_t *idx = &call->in[1];
  int64_t V = call->in[0].shape[0];
  for (int64_t i = 0; i < idx->numel; i++) {
    int64_t v = index_at(idx, i);
    if (v < 0 || v >= V)
      return opd__kerr(call, OPD_EINVAL, "indices[%lld] (flat) = %lld is out of range "
                       "[0, %lld) of weight's %lld rows", (long long)i, (long long)v,
                       (long long)V, (long long)V);
  }
  return 0;
}

typedef struct rows {
  const opd_tview_t *idx;          /* the indices */
  const char *w;                   /* weight's first element */
  char *y;                         /* y's first element */
  size_t row;                      /* bytes per row (D elements) */
} rows_t;

static void copy_rows(void *arg, int64_t b, int64_t e) {
  const rows_t *r = arg;
  for (int64_t i = b; i < e; i++)
    memcpy(r->y + (size_t)i * r->row, r->w + (size_t)index_at(r->idx, i) * r->row, r->row);
}

static void plan(const opd_kcall_t *call, rows_t *r) {
  r->idx = &call->in[1];
  r->w = call->in[0].data;
  r->y = call->out[0].data;
  r->row = (size_t)call->in[0].shape[1] * opd__dtype_size(call->in[0].dtype);
}

int opd__embedding_cpu_ref(opd_kcall_t *call) {
  int rc = check(call);
  if (rc != 0) return rc;
  rows_t r;
  plan(call, &r);
  if (r.row > 0) copy_rows(&r, 0, call->in[1].numel);
  return 0;
}

int opd__embedding_cpu_fast(opd_kcall_t *call) {
  int rc = check(call);
  if (rc != 0) return rc;
  rows_t r;
  plan(call, &r);
  if (r.row == 0 || call->in[1].numel == 0) return 0;
  int64_t grain = (int64_t)(OPD_GRAIN_ELEMS * 4 / r.row);
  call->exec->parallel_for(call->exec, call->in[1].numel, grain < 1 ? 1 : grain, copy_rows,
                           &r);
  return 0;
}
