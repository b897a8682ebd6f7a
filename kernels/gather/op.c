/* gather: x (...), index (...) int64 -> out (index's shape), along one dim
 * (torch.gather(x, dim, index)):
 *   out[i0, .., id, .., in] = x[i0, .., index[i0, .., id, .., in], .., in].
 *
 * DESIGN
 * A data movement op: any dtype of x (only its element size matters),
 * index int64 as torch requires, of x's rank, each extent but dim's at
 * most x's (torch's rule: index may cover less of x than x has, and its
 * dim extent is free). out has index's shape and x's dtype. The kernels
 * (kernels/gather/gather.h) walk out flat and address x through its
 * contiguous strides with the dim's coordinate replaced by the index. An
 * index outside [0, x.size(dim)) is an error on the CPU (OPD_EINVAL naming
 * it, its flat position and the extent; checked before anything is
 * written); on CUDA, where a captured run cannot report back, such an
 * element is written as zeros (as embedding does: kernels/embedding/op.c).
 * A 0-d x and index are taken as one element (dim 0 or -1), as torch does.
 */
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"

OPD_OP_DECLARE(gather);

static int gather_shape(opd_kcall_t *call, opd_tshape_t *out) {
  const opd_tview_t *x = &call->in[0], *idx = &call->in[1];
  char a[160], b[160];
  int r = x->rank ? x->rank : 1;
  int64_t dim = call->attr[0].i;
  if (idx->rank != x->rank)
    return opd__kerr(call, OPD_ESHAPE, "index has rank %d but x has rank %d; expected equal "
                     "ranks", idx->rank, x->rank);
  if (dim < -r || dim >= r)
    return opd__kerr(call, OPD_EATTR, "dim = %lld is out of range for x's rank %d",
                     (long long)dim, x->rank);
  if (dim < 0) dim += r;
  for (int d = 0; d < x->rank; d++)
    if (d != dim && idx->shape[d] > x->shape[d])
      return opd__kerr(call, OPD_ESHAPE, "index %s is larger than x %s on dim %d (only dim "
                       "%lld may be)", opd__shape_str(a, sizeof a, idx->shape, idx->rank),
                       opd__shape_str(b, sizeof b, x->shape, x->rank), d, (long long)dim);
  out[0].dtype = x->dtype;
  out[0].rank = idx->rank;
  for (int d = 0; d < idx->rank; d++) out[0].shape[d] = idx->shape[d];
  return 0;
}

const opd_op_def_t opd__op_gather = {
    .name = "gather",
    .summary = "values along a dim by index: torch.gather(x, dim, index)",
    .n_in_min = 2,
    .n_in_max = 2,
    .n_out = 1,
    .in = {{"x", OPD_DT_ANY, "(...) any dtype"},
           {"index", OPD_DT(INT64), "(...) int64, x's rank, each in [0, x.size(dim)); its "
                                     "extents at most x's except on dim"}},
    .out = {{"out", OPD_DT_ANY, "(index's shape) dtype of x"}},
    .n_attrs = 1,
    .attrs = {{.name = "dim",
               .type = OPD_ATTR_INT,
               .required = 1,
               .doc = "the dim indexed (negative counts from the end)"}},
    .shape_doc = "x (...), index (...) of x's rank -> out (index's shape)",
    .shape = gather_shape,
    .flags = OPD_OPF_STEADY_COST,
    OPD_ROW_KERNELS(gather),
    .cuda_dtypes = OPD_DT_ANY,
};
