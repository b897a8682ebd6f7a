/* relu: x -> y = max(x, 0), any shape, float32 (float16 and bfloat16 on
 * the CUDA backend: cpu_dtypes); NaN stays NaN (torch). */
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"

OPD_OP_DECLARE(relu);

const opd_op_def_t opd__op_relu = {
    .name = "relu",
    .summary = "elementwise max(x, 0) (torch.relu; NaN propagates)",
    .n_in_min = 1,
    .n_in_max = 1,
    .n_out = 1,
    .in = {{"x", OPD_DT_FLOATS, "(...)"}},
    .out = {{"y", OPD_DT_FLOATS, "(...) same shape as x"}},
    .flags = OPD_OPF_INPLACE,
    .cpu_dtypes = OPD_DT_FLOAT,
    .shape_doc = "x (...) -> y (...)",
    .shape = opd__same_shape,
    .cpu_ref = opd__relu_cpu_ref,
    .cpu_fast = opd__relu_cpu_fast,
    .cuda = opd__relu_cuda,
    .cuda_dtypes = OPD_DT(FLOAT32) | OPD_DT(FLOAT16) | OPD_DT(BFLOAT16),
};
