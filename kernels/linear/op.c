/* linear: x (..., K), weight (N, K), bias (N)? -> out (..., N), with an
 * optional activation (F.linear then relu / gelu / gelu tanh / silu),
 * float32, float64, float16 and bfloat16 (the CPU computes halves in
 * float32).
 *
 * DESIGN
 * The shape rule and the kernels share one plan (linear.h). The weight
 * keeps torch's (N, K) layout, so nn.Linear's parameters are used as they
 * are. The activation is fused into the epilogue (one pass over the
 * output on the CPU, cuBLASLt's epilogue or one small kernel on CUDA),
 * so a layer of an MLP is one op. The output must not alias the inputs:
 * no INPLACE flag.
 */
#include "kernels/common/cast.h"
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/linear/linear.h"

OPD_OP_DECLARE(linear);

static int linear_shape(opd_kcall_t *call, opd_tshape_t *out) {
  linear_plan_t p;
  int rc = opd__same_dtype(call); /* x, weight, bias of one dtype */
  if (rc) return rc;
  return opd__linear_plan(call, &p, &out[0]);
}

const opd_op_def_t opd__op_linear = {
    .name = "linear",
    .summary = "x @ weight^T + bias, then an activation (F.linear, "
               "nn.Linear's layout)",
    .n_in_min = 2,
    .n_in_max = 3,
    .n_out = 1,
    .in = {{"x", OPD_DT_FLOATS64, "(..., K)"},
           {"weight", OPD_DT_FLOATS64, "(N, K)"},
           {"bias", OPD_DT_FLOATS64, "(N), optional"}},
    .out = {{"out", OPD_DT_FLOATS64, "(..., N)"}},
    .n_attrs = 1,
    .attrs = {{.name = "act",
               .type = OPD_ATTR_STR,
               .def = {.type = OPD_ATTR_STR, .s = "none"},
               .choices = "none|relu|gelu|gelu_tanh|silu",
               .doc = "activation after the bias: gelu is the exact (erf) "
                      "form, gelu_tanh F.gelu(approximate=\"tanh\"), silu "
                      "x*sigmoid(x)"}},
    .cpu_dtypes = OPD_DT_FLOATS64,
    .shape_doc = "x (..., K), weight (N, K), bias (N)? -> out (..., N)",
    .shape = linear_shape,
    .cpu_ref = opd__linear_cpu_ref,
    .cpu_fast = opd__linear_cpu_fast,
    .flags = OPD_OPF_CUDA_BLASLT | /* the CUDA kernel runs cuBLASLt */
             OPD_OPF_STEADY_COST,
    .cuda = opd__linear_cuda,
    .cuda_dtypes = OPD_DT_FLOATS64,
};
