/* Shape rule of the row normalizations; see norm.h. */
#include "kernels/common/norm.h"

#include "kernels/common/kutil.h"

int opd__norm_shape(opd_kcall_t *call, opd_tshape_t *out,
                    const char *const *names) {
  const opd_tview_t *x = &call->in[0];
  char sx[128], sp[128];
  if (x->rank < 1)
    return opd__kerr(call, OPD_ESHAPE,
                     "input 0 (x) is 0-d; expected at least 1 dim (..., C)");
  int64_t C = x->shape[x->rank - 1];
  for (int i = 1; i < call->n_in; i++) {
    const opd_tview_t *p = &call->in[i];
    if (p->rank != 1 || p->shape[0] != C)
      return opd__kerr(call, OPD_ESHAPE,
                       "input 0 (x) has shape %s but %s has shape %s; "
                       "expected %s of shape [%lld] (the last dim of x)",
                       opd__shape_str(sx, sizeof sx, x->shape, x->rank),
                       names[i - 1],
                       opd__shape_str(sp, sizeof sp, p->shape, p->rank),
                       names[i - 1], (long long)C);
  }
  int rc = opd__same_dtype(call);
  if (rc) return rc;
  return opd__same_shape(call, out);
}
