/* The attention family's rows: sdpa (F.scaled_dot_product_attention),
 * rope (rotary position embedding, rotate_half form) and swiglu
 * (silu(a) * b of x's two halves), float32 on the CPU (float16 and
 * bfloat16 on the CUDA backend: cpu_dtypes).
 *
 * DESIGN
 * Each op is one row with its shape rule here; the kernels are in
 * cpu.c (sdpa), pointwise.c (rope, swiglu), cuda.cu and pointwise.cu;
 * their sizes come from attn.h. torch's semantics unless said:
 *   sdpa   q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv), or rank 3
 *          (N, T, D); out (B, H, Tq, Dv). Batch dims must be equal (no
 *          broadcasting between q, k and v). mask: bool (True = attend)
 *          or q's float dtype (added to the scores), any shape
 *          broadcastable to (B, H, Tq, Tk). causal: key j > query i is
 *          masked, aligned top-left for Tq != Tk like torch's is_causal;
 *          causal with a mask is refused, as torch does. scale 0 means
 *          1/sqrt(D). A query row whose keys are all masked (or Tk = 0)
 *          gives zeros, as torch >= 2.5 does.
 *   rope   out = x * cos + rotate_half(x) * sin, rotate_half(x) =
 *          cat(-x[..., D/2:], x[..., :D/2]); cos and sin of one shape,
 *          broadcastable to x's (T, D) or (B, 1, T, D); D even.
 *   swiglu out = silu(x[..., :d]) * x[..., d:], d = x.shape[-1] / 2.
 * No op runs in place: an output element depends on several inputs.
 */
#include "kernels/attn/attn.h"
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"

OPD_OP_DECLARE(sdpa);
OPD_OP_DECLARE(rope);
OPD_OP_DECLARE(swiglu);

/* Checks that q, k and v (inputs 0..2) share one dtype. */
static int qkv_dtype(opd_kcall_t *call) {
  for (int i = 1; i < 3; i++)
    if (call->in[i].dtype != call->in[0].dtype)
      return opd__kerr(call, OPD_EDTYPE, "%s is %s but q is %s",
                       call->op->in[i].name, opd__kdtype_name(call->in[i].dtype),
                       opd__kdtype_name(call->in[0].dtype));
  return 0;
}

/* Checks the mask (input 3) against the scores' shape `want` (rank r). */
static int mask_check(opd_kcall_t *call, const int64_t *want, int r) {
  const opd_tview_t *m = &call->in[3];
  char sm[128], sw[128];
  if (m->dtype != OPD_DTYPE_BOOL && m->dtype != call->in[0].dtype)
    return opd__kerr(call, OPD_EDTYPE,
                     "mask is %s; expected bool (True = attend) or q's dtype "
                     "%s (added to the scores)",
                     opd__kdtype_name(m->dtype), opd__kdtype_name(call->in[0].dtype));
  if (call->attr[0].i)
    return opd__kerr(call, OPD_EATTR,
                     "causal=true with a mask: give one or the other (as "
                     "torch's is_causal with attn_mask)");
  int ok = m->rank <= r;
  for (int i = 0; ok && i < m->rank; i++) {
    int64_t e = m->shape[m->rank - 1 - i], w = want[r - 1 - i];
    ok = e == w || e == 1;
  }
  if (ok) return 0;
  opd__shape_str(sm, sizeof sm, m->shape, m->rank);
  opd__shape_str(sw, sizeof sw, want, r);
  return opd__kerr(call, OPD_ESHAPE,
                   "mask has shape %s, which does not broadcast to the scores' "
                   "shape %s",
                   sm, sw);
}

