/* Geometry of one conv2d call, shared by its shape rule and kernels. */
#ifndef OPD_KERNELS_CONV2D_PLAN_H
#define OPD_KERNELS_CONV2D_PLAN_H

#include "kernels/kernel.h"

typedef struct conv_plan {
  int64_t N, C, H, W;              /* x is (N, C, H, W); (C, H, W) is N=1 */
  int64_t K, R, S;                 /* weight is (K, C/G, R, S) */
  int64_t G;                       /* groups: C and K split into G equal
                                      parts, output channel k reads input
                                      channels of part k / (K/G) only */
  int64_t P, Q;                    /* y is (N, K, P, Q) */
  int64_t sh, sw;                  /* stride */
  int64_t ph, pw;                  /* top / left padding (zeros): the
                                      kernels' offsets */
  int64_t pb, pr;                  /* bottom / right padding: only in P, Q */
  int64_t dh, dw;                  /* dilation */
  int has_bias;                    /* bias (K) given */
  int batched;                     /* x has 4 dims (else 3: y has 3 too) */
} conv_plan_t;

/* Fills *p from the call's shapes and attrs. Returns 0, or OPD_ESHAPE /
 * OPD_EATTR / OPD_EOVERFLOW with call->err set. */
int opd__conv2d_plan(opd_kcall_t *call, conv_plan_t *p);

/* Smallest q >= 0 with q*st + off >= lim (for lim > off), capped at Q: the
 * first output column whose tap at offset `off` is at or past input
 * column lim (lim 0: the first inside the image, lim W: the first past
 * it). */
static inline int64_t conv_first_q(int64_t lim, int64_t off, int64_t st, int64_t Q) {
  if (off >= lim) return 0;
  int64_t q = (lim - off + st - 1) / st;
  return q < Q ? q : Q;
}

#endif /* OPD_KERNELS_CONV2D_PLAN_H */
