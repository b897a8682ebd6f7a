/* The norm family's table: row-wise normalizations, x (..., C) -> y,
 * one row per op (softmax, log_softmax, layernorm, rmsnorm), float32,
 * float64, float16 and bfloat16 (the CPU computes halves in float32).
 *
 * DESIGN
 * softmax is in the family with the two norms: each reduces a row to
 * statistics and rewrites it from them, and they share that body on
 * each backend (cpu.c over kernels/common/rowred.h, cuda.cu over
 * rows.cuh); which elements form a row is dims.h's. All are INPLACE (y
 * may be exactly x). What the rows share is NORM_ROW's; each row adds
 * its inputs, attributes and shape rule (layernorm and rmsnorm share
 * theirs: norm_shape; softmax and log_softmax: softmax_shape). A new op
 * of the family is its row here plus its section in cpu.c and cuda.cu
 * (and its X line in kernels/runtime/registry.c). The rows set
 * OPD_OPF_CPU_STRIDED: their CPU kernels sit behind the row-wise strided
 * driver (kernels/common/strided.h), and a layernorm or rmsnorm whose x
 * and y are laid out alike with the normalized dim not innermost in
 * memory runs as columns (kernels/norm/cols.h).
 *
 * softmax, log_softmax: torch.softmax / torch.log_softmax(x, dim,
 * dtype=): any dim (default -1, negative from the end); dtype "" keeps
 * x's dtype, else x is converted and the op computed and written in that
 * dtype (torch's dtype=; float16 / bfloat16 computed in float32). A 0-d x is
 * one row of one element and gives 1.0 (log_softmax 0.0), as torch.
 * layernorm: F.layer_norm(x, normalized_shape, weight, bias, eps) with
 * normalized_shape = weight's shape (any number of trailing dims of x),
 * or the last `ndims` dims when there is no weight. Inputs are
 * positional: weight alone is input 1, bias needs weight (pass ones for
 * a bias-only norm). Biased variance, as torch.
 * rmsnorm: F.rms_norm(x, normalized_shape, weight, eps), normalized_shape
 * as layernorm's. eps defaults to torch.finfo(float32).eps, what
 * F.rms_norm uses when eps=None.
 */
#include <string.h>

#include "kernels/common/cast.h"
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/common/strided.h"
#include "kernels/norm/cols.h"
#include "kernels/norm/dims.h"

OPD_OP_DECLARE(softmax);
OPD_OP_DECLARE(log_softmax);
OPD_OP_DECLARE(layernorm);
OPD_OP_DECLARE(rmsnorm);

/* The CPU kernels as the rows give them (OPD_OPF_CPU_STRIDED): any
 * strides, through opd__rows_strided's tiles of rows; softmax's rows run
 * along its dim (made the last in each tile), the norms' over their
 * trailing dims. */
static int softmax_rows(opd_kcall_t *call, opd_cpu_fn fn) {
  const opd_tview_t *x = &call->in[0];
  if (x->rank == 0) return fn(call);
  int64_t dim = call->attr[0].i;
  return opd__rows_strided(call, (int)(dim < 0 ? dim + x->rank : dim), 1, 0, fn);
}

static int norm_rows(opd_kcall_t *call, opd_cpu_fn fn) {
  int k = opd__norm_ndims(call);
  return opd__rows_strided(call, call->in[0].rank - k, k, -1, fn);
}

#define ROWS_KERNELS(name, driver)                                         \
  static int name##_ref_strided(opd_kcall_t *call) {                       \
    return driver(call, opd__##name##_cpu_ref);                            \
  }                                                                        \
  static int name##_fast_strided(opd_kcall_t *call) {                      \
    return driver(call, opd__##name##_cpu_fast);                           \
  }

/* The norms' fast entry: x and y laid out alike with the normalized dim
 * not innermost in memory (a transposed x into a transposed out) run as
 * columns on the memory as it is (kernels/norm/cols.h), else the tiles. */
static int norm_fast(opd_kcall_t *call, opd_cpu_fn fn, int rms) {
  int64_t outer, C, inner;
  const opd_tview_t *x = &call->in[0];
  if (x->rank > 0 && x->numel > 0 && !opd__kview_contiguous(x) &&
      opd__norm_cols_ok(call) && opd__rows_dense(call, x->rank - 1, &outer, &C, &inner) &&
      inner > 1)
    return opd__norm_cols(call, outer, C, inner, rms);
  return norm_rows(call, fn);
}

ROWS_KERNELS(softmax, softmax_rows)
ROWS_KERNELS(log_softmax, softmax_rows)