static int sdpa_shape(opd_kcall_t *call, opd_tshape_t *out) {
  const opd_tview_t *q = &call->in[0], *k = &call->in[1], *v = &call->in[2];
  char sq[128], sk[128], sv[128];
  int rc = qkv_dtype(call), r = q->rank;
  if (rc) return rc;
  opd__shape_str(sq, sizeof sq, q->shape, q->rank);
  opd__shape_str(sk, sizeof sk, k->shape, k->rank);
  opd__shape_str(sv, sizeof sv, v->shape, v->rank);
  if ((r != 3 && r != 4) || k->rank != r || v->rank != r)
    return opd__kerr(call, OPD_ESHAPE,
                     "q %s, k %s, v %s: expected rank 4 (B, H, T, D) or rank 3 "
                     "(N, T, D), all of one rank",
                     sq, sk, sv);
  for (int i = 0; i < r - 2; i++)
    if (k->shape[i] != q->shape[i] || v->shape[i] != q->shape[i])
      return opd__kerr(call, OPD_ESHAPE,
                       "q %s, k %s, v %s: batch dims differ (dim %d)", sq, sk,
                       sv, i);
  if (k->shape[r - 1] != q->shape[r - 1])
    return opd__kerr(call, OPD_ESHAPE,
                     "q %s and k %s: head dims differ (%lld vs %lld)", sq, sk,
                     (long long)q->shape[r - 1], (long long)k->shape[r - 1]);
  if (v->shape[r - 2] != k->shape[r - 2])
    return opd__kerr(call, OPD_ESHAPE,
                     "k %s and v %s: key lengths differ (%lld vs %lld)", sk, sv,
                     (long long)k->shape[r - 2], (long long)v->shape[r - 2]);
  if (call->n_in > 3) {
    int64_t want[4];
    for (int i = 0; i < r - 1; i++) want[i] = q->shape[i];
    want[r - 1] = k->shape[r - 2];
    if ((rc = mask_check(call, want, r))) return rc;
  }
  out[0].dtype = q->dtype;
  out[0].rank = r;
  for (int i = 0; i < r - 1; i++) out[0].shape[i] = q->shape[i];
  out[0].shape[r - 1] = v->shape[r - 1];
  return 0;
}

const opd_op_def_t opd__op_sdpa = {
    .name = "sdpa",
    .summary = "scaled dot-product attention (F.scaled_dot_product_attention): "
               "softmax(q k^T * scale + mask) v",
    .n_in_min = 3,
    .n_in_max = 4,
    .n_out = 1,
    .in = {{"q", OPD_DT_FLOATS, "(B, H, Tq, D) or (N, Tq, D)"},
           {"k", OPD_DT_FLOATS, "(B, H, Tk, D) or (N, Tk, D)"},
           {"v", OPD_DT_FLOATS, "(B, H, Tk, Dv) or (N, Tk, Dv)"},
           {"mask", OPD_DT_FLOATS | OPD_DT(BOOL),
            "optional, broadcastable to (B, H, Tq, Tk): bool (True = attend) "
            "or q's dtype (added)"}},
    .out = {{"out", OPD_DT_FLOATS, "(B, H, Tq, Dv) or (N, Tq, Dv)"}},
    .n_attrs = 2,
    .attrs = {{.name = "causal",
               .type = OPD_ATTR_BOOL,
               .def = {.type = OPD_ATTR_BOOL, .i = 0},
               .doc = "mask key j > query i (top-left aligned when Tq != Tk, "
                      "as torch's is_causal); not with a mask"},
              {.name = "scale",
               .type = OPD_ATTR_FLOAT,
               .def = {.type = OPD_ATTR_FLOAT, .f = 0.0},
               .doc = "factor on q k^T; 0 means 1/sqrt(D)"}},
    .cpu_dtypes = OPD_DT_FLOAT | OPD_DT(BOOL),
    .shape_doc = "q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv), mask? -> "
                 "out (B, H, Tq, Dv)",
    .shape = sdpa_shape,
    .flags = OPD_OPF_STEADY_COST,
    OPD_ROW_KERNELS(sdpa),
    .cuda_dtypes = OPD_DT_FLOATS,
};

