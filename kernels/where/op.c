/* where: cond, x, y -> out = cond ? x : y elementwise, broadcast
 * (torch.where(cond, x, y)).
 *
 * DESIGN
 * cond is bool or uint8 (nonzero selects x); x and y share one dtype, any
 * of the protocol's (only its size matters: elements are moved, never
 * converted; torch would promote mixed dtypes, here they are refused so
 * that nothing converts unseen). The three broadcast together with numpy
 * rules; the kernels index each through broadcast strides
 * (kernels/where/where.h) that this rule and they derive alike.
 */
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"

OPD_OP_DECLARE(where);

static int where_shape(opd_kcall_t *call, opd_tshape_t *out) {
  const opd_tview_t *c = &call->in[0], *x = &call->in[1], *y = &call->in[2];
  if (x->dtype != y->dtype)
    return opd__kerr(call, OPD_EDTYPE, "x is %s but y is %s; expected one dtype (convert one "
                     "of them first)", opd__kdtype_name(x->dtype), opd__kdtype_name(y->dtype));
  int64_t cx[OPD_MAX_RANK];
  int r1, r2;
  char a[160], b[160], d[160];
  if (opd__bcast_shape(c->shape, c->rank, x->shape, x->rank, cx, &r1) != 0 ||
      opd__bcast_shape(cx, r1, y->shape, y->rank, out[0].shape, &r2) != 0)
    return opd__kerr(call, OPD_ESHAPE, "cond %s, x %s and y %s do not broadcast together",
                     opd__shape_str(a, sizeof a, c->shape, c->rank),
                     opd__shape_str(b, sizeof b, x->shape, x->rank),
                     opd__shape_str(d, sizeof d, y->shape, y->rank));
  out[0].dtype = x->dtype;
  out[0].rank = r2;
  return 0;
}

const opd_op_def_t opd__op_where = {
    .name = "where",
    .summary = "elementwise choice: cond ? x : y, broadcast (torch.where)",
    .n_in_min = 3,
    .n_in_max = 3,
    .n_out = 1,
    .in = {{"cond", OPD_DT(BOOL) | OPD_DT(UINT8), "(...) bool or uint8, nonzero picks x"},
           {"x", OPD_DT_ANY, "(...) any dtype"},
           {"y", OPD_DT_ANY, "(...) dtype of x"}},
    .out = {{"out", OPD_DT_ANY, "(...) the broadcast shape, dtype of x"}},
    .shape_doc = "cond (...), x (...), y (...) -> out (broadcast of the three)",
    .shape = where_shape,
    .flags = OPD_OPF_STEADY_COST,
    OPD_ROW_KERNELS(where),
    .cuda_dtypes = OPD_DT(BOOL) | OPD_DT(UINT8),
};
