/* The pool family's geometry: from a call's x and attributes, the planes,
 * the input and output extents and the window, for max_pool2d and
 * adaptive_avg_pool2d; shared by the shape rules (ops.c) and both
 * backends (cpu.c, cuda.cu).
 *
 * DESIGN
 * x is (N, C, H, W) or unbatched (C, H, W); either way the ops see N C
 * planes of H x W (C-contiguous) and write planes of OH x OW. The rules
 * are torch's (aten/src/ATen/native/Pool.h pooling_output_shape and
 * AdaptiveAveragePooling): one function computes them and says what is
 * wrong, so a rule and its kernels can never disagree.
 */
#ifndef OPD_KERNELS_POOL_GEOM_H
#define OPD_KERNELS_POOL_GEOM_H

#include <stdint.h>

#include "opd/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct opd_pool_geom {
  int64_t planes;                  /* N C (C for an unbatched x) */
  int64_t H, W;                    /* input plane */
  int64_t OH, OW;                  /* output plane */
  int64_t kh, kw;                  /* max_pool2d: window */
  int64_t sh, sw;                  /* stride */
  int64_t ph, pw;                  /* padding (-inf) on each side */
  int64_t dh, dw;                  /* dilation */
} opd_pool_geom_t;

/* Fills g for a call of max_pool2d (adaptive 0: attrs kernel, stride,
 * padding, dilation, ceil_mode) or adaptive_avg_pool2d (adaptive 1: attr
 * size). Returns 0, or OPD_ESHAPE / OPD_EATTR with call->err naming what
 * is wrong (x's rank, a value out of range, an output of no element). */
int opd__pool_geom(opd_kcall_t *call, int adaptive, opd_pool_geom_t *g);

#ifdef __cplusplus
}
#endif

#endif /* OPD_KERNELS_POOL_GEOM_H */
