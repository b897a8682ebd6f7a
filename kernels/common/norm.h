/* Shape rule shared by the row normalizations (layernorm, rmsnorm).
 *
 * DESIGN
 * Both take x (..., C) and optional per-channel params of shape (C) as
 * inputs 1.., and write y of x's shape.
 */
#ifndef OPD_KERNELS_NORM_H
#define OPD_KERNELS_NORM_H

#include "kernels/kernel.h"

/* Checks x has rank >= 1 and every input after it (named by `names`,
 * e.g. {"weight", "bias"}) has shape (C), C = x's last dim. Returns 0 with
 * out[0] = x's shape and dtype, or OPD_ESHAPE / OPD_EDTYPE (a param
 * whose dtype is not x's) with call->err set. */
int opd__norm_shape(opd_kcall_t *call, opd_tshape_t *out,
                    const char *const *names);

#endif /* OPD_KERNELS_NORM_H */
