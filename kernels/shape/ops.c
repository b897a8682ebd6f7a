/* The shape family's table: data movement ops that rearrange elements
 * without computing on them (permute, reshape, slice, cat, expand), any
 * dtype on both backends, outputs C-contiguous.
 *
 * DESIGN
 * permute, slice and expand are views of x (kernels/shape/view.c) gathered
 * by the copy op's kernels: their rules state the view's shape, their
 * kernels gather it, and they take a strided x (OPD_OPF_STRIDED), whose
 * strides the view composes with. reshape is a copy of contiguous bytes,
 * and nothing at all when y is x's memory: OPD_OPF_INPLACE lets a run's y
 * be exactly x (the same shape), OPD_OPF_VIEW lets a graph give a reshape
 * of an intermediate that intermediate's memory (docs/graphs.md). cat copies each input's rows into
 * its span of every output row. A dtype is only its element size here, so
 * every dtype of the protocol is taken (cpu_dtypes 0: all of them).
 *
 * permute(x) dims: x.permute(dims).contiguous(); negative dims count from
 *   the end.
 * reshape(x) shape: x.reshape(shape); one -1 is inferred; the element
 *   counts must match.
 * slice(x) dim start end step: x[..., start:end:step, ...] on dim with
 *   Python's clamping (negative bounds count from the end; out of range is
 *   clamped, an empty range gives extent 0); step >= 1; end defaults to
 *   INT64_MAX (to the end), as aten.slice.Tensor's None.
 * cat(x, ...) dim: torch.cat of 1 to 15 inputs (all named x, a list for
 *   torch.ops.opd.cat); one dtype, one rank >= 1, extents
 *   equal except on dim (torch's legacy skip of 1-d empty inputs is not
 *   done: a (0,) input among 2-d ones is refused).
 * expand(x) shape: x.expand(shape).contiguous(); -1 keeps an extent.
 * An empty INTS cannot travel (attributes hold 1..8 ints): a 0-d x cannot
 * be permuted or expanded to 0-d, nor anything reshaped to 0-d; reshape
 * to [1] and index, or keep the tensor as it is.
 */
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/shape/view.h"

OPD_OP_DECLARE(permute);
OPD_OP_DECLARE(reshape);
OPD_OP_DECLARE(slice);
OPD_OP_DECLARE(cat);
OPD_OP_DECLARE(expand);

/* The output of a view op: the view's extents, x's dtype. */
static int view_out(opd_kcall_t *call, opd_tshape_t *out,
                    int (*view)(opd_kcall_t *, opd_tview_t *)) {
  opd_tview_t v;
  int rc = view(call, &v);
  if (rc != 0) return rc;
  out[0].dtype = v.dtype;
  out[0].rank = v.rank;
  for (int i = 0; i < v.rank; i++) out[0].shape[i] = v.shape[i];
  return 0;
}

static int permute_shape(opd_kcall_t *call, opd_tshape_t *out) {
  return view_out(call, out, opd__permute_view);
}
static int slice_shape(opd_kcall_t *call, opd_tshape_t *out) {
  return view_out(call, out, opd__slice_view);
}
static int expand_shape(opd_kcall_t *call, opd_tshape_t *out) {
  return view_out(call, out, opd__expand_view);
}

static int reshape_shape(opd_kcall_t *call, opd_tshape_t *out) {
  const opd_tview_t *x = &call->in[0];
  const opd_attr_val_t *sh = &call->attr[0];
  char xs[160], ss[160];
  opd__shape_str(xs, sizeof xs, x->shape, x->rank);
  opd__shape_str(ss, sizeof ss, sh->ints, sh->n);
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < sh->n; i++) {
    int64_t s = sh->ints[i];
    if (s == -1) {
      if (infer >= 0)
        return opd__kerr(call, OPD_EATTR, "shape %s has more than one -1", ss);
      infer = i;
    } else if (s < 0) {
      return opd__kerr(call, OPD_EATTR, "shape[%d] = %lld is negative (only one -1, "
                       "inferred, is allowed)", i, (long long)s);
    } else if (__builtin_mul_overflow(known, s, &known)) {
      return opd__kerr(call, OPD_ESHAPE, "shape %s has more elements than int64 holds", ss);
    }
  }
  out[0].dtype = x->dtype;
  out[0].rank = sh->n;
  for (int i = 0; i < sh->n; i++) out[0].shape[i] = sh->ints[i];
  if (infer >= 0) {
    if (known == 0)
      return opd__kerr(call, OPD_ESHAPE, "cannot reshape x %s (%lld elements) into %s: "
                       "the -1 could be any extent", xs, (long long)x->numel, ss);
    if (x->numel % known != 0)
      return opd__kerr(call, OPD_ESHAPE, "cannot reshape x %s (%lld elements) into %s",
                       xs, (long long)x->numel, ss);
    out[0].shape[infer] = x->numel / known;
  } else if (known != x->numel) {
    return opd__kerr(call, OPD_ESHAPE, "cannot reshape x %s (%lld elements) into %s "
                     "(%lld elements)", xs, (long long)x->numel, ss, (long long)known);
  }
  return 0;
}

