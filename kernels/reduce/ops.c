/* The reduce family's table: reductions over a set of dims, x -> out, one
 * row per op (sum, mean, amax), as torch.sum / torch.mean / torch.amax
 * with dim= and keepdim=.
 *
 * DESIGN
 * The ops differ only in the operation applied along the reduced dims,
 * so the rows share one schema and one shape rule (reduce_shape) and one
 * body per backend (cpu.c, cuda.cu) over the geometry of geom.h. A new op
 * of the family is its row here, its operation in cpu.c and cuda.cu and
 * its X line in kernels/runtime/registry.c.
 *
 * dims: the dims to reduce, negative ones counting from the end; the
 * default (a single INT64_MIN, shown by `opctl ops`) means every dim, as
 * torch's dim=None (the protocol carries no empty list). A dim given
 * twice or out of range is an OPD_EATTR naming it. keepdim keeps the
 * reduced dims as extent 1. Dtypes: float32, float64, float16 and
 * bfloat16 (the CPU computes halves in float32); sum also takes int8, uint8, int32, int64 and bool and
 * gives int64 for them, as torch. Empty reductions: sum gives 0,
 * mean NaN (0/0, as torch), amax is refused (torch raises too).
 */
#include "kernels/common/cast.h"
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/reduce/geom.h"

OPD_OP_DECLARE(sum);
OPD_OP_DECLARE(mean);
OPD_OP_DECLARE(amax);
OPD_OP_DECLARE_CUDA_WORKSPACE(sum);
OPD_OP_DECLARE_CUDA_WORKSPACE(mean);
OPD_OP_DECLARE_CUDA_WORKSPACE(amax);

#define INTS_DT \
  (OPD_DT(INT8) | OPD_DT(UINT8) | OPD_DT(INT32) | OPD_DT(INT64) | OPD_DT(BOOL))

/* Shape rule: out = x's shape without the reduced dims (extent 1 with
 * keepdim); dtype x's, int64 for sum of an integer or bool x. OPD_EATTR
 * for a dim out of range or given twice, OPD_ESHAPE for amax over an
 * empty dim when no_empty. */
static int reduce_shape(opd_kcall_t *call, opd_tshape_t *out, int no_empty) {
  const opd_tview_t *x = &call->in[0];
  const opd_attr_val_t *dims = &call->attr[0];
  int keep = call->attr[1].i != 0, bad = 0;
  uint32_t mask;
  int rc = opd__red_mask(dims->ints, opd__red_ndims(dims), x->rank, &mask,
                         &bad);
  if (rc == -1)
    return opd__kerr(call, OPD_EATTR,
                     "dims[%d]=%lld is out of range for x of rank %d "
                     "(expected -%d..%d)",
                     bad, (long long)dims->ints[bad], x->rank,
                     x->rank > 0 ? x->rank : 1, x->rank > 0 ? x->rank - 1 : 0);
  if (rc == -2)
    return opd__kerr(call, OPD_EATTR, "dims[%d]=%lld names a dim given twice",
                     bad, (long long)dims->ints[bad]);
  out[0].rank = 0;
  for (int d = 0; d < x->rank; d++) {
    if ((mask >> d) & 1) {
      if (x->shape[d] == 0 && no_empty)
        return opd__kerr(call, OPD_ESHAPE,
                         "dim %d of x has extent 0: the maximum of nothing "
                         "is undefined (as torch.amax)", d);
      if (!keep) continue;
      out[0].shape[out[0].rank++] = 1;
    } else {
      out[0].shape[out[0].rank++] = x->shape[d];
    }
  }
  out[0].dtype = OPD_DT_FLOATS64 & (1u << x->dtype) ? x->dtype : OPD_DTYPE_INT64;
  return 0;
}

static int sum_shape(opd_kcall_t *call, opd_tshape_t *out) {
  return reduce_shape(call, out, 0);
}
static int mean_shape(opd_kcall_t *call, opd_tshape_t *out) {
  return reduce_shape(call, out, 0);
}
static int amax_shape(opd_kcall_t *call, opd_tshape_t *out) {
  return reduce_shape(call, out, 1);
}

/* The row of reduce op `op`; the remaining arguments are the row's own
 * fields (summary, in, out, cpu_dtypes). */
#define REDUCE_ROW(op, ...)                                                 \
  {                                                                         \
    .name = #op,                                                            \
    .n_in_min = 1,                                                          \
    .n_in_max = 1,                                                          \
    .n_out = 1,                                                             \
    .n_attrs = 2,                                                           \
    .attrs = {{.name = "dims",                                              \
               .type = OPD_ATTR_INTS,                                       \
               .def = {.type = OPD_ATTR_INTS, .n = 1, .ints = {INT64_MIN}}, \
               .doc = "dims to reduce, negative from the end (default "     \
                      "INT64_MIN: all dims)"},                              \
              {.name = "keepdim",                                           \
               .type = OPD_ATTR_BOOL,                                       \
               .def = {.type = OPD_ATTR_BOOL, .i = 0},                      \
               .doc = "keep reduced dims with extent 1"}},                  \
    .shape_doc = "x (...) -> out (x's shape without dims, or 1 there with " \
                 "keepdim)",                                                \
    .shape = op##_shape,                                                    \
    .flags = OPD_OPF_STEADY_COST,                                           \
    OPD_ROW_KERNELS(op),                                                    \
    .cuda_workspace = opd__##op##_cuda_workspace,                           \
    __VA_ARGS__                                                             \
  }

const opd_op_def_t opd__op_sum = REDUCE_ROW(
    sum, .summary = "sum over dims (torch.sum(x, dims, keepdim))",
    .in = {{"x", OPD_DT_FLOATS64 | INTS_DT, "(...)"}},
    .out = {{"out", OPD_DT_FLOATS64 | OPD_DT(INT64),
             "x's dtype; int64 for integer or bool x"}},
    .cpu_dtypes = OPD_DT_FLOATS64 | INTS_DT, .cuda_dtypes = OPD_DT_FLOATS64 | INTS_DT);

const opd_op_def_t opd__op_mean = REDUCE_ROW(
    mean, .summary = "mean over dims (torch.mean(x, dims, keepdim))",
    .in = {{"x", OPD_DT_FLOATS64, "(...)"}},
    .out = {{"out", OPD_DT_FLOATS64, "x's dtype"}},
    .cpu_dtypes = OPD_DT_FLOATS64, .cuda_dtypes = OPD_DT_FLOATS64);

const opd_op_def_t opd__op_amax = REDUCE_ROW(
    amax, .summary = "maximum over dims, NaN if any (torch.amax(x, dims, "
                     "keepdim))",
    .in = {{"x", OPD_DT_FLOATS64, "(...)"}},
    .out = {{"out", OPD_DT_FLOATS64, "x's dtype"}},
    .cpu_dtypes = OPD_DT_FLOATS64, .cuda_dtypes = OPD_DT_FLOATS64);
