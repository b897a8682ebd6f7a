/* copy: x (any strides, any dtype) -> y contiguous, like x.contiguous().
 *
 * DESIGN
 * The only op that sets OPD_OPF_STRIDED: its input may be any strided view
 * (the daemon has checked that every element lies inside the arena); the
 * output is C-contiguous with the same shape and dtype.
 */
#include "kernels/common/cpu.h"

OPD_OP_DECLARE(copy);

static int copy_shape(opd_kcall_t *call, opd_tshape_t *out) {
  const opd_tview_t *x = &call->in[0];
  out[0].dtype = x->dtype;
  out[0].rank = x->rank;
  for (int i = 0; i < x->rank; i++) out[0].shape[i] = x->shape[i];
  return 0;
}

const opd_op_def_t opd__op_copy = {
    .name = "copy",
    .summary = "copies a strided tensor into a contiguous one (.contiguous())",
    .n_in_min = 1,
    .n_in_max = 1,
    .n_out = 1,
    .in = {{"x", OPD_DT_ANY, "(...) any strides"}},
    .out = {{"y", OPD_DT_ANY, "(...) contiguous, dtype of x"}},
    .flags = OPD_OPF_STRIDED | OPD_OPF_STEADY_COST,
    .shape_doc = "x (...) -> y (...)",
    .shape = copy_shape,
    .cpu_ref = opd__copy_cpu_ref,
    .cpu_fast = opd__copy_cpu_fast,
    .cuda = opd__copy_cuda,
    .cuda_dtypes = OPD_DT_ANY,
};
