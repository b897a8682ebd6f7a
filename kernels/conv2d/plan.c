/* conv2d's geometry from a call's shapes and attrs (plan.h), shared by its
 * shape rule (op.c) and kernels (cpu.c, cuda.cu).
 *
 * DESIGN
 * stride, padding and dilation each take one int (both dims) or [h, w],
 * as torch. The output size is P = (H + 2 ph - dh (R - 1) - 1) / sh + 1,
 * and likewise Q; it must be positive. Every product is checked for
 * overflow, since attrs come from the client.
 */
#include "kernels/conv2d/plan.h"

#include "kernels/common/kutil.h"

enum { A_STRIDE, A_PADDING, A_DILATION };

/* Reads INTS attr i into (*h, *w); OPD_EATTR unless it holds 1 or 2 ints
 * within [lo, 2^31). */
static int pair(opd_kcall_t *call, int i, int64_t lo, int64_t *h,
                int64_t *w) {
  const opd_attr_val_t *v = &call->attr[i];
  const char *name = call->op->attrs[i].name;
  if (v->n < 1 || v->n > 2)
    return opd__kerr(call, OPD_EATTR,
                     "%s has %d values; expected 1 (both dims) or 2 [h, w]",
                     name, v->n);
  *h = v->ints[0];
  *w = v->n == 2 ? v->ints[1] : v->ints[0];
  for (int k = 0; k < v->n; k++) {
    if (v->ints[k] < lo)
      return opd__kerr(call, OPD_EATTR, "%s=%lld is %s; expected %s", name,
                       (long long)v->ints[k],
                       lo > 0 ? "not positive" : "negative",
                       lo > 0 ? "> 0" : ">= 0");
    if (v->ints[k] >= ((int64_t)1 << 31))
      return opd__kerr(call, OPD_EATTR, "%s=%lld is too large", name,
                       (long long)v->ints[k]);
  }
  return 0;
}

/* Output extent along one dim; OPD_ESHAPE unless positive. */
static int out_size(opd_kcall_t *call, const char *dim, int64_t in,
                    int64_t k, int64_t s, int64_t pad, int64_t dil,
                    int64_t *out) {
  int64_t span, ext;
  if (__builtin_mul_overflow(dil, k - 1, &span) ||
      __builtin_add_overflow(in, 2 * pad, &ext))
    return opd__kerr(call, OPD_EOVERFLOW, "output %s overflows", dim);
  int64_t num = ext - span - 1;
  if (num < 0)
    return opd__kerr(call, OPD_ESHAPE,
                     "output %s is not positive: input %s %lld + 2*padding "
                     "%lld is smaller than the dilated kernel %lld",
                     dim, dim, (long long)in, (long long)pad,
                     (long long)(span + 1));
  *out = num / s + 1;
  return 0;
}

int opd__conv2d_plan(opd_kcall_t *call, conv_plan_t *p) {
  const opd_tview_t *x = &call->in[0], *w = &call->in[1];
  char sx[128], sw[128], sb[128];
  opd__shape_str(sx, sizeof sx, x->shape, x->rank);
  opd__shape_str(sw, sizeof sw, w->shape, w->rank);
  if (x->rank != 4)
    return opd__kerr(call, OPD_ESHAPE,
                     "input 0 (x) has shape %s; expected 4 dims (N, C, H, W)",
                     sx);
  if (w->rank != 4)
    return opd__kerr(call, OPD_ESHAPE,
                     "input 1 (weight) has shape %s; expected 4 dims "
                     "(K, C, R, S)",
                     sw);
  p->N = x->shape[0];
  p->C = x->shape[1];
  p->H = x->shape[2];
  p->W = x->shape[3];
  p->K = w->shape[0];
  p->R = w->shape[2];
  p->S = w->shape[3];
  if (w->shape[1] != p->C)
    return opd__kerr(call, OPD_ESHAPE,
                     "input 0 (x) has shape %s with %lld channels but weight "
                     "has shape %s with %lld input channels; expected equal "
                     "(groups is not supported)",
                     sx, (long long)p->C, sw, (long long)w->shape[1]);
  p->has_bias = call->n_in > 2;
  if (p->has_bias) {
    const opd_tview_t *b = &call->in[2];
    if (b->rank != 1 || b->shape[0] != p->K)
      return opd__kerr(call, OPD_ESHAPE,
                       "input 2 (bias) has shape %s; expected [%lld] (the "
                       "first dim of weight %s)",
                       opd__shape_str(sb, sizeof sb, b->shape, b->rank),
                       (long long)p->K, sw);
  }
  int rc;
  if ((rc = pair(call, A_STRIDE, 1, &p->sh, &p->sw)) ||
      (rc = pair(call, A_PADDING, 0, &p->ph, &p->pw)) ||
      (rc = pair(call, A_DILATION, 1, &p->dh, &p->dw)))
    return rc;
  if ((rc = out_size(call, "height", p->H, p->R, p->sh, p->ph, p->dh,
                     &p->P)) ||
      (rc = out_size(call, "width", p->W, p->S, p->sw, p->pw, p->dw, &p->Q)))
    return rc;
  int64_t t, pq, crs; /* y's numel; im2col's columns (C*R*S, P*Q) */
  if (__builtin_mul_overflow(p->P, p->Q, &pq) ||
      __builtin_mul_overflow(p->N, p->K, &t) ||
      __builtin_mul_overflow(t, pq, &t) ||
      __builtin_mul_overflow(p->C, p->R, &crs) ||
      __builtin_mul_overflow(crs, p->S, &crs) ||
      __builtin_mul_overflow(crs, pq, &t) || t > (INT64_MAX >> 3))
    return opd__kerr(call, OPD_EOVERFLOW, "output or column sizes overflow");
  return 0;
}
