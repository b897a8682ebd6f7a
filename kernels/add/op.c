/* add: a, b -> out = a + b with torch broadcasting, float32 (float16 and
 * bfloat16 on the CUDA backend: cpu_dtypes).
 *
 * DESIGN
 * The rule and kernels are shared with the other broadcasting binary op
 * (kernels/common/binary.c); this row only names them. INPLACE: out may be
 * exactly a (or b, when that operand has the output's shape).
 */
#include "kernels/common/binary.h"
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"

OPD_OP_DECLARE(add);

const opd_op_def_t opd__op_add = {
    .name = "add",
    .summary = "elementwise a + b with broadcasting (torch.add)",
    .n_in_min = 2,
    .n_in_max = 2,
    .n_out = 1,
    .in = {{"a", OPD_DT_FLOATS, "(...) broadcastable with b"},
           {"b", OPD_DT_FLOATS, "(...) broadcastable with a"}},
    .out = {{"out", OPD_DT_FLOATS, "broadcast shape of a and b"}},
    .flags = OPD_OPF_INPLACE,
    .cpu_dtypes = OPD_DT_FLOAT,
    .shape_doc = "a (...), b (...) -> out (broadcast(a, b))",
    .shape = opd__binary_shape,
    .cpu_ref = opd__add_cpu_ref,
    .cpu_fast = opd__add_cpu_fast,
    .cuda = opd__add_cuda,
    .cuda_dtypes = OPD_DT(FLOAT32) | OPD_DT(FLOAT16) | OPD_DT(BFLOAT16),
};
