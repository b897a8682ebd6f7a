/* conv2d's geometry from a call's shapes and attrs (plan.h), shared by its
 * shape rule (op.c) and kernels (cpu.c, depthwise.c, cuda.cu).
 *
 * DESIGN
 * As F.conv2d: x is (N, C, H, W), or (C, H, W) unbatched (planned as
 * N = 1; the output then has 3 dims too); weight is (K, C/groups, R, S).
 * stride and dilation each take one int (both dims) or [h, w]; padding one
 * int, [h, w], or [top, bottom, left, right] (asymmetric, as 'same' with an
 * even kernel needs). padding_mode "same" computes the pads itself: the
 * dilated kernel's extent minus one, split with the odd one on the
 * bottom / right, as torch does; like torch it needs stride 1. "valid" is
 * no padding. The output size is P = (H + top + bottom - dh (R - 1) - 1) /
 * sh + 1, and likewise Q; it must be positive. Every product is checked
 * for overflow, since attrs come from the client.
 */
#include "kernels/conv2d/plan.h"

#include <string.h>

#include "kernels/common/kutil.h"

enum { A_STRIDE, A_PADDING, A_DILATION, A_GROUPS, A_PADDING_MODE };

/* Checks that the n ints of INTS attr i lie within [lo, 2^31); OPD_EATTR
 * naming the attr and the value otherwise. */
