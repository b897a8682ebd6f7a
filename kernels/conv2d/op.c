/* conv2d: x (N,C,H,W), weight (K,C,R,S), bias (K)? -> y (N,K,P,Q),
 * F.conv2d with groups=1, float32
 * (float16 and bfloat16 on the CUDA backend: cpu_dtypes).
 *
 * DESIGN
 * stride, padding and dilation each take one int (both dims) or [h, w],
 * as torch. groups is not supported. The output size is
 * P = (H + 2 ph - dh (R - 1) - 1) / sh + 1, and likewise Q; it must be
 * positive. Every product is checked for overflow, since attrs come from
 * the client (the geometry: plan.c, shared with the kernels).
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
  out[0].rank = 4;
  out[0].shape[0] = p.N;
  out[0].shape[1] = p.K;
  out[0].shape[2] = p.P;
  out[0].shape[3] = p.Q;
  return 0;
}

#define INTS1(v) {.type = OPD_ATTR_INTS, .n = 1, .ints = {v}}

const opd_op_def_t opd__op_conv2d = {
    .name = "conv2d",
    .summary = "2-D convolution (F.conv2d, groups=1 only; groups is not "
               "supported)",
    .n_in_min = 2,
    .n_in_max = 3,
    .n_out = 1,
    .in = {{"x", OPD_DT_FLOATS, "(N, C, H, W)"},
           {"weight", OPD_DT_FLOATS, "(K, C, R, S)"},
           {"bias", OPD_DT_FLOATS, "(K) optional"}},
    .out = {{"y", OPD_DT_FLOATS, "(N, K, P, Q)"}},
    .n_attrs = 3,
    .attrs = {{.name = "stride",
               .type = OPD_ATTR_INTS,
               .def = INTS1(1),
               .doc = "step, one int or [h, w], > 0"},
              {.name = "padding",
               .type = OPD_ATTR_INTS,
               .def = INTS1(0),
               .doc = "zeros added on each side, one int or [h, w], >= 0"},
              {.name = "dilation",
               .type = OPD_ATTR_INTS,
               .def = INTS1(1),
               .doc = "spacing of kernel taps, one int or [h, w], > 0"}},
    .cpu_dtypes = OPD_DT_FLOAT,
    .shape_doc = "x (N, C, H, W), weight (K, C, R, S), bias (K)? -> "
                 "y (N, K, P, Q), P = (H + 2 pad - dil (R-1) - 1) / stride + 1",
    .shape = conv2d_shape,
    .cpu_ref = opd__conv2d_cpu_ref,
    .cpu_fast = opd__conv2d_cpu_fast,
    .flags = OPD_OPF_CUDA_BLASLT, /* the CUDA kernel runs cuBLASLt */
    .cuda = opd__conv2d_cuda,
    .cuda_dtypes = OPD_DT(FLOAT32) | OPD_DT(FLOAT16) | OPD_DT(BFLOAT16),
    .cuda_workspace = opd__conv2d_cuda_workspace,
};
