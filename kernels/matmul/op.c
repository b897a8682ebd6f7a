/* matmul: a, b -> out, torch.matmul semantics (1-D operands, broadcast
 * batch dims), float32, float64, float16 and bfloat16 (the CPU computes
 * halves in float32).
 *
 * DESIGN
 * The shape rule and the kernels share one plan (plan.h), so they cannot
 * disagree on torch's 1-D and batch cases. The output must not alias the
 * inputs: no INPLACE flag.
 */
#include "kernels/common/cast.h"
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/matmul/plan.h"

OPD_OP_DECLARE(matmul);

static int matmul_shape(opd_kcall_t *call, opd_tshape_t *out) {
  mm_plan_t p;
  int rc = opd__same_dtype(call); /* a and b of one dtype */
  if (rc) return rc;
  return opd__matmul_plan(call, &p, &out[0]);
}

const opd_op_def_t opd__op_matmul = {
    .name = "matmul",
    .summary = "matrix product with torch.matmul semantics (1-D operands, "
               "broadcast batch dims)",
    .n_in_min = 2,
    .n_in_max = 2,
    .n_out = 1,
    .in = {{"a", OPD_DT_FLOATS64, "(..., M, K) or (K)"},
           {"b", OPD_DT_FLOATS64, "(..., K, N) or (K)"}},
    .out = {{"out", OPD_DT_FLOATS64,
             "(broadcast(...), M, N); M dropped if a is 1-D, N if b is"}},
    .cpu_dtypes = OPD_DT_FLOATS64,
    .shape_doc = "a (..., M, K), b (..., K, N) -> out (..., M, N)",
    .shape = matmul_shape,
    .cpu_ref = opd__matmul_cpu_ref,
    .cpu_fast = opd__matmul_cpu_fast,
    .flags = OPD_OPF_CUDA_BLASLT | /* the CUDA kernel runs cuBLASLt */
             OPD_OPF_STEADY_COST,
    .cuda = opd__matmul_cuda,
    .cuda_dtypes = OPD_DT_FLOATS64,
};
