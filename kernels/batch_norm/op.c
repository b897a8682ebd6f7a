/* batch_norm: x (N, C, ...), mean (C), var (C), weight (C)?, bias (C)? ->
 * y (N, C, ...), F.batch_norm in inference (training=False: the running
 * statistics given), float32 (float16 and bfloat16 on the CUDA backend:
 * cpu_dtypes).
 *
 * DESIGN
 * y = (x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c] along dim
 * 1 of x: (N, C), (N, C, L), (N, C, H, W) or more trailing dims. Inputs
 * are positional: bias needs weight (pass ones for a bias-only norm).
 * The kernels fold each channel into a scale and a shift first (in
 * double on the CPU), then apply y = x scale + shift: one multiply-add
 * per element, as torch's inference kernel. INPLACE (y may be exactly x).
 */
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"

OPD_OP_DECLARE(batch_norm);

static int batch_norm_shape(opd_kcall_t *call, opd_tshape_t *out) {
  static const char *const names[] = {"x", "mean", "var", "weight", "bias"};
  const opd_tview_t *x = &call->in[0];
  char sx[128], sp[128];
  if (x->rank < 2)
    return opd__kerr(call, OPD_ESHAPE,
                     "input 0 (x) has shape %s; expected (N, C, ...) with "
                     "channels on dim 1",
                     opd__shape_str(sx, sizeof sx, x->shape, x->rank));
  int64_t C = x->shape[1];
  for (int i = 1; i < call->n_in; i++) {
    const opd_tview_t *p = &call->in[i];
    if (p->rank != 1 || p->shape[0] != C)
      return opd__kerr(call, OPD_ESHAPE,
                       "input 0 (x) has shape %s but %s has shape %s; "
                       "expected %s of shape [%lld] (dim 1 of x)",
                       opd__shape_str(sx, sizeof sx, x->shape, x->rank),
                       names[i], opd__shape_str(sp, sizeof sp, p->shape, p->rank),
                       names[i], (long long)C);
  }
  int rc = opd__same_dtype(call);
  if (rc) return rc;
  return opd__same_shape(call, out);
}

const opd_op_def_t opd__op_batch_norm = {
    .name = "batch_norm",
    .summary = "batch norm in inference (F.batch_norm(x, mean, var, w, b, "
               "training=False, eps=eps))",
    .n_in_min = 3,
    .n_in_max = 5,
    .n_out = 1,
    .in = {{"x", OPD_DT_FLOATS, "(N, C, ...)"},
           {"mean", OPD_DT_FLOATS, "(C) running mean"},
           {"var", OPD_DT_FLOATS, "(C) running variance"},
           {"weight", OPD_DT_FLOATS, "(C) optional scale"},
           {"bias", OPD_DT_FLOATS, "(C) optional shift (needs weight)"}},
    .out = {{"y", OPD_DT_FLOATS, "x's shape"}},
    .n_attrs = 1,
    .attrs = {{.name = "eps",
               .type = OPD_ATTR_FLOAT,
               .def = {.type = OPD_ATTR_FLOAT, .f = 1e-5},
               .doc = "added to the variance before the square root"}},
    .flags = OPD_OPF_INPLACE | OPD_OPF_STEADY_COST,
    .shape_doc = "x (N, C, ...), mean (C), var (C), weight (C)?, bias (C)? "
                 "-> y (N, C, ...)",
    .shape = batch_norm_shape,
    .cpu_dtypes = OPD_DT_FLOAT,
    OPD_ROW_KERNELS(batch_norm),
    .cuda_dtypes = OPD_DT(FLOAT32) | OPD_DT(FLOAT16) | OPD_DT(BFLOAT16),
};
