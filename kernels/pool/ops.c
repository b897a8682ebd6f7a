/* The pool family's table: 2-D pooling over the planes of x (N, C, H, W)
 * or (C, H, W), one row per op (max_pool2d, adaptive_avg_pool2d), float32
 * (float16 and bfloat16 on the CUDA backend: cpu_dtypes).
 *
 * DESIGN
 * The rows share one shape rule over geom.c (torch's output sizes and
 * checks) and one body per backend (cpu.c, cuda.cu), a window function
 * per op. A new op of the family: its row here, its window in cpu.c and
 * cuda.cu, and its X line in kernels/runtime/registry.c.
 *
 * max_pool2d: F.max_pool2d(x, kernel, stride, padding, dilation,
 * ceil_mode) without return_indices; stride's default [0] means the
 * kernel size (torch's stride=None); padding counts as -inf; a NaN in a
 * window gives NaN (as torch). adaptive_avg_pool2d: F.adaptive_avg_pool2d
 * (x, size); window [floor(i H / OH), ceil((i + 1) H / OH)).
 */
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/pool/geom.h"

OPD_OP_DECLARE(max_pool2d);
OPD_OP_DECLARE(adaptive_avg_pool2d);

/* out = x's shape with (OH, OW) for (H, W), x's dtype. */
static int pool_shape(opd_kcall_t *call, opd_tshape_t *out, int adaptive) {
  opd_pool_geom_t g;
  int rc = opd__pool_geom(call, adaptive, &g);
  if (rc) return rc;
  opd__same_shape(call, out);
  out[0].shape[out[0].rank - 2] = g.OH;
  out[0].shape[out[0].rank - 1] = g.OW;
  return 0;
}

static int max_pool2d_shape(opd_kcall_t *call, opd_tshape_t *out) {
  return pool_shape(call, out, 0);
}

static int adaptive_avg_pool2d_shape(opd_kcall_t *call, opd_tshape_t *out) {
  return pool_shape(call, out, 1);
}

#define INTS1(v) {.type = OPD_ATTR_INTS, .n = 1, .ints = {v}}

/* The row of pool op `op`; the remaining arguments are its own fields. */
#define POOL_ROW(op, ...)                                                   \
  {                                                                         \
    .name = #op,                                                            \
    .n_in_min = 1,                                                          \
    .n_in_max = 1,                                                          \
    .n_out = 1,                                                             \
    .in = {{"x", OPD_DT_FLOATS, "(N, C, H, W) or (C, H, W)"}},              \
    .out = {{"y", OPD_DT_FLOATS, "(N, C, OH, OW) or (C, OH, OW)"}},         \
    .cpu_dtypes = OPD_DT_FLOAT,                                             \
    .shape = op##_shape,                                                    \
    .flags = OPD_OPF_STEADY_COST,                                           \
    OPD_ROW_KERNELS(op),                                                    \
    .cuda_dtypes = OPD_DT(FLOAT32) | OPD_DT(FLOAT16) | OPD_DT(BFLOAT16),    \
    __VA_ARGS__                                                             \
  }

const opd_op_def_t opd__op_max_pool2d = POOL_ROW(
    max_pool2d,
    .summary = "2-D max pooling (F.max_pool2d, no indices)",
    .n_attrs = 5,
    .attrs = {{.name = "kernel",
               .type = OPD_ATTR_INTS,
               .required = 1,
               .doc = "window, one int or [h, w], > 0"},
              {.name = "stride",
               .type = OPD_ATTR_INTS,
               .def = INTS1(0),
               .doc = "step, one int or [h, w] (default [0]: the kernel)"},
              {.name = "padding",
               .type = OPD_ATTR_INTS,
               .def = INTS1(0),
               .doc = "-inf added on each side, at most half the kernel"},
              {.name = "dilation",
               .type = OPD_ATTR_INTS,
               .def = INTS1(1),
               .doc = "spacing of window taps, > 0"},
              {.name = "ceil_mode",
               .type = OPD_ATTR_BOOL,
               .def = {.type = OPD_ATTR_BOOL, .i = 0},
               .doc = "round the output size up (a last partial window)"}},
    .shape_doc = "x (N, C, H, W) -> y (N, C, OH, OW), OH = (H + 2 pad - "
                 "dil (k-1) - 1) / stride + 1 (rounded up with ceil_mode)");

const opd_op_def_t opd__op_adaptive_avg_pool2d = POOL_ROW(
    adaptive_avg_pool2d,
    .summary = "2-D adaptive average pooling (F.adaptive_avg_pool2d)",
    .n_attrs = 1,
    .attrs = {{.name = "size",
               .type = OPD_ATTR_INTS,
               .required = 1,
               .doc = "output (OH, OW), one int or [h, w], > 0"}},
    .shape_doc = "x (N, C, H, W) -> y (N, C, OH, OW)");
