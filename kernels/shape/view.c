/* The views of permute, slice and expand (see view.h).
 *
 * DESIGN
 * Plain index math over x's extents and strides, no allocation; every
 * attribute is checked here, where it is interpreted, and a message names
 * the attribute, its value and x's shape. Counts that could overflow
 * int64 (an expand to huge extents) are refused here, before the daemon
 * sizes anything from them.
 */
#include "kernels/shape/view.h"

#include "kernels/common/kutil.h"

/* The first element of x moved by `off` elements; NULL stays NULL. */
static void *moved(const opd_tview_t *x, int64_t off) {
  if (x->data == NULL) return NULL;
  return (char *)x->data + off * (int64_t)opd__dtype_size(x->dtype);
}

/* Sets v->numel from v's extents; OPD_ESHAPE if it overflows int64. */
static int count(opd_kcall_t *call, opd_tview_t *v) {
  int64_t n = 1;
  for (int d = 0; d < v->rank; d++)
    if (__builtin_mul_overflow(n, v->shape[d], &n)) {
      char s[160];
      return opd__kerr(call, OPD_ESHAPE, "shape %s has more elements than int64 holds",
                       opd__shape_str(s, sizeof s, v->shape, v->rank));
    }
  v->numel = n;
  return 0;
}

int opd__permute_view(opd_kcall_t *call, opd_tview_t *v) {
  const opd_tview_t *x = &call->in[0];
  const opd_attr_val_t *dims = &call->attr[0];
  char xs[160], ds[160];
  if (dims->n != x->rank)
    return opd__kerr(call, OPD_EATTR, "dims %s has %d entries but x %s has rank %d",
                     opd__shape_str(ds, sizeof ds, dims->ints, dims->n), dims->n,
                     opd__shape_str(xs, sizeof xs, x->shape, x->rank), x->rank);
  unsigned seen = 0;
  *v = *x;
  for (int i = 0; i < dims->n; i++) {
    int64_t d = dims->ints[i];
    if (d < -x->rank || d >= x->rank)
      return opd__kerr(call, OPD_EATTR, "dims[%d] = %lld is out of range for x of rank %d "
                       "(expected %d..%d)", i, (long long)d, x->rank, -x->rank, x->rank - 1);
    if (d < 0) d += x->rank;
    if (seen >> d & 1)
      return opd__kerr(call, OPD_EATTR, "dims %s repeats dim %lld: it must be a permutation "
                       "of x's %d dims", opd__shape_str(ds, sizeof ds, dims->ints, dims->n),
                       (long long)d, x->rank);
    seen |= 1u << d;
    v->shape[i] = x->shape[d];
    v->strides[i] = x->strides[d];
  }
  return 0;
}

/* Python's clamping of a slice bound i for a dim of extent n (step > 0). */
static int64_t clamp(int64_t i, int64_t n) {
  if (i < 0) {
    i += n;
    return i < 0 ? 0 : i;
  }
  return i > n ? n : i;
}

int opd__slice_view(opd_kcall_t *call, opd_tview_t *v) {
  const opd_tview_t *x = &call->in[0];
  int64_t dim = call->attr[0].i, step = call->attr[3].i;
  char xs[160];
  if (x->rank == 0)
    return opd__kerr(call, OPD_ESHAPE, "x is 0-d; slice needs a tensor of rank >= 1");
  if (dim < -x->rank || dim >= x->rank)
    return opd__kerr(call, OPD_EATTR, "dim %lld is out of range for x %s of rank %d "
                     "(expected %d..%d)", (long long)dim,
                     opd__shape_str(xs, sizeof xs, x->shape, x->rank), x->rank, -x->rank,
                     x->rank - 1);
  if (step < 1)
    return opd__kerr(call, OPD_EATTR, "step must be >= 1, got %lld", (long long)step);
  if (dim < 0) dim += x->rank;
  int64_t n = x->shape[dim];
  int64_t start = clamp(call->attr[1].i, n), end = clamp(call->attr[2].i, n);
  int64_t len = end > start ? (end - start - 1) / step + 1 : 0;
  *v = *x;
  v->shape[dim] = len;
  if (len > 1) v->strides[dim] = x->strides[dim] * step; /* < x's span: no overflow */
  v->data = len > 0 ? moved(x, start * x->strides[dim]) : x->data;
  return count(call, v);
}

int opd__expand_view(opd_kcall_t *call, opd_tview_t *v) {
  const opd_tview_t *x = &call->in[0];
  const opd_attr_val_t *sh = &call->attr[0];
  char xs[160], ss[160];
  opd__shape_str(xs, sizeof xs, x->shape, x->rank);
  opd__shape_str(ss, sizeof ss, sh->ints, sh->n);
  if (sh->n < x->rank)
    return opd__kerr(call, OPD_EATTR, "shape %s has %d dims, fewer than x %s (rank %d)",
                     ss, sh->n, xs, x->rank);
  int lead = sh->n - x->rank;
  *v = *x;
  v->rank = sh->n;
  for (int i = 0; i < sh->n; i++) {
    int64_t s = sh->ints[i];
    if (i < lead) { /* a new leading dim */
      if (s < 0)
        return opd__kerr(call, OPD_EATTR, "shape[%d] = %lld: a new leading dim (x %s has "
                         "rank %d) needs an extent >= 0", i, (long long)s, xs, x->rank);
      v->shape[i] = s;
      v->strides[i] = 0;
      continue;
    }
    int d = i - lead;
    if (s == -1) s = x->shape[d];
    if (s < 0)
      return opd__kerr(call, OPD_EATTR, "shape[%d] = %lld is negative (only -1, keep x's "
                       "extent, is allowed)", i, (long long)sh->ints[i]);
    if (s == x->shape[d]) {
      v->shape[i] = s;
      v->strides[i] = x->strides[d];
    } else if (x->shape[d] == 1) {
      v->shape[i] = s;
      v->strides[i] = 0;
    } else {
      return opd__kerr(call, OPD_ESHAPE, "cannot expand x %s to %s: dim %d has extent %lld, "
                       "not 1, and cannot become %lld", xs, ss, d, (long long)x->shape[d],
                       (long long)s);
    }
  }
  return count(call, v);
}

opd_tview_t opd__dense_view(const opd_tview_t *v, void *data) {
  opd_tview_t d = *v;
  d.data = data;
  int64_t s = 1;
  for (int i = v->rank - 1; i >= 0; i--) {
    d.strides[i] = s;
    s *= v->shape[i];
  }
  return d;
}
