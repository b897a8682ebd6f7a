/* The CPU backend's kernel entry points, one pair per op.
 *
 * DESIGN
 * kernels/<op>/cpu.c defines them, kernels/<op>/op.c puts them in the op's
 * row (for an op of a family: kernels/<family>/cpu.c and ops.c); both
 * declare them with OPD_OP_DECLARE(<op>) (kernels/kernel.h), so no header
 * lists the ops. `_ref` is the plain reference (the truth the
 * tests compare with), `_fast` the vectorized / BLAS / pooled variant the
 * daemon runs.
 */
#ifndef OPD_KERNELS_CPU_H
#define OPD_KERNELS_CPU_H

#include "kernels/kernel.h"

#endif /* OPD_KERNELS_CPU_H */
