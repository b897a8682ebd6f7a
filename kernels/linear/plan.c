/* linear's plan (linear.h): the product and epilogue a call maps onto,
 * shared by its shape rule (op.c) and kernels (cpu.c, cuda.cu).
 *
 * DESIGN
 * See linear.h: x's leading dims fold into M, weight keeps torch's (N, K)
 * layout, `act` becomes an opd_act_t.
 */
#include "kernels/linear/linear.h"

#include "kernels/common/kutil.h"

static const char *const ACTS[] = {"none", "relu", "gelu", "gelu_tanh", "silu"};

/* OPD_ESHAPE naming x's and the weight's shapes, then `why` (the shapes
 * are formatted only here: the plan runs on every call). */
static int xw_err(opd_kcall_t *call, const char *why) {
  const opd_tview_t *x = &call->in[0], *w = &call->in[1];
  char sx[128], sw[128];
  return opd__kerr(call, OPD_ESHAPE,
                   "input 0 (x) has shape %s and input 1 (weight) has shape "
                   "%s; %s",
                   opd__shape_str(sx, sizeof sx, x->shape, x->rank),
                   opd__shape_str(sw, sizeof sw, w->shape, w->rank), why);
}

int opd__linear_plan(opd_kcall_t *call, linear_plan_t *p, opd_tshape_t *out) {
  const opd_tview_t *x = &call->in[0], *w = &call->in[1];
  memset(p, 0, sizeof *p);
  if (x->rank < 1 || w->rank != 2)
    return xw_err(call, "x must have at least 1 dim and weight exactly 2 "
                  "(N, K)");
  p->K = x->shape[x->rank - 1];
  p->N = w->shape[0];
  if (w->shape[1] != p->K) {
    char why[160];
    snprintf(why, sizeof why,
             "x's last dim %lld must equal weight's second dim %lld (weight "
             "is (N, K), torch's layout)",
             (long long)p->K, (long long)w->shape[1]);
    return xw_err(call, why);
  }
  p->M = opd__rows(x, p->K);
  if (p->K == 0) { /* numel is 0: the rows are the leading dims */
    p->M = 1;
    for (int d = 0; d < x->rank - 1; d++) p->M *= x->shape[d];
  }
  p->has_bias = call->n_in > 2;
  if (p->has_bias) {
    const opd_tview_t *b = &call->in[2];
    char sw[128], sb[128];
    if (b->rank != 1 || b->shape[0] != p->N)
      return opd__kerr(call, OPD_ESHAPE,
                       "input 1 (weight) has shape %s and input 2 (bias) has "
                       "shape %s; bias must be (N) = [%lld]",
                       opd__shape_str(sw, sizeof sw, w->shape, w->rank),
                       opd__shape_str(sb, sizeof sb, b->shape, b->rank),
                       (long long)p->N);
  }
  p->act = OPD_ACT_NONE;
  for (int i = 0; i < (int)(sizeof ACTS / sizeof ACTS[0]); i++)
    if (strcmp(call->attr[0].s, ACTS[i]) == 0) p->act = (opd_act_t)i;
  if (out) {
    out->dtype = x->dtype;
    out->rank = x->rank;
    for (int d = 0; d < x->rank - 1; d++) out->shape[d] = x->shape[d];
    out->shape[x->rank - 1] = p->N;
  }
  return 0;
}
