/* Shape formatting and broadcasting math shared by rules and kernels.
 *
 * DESIGN
 * Plain functions over int64 extents; no allocation. See kutil.h.
 */
#include "kernels/common/kutil.h"

#include <stdio.h>

const char *opd__shape_str(char *buf, size_t n, const int64_t *shape,
                           int rank) {
  size_t used = 0;
  if (n == 0) return buf;
  buf[0] = '\0';
  int w = snprintf(buf, n, "[");
  used = w > 0 ? (size_t)w : 0;
  for (int i = 0; i < rank && used < n; i++) {
    w = snprintf(buf + used, n - used, i ? ",%lld" : "%lld",
                 (long long)shape[i]);
    if (w < 0) break;
    used += (size_t)w;
  }
  if (used < n) snprintf(buf + used, n - used, "]");
  return buf;
}

int opd__bcast_shape(const int64_t *a, int ra, const int64_t *b, int rb,
                     int64_t *out, int *rank) {
  int r = ra > rb ? ra : rb;
  for (int i = 0; i < r; i++) {
    int ia = ra - r + i, ib = rb - r + i;
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da == db || db == 1)
      out[i] = da;
    else if (da == 1)
      out[i] = db;
    else
      return -1 - i;
  }
  *rank = r;
  return 0;
}

void opd__bcast_strides(const int64_t *shape, int rank, int rank_out,
                        int64_t *strides) {
  int64_t s = 1;
  for (int i = rank_out - 1; i >= 0; i--) {
    int k = rank - rank_out + i;
    if (k < 0 || shape[k] == 1) {
      strides[i] = 0;
    } else {
      strides[i] = s;
    }
    if (k >= 0) s *= shape[k];
  }
}

int opd__same_shape(opd_kcall_t *call, opd_tshape_t *out) {
  const opd_tview_t *x = &call->in[0];
  out[0].dtype = x->dtype;
  out[0].rank = x->rank;
  for (int i = 0; i < x->rank; i++) out[0].shape[i] = x->shape[i];
  return 0;
}

int opd__same_dtype(opd_kcall_t *call) {
  for (int i = 1; i < call->n_in; i++)
    if (call->in[i].dtype != call->in[0].dtype)
      return opd__kerr(call, OPD_EDTYPE,
                       "%s is %s but %s is %s; expected one dtype for all "
                       "inputs (convert one of them first)",
                       call->op->in[0].name,
                       opd__kdtype_name(call->in[0].dtype),
                       call->op->in[i].name,
                       opd__kdtype_name(call->in[i].dtype));
  return 0;
}
