/* softmax: x (..., C) -> y (..., C), along the last dim (torch.softmax).
 *
 * DESIGN
 * Only the last dim is supported; the `dim` attribute exists so that a
 * client that writes torch's call gets a clear error instead of a silently
 * wrong axis. A 0-d x is one row of one element and gives 1.0, as torch.
 */
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"

OPD_OP_DECLARE(softmax);

static int softmax_shape(opd_kcall_t *call, opd_tshape_t *out) {
  const opd_tview_t *x = &call->in[0];
  int64_t dim = call->attr[0].i;
  int last = x->rank > 0 ? x->rank - 1 : 0;
  if (dim != -1 && dim != last)
    return opd__kerr(call, OPD_EATTR,
                     "dim=%lld is not supported for x of rank %d: only the "
                     "last dim (-1 or %d) is",
                     (long long)dim, x->rank, last);
  return opd__same_shape(call, out);
}

const opd_op_def_t opd__op_softmax = {
    .name = "softmax",
    .summary = "softmax along the last dim, max-subtracted (torch.softmax)",
    .n_in_min = 1,
    .n_in_max = 1,
    .n_out = 1,
    .in = {{"x", OPD_DT_FLOATS, "(..., C)"}},
    .out = {{"y", OPD_DT_FLOATS, "(..., C) rows sum to 1"}},
    .n_attrs = 1,
    .attrs = {{.name = "dim",
               .type = OPD_ATTR_INT,
               .def = {.type = OPD_ATTR_INT, .i = -1},
               .doc = "the dim to normalize; must be the last (-1 or rank-1)"}},
    .flags = OPD_OPF_INPLACE,
    .cpu_dtypes = OPD_DT_FLOAT,
    .shape_doc = "x (..., C) -> y (..., C)",
    .shape = softmax_shape,
    .cpu_ref = opd__softmax_cpu_ref,
    .cpu_fast = opd__softmax_cpu_fast,
    .cuda = opd__softmax_cuda,
    .cuda_dtypes = OPD_DT(FLOAT32) | OPD_DT(FLOAT16) | OPD_DT(BFLOAT16),
};
