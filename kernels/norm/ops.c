/* The norm family's table: row-wise normalizations over the last dim,
 * x (..., C) -> y (..., C), one row per op (softmax, layernorm, rmsnorm),
 * float32 (float16 and bfloat16 on the CUDA backend: cpu_dtypes).
 *
 * DESIGN
 * softmax is in the family with the two norms: each reduces a row to
 * statistics and rewrites it from them, and the three share that body on
 * each backend (cpu.c over kernels/common/rowred.h, cuda.cu over
 * rows.cuh). All are INPLACE (y may be exactly x). What the rows
 * share is NORM_ROW's; each row adds its inputs, attribute and shape
 * rule (layernorm and rmsnorm share theirs: norm_shape). A new op of the
 * family is its row here plus its section in cpu.c and cuda.cu (and its X
 * line in kernels/runtime/registry.c).
 *
 * softmax: torch.softmax along the last dim. Only the last dim is
 * supported; the `dim` attribute exists so that a client that writes
 * torch's call gets a clear error instead of a silently wrong axis. A 0-d
 * x is one row of one element and gives 1.0, as torch.
 * layernorm: F.layer_norm(x, (C,), weight, bias, eps). Inputs are
 * positional: weight alone is input 1, bias needs weight (pass ones for a
 * bias-only norm). Biased variance, as torch.
 * rmsnorm: F.rms_norm(x, (C,), weight, eps). eps defaults to
 * torch.finfo(float32).eps, what F.rms_norm uses when eps=None.
 */
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"

OPD_OP_DECLARE(softmax);
OPD_OP_DECLARE(layernorm);
OPD_OP_DECLARE(rmsnorm);

/* The row of norm op `op` (its shape rule is <op>_shape); the remaining
 * arguments are the row's own fields: summary, inputs, output, attribute,
 * shape_doc. */
#define NORM_ROW(op, ...)                                                  \
  {                                                                        \
    .name = #op,                                                           \
    .n_in_min = 1,                                                         \
    .n_out = 1,                                                            \
    .flags = OPD_OPF_INPLACE,                                              \
    .cpu_dtypes = OPD_DT_FLOAT,                                            \
    .shape = op##_shape,                                                   \
    OPD_ROW_KERNELS(op),                                                   \
    .cuda_dtypes = OPD_DT(FLOAT32) | OPD_DT(FLOAT16) | OPD_DT(BFLOAT16),   \
    __VA_ARGS__                                                            \
  }

/* Shape rule of the norms: x (..., C), then optional per-channel params of
 * shape (C) as inputs 1.. (named by `names`, e.g. {"weight", "bias"}).
 * Checks x has rank >= 1 and every param has shape (C), C = x's last dim.
 * Returns 0 with out[0] = x's shape and dtype, or OPD_ESHAPE / OPD_EDTYPE
 * (a param whose dtype is not x's) with call->err set. */
static int norm_shape(opd_kcall_t *call, opd_tshape_t *out,
                      const char *const *names) {
  const opd_tview_t *x = &call->in[0];
  char sx[128], sp[128];
  if (x->rank < 1)
    return opd__kerr(call, OPD_ESHAPE,
                     "input 0 (x) is 0-d; expected at least 1 dim (..., C)");
  int64_t C = x->shape[x->rank - 1];
  for (int i = 1; i < call->n_in; i++) {
    const opd_tview_t *p = &call->in[i];
    if (p->rank != 1 || p->shape[0] != C)
      return opd__kerr(call, OPD_ESHAPE,
                       "input 0 (x) has shape %s but %s has shape %s; "
                       "expected %s of shape [%lld] (the last dim of x)",
                       opd__shape_str(sx, sizeof sx, x->shape, x->rank),
                       names[i - 1],
                       opd__shape_str(sp, sizeof sp, p->shape, p->rank),
                       names[i - 1], (long long)C);
  }
  int rc = opd__same_dtype(call);
  if (rc) return rc;
  return opd__same_shape(call, out);
}

static int softmax_shape(opd_kcall_t *call, opd_tshape_t *out) {
  const opd_tview_t *x = &call->in[0];
  int64_t dim = call->attr[0].i;
  int last = x->rank > 0 ? x->rank - 1 : 0;
  if (dim != -1 && dim != last)
    return opd__kerr(call, OPD_EATTR,
                     "dim=%lld is not supported for x of rank %d: only the "
                     "last dim (-1 or %d) is",
                     (long long)dim, x->rank, last);
  return opd__same_shape(call, out);
}

const opd_op_def_t opd__op_softmax = NORM_ROW(
    softmax,
    .summary = "softmax along the last dim, max-subtracted (torch.softmax)",
    .n_in_max = 1,
    .in = {{"x", OPD_DT_FLOATS, "(..., C)"}},
    .out = {{"y", OPD_DT_FLOATS, "(..., C) rows sum to 1"}},
    .n_attrs = 1,
    .attrs = {{.name = "dim",
               .type = OPD_ATTR_INT,
               .def = {.type = OPD_ATTR_INT, .i = -1},
               .doc = "the dim to normalize; must be the last (-1 or rank-1)"}},
    .shape_doc = "x (..., C) -> y (..., C)");

static int layernorm_shape(opd_kcall_t *call, opd_tshape_t *out) {
  static const char *const names[] = {"weight", "bias"};
  return norm_shape(call, out, names);
}

const opd_op_def_t opd__op_layernorm = NORM_ROW(
    layernorm,
    .summary = "layer norm over the last dim (F.layer_norm(x, (C,), w, b, eps))",
    .n_in_max = 3,
    .in = {{"x", OPD_DT_FLOATS, "(..., C)"},
           {"weight", OPD_DT_FLOATS, "(C) optional scale"},
           {"bias", OPD_DT_FLOATS, "(C) optional shift (needs weight)"}},
    .out = {{"y", OPD_DT_FLOATS, "(..., C)"}},
    .n_attrs = 1,
    .attrs = {{.name = "eps",
               .type = OPD_ATTR_FLOAT,
               .def = {.type = OPD_ATTR_FLOAT, .f = 1e-5},
               .doc = "added to the variance before the square root"}},
    .shape_doc = "x (..., C), weight (C)?, bias (C)? -> y (..., C)");

static int rmsnorm_shape(opd_kcall_t *call, opd_tshape_t *out) {
  static const char *const names[] = {"weight"};
  return norm_shape(call, out, names);
}

const opd_op_def_t opd__op_rmsnorm = NORM_ROW(
    rmsnorm,
    .summary = "RMS norm over the last dim (F.rms_norm(x, (C,), w, eps))",
    .n_in_max = 2,
    .in = {{"x", OPD_DT_FLOATS, "(..., C)"},
           {"weight", OPD_DT_FLOATS, "(C) optional scale"}},
    .out = {{"y", OPD_DT_FLOATS, "(..., C)"}},
    .n_attrs = 1,
    .attrs = {{.name = "eps",
               .type = OPD_ATTR_FLOAT,
               .def = {.type = OPD_ATTR_FLOAT, .f = 1.1920928955078125e-07},
               .doc = "added to mean(x^2) before the square root "
                      "(default: float32 eps, as torch with eps=None)"}},
    .shape_doc = "x (..., C), weight (C)? -> y (..., C)");
