/* layernorm: x (..., C), weight (C)?, bias (C)? -> y (..., C),
 * F.layer_norm(x, (C,), weight, bias, eps).
 *
 * DESIGN
 * Inputs are positional: weight alone is input 1, bias needs weight (pass
 * ones for a bias-only norm). Biased variance, as torch.
 */
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/common/norm.h"

OPD_OP_DECLARE(layernorm);

static int layernorm_shape(opd_kcall_t *call, opd_tshape_t *out) {
  static const char *const names[] = {"weight", "bias"};
  return opd__norm_shape(call, out, names);
}

const opd_op_def_t opd__op_layernorm = {
    .name = "layernorm",
    .summary = "layer norm over the last dim (F.layer_norm(x, (C,), w, b, eps))",
    .n_in_min = 1,
    .n_in_max = 3,
    .n_out = 1,
    .in = {{"x", OPD_DT_FLOATS, "(..., C)"},
           {"weight", OPD_DT_FLOATS, "(C) optional scale"},
           {"bias", OPD_DT_FLOATS, "(C) optional shift (needs weight)"}},
    .out = {{"y", OPD_DT_FLOATS, "(..., C)"}},
    .n_attrs = 1,
    .attrs = {{.name = "eps",
               .type = OPD_ATTR_FLOAT,
               .def = {.type = OPD_ATTR_FLOAT, .f = 1e-5},
               .doc = "added to the variance before the square root"}},
    .flags = OPD_OPF_INPLACE,
    .cpu_dtypes = OPD_DT_FLOAT,
    .shape_doc = "x (..., C), weight (C)?, bias (C)? -> y (..., C)",
    .shape = layernorm_shape,
    .cpu_ref = opd__layernorm_cpu_ref,
    .cpu_fast = opd__layernorm_cpu_fast,
    .cuda = opd__layernorm_cuda,
    .cuda_dtypes = OPD_DT(FLOAT32) | OPD_DT(FLOAT16) | OPD_DT(BFLOAT16),
};
