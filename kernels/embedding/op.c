/* embedding: weight (V, D), indices (...) int32/int64 -> y (..., D),
 * y[i] = weight[indices[i]] (F.embedding without padding_idx / max_norm:
 * they change only the gradient or the weight).
 *
 * DESIGN
 * A gather of whole rows: any weight dtype (float32/16/bf16 for models,
 * but only the element size matters), indices int32 or int64 of any rank
 * up to 7 (y adds one dim). An index outside [0, V) is an error on the
 * CPU (OPD_EINVAL naming the index, its position and V; checked before
 * anything is written). On CUDA the indices live on the device and the
 * run may be captured into a graph, where nothing can be read back before
 * the reply: the kernel writes a row of zeros for such an index instead
 * (documented in docs/operators.md), as the CPU would have refused it.
 */
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"

OPD_OP_DECLARE(embedding);

static int embedding_shape(opd_kcall_t *call, opd_tshape_t *out) {
  const opd_tview_t *w = &call->in[0], *idx = &call->in[1];
  char s[160];
  if (w->rank != 2)
    return opd__kerr(call, OPD_ESHAPE, "weight has shape %s; expected (V, D)",
                     opd__shape_str(s, sizeof s, w->shape, w->rank));
  if (idx->rank >= OPD_MAX_RANK)
    return opd__kerr(call, OPD_ESHAPE, "indices has rank %d; at most %d (y adds a dim)",
                     idx->rank, OPD_MAX_RANK - 1);
  out[0].dtype = w->dtype;
  out[0].rank = idx->rank + 1;
  for (int d = 0; d < idx->rank; d++) out[0].shape[d] = idx->shape[d];
  out[0].shape[idx->rank] = w->shape[1];
  return 0;
}

const opd_op_def_t opd__op_embedding = {
    .name = "embedding",
    .summary = "rows of a table by index: weight[indices] (F.embedding)",
    .n_in_min = 2,
    .n_in_max = 2,
    .n_out = 1,
    .in = {{"weight", OPD_DT_ANY, "(V, D) any dtype"},
           {"indices", OPD_DT(INT32) | OPD_DT(INT64), "(...) int32 or int64, each in [0, V)"}},
    .out = {{"y", OPD_DT_ANY, "(..., D) dtype of weight"}},
    .shape_doc = "weight (V, D), indices (...) -> y (..., D)",
    .shape = embedding_shape,
    .flags = OPD_OPF_STEADY_COST,
    OPD_ROW_KERNELS(embedding),
    .cuda_dtypes = OPD_DT_ANY,
};