static int layernorm_ref_strided(opd_kcall_t *call) {
  return norm_rows(call, opd__layernorm_cpu_ref);
}
static int layernorm_fast_strided(opd_kcall_t *call) {
  return norm_fast(call, opd__layernorm_cpu_fast, 0);
}
static int rmsnorm_ref_strided(opd_kcall_t *call) {
  return norm_rows(call, opd__rmsnorm_cpu_ref);
}
static int rmsnorm_fast_strided(opd_kcall_t *call) {
  return norm_fast(call, opd__rmsnorm_cpu_fast, 1);
}

/* The row of norm op `op` (its shape rule is <op>_shape); the remaining
 * arguments are the row's own fields: summary, inputs, output, attribute,
 * shape_doc. */
#define NORM_ROW(op, ...)                                                  \
  {                                                                        \
    .name = #op,                                                           \
    .n_in_min = 1,                                                         \
    .n_out = 1,                                                            \
    .flags = OPD_OPF_INPLACE | OPD_OPF_CPU_STRIDED,                        \
    .cpu_dtypes = OPD_DT_FLOATS64,                                         \
    .shape = op##_shape,                                                   \
    OPD_ROW_KERNELS_STRIDED(op),                                           \
    .cuda_dtypes = OPD_DT_FLOATS64,                                        \
    __VA_ARGS__                                                            \
  }

/* Shape rule of the norms: x (..., S), S = normalized_shape (weight's
 * shape, else the last `ndims` dims), then optional params of shape S as
 * inputs 1.. (named by `names`, e.g. {"weight", "bias"}). Checks x has
 * rank >= 1, ndims is in 1..rank, and every param has shape S. Returns 0
 * with out[0] = x's shape and dtype, or OPD_ESHAPE / OPD_EATTR /
 * OPD_EDTYPE (a param whose dtype is not x's) with call->err set. */
static int norm_shape(opd_kcall_t *call, opd_tshape_t *out,
                      const char *const *names) {
  const opd_tview_t *x = &call->in[0];
  char sx[128], sp[128], ss[128];
  if (x->rank < 1)
    return opd__kerr(call, OPD_ESHAPE,
                     "input 0 (x) is 0-d; expected at least 1 dim (..., C)");
  int64_t nd = call->attr[1].i;
  if (call->n_in > 1 && nd != 1 && nd != call->in[1].rank)
    return opd__kerr(call, OPD_EATTR,
                     "ndims=%lld but weight has rank %d: normalized_shape is "
                     "weight's shape (leave ndims at 1 or give %d)",
                     (long long)nd, call->in[1].rank, call->in[1].rank);
  int64_t kk = call->n_in > 1 ? call->in[1].rank : nd;
  if (kk < 1 || kk > x->rank)
    return opd__kerr(call, OPD_EATTR,
                     "%s=%lld is out of range for x of shape %s (expected 1 "
                     "to %d trailing dims)",
                     call->n_in > 1 ? "weight's rank" : "ndims", (long long)kk,
                     opd__shape_str(sx, sizeof sx, x->shape, x->rank),
                     x->rank);
  int k = (int)kk;
  const int64_t *S = x->shape + x->rank - k;
  for (int i = 1; i < call->n_in; i++) {
    const opd_tview_t *p = &call->in[i];
    int ok = p->rank == k;
    for (int d = 0; ok && d < k; d++) ok = p->shape[d] == S[d];
    if (ok) continue;
    if (k == 1)
      return opd__kerr(call, OPD_ESHAPE,
                       "input 0 (x) has shape %s but %s has shape %s; "
                       "expected %s of shape [%lld] (the last dim of x)",
                       opd__shape_str(sx, sizeof sx, x->shape, x->rank),
                       names[i - 1],
                       opd__shape_str(sp, sizeof sp, p->shape, p->rank),
                       names[i - 1], (long long)S[0]);
    return opd__kerr(call, OPD_ESHAPE,
                     "input 0 (x) has shape %s but %s has shape %s; "
                     "expected %s of shape %s (the last %d dims of x)",
                     opd__shape_str(sx, sizeof sx, x->shape, x->rank),
                     names[i - 1],
                     opd__shape_str(sp, sizeof sp, p->shape, p->rank),
                     names[i - 1], opd__shape_str(ss, sizeof ss, S, k), k);
  }
  int rc = opd__same_dtype(call);
  if (rc) return rc;
  return opd__same_shape(call, out);
}

/* Shape rule of softmax and log_softmax: y has x's shape, in the dtype
 * of the `dtype` attribute ("" = x's). OPD_EATTR for a dim out of range. */
static int softmax_shape(opd_kcall_t *call, opd_tshape_t *out) {
  const opd_tview_t *x = &call->in[0];
  int64_t dim = call->attr[0].i;
  int r = x->rank > 0 ? x->rank : 1;
  if (dim < -r || dim >= r)
    return opd__kerr(call, OPD_EATTR,
                     "dim=%lld is out of range for x of rank %d (expected "
                     "-%d..%d)",
                     (long long)dim, x->rank, r, r - 1);
  opd__same_shape(call, out);
  const char *dt = call->attr[1].s;
  if (dt[0] == '\0') return 0;
#define X(name, val, size, str) \
  if (strcmp(dt, str) == 0) out[0].dtype = OPD_DTYPE_##name;
  OPD_DTYPE_MAP(X)
#undef X
  return 0;
}