static int in_range(opd_kcall_t *call, int i, int64_t lo) {
  const opd_attr_val_t *v = &call->attr[i];
  const char *name = call->op->attrs[i].name;
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

/* Reads INTS attr i into (*h, *w); OPD_EATTR unless it holds 1 or 2 ints
 * within [lo, 2^31). */
static int pair(opd_kcall_t *call, int i, int64_t lo, int64_t *h,
                int64_t *w) {
  const opd_attr_val_t *v = &call->attr[i];
  if (v->n < 1 || v->n > 2)
    return opd__kerr(call, OPD_EATTR,
                     "%s has %d values; expected 1 (both dims) or 2 [h, w]",
                     call->op->attrs[i].name, v->n);
  *h = v->ints[0];
  *w = v->n == 2 ? v->ints[1] : v->ints[0];
  return in_range(call, i, lo);
}

/* The four pads (top, bottom, left, right) from padding and padding_mode;
 * needs p's kernel size, stride and dilation. */
static int pads(opd_kcall_t *call, conv_plan_t *p) {
  const opd_attr_val_t *v = &call->attr[A_PADDING];
  const char *mode = call->attr[A_PADDING_MODE].s;
  int rc = in_range(call, A_PADDING, 0);
  if (rc) return rc;
  if (v->n == 1 || v->n == 2) {
    p->ph = p->pb = v->ints[0];
    p->pw = p->pr = v->ints[v->n - 1];
  } else if (v->n == 4) {
    p->ph = v->ints[0];
    p->pb = v->ints[1];
    p->pw = v->ints[2];
    p->pr = v->ints[3];
  } else {
    return opd__kerr(call, OPD_EATTR,
                     "padding has %d values; expected 1 (every side), 2 "
                     "[h, w] or 4 [top, bottom, left, right]",
                     v->n);
  }
  if (strcmp(mode, "explicit") == 0) return 0;
  if (p->ph || p->pb || p->pw || p->pr)
    return opd__kerr(call, OPD_EATTR,
                     "padding_mode=\"%s\" computes the padding itself; "
                     "padding must be 0 (got %lld, %lld, %lld, %lld)",
                     mode, (long long)p->ph, (long long)p->pb,
                     (long long)p->pw, (long long)p->pr);
  if (strcmp(mode, "valid") == 0) return 0;
  /* "same" (the attr's choices admit nothing else) */
  if (p->sh != 1 || p->sw != 1)
    return opd__kerr(call, OPD_EATTR,
                     "padding_mode=\"same\" needs stride 1, got stride "
                     "[%lld, %lld] (torch refuses padding='same' with "
                     "strides too; give the padding as ints)",
                     (long long)p->sh, (long long)p->sw);
  int64_t th = p->dh * (p->R - 1), tw = p->dw * (p->S - 1);
  if (th >= ((int64_t)1 << 31) || tw >= ((int64_t)1 << 31))
    return opd__kerr(call, OPD_EATTR, "padding 'same' is too large");
  p->ph = th / 2;
  p->pb = th - p->ph;
  p->pw = tw / 2;
  p->pr = tw - p->pw;
  return 0;
}

/* Output extent along one dim; OPD_ESHAPE unless positive. */
static int out_size(opd_kcall_t *call, const char *dim, int64_t in,
                    int64_t k, int64_t s, int64_t pad, int64_t dil,
                    int64_t *out) {
  int64_t span, ext;
  if (__builtin_mul_overflow(dil, k - 1, &span) ||
      __builtin_add_overflow(in, pad, &ext))
    return opd__kerr(call, OPD_EOVERFLOW, "output %s overflows", dim);
  int64_t num = ext - span - 1;
  if (num < 0)
    return opd__kerr(call, OPD_ESHAPE,
                     "output %s is not positive: input %s %lld + padding "
                     "%lld (both sides) is smaller than the dilated kernel "
                     "%lld",
                     dim, dim, (long long)in, (long long)pad,
                     (long long)(span + 1));
  *out = num / s + 1;
  return 0;
}

/* x's and weight's shapes and groups into p; OPD_ESHAPE / OPD_EATTR
 * naming the numbers that disagree. */
static int shapes(opd_kcall_t *call, conv_plan_t *p) {
  const opd_tview_t *x = &call->in[0], *w = &call->in[1];
  char sx[128], sw[128], sb[128];
  opd__shape_str(sx, sizeof sx, x->shape, x->rank);
  opd__shape_str(sw, sizeof sw, w->shape, w->rank);
  if (x->rank != 4 && x->rank != 3)
    return opd__kerr(call, OPD_ESHAPE,
                     "input 0 (x) has shape %s; expected 4 dims (N, C, H, W) "
                     "or 3 (C, H, W)",
                     sx);
  if (w->rank != 4)
    return opd__kerr(call, OPD_ESHAPE,
                     "input 1 (weight) has shape %s; expected 4 dims "
                     "(K, C/groups, R, S)",
                     sw);
  p->batched = x->rank == 4;
  int o = p->batched ? 0 : -1; /* (C, H, W): the dims from 0 */
  p->N = p->batched ? x->shape[0] : 1;
  p->C = x->shape[o + 1];
  p->H = x->shape[o + 2];
  p->W = x->shape[o + 3];
  p->K = w->shape[0];
  p->R = w->shape[2];
  p->S = w->shape[3];
  p->G = call->attr[A_GROUPS].i;
  if (p->G < 1 || p->G >= ((int64_t)1 << 31))
    return opd__kerr(call, OPD_EATTR, "groups=%lld is %s; expected >= 1",
                     (long long)p->G, p->G < 1 ? "not positive" : "too large");
  if (p->C % p->G)
    return opd__kerr(call, OPD_ESHAPE,
                     "input 0 (x) has shape %s with %lld channels, not "
                     "divisible by groups=%lld",
                     sx, (long long)p->C, (long long)p->G);
  if (p->K % p->G)
    return opd__kerr(call, OPD_ESHAPE,
                     "input 1 (weight) has shape %s with %lld output "
                     "channels, not divisible by groups=%lld",
                     sw, (long long)p->K, (long long)p->G);
  if (w->shape[1] != p->C / p->G)
    return opd__kerr(call, OPD_ESHAPE,
                     "input 0 (x) has shape %s with %lld channels but weight "
                     "has shape %s with %lld input channels; expected "
                     "channels / groups = %lld / %lld = %lld",
                     sx, (long long)p->C, sw, (long long)w->shape[1],
                     (long long)p->C, (long long)p->G,
                     (long long)(p->C / p->G));
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
  return 0;
}

int opd__conv2d_plan(opd_kcall_t *call, conv_plan_t *p) {
  int rc;
  if ((rc = shapes(call, p)) ||
      (rc = pair(call, A_STRIDE, 1, &p->sh, &p->sw)) ||
      (rc = pair(call, A_DILATION, 1, &p->dh, &p->dw)) ||
      (rc = pads(call, p)))
    return rc;
  if ((rc = out_size(call, "height", p->H, p->R, p->sh, p->ph + p->pb, p->dh,
                     &p->P)) ||
      (rc = out_size(call, "width", p->W, p->S, p->sw, p->pw + p->pr, p->dw,
                     &p->Q)))
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
