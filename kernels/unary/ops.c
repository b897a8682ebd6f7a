/* The unary family's table: elementwise ops x -> y of x's shape, one row
 * per op (relu, gelu, silu, sigmoid, tanh), float32, float64, float16
 * and bfloat16 on both backends (the CPU computes halves in float32).
 *
 * DESIGN
 * The ops of the family share their schema (one input x of any shape, one
 * output y of its shape and dtype, INPLACE: y may be exactly x), their
 * shape rule (opd__same_shape) and one body per backend: cpu.c's chunked
 * range loops, cuda.cu's packed tiles over a functor. A row adds only
 * what is its own: the name, the summary, attributes. A new op of the
 * family is one UNARY_ROW here plus its function in cpu.c and cuda.cu (and
 * its X line in kernels/runtime/registry.c).
 *
 * relu: y = max(x, 0); NaN stays NaN (torch).
 * gelu: F.gelu(x, approximate="none"|"tanh"). The attribute is a string
 * checked by the daemon against its choices, so the kernels only test for
 * "tanh".
 * silu: x * sigmoid(x) = x / (1 + e^-x) (F.silu). sigmoid: 1 / (1 + e^-x)
 * (torch.sigmoid). tanh: torch.tanh.
 */
#include "kernels/common/cast.h"
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"

/* The row of unary op `op`; the remaining arguments are the row's own
 * fields (attributes). */
#define UNARY_ROW(op, summ, ...)                                           \
  {                                                                        \
    .name = #op,                                                           \
    .summary = summ,                                                       \
    .n_in_min = 1,                                                         \
    .n_in_max = 1,                                                         \
    .n_out = 1,                                                            \
    .in = {{"x", OPD_DT_FLOATS64, "(...)"}},                               \
    .out = {{"y", OPD_DT_FLOATS64, "(...) same shape as x"}},              \
    .flags = OPD_OPF_INPLACE,                                              \
    .cpu_dtypes = OPD_DT_FLOATS64,                                         \
    .shape_doc = "x (...) -> y (...)",                                     \
    .shape = opd__same_shape,                                              \
    OPD_ROW_KERNELS(op),                                                   \
    .cuda_dtypes = OPD_DT_FLOATS64,                                        \
    __VA_ARGS__                                                            \
  }

OPD_OP_DECLARE(relu);
OPD_OP_DECLARE(gelu);
OPD_OP_DECLARE(silu);
OPD_OP_DECLARE(sigmoid);
OPD_OP_DECLARE(tanh);

const opd_op_def_t opd__op_relu =
    UNARY_ROW(relu, "elementwise max(x, 0) (torch.relu; NaN propagates)");

const opd_op_def_t opd__op_gelu = UNARY_ROW(
    gelu, "Gaussian error linear unit (F.gelu), exact or tanh form",
    .n_attrs = 1,
    .attrs = {{.name = "approximate",
               .type = OPD_ATTR_STR,
               .def = {.type = OPD_ATTR_STR, .s = "none"},
               .choices = "none|tanh",
               .doc = "none: 0.5x(1+erf(x/sqrt2)); tanh: "
                      "0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3)))"}});

const opd_op_def_t opd__op_silu =
    UNARY_ROW(silu, "sigmoid linear unit x * sigmoid(x) (F.silu)");

const opd_op_def_t opd__op_sigmoid =
    UNARY_ROW(sigmoid, "logistic sigmoid 1 / (1 + e^-x) (torch.sigmoid)");

const opd_op_def_t opd__op_tanh =
    UNARY_ROW(tanh, "hyperbolic tangent (torch.tanh)");