static int log_softmax_shape(opd_kcall_t *call, opd_tshape_t *out) {
  return softmax_shape(call, out);
}

#define SOFTMAX_ATTRS                                                       \
  .n_attrs = 2,                                                             \
  .attrs = {{.name = "dim",                                                 \
             .type = OPD_ATTR_INT,                                          \
             .def = {.type = OPD_ATTR_INT, .i = -1},                        \
             .doc = "the dim to normalize (negative from the end)"},        \
            {.name = "dtype",                                               \
             .type = OPD_ATTR_STR,                                          \
             .def = {.type = OPD_ATTR_STR, .s = ""},                        \
             .choices = "|float32|float16|bfloat16|float64",                \
             .doc = "compute and write y in this dtype (\"\": x's), as "    \
                    "torch's dtype="}}

const opd_op_def_t opd__op_softmax = NORM_ROW(
    softmax,
    .summary = "softmax along a dim, max-subtracted (torch.softmax(x, dim, "
               "dtype))",
    .n_in_max = 1,
    .in = {{"x", OPD_DT_FLOATS64, "(...)"}},
    .out = {{"y", OPD_DT_FLOATS64, "x's shape, sums to 1 along dim"}},
    SOFTMAX_ATTRS,
    .shape_doc = "x (...) -> y (...)");

const opd_op_def_t opd__op_log_softmax = NORM_ROW(
    log_softmax,
    .summary = "log of softmax along a dim (torch.log_softmax(x, dim, "
               "dtype))",
    .n_in_max = 1,
    .in = {{"x", OPD_DT_FLOATS64, "(...)"}},
    .out = {{"y", OPD_DT_FLOATS64, "x's shape: x - max - log(sum(exp(x - max)))"}},
    SOFTMAX_ATTRS,
    .shape_doc = "x (...) -> y (...)");

/* The norms' second attribute: how many trailing dims without a weight. */
#define NDIMS_ATTR                                                          \
  {.name = "ndims",                                                         \
   .type = OPD_ATTR_INT,                                                    \
   .def = {.type = OPD_ATTR_INT, .i = 1},                                   \
   .doc = "trailing dims normalized over when there is no weight (with "    \
          "one: weight's rank)"}

static int layernorm_shape(opd_kcall_t *call, opd_tshape_t *out) {
  static const char *const names[] = {"weight", "bias"};
  return norm_shape(call, out, names);
}

const opd_op_def_t opd__op_layernorm = NORM_ROW(
    layernorm,
    .summary = "layer norm over trailing dims (F.layer_norm(x, w.shape, w, b, eps))",
    .n_in_max = 3,
    .in = {{"x", OPD_DT_FLOATS64, "(..., *S)"},
           {"weight", OPD_DT_FLOATS64, "(S) optional scale"},
           {"bias", OPD_DT_FLOATS64, "(S) optional shift (needs weight)"}},
    .out = {{"y", OPD_DT_FLOATS64, "x's shape"}},
    .n_attrs = 2,
    .attrs = {{.name = "eps",
               .type = OPD_ATTR_FLOAT,
               .def = {.type = OPD_ATTR_FLOAT, .f = 1e-5},
               .doc = "added to the variance before the square root"},
              NDIMS_ATTR},
    .shape_doc = "x (..., *S), weight (S)?, bias (S)? -> y (..., *S)");

static int rmsnorm_shape(opd_kcall_t *call, opd_tshape_t *out) {
  static const char *const names[] = {"weight"};
  return norm_shape(call, out, names);
}

const opd_op_def_t opd__op_rmsnorm = NORM_ROW(
    rmsnorm,
    .summary = "RMS norm over trailing dims (F.rms_norm(x, w.shape, w, eps))",
    .n_in_max = 2,
    .in = {{"x", OPD_DT_FLOATS64, "(..., *S)"},
           {"weight", OPD_DT_FLOATS64, "(S) optional scale"}},
    .out = {{"y", OPD_DT_FLOATS64, "x's shape"}},
    .n_attrs = 2,
    .attrs = {{.name = "eps",
               .type = OPD_ATTR_FLOAT,
               .def = {.type = OPD_ATTR_FLOAT, .f = 1.1920928955078125e-07},
               .doc = "added to mean(x^2) before the square root "
                      "(default: float32 eps, as torch with eps=None)"},
              NDIMS_ATTR},
    .shape_doc = "x (..., *S), weight (S)? -> y (..., *S)");
