/* conv2d: x (N,C,H,W) or (C,H,W), weight (K,C/groups,R,S), bias (K)? ->
 * y (N,K,P,Q) or (K,P,Q): F.conv2d, float32 (float16 and bfloat16 on the
 * CUDA backend: cpu_dtypes).
 *
 * DESIGN
 * stride and dilation each take one int (both dims) or [h, w], as torch;
 * padding one int, [h, w] or [top, bottom, left, right]. torch's string
 * paddings reach the daemon as the str attr padding_mode ("same" |
 * "valid"; "explicit", the default, reads padding), so that the daemon
 * resolves them for every client and in graphs, and refuses "same" with
 * a stride as torch does; the Python client turns padding="same" into
 * padding_mode="same". groups splits C and K into groups (depthwise:
 * groups == C). The output size is P = (H + top + bottom - dh (R - 1) -
 * 1) / sh + 1, and likewise Q; it must be positive. Every product is
 * checked for overflow, since attrs come from the client (the geometry:
 * plan.c, shared with the kernels).
 */
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/conv2d/plan.h"

OPD_OP_DECLARE(conv2d);
OPD_OP_DECLARE_CUDA_WORKSPACE(conv2d);

static int conv2d_shape(opd_kcall_t *call, opd_tshape_t *out) {
  conv_plan_t p;
  int rc = opd__same_dtype(call); /* x, weight, bias of one dtype */
  if (rc) return rc;
  rc = opd__conv2d_plan(call, &p);
  if (rc) return rc;
  out[0].dtype = call->in[0].dtype;
  int o = p.batched ? 1 : 0; /* unbatched: (K, P, Q) */
  out[0].rank = 3 + o;
  if (p.batched) out[0].shape[0] = p.N;
  out[0].shape[o] = p.K;
  out[0].shape[o + 1] = p.P;
  out[0].shape[o + 2] = p.Q;
  return 0;
}

#define INTS1(v) {.type = OPD_ATTR_INTS, .n = 1, .ints = {v}}

const opd_op_def_t opd__op_conv2d = {
    .name = "conv2d",
    .summary = "2-D convolution (F.conv2d: groups, depthwise, unbatched "
               "input; padding='same'|'valid' as padding_mode)",
    .n_in_min = 2,
    .n_in_max = 3,
    .n_out = 1,
    .in = {{"x", OPD_DT_FLOATS, "(N, C, H, W) or (C, H, W)"},
           {"weight", OPD_DT_FLOATS, "(K, C/groups, R, S)"},
           {"bias", OPD_DT_FLOATS, "(K) optional"}},
    .out = {{"y", OPD_DT_FLOATS, "(N, K, P, Q) or (K, P, Q)"}},
    .n_attrs = 5,
    .attrs = {{.name = "stride",
               .type = OPD_ATTR_INTS,
               .def = INTS1(1),
               .doc = "step, one int or [h, w], > 0"},
              {.name = "padding",
               .type = OPD_ATTR_INTS,
               .def = INTS1(0),
               .doc = "zeros added: one int (every side), [h, w] or [top, "
                      "bottom, left, right], >= 0"},
              {.name = "dilation",
               .type = OPD_ATTR_INTS,
               .def = INTS1(1),
               .doc = "spacing of kernel taps, one int or [h, w], > 0"},
              {.name = "groups",
               .type = OPD_ATTR_INT,
               .def = {.type = OPD_ATTR_INT, .i = 1},
               .doc = "channel groups, dividing C and K (C: depthwise)"},
              {.name = "padding_mode",
               .type = OPD_ATTR_STR,
               .def = {.type = OPD_ATTR_STR, .s = "explicit"},
               .choices = "explicit|same|valid",
               .doc = "explicit: padding; same: output size of the input "
                      "(stride 1; an odd extra row / column goes bottom / "
                      "right, as torch's padding='same'); valid: none"}},
    .cpu_dtypes = OPD_DT_FLOAT,
    .shape_doc = "x (N, C, H, W) or (C, H, W), weight (K, C/groups, R, S), "
                 "bias (K)? -> y (N, K, P, Q) or (K, P, Q), P = (H + "
                 "pad_top + pad_bottom - dil (R-1) - 1) / stride + 1",
    .shape = conv2d_shape,
    .cpu_ref = opd__conv2d_cpu_ref,
    .cpu_fast = opd__conv2d_cpu_fast,
    .flags = OPD_OPF_CUDA_BLASLT | /* the CUDA kernel runs cuBLASLt */
             OPD_OPF_STEADY_COST,
    .cuda = opd__conv2d_cuda,
    .cuda_dtypes = OPD_DT(FLOAT32) | OPD_DT(FLOAT16) | OPD_DT(BFLOAT16),
    .cuda_workspace = opd__conv2d_cuda_workspace,
};