static int cat_shape(opd_kcall_t *call, opd_tshape_t *out) {
  const opd_tview_t *x0 = &call->in[0];
  int64_t dim = call->attr[0].i;
  char a[160], b[160];
  if (x0->rank == 0)
    return opd__kerr(call, OPD_ESHAPE, "input 0 is 0-d; cat needs tensors of rank >= 1");
  if (dim < -x0->rank || dim >= x0->rank)
    return opd__kerr(call, OPD_EATTR, "dim %lld is out of range for inputs of rank %d "
                     "(expected %d..%d)", (long long)dim, x0->rank, -x0->rank, x0->rank - 1);
  if (dim < 0) dim += x0->rank;
  out[0].dtype = x0->dtype;
  out[0].rank = x0->rank;
  for (int d = 0; d < x0->rank; d++) out[0].shape[d] = x0->shape[d];
  for (int i = 1; i < call->n_in; i++) {
    const opd_tview_t *x = &call->in[i];
    if (x->dtype != x0->dtype)
      return opd__kerr(call, OPD_EDTYPE, "input %d is %s but input 0 is %s; cat takes one "
                       "dtype", i, opd__kdtype_name(x->dtype), opd__kdtype_name(x0->dtype));
    int same = x->rank == x0->rank;
    for (int d = 0; same && d < x->rank; d++)
      same = d == dim || x->shape[d] == x0->shape[d];
    if (!same)
      return opd__kerr(call, OPD_ESHAPE, "input %d has shape %s but input 0 has %s; they "
                       "must match except on dim %lld", i,
                       opd__shape_str(a, sizeof a, x->shape, x->rank),
                       opd__shape_str(b, sizeof b, x0->shape, x0->rank), (long long)dim);
    out[0].shape[dim] += x->shape[dim];
  }
  return 0;
}

#define ANY_X {"x", OPD_DT_ANY, "(...) any dtype"}
#define CAT_X {"x", OPD_DT_ANY, "(...) 1 to 15 tensors of one dtype"}

const opd_op_def_t opd__op_permute = {
    .name = "permute",
    .summary = "reorders dims: x.permute(dims).contiguous()",
    .n_in_min = 1,
    .n_in_max = 1,
    .n_out = 1,
    .in = {{"x", OPD_DT_ANY, "(...) any dtype, any strides"}},
    .out = {{"y", OPD_DT_ANY, "(x.shape[dims[0]], ...) contiguous, dtype of x"}},
    .n_attrs = 1,
    .attrs = {{.name = "dims",
               .type = OPD_ATTR_INTS,
               .required = 1,
               .doc = "a permutation of x's dims (negative count from the end)"}},
    .flags = OPD_OPF_STRIDED | OPD_OPF_STEADY_COST,
    .shape_doc = "x (d0, ..., dn) -> y (d[dims[0]], ..., d[dims[n]])",
    .shape = permute_shape,
    OPD_ROW_KERNELS(permute),
    .cuda_dtypes = OPD_DT_ANY,
};

const opd_op_def_t opd__op_reshape = {
    .name = "reshape",
    .summary = "same elements, other extents: x.reshape(shape) (a copy)",
    .n_in_min = 1,
    .n_in_max = 1,
    .n_out = 1,
    .in = {ANY_X},
    .out = {{"y", OPD_DT_ANY, "(shape) dtype of x"}},
    .n_attrs = 1,
    .attrs = {{.name = "shape",
               .type = OPD_ATTR_INTS,
               .required = 1,
               .doc = "the new extents, one of them may be -1 (inferred); the element "
                      "count must stay x's"}},
    .flags = OPD_OPF_INPLACE | OPD_OPF_VIEW,
    .shape_doc = "x (...) -> y (shape), numel(y) == numel(x)",
    .shape = reshape_shape,
    OPD_ROW_KERNELS(reshape),
    .cuda_dtypes = OPD_DT_ANY,
};