static int rope_shape(opd_kcall_t *call, opd_tshape_t *out) {
  const opd_tview_t *x = &call->in[0], *c = &call->in[1], *s = &call->in[2];
  char sx[128], sc[128], ss[128];
  int64_t b[OPD_MAX_RANK];
  int rb, rc = opd__same_dtype(call);
  if (rc) return rc;
  opd__shape_str(sx, sizeof sx, x->shape, x->rank);
  opd__shape_str(sc, sizeof sc, c->shape, c->rank);
  opd__shape_str(ss, sizeof ss, s->shape, s->rank);
  if (x->rank < 2 || x->shape[x->rank - 1] % 2 != 0)
    return opd__kerr(call, OPD_ESHAPE,
                     "x has shape %s; expected (..., T, D) with D even", sx);
  int same = c->rank == s->rank;
  for (int i = 0; same && i < c->rank; i++) same = c->shape[i] == s->shape[i];
  if (!same)
    return opd__kerr(call, OPD_ESHAPE, "cos %s and sin %s: shapes differ", sc, ss);
  int ok = opd__bcast_shape(x->shape, x->rank, c->shape, c->rank, b, &rb) == 0 &&
           rb == x->rank;
  for (int i = 0; ok && i < rb; i++) ok = b[i] == x->shape[i];
  if (!ok)
    return opd__kerr(call, OPD_ESHAPE,
                     "cos / sin %s do not broadcast to x's shape %s (expected "
                     "(T, D) or (B, 1, T, D))",
                     sc, sx);
  return opd__same_shape(call, out);
}

const opd_op_def_t opd__op_rope = {
    .name = "rope",
    .summary = "rotary position embedding: x * cos + rotate_half(x) * sin "
               "(LLaMA / transformers' apply_rotary_pos_emb)",
    .n_in_min = 3,
    .n_in_max = 3,
    .n_out = 1,
    .in = {{"x", OPD_DT_FLOATS, "(..., T, D), D even"},
           {"cos", OPD_DT_FLOATS, "broadcastable to x: (T, D) or (B, 1, T, D)"},
           {"sin", OPD_DT_FLOATS, "cos's shape"}},
    .out = {{"out", OPD_DT_FLOATS, "x's shape"}},
    .cpu_dtypes = OPD_DT_FLOAT,
    .shape_doc = "x (..., T, D), cos (T, D), sin (T, D) -> out (..., T, D)",
    .shape = rope_shape,
    .flags = OPD_OPF_STEADY_COST,
    OPD_ROW_KERNELS(rope),
    .cuda_dtypes = OPD_DT_FLOATS,
};

static int swiglu_shape(opd_kcall_t *call, opd_tshape_t *out) {
  const opd_tview_t *x = &call->in[0];
  char sx[128];
  opd__shape_str(sx, sizeof sx, x->shape, x->rank);
  if (x->rank < 1 || x->shape[x->rank - 1] % 2 != 0)
    return opd__kerr(call, OPD_ESHAPE,
                     "x has shape %s; expected (..., 2d): a last dim that is "
                     "even",
                     sx);
  opd__same_shape(call, out);
  out[0].shape[x->rank - 1] /= 2;
  return 0;
}

const opd_op_def_t opd__op_swiglu = {
    .name = "swiglu",
    .summary = "silu(x[..., :d]) * x[..., d:], d = x.shape[-1] / 2 (the "
               "SwiGLU gate of a fused up projection)",
    .n_in_min = 1,
    .n_in_max = 1,
    .n_out = 1,
    .in = {{"x", OPD_DT_FLOATS, "(..., 2d)"}},
    .out = {{"out", OPD_DT_FLOATS, "(..., d)"}},
    .cpu_dtypes = OPD_DT_FLOAT,
    .shape_doc = "x (..., 2d) -> out (..., d)",
    .shape = swiglu_shape,
    .flags = OPD_OPF_STEADY_COST,
    OPD_ROW_KERNELS(swiglu),
    .cuda_dtypes = OPD_DT_FLOATS,
};
