/* The shape family on the CPU: permute, slice and expand gather their
 * view of x with the copy op's kernels; reshape copies bytes; cat copies
 * each input's runs into the output's rows. Any dtype: only its size
 * matters.
 *
 * Variants:
 *   cpu_ref   permute/slice/expand: opd__copy_cpu_ref over the view (a
 *             full multi-index per element); reshape: one memcpy; cat:
 *             output row by output row, one memcpy per input
 *   cpu_fast  permute/slice/expand: opd__copy_views_cpu (kernels/copy/copy.h:
 *             dims merged, runs or tiles copied over call->exec); reshape:
 *             the same function's parallel memcpy; cat: the output's elements split over
 *             call->exec, each range copied as runs of one input
 * In place (reshape with y exactly x): nothing to copy.
 * Test: build/tests/ops, suite shape
 */
#include <string.h>

#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/copy/copy.h"
#include "kernels/shape/view.h"

OPD_OP_DECLARE(copy);
OPD_OP_DECLARE(permute);
OPD_OP_DECLARE(reshape);
OPD_OP_DECLARE(slice);
OPD_OP_DECLARE(cat);
OPD_OP_DECLARE(expand);

/* Gathers view v into call's output 0: the copy op's reference (a call of
 * its own: x the view) or the copy family's fast view-to-view copy. */
static int gather(opd_kcall_t *call, const opd_tview_t *v, int fast) {
  if (fast) {
    opd_tview_t d = opd__dense_view(v, call->out[0].data);
    int rc = opd__copy_views_cpu(call->exec, &d, v);
    return rc ? opd__kerr(call, rc, "the view's copy failed (%d)", rc) : 0;
  }
  opd_kcall_t sub;
  sub.op = call->op;
  sub.n_in = sub.n_out = 1;
  sub.in[0] = *v;
  sub.out[0] = opd__dense_view(v, call->out[0].data);
  sub.exec = call->exec;
  sub.err[0] = '\0';
  int rc = opd__copy_cpu_ref(&sub);
  if (rc != 0) memcpy(call->err, sub.err, sizeof call->err);
  return rc;
}

/* The kernels of a view op: its view, gathered by the copy reference or
 * the fast copy. */
#define VIEW_KERNELS(op)                               \
  int opd__##op##_cpu_ref(opd_kcall_t *call) {         \
    opd_tview_t v;                                     \
    int rc = opd__##op##_view(call, &v);               \
    return rc ? rc : gather(call, &v, 0);              \
  }                                                    \
  int opd__##op##_cpu_fast(opd_kcall_t *call) {        \
    opd_tview_t v;                                     \
    int rc = opd__##op##_view(call, &v);               \
    return rc ? rc : gather(call, &v, 1);              \
  }

VIEW_KERNELS(permute)
VIEW_KERNELS(slice)
VIEW_KERNELS(expand)

/* ---- reshape ----------------------------------------------------------- */

int opd__reshape_cpu_ref(opd_kcall_t *call) {
  const opd_tview_t *x = &call->in[0];
  if (x->data == call->out[0].data || x->numel == 0) return 0; /* in place */
  memcpy(call->out[0].data, x->data, (size_t)x->numel * opd__dtype_size(x->dtype));
  return 0;
}

int opd__reshape_cpu_fast(opd_kcall_t *call) {
  if (call->in[0].data == call->out[0].data) return 0;
  return gather(call, &call->in[0], 1); /* contiguous to contiguous: memcpy */
}

/* ---- cat --------------------------------------------------------------- */

/* cat as runs: y is `outer` rows of `row` elements; input k fills
 * [pre[k], pre[k] + run[k]) of each row from its own rows of run[k]. */
typedef struct cat_plan {
  int n;                            /* inputs */
  size_t esz;                       /* bytes per element */
  int64_t outer, row;               /* rows of y, elements per row */
  int64_t run[OPD_MAX_TENSORS];     /* elements of input k per row */
  int64_t pre[OPD_MAX_TENSORS];     /* where they start in y's row */
  const char *src[OPD_MAX_TENSORS]; /* input k's first element */
  char *dst;                        /* y's first element */
} cat_plan_t;

static void cat_plan(const opd_kcall_t *call, cat_plan_t *p) {
  const opd_tview_t *y = &call->out[0];
  int64_t dim = call->attr[0].i;
  if (dim < 0) dim += y->rank;
  int64_t inner = 1;
  for (int d = (int)dim + 1; d < y->rank; d++) inner *= y->shape[d];
  p->n = call->n_in;
  p->esz = opd__dtype_size(y->dtype);
  p->outer = 1;
  for (int d = 0; d < dim; d++) p->outer *= y->shape[d];
  p->row = y->shape[dim] * inner;
  p->dst = y->data;
  int64_t at = 0;
  for (int k = 0; k < call->n_in; k++) {
    p->run[k] = call->in[k].shape[dim] * inner;
    p->pre[k] = at;
    p->src[k] = call->in[k].data;
    at += p->run[k];
  }
}

int opd__cat_cpu_ref(opd_kcall_t *call) {
  cat_plan_t p;
  cat_plan(call, &p);
  for (int64_t o = 0; o < p.outer; o++)
    for (int k = 0; k < p.n; k++)
      if (p.run[k] > 0)
        memcpy(p.dst + (o * p.row + p.pre[k]) * (int64_t)p.esz,
               p.src[k] + o * p.run[k] * (int64_t)p.esz, (size_t)p.run[k] * p.esz);
  return 0;
}

/* Elements [b, e) of y, each stretch within one input's run copied at
 * once. */
static void cat_range(void *arg, int64_t b, int64_t e) {
  const cat_plan_t *p = arg;
  int64_t esz = (int64_t)p->esz;
  int k = 0;
  for (int64_t i = b; i < e;) {
    int64_t o = i / p->row, c = i % p->row;
    while (k > 0 && c < p->pre[k]) k--; /* a new row starts over */
    while (c >= p->pre[k] + p->run[k]) k++;
    int64_t len = p->pre[k] + p->run[k] - c;
    if (len > e - i) len = e - i;
    memcpy(p->dst + i * esz, p->src[k] + (o * p->run[k] + c - p->pre[k]) * esz,
           (size_t)(len * esz));
    i += len;
  }
}

int opd__cat_cpu_fast(opd_kcall_t *call) {
  cat_plan_t p;
  cat_plan(call, &p);
  int64_t n = p.outer * p.row;
  if (n == 0) return 0;
  call->exec->parallel_for(call->exec, n, OPD_GRAIN_ELEMS * 4 / (int64_t)p.esz, cat_range,
                           &p);
  return 0;
}
