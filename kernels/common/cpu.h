/* The CPU backend's kernel entry points, one pair per op.
 *
 * DESIGN
 * kernels/<op>/cpu.c defines them, kernels/<op>/op.c puts them in the op's
 * row. `_ref` is the plain reference (the truth the tests compare with),
 * `_fast` the vectorized / BLAS / pooled variant the daemon runs.
 */
#ifndef OPD_KERNELS_CPU_H
#define OPD_KERNELS_CPU_H

#include "kernels/kernel.h"


#define X(name)                                 \
  int opd__##name##_cpu_ref(opd_kcall_t *call); \
  int opd__##name##_cpu_fast(opd_kcall_t *call);
OPD_BUILTIN_OPS(X)
#undef X

#endif /* OPD_KERNELS_CPU_H */
