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
 * its X line in kernels/runtime/registry.c). The rows set
 * OPD_OPF_CPU_STRIDED: the CPU entry points are cpu.c's behind the
 * element-wise strided driver (OPD_EW_STRIDED_KERNELS,
 * kernels/common/strided.h), which takes any strides.
 *
 * relu: y = max(x, 0); NaN stays NaN (torch).
 * gelu: F.gelu(x, approximate="none"|"tanh"). The attribute is a string
 * checked by the daemon against its choices, so the kernels only test for
 * "tanh".
 * silu: x * sigmoid(x) = x / (1 + e^-x) (F.silu). sigmoid: 1 / (1 + e^-x)
 * (torch.sigmoid). tanh: torch.tanh.
 * hardtanh: clamp(x, min_val, max_val) (F.hardtanh; F.relu6 is min_val 0,
 * max_val 6). hardsigmoid: clamp(x + 3, 0, 6) / 6. hardswish:
 * x * clamp(x + 3, 0, 6) / 6 (MobileNetV3's; kernels/unary/hard.c).
 * neg, abs, exp, log, sqrt, rsqrt, sin, cos: torch's (kernels/unary/math.c;
 * log and sqrt of a negative x give NaN, rsqrt(0) +inf, as torch).
 */
#include "kernels/common/cast.h"
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/common/strided.h"

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
    .flags = OPD_OPF_INPLACE | OPD_OPF_ELEMENTWISE | OPD_OPF_CPU_STRIDED,  \
    .cpu_dtypes = OPD_DT_FLOATS64,                                         \
    .shape_doc = "x (...) -> y (...)",                                     \
    .shape = opd__same_shape,                                              \
    OPD_ROW_KERNELS_STRIDED(op),                                           \
    .cuda_dtypes = OPD_DT_FLOATS64,                                        \
    __VA_ARGS__                                                            \
  }

OPD_OP_DECLARE(relu);
OPD_EW_STRIDED_KERNELS(relu)
OPD_OP_DECLARE(gelu);
OPD_EW_STRIDED_KERNELS(gelu)
OPD_OP_DECLARE(silu);
OPD_EW_STRIDED_KERNELS(silu)
OPD_OP_DECLARE(sigmoid);
OPD_EW_STRIDED_KERNELS(sigmoid)
OPD_OP_DECLARE(tanh);
OPD_EW_STRIDED_KERNELS(tanh)
OPD_OP_DECLARE(hardtanh);
OPD_EW_STRIDED_KERNELS(hardtanh)
OPD_OP_DECLARE(hardsigmoid);
OPD_EW_STRIDED_KERNELS(hardsigmoid)
OPD_OP_DECLARE(hardswish);
OPD_EW_STRIDED_KERNELS(hardswish)

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

const opd_op_def_t opd__op_hardtanh = UNARY_ROW(
    hardtanh, "clamp(x, min_val, max_val) (F.hardtanh; F.relu6: 0, 6)",
    .n_attrs = 2,
    .attrs = {{.name = "min_val",
               .type = OPD_ATTR_FLOAT,
               .def = {.type = OPD_ATTR_FLOAT, .f = -1.0},
               .doc = "lower bound (default -1)"},
              {.name = "max_val",
               .type = OPD_ATTR_FLOAT,
               .def = {.type = OPD_ATTR_FLOAT, .f = 1.0},
               .doc = "upper bound (default 1)"}});

const opd_op_def_t opd__op_hardsigmoid =
    UNARY_ROW(hardsigmoid, "clamp(x + 3, 0, 6) / 6 (F.hardsigmoid)");

const opd_op_def_t opd__op_hardswish =
    UNARY_ROW(hardswish, "x * clamp(x + 3, 0, 6) / 6 (F.hardswish)");

/* neg, abs, exp, log, sqrt, rsqrt, sin, cos (kernels/unary/math.c) */
OPD_OP_DECLARE(neg);
OPD_EW_STRIDED_KERNELS(neg)
OPD_OP_DECLARE(abs);
OPD_EW_STRIDED_KERNELS(abs)
OPD_OP_DECLARE(exp);
OPD_EW_STRIDED_KERNELS(exp)
OPD_OP_DECLARE(log);
OPD_EW_STRIDED_KERNELS(log)
OPD_OP_DECLARE(sqrt);
OPD_EW_STRIDED_KERNELS(sqrt)
OPD_OP_DECLARE(rsqrt);
OPD_EW_STRIDED_KERNELS(rsqrt)
OPD_OP_DECLARE(sin);
OPD_EW_STRIDED_KERNELS(sin)
OPD_OP_DECLARE(cos);
OPD_EW_STRIDED_KERNELS(cos)

const opd_op_def_t opd__op_neg = UNARY_ROW(neg, "-x (torch.neg)");
const opd_op_def_t opd__op_abs = UNARY_ROW(abs, "|x| (torch.abs)");
const opd_op_def_t opd__op_exp = UNARY_ROW(exp, "e^x (torch.exp)");
const opd_op_def_t opd__op_log = UNARY_ROW(log, "natural logarithm (torch.log; NaN below 0, -inf at 0)");
const opd_op_def_t opd__op_sqrt = UNARY_ROW(sqrt, "square root (torch.sqrt; NaN below 0)");
const opd_op_def_t opd__op_rsqrt = UNARY_ROW(rsqrt, "1 / sqrt(x) (torch.rsqrt; +inf at 0)");
const opd_op_def_t opd__op_sin = UNARY_ROW(sin, "sine (torch.sin)");
const opd_op_def_t opd__op_cos = UNARY_ROW(cos, "cosine (torch.cos)");
