/* relu: x -> y = max(x, 0), float32, any shape; NaN stays NaN (torch). */
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"

const opd_op_def_t opd__op_relu = {
    .name = "relu",
    .summary = "elementwise max(x, 0) (torch.relu; NaN propagates)",
    .n_in_min = 1,
    .n_in_max = 1,
    .n_out = 1,
    .in = {{"x", OPD_DT_FLOAT, "(...)"}},
    .out = {{"y", OPD_DT_FLOAT, "(...) same shape as x"}},
    .flags = OPD_OPF_INPLACE,
    .shape_doc = "x (...) -> y (...)",
    .shape = opd__same_shape,
    .cpu_ref = opd__relu_cpu_ref,
    .cpu_fast = opd__relu_cpu_fast,
};
