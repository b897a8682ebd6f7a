/* gelu: x -> y, F.gelu(x, approximate="none"|"tanh"), float32 (float16 and
 * bfloat16 on the CUDA backend: cpu_dtypes).
 *
 * DESIGN
 * The attribute is a string checked by the daemon against its choices, so
 * the kernels only test for "tanh".
 */
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"

OPD_OP_DECLARE(gelu);

const opd_op_def_t opd__op_gelu = {
    .name = "gelu",
    .summary = "Gaussian error linear unit (F.gelu), exact or tanh form",
    .n_in_min = 1,
    .n_in_max = 1,
    .n_out = 1,
    .in = {{"x", OPD_DT_FLOATS, "(...)"}},
    .out = {{"y", OPD_DT_FLOATS, "(...) same shape as x"}},
    .n_attrs = 1,
    .attrs = {{.name = "approximate",
               .type = OPD_ATTR_STR,
               .def = {.type = OPD_ATTR_STR, .s = "none"},
               .choices = "none|tanh",
               .doc = "none: 0.5x(1+erf(x/sqrt2)); tanh: "
                      "0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3)))"}},
    .flags = OPD_OPF_INPLACE,
    .cpu_dtypes = OPD_DT_FLOAT,
    .shape_doc = "x (...) -> y (...)",
    .shape = opd__same_shape,
    .cpu_ref = opd__gelu_cpu_ref,
    .cpu_fast = opd__gelu_cpu_fast,
    .cuda = opd__gelu_cuda,
    .cuda_dtypes = OPD_DT(FLOAT32) | OPD_DT(FLOAT16) | OPD_DT(BFLOAT16),
};
