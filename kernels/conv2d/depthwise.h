/* conv2d's depthwise CPU kernel (one input channel per group), as cpu.c
 * calls it. */
#ifndef OPD_KERNELS_CONV2D_DEPTHWISE_H
#define OPD_KERNELS_CONV2D_DEPTHWISE_H

#include "kernels/conv2d/plan.h"

/* y = conv2d(x, weight, bias) for a planned float32 call with C == G
 * (K = G * multiplier), planes spread over call->exec. Returns 0. */
int opd__conv2d_cpu_depthwise(opd_kcall_t *call, const conv_plan_t *p);

#endif /* OPD_KERNELS_CONV2D_DEPTHWISE_H */
