/* Geometry of one conv2d call, shared by its shape rule and kernels. */
#ifndef OPD_KERNELS_CONV2D_PLAN_H
#define OPD_KERNELS_CONV2D_PLAN_H

#include "kernels/kernel.h"

typedef struct conv_plan {
  int64_t N, C, H, W;              /* x is (N, C, H, W) */
  int64_t K, R, S;                 /* weight is (K, C, R, S) */
  int64_t P, Q;                    /* y is (N, K, P, Q) */
  int64_t sh, sw;                  /* stride */
  int64_t ph, pw;                  /* padding (zeros) */
  int64_t dh, dw;                  /* dilation */
  int has_bias;                    /* bias (K) given */
} conv_plan_t;

/* Fills *p from the call's shapes and attrs. Returns 0, or OPD_ESHAPE /
 * OPD_EATTR / OPD_EOVERFLOW with call->err set. */
int opd__conv2d_plan(opd_kcall_t *call, conv_plan_t *p);

#endif /* OPD_KERNELS_CONV2D_PLAN_H */
