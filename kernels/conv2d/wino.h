/* conv2d's Winograd F(2x2, 3x3) CPU kernel (wino_cpu.c), as cpu.c calls
 * it. */
#ifndef OPD_KERNELS_CONV2D_WINO_H
#define OPD_KERNELS_CONV2D_WINO_H

#include "kernels/conv2d/plan.h"

/* Fewest input and output channels for which Winograd is picked: below,
 * the 16 GEMMs over C are too short to pay for the transforms. */
#define OPD_WINO_CMIN 16

/* 1 when the planned call can run opd__conv2d_cpu_wino: a 3x3 kernel,
 * stride 1, dilation 1, one group, C and K >= OPD_WINO_CMIN, P and Q >= 2. */
int opd__conv2d_wino_fits(const conv_plan_t *p);

/* y = conv2d(x, weight, bias) for a planned float32 call that
 * opd__conv2d_wino_fits, blocks of tiles spread over call->exec. Returns
 * 0, or OPD_ENOMEM (y partly written). */
int opd__conv2d_cpu_wino(opd_kcall_t *call, const conv_plan_t *p);

#endif /* OPD_KERNELS_CONV2D_WINO_H */