const opd_op_def_t opd__op_slice = {
    .name = "slice",
    .summary = "a range of one dim: x[..., start:end:step, ...] (Python's clamping)",
    .n_in_min = 1,
    .n_in_max = 1,
    .n_out = 1,
    .in = {{"x", OPD_DT_ANY, "(...) any dtype, any strides, rank >= 1"}},
    .out = {{"y", OPD_DT_ANY, "(...) x's shape but on dim, contiguous"}},
    .n_attrs = 4,
    .attrs = {{.name = "dim",
               .type = OPD_ATTR_INT,
               .def = {.type = OPD_ATTR_INT, .i = 0},
               .doc = "the dim sliced (negative counts from the end)"},
              {.name = "start",
               .type = OPD_ATTR_INT,
               .def = {.type = OPD_ATTR_INT, .i = 0},
               .doc = "first index (negative counts from the end; clamped)"},
              {.name = "end",
               .type = OPD_ATTR_INT,
               .def = {.type = OPD_ATTR_INT, .i = INT64_MAX},
               .doc = "one past the last index (negative counts from the end; clamped; "
                      "default: the end)"},
              {.name = "step",
               .type = OPD_ATTR_INT,
               .def = {.type = OPD_ATTR_INT, .i = 1},
               .doc = "stride between taken indices, >= 1"}},
    .flags = OPD_OPF_STRIDED | OPD_OPF_STEADY_COST,
    .shape_doc = "x (..., n, ...) -> y (..., len(range(start, end, step)), ...)",
    .shape = slice_shape,
    OPD_ROW_KERNELS(slice),
    .cuda_dtypes = OPD_DT_ANY,
};

const opd_op_def_t opd__op_cat = {
    .name = "cat",
    .summary = "joins tensors along a dim (torch.cat)",
    .n_in_min = 1,
    .n_in_max = OPD_MAX_TENSORS - 1,
    .n_out = 1,
    .in = {CAT_X, CAT_X, CAT_X, CAT_X, CAT_X, CAT_X, CAT_X, CAT_X, CAT_X, CAT_X, CAT_X,
           CAT_X, CAT_X, CAT_X, CAT_X},
    .out = {{"y", OPD_DT_ANY, "(...) the inputs' shape, their extents on dim summed"}},
    .n_attrs = 1,
    .attrs = {{.name = "dim",
               .type = OPD_ATTR_INT,
               .def = {.type = OPD_ATTR_INT, .i = 0},
               .doc = "the dim joined along (negative counts from the end)"}},
    .shape_doc = "x (1 to 15 tensors: (..., n0, ...), (..., n1, ...), ...) -> "
                 "y (..., n0+n1+..., ...)",
    .shape = cat_shape,
    .flags = OPD_OPF_STEADY_COST,
    OPD_ROW_KERNELS(cat),
    .cuda_dtypes = OPD_DT_ANY,
};

const opd_op_def_t opd__op_expand = {
    .name = "expand",
    .summary = "repeats dims of extent 1: x.expand(shape).contiguous()",
    .n_in_min = 1,
    .n_in_max = 1,
    .n_out = 1,
    .in = {{"x", OPD_DT_ANY, "(...) any dtype, any strides"}},
    .out = {{"y", OPD_DT_ANY, "(shape) contiguous, dtype of x"}},
    .n_attrs = 1,
    .attrs = {{.name = "shape",
               .type = OPD_ATTR_INTS,
               .required = 1,
               .doc = "the extents, right aligned with x's; -1 keeps x's; x's dims of "
                      "extent 1 and new leading dims take any"}},
    .flags = OPD_OPF_STRIDED | OPD_OPF_STEADY_COST,
    .shape_doc = "x (...) -> y (shape)",
    .shape = expand_shape,
    OPD_ROW_KERNELS(expand),
    .cuda_dtypes = OPD_DT_ANY,
};
