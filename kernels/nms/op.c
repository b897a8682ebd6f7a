/* nms: boxes (N, 4), scores (N) -> keep (N) int64, count (1) int64,
 * torchvision.ops.nms.
 *
 * DESIGN
 * torchvision returns a tensor of data-dependent length; opd outputs have
 * shapes fixed before the run, so keep has room for all N indices: the
 * kept ones come first, in descending score order, the rest are -1, and
 * count[0] says how many were kept.
 */
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"

OPD_OP_DECLARE(nms);
OPD_OP_DECLARE_CUDA_WORKSPACE(nms);

static int nms_shape(opd_kcall_t *call, opd_tshape_t *out) {
  const opd_tview_t *bx = &call->in[0], *sc = &call->in[1];
  char sb[128], ss[128];
  opd__shape_str(sb, sizeof sb, bx->shape, bx->rank);
  opd__shape_str(ss, sizeof ss, sc->shape, sc->rank);
  if (bx->rank != 2 || bx->shape[1] != 4)
    return opd__kerr(call, OPD_ESHAPE,
                     "input 0 (boxes) has shape %s; expected (N, 4) as "
                     "(x1, y1, x2, y2)",
                     sb);
  if (sc->rank != 1 || sc->shape[0] != bx->shape[0])
    return opd__kerr(call, OPD_ESHAPE,
                     "input 0 (boxes) has shape %s but scores has shape %s; "
                     "expected scores of shape [%lld] (one per box)",
                     sb, ss, (long long)bx->shape[0]);
  out[0].dtype = OPD_DTYPE_INT64;
  out[0].rank = 1;
  out[0].shape[0] = bx->shape[0];
  out[1].dtype = OPD_DTYPE_INT64;
  out[1].rank = 1;
  out[1].shape[0] = 1;
  return 0;
}

const opd_op_def_t opd__op_nms = {
    .name = "nms",
    .summary = "non-maximum suppression (torchvision.ops.nms); keep padded "
               "with -1, count = number kept",
    .n_in_min = 2,
    .n_in_max = 2,
    .n_out = 2,
    .in = {{"boxes", OPD_DT_FLOAT, "(N, 4) as (x1, y1, x2, y2)"},
           {"scores", OPD_DT_FLOAT, "(N)"}},
    .out = {{"keep", OPD_DT(INT64),
             "(N) kept indices by descending score, then -1"},
            {"count", OPD_DT(INT64), "(1) number of kept indices"}},
    .n_attrs = 1,
    .attrs = {{.name = "iou_threshold",
               .type = OPD_ATTR_FLOAT,
               .required = 1,
               .doc = "discard boxes with IoU > this against a kept box"}},
    .shape_doc = "boxes (N, 4), scores (N) -> keep (N), count (1)",
    .shape = nms_shape,
    .cpu_ref = opd__nms_cpu_ref,
    .cpu_fast = opd__nms_cpu_fast,
    .cuda = opd__nms_cuda,
    .cuda_dtypes = OPD_DT(FLOAT32),
    .cuda_workspace = opd__nms_cuda_workspace,
};
