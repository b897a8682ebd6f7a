/* gru_cell: one step of torch.nn.GRUCell, x (B, I), h (B, H), w_ih
 * (3H, I), w_hh (3H, H), b_ih (3H)?, b_hh (3H)? -> h_new (B, H), float32
 * (float16 and bfloat16 on the CUDA backend: cpu_dtypes).
 *
 * DESIGN
 *   r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)
 *   z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
 *   n = tanh(W_in x + b_in + r * (W_hn h + b_hn))
 *   h' = (1 - z) * n + z * h
 * with the gates' rows in torch's order (r, z, n), so a GRUCell's
 * weight_ih, weight_hh, bias_ih, bias_hh are the inputs as they are. The
 * kernels do two GEMMs (x @ w_ih^T, h @ w_hh^T) into scratch and one gate
 * pass. Unbatched x (I) with h (H) gives h_new (H), as torch. b_hh
 * without b_ih cannot be given (inputs are positional): pass zeros for
 * b_ih. No INPLACE: the output is not one pass over an input.
 */
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/gru_cell/gru.h"

OPD_OP_DECLARE(gru_cell);
OPD_OP_DECLARE_CUDA_WORKSPACE(gru_cell);

/* Checks that input i has shape [rows] (rank 1) or [rows, cols] (rank
 * 2); `what` names them ("3H, I"). OPD_ESHAPE naming i's, x's and h's
 * shapes and the one expected. */
static int check_w(opd_kcall_t *call, int i, int rank, int64_t rows,
                   int64_t cols, const char *what) {
  const opd_tview_t *t = &call->in[i];
  if (t->rank == rank && t->shape[0] == rows && (rank == 1 || t->shape[1] == cols))
    return 0;
  char sh[128], sx[128], sg[128], sw[128];
  const opd_tview_t *x = &call->in[0], *h = &call->in[1];
  const int64_t want[2] = {rows, cols};
  opd__shape_str(sh, sizeof sh, h->shape, h->rank);
  opd__shape_str(sx, sizeof sx, x->shape, x->rank);
  opd__shape_str(sg, sizeof sg, t->shape, t->rank);
  opd__shape_str(sw, sizeof sw, want, rank);
  return opd__kerr(call, OPD_ESHAPE,
                   "input %d (%s) has shape %s but input 0 (x) has shape %s "
                   "and input 1 (h) %s; %s must be (%s) = %s",
                   i, call->op->in[i].name, sg, sx, sh, call->op->in[i].name,
                   what, sw);
}

static int gru_shape(opd_kcall_t *call, opd_tshape_t *out) {
  const opd_tview_t *x = &call->in[0], *h = &call->in[1];
  char sx[128], sh[128];
  int rc = opd__same_dtype(call); /* every input of one dtype */
  if (rc) return rc;
  opd__shape_str(sx, sizeof sx, x->shape, x->rank);
  opd__shape_str(sh, sizeof sh, h->shape, h->rank);
  if (x->rank < 1 || x->rank > 2 || h->rank != x->rank)
    return opd__kerr(call, OPD_ESHAPE,
                     "input 0 (x) has shape %s and input 1 (h) has shape %s; "
                     "expected x (B, I) and h (B, H), or unbatched x (I) and "
                     "h (H)",
                     sx, sh);
  if (x->rank == 2 && x->shape[0] != h->shape[0])
    return opd__kerr(call, OPD_ESHAPE,
                     "input 0 (x) has shape %s and input 1 (h) has shape %s; "
                     "their batch dims differ (%lld vs %lld)",
                     sx, sh, (long long)x->shape[0], (long long)h->shape[0]);
  gru_dims_t d = opd__gru_dims(call);
  if ((rc = check_w(call, 2, 2, 3 * d.H, d.I, "3H, I"))) return rc;
  if ((rc = check_w(call, 3, 2, 3 * d.H, d.H, "3H, H"))) return rc;
  if (d.has_bih && (rc = check_w(call, 4, 1, 3 * d.H, 0, "3H"))) return rc;
  if (d.has_bhh && (rc = check_w(call, 5, 1, 3 * d.H, 0, "3H"))) return rc;
  out[0].dtype = h->dtype;
  out[0].rank = h->rank;
  for (int i = 0; i < h->rank; i++) out[0].shape[i] = h->shape[i];
  return 0;
}

const opd_op_def_t opd__op_gru_cell = {
    .name = "gru_cell",
    .summary = "one GRU step (torch.nn.GRUCell; gates r, z, n in torch's "
               "order)",
    .n_in_min = 4,
    .n_in_max = 6,
    .n_out = 1,
    .in = {{"x", OPD_DT_FLOATS, "(B, I) or (I)"},
           {"h", OPD_DT_FLOATS, "(B, H) or (H)"},
           {"w_ih", OPD_DT_FLOATS, "(3H, I): weight_ih, rows r, z, n"},
           {"w_hh", OPD_DT_FLOATS, "(3H, H): weight_hh, rows r, z, n"},
           {"b_ih", OPD_DT_FLOATS, "(3H), optional"},
           {"b_hh", OPD_DT_FLOATS, "(3H), optional (needs b_ih)"}},
    .out = {{"h_new", OPD_DT_FLOATS, "h's shape"}},
    .cpu_dtypes = OPD_DT_FLOAT,
    .shape_doc = "x (B, I), h (B, H), w_ih (3H, I), w_hh (3H, H), b_ih (3H)?, "
                 "b_hh (3H)? -> h_new (B, H)",
    .shape = gru_shape,
    .cpu_ref = opd__gru_cell_cpu_ref,
    .cpu_fast = opd__gru_cell_cpu_fast,
    .flags = OPD_OPF_CUDA_BLASLT | /* the CUDA kernel runs cuBLASLt */
             OPD_OPF_STEADY_COST,
    .cuda = opd__gru_cell_cuda,
    .cuda_dtypes = OPD_DT(FLOAT32) | OPD_DT(FLOAT16) | OPD_DT(BFLOAT16),
    .cuda_workspace = opd__gru_cell_cuda_workspace,
};
