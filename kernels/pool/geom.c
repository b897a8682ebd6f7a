/* The pool family's geometry (geom.h): torch's output sizes and checks.
 *
 * DESIGN
 * Attributes come from the client: every value is range-checked before
 * it is used, and the output extent computed in int64 from values bounded
 * by the input's (a window or stride past 2^31 is refused).
 */
#include "kernels/pool/geom.h"

#include "kernels/kernel.h"
#include "kernels/common/kutil.h"

#define LIM ((int64_t)1 << 31)

/* (h, w) from an INTS attribute of 1 or 2 ints; 0 or OPD_EATTR. */
static int pair(opd_kcall_t *call, int a, int64_t lo, int64_t *h, int64_t *w) {
  const opd_attr_val_t *v = &call->attr[a];
  const char *name = call->op->attrs[a].name;
  if (v->n != 1 && v->n != 2)
    return opd__kerr(call, OPD_EATTR, "%s holds %d ints; expected one or [h, w]",
                     name, v->n);
  *h = v->ints[0];
  *w = v->ints[v->n - 1];
  if (*h < lo || *w < lo || *h >= LIM || *w >= LIM)
    return opd__kerr(call, OPD_EATTR, "%s=[%lld, %lld]: expected values >= %lld",
                     name, (long long)*h, (long long)*w, (long long)lo);
  return 0;
}

/* torch's pooling_output_shape for one dim. */
static int64_t out_len(int64_t in, int64_t k, int64_t p, int64_t s, int64_t d,
                       int ceil) {
  int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil ? s - 1 : 0);
  int64_t o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
  if (ceil && (o - 1) * s >= in + p) o--;
  return o;
}

int opd__pool_geom(opd_kcall_t *call, int adaptive, opd_pool_geom_t *g) {
  const opd_tview_t *x = &call->in[0];
  char sx[128];
  int rc;
  if (x->rank != 3 && x->rank != 4)
    return opd__kerr(call, OPD_ESHAPE,
                     "input 0 (x) has shape %s; expected (N, C, H, W) or "
                     "(C, H, W)",
                     opd__shape_str(sx, sizeof sx, x->shape, x->rank));
  int r = x->rank;
  g->H = x->shape[r - 2];
  g->W = x->shape[r - 1];
  g->planes = x->shape[r - 3] * (r == 4 ? x->shape[0] : 1);
  if (g->H == 0 || g->W == 0)
    return opd__kerr(call, OPD_ESHAPE,
                     "input 0 (x) has shape %s: H and W must be non-zero",
                     opd__shape_str(sx, sizeof sx, x->shape, x->rank));
  if (adaptive) {
    if ((rc = pair(call, 0, 1, &g->OH, &g->OW))) return rc;
    g->kh = g->kw = g->sh = g->sw = g->dh = g->dw = 1;
    g->ph = g->pw = 0;
    return 0;
  }
  if ((rc = pair(call, 0, 1, &g->kh, &g->kw))) return rc;
  if ((rc = pair(call, 1, 0, &g->sh, &g->sw))) return rc;
  if (g->sh == 0 || g->sw == 0) { /* the default, [0]: the kernel's */
    if (g->sh != g->sw)
      return opd__kerr(call, OPD_EATTR, "stride=[%lld, %lld]: expected > 0 "
                       "(or [0], the default: the kernel size)",
                       (long long)g->sh, (long long)g->sw);
    g->sh = g->kh;
    g->sw = g->kw;
  }
  if ((rc = pair(call, 2, 0, &g->ph, &g->pw))) return rc;
  if ((rc = pair(call, 3, 1, &g->dh, &g->dw))) return rc;
  if (g->ph > g->kh / 2 || g->pw > g->kw / 2)
    return opd__kerr(call, OPD_EATTR,
                     "padding=[%lld, %lld] is more than half the kernel "
                     "[%lld, %lld] (as torch refuses)",
                     (long long)g->ph, (long long)g->pw, (long long)g->kh,
                     (long long)g->kw);
  int ceil = call->attr[4].i != 0;
  g->OH = out_len(g->H, g->kh, g->ph, g->sh, g->dh, ceil);
  g->OW = out_len(g->W, g->kw, g->pw, g->sw, g->dw, ceil);
  if (g->OH < 1 || g->OW < 1)
    return opd__kerr(call, OPD_ESHAPE,
                     "input 0 (x) has shape %s: the output would be %lldx%lld "
                     "(too small for the kernel [%lld, %lld], dilation "
                     "[%lld, %lld], padding [%lld, %lld])",
                     opd__shape_str(sx, sizeof sx, x->shape, x->rank),
                     (long long)g->OH, (long long)g->OW, (long long)g->kh,
                     (long long)g->kw, (long long)g->dh, (long long)g->dw,
                     (long long)g->ph, (long long)g->pw);
  return 0;
}
