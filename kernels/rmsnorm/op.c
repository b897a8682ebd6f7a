/* rmsnorm: x (..., C), weight (C)? -> y (..., C),
 * F.rms_norm(x, (C,), weight, eps).
 *
 * DESIGN
 * eps defaults to torch.finfo(float32).eps, what F.rms_norm uses when
 * eps=None.
 */
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/common/norm.h"

OPD_OP_DECLARE(rmsnorm);

static int rmsnorm_shape(opd_kcall_t *call, opd_tshape_t *out) {
  static const char *const names[] = {"weight"};
  return opd__norm_shape(call, out, names);
}

const opd_op_def_t opd__op_rmsnorm = {
    .name = "rmsnorm",
    .summary = "RMS norm over the last dim (F.rms_norm(x, (C,), w, eps))",
    .n_in_min = 1,
    .n_in_max = 2,
    .n_out = 1,
    .in = {{"x", OPD_DT_FLOATS, "(..., C)"},
           {"weight", OPD_DT_FLOATS, "(C) optional scale"}},
    .out = {{"y", OPD_DT_FLOATS, "(..., C)"}},
    .n_attrs = 1,
    .attrs = {{.name = "eps",
               .type = OPD_ATTR_FLOAT,
               .def = {.type = OPD_ATTR_FLOAT, .f = 1.1920928955078125e-07},
               .doc = "added to mean(x^2) before the square root "
                      "(default: float32 eps, as torch with eps=None)"}},
    .flags = OPD_OPF_INPLACE,
    .cpu_dtypes = OPD_DT_FLOAT,
    .shape_doc = "x (..., C), weight (C)? -> y (..., C)",
    .shape = rmsnorm_shape,
    .cpu_ref = opd__rmsnorm_cpu_ref,
    .cpu_fast = opd__rmsnorm_cpu_fast,
    .cuda = opd__rmsnorm_cuda,
    .cuda_dtypes = OPD_DT(FLOAT32) | OPD_DT(FLOAT16) | OPD_DT(BFLOAT16),
};
