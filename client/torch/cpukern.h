/* The CPU torch kernel (cpukern.c): what torchops.c calls of it.
 *
 * DESIGN
 * torchops.c owns the kernels' table and their registration; for torch's
 * CPU dispatch key it registers trampolines that call
 * opd__torch_cpu_kernel with the kernel's row. The Python function a call
 * falls back on is cpukern.c's, set with opd__torch_cpu_fallback.
 */
#ifndef OPD_CLIENT_TORCH_CPUKERN_H
#define OPD_CLIENT_TORCH_CPUKERN_H

#include "client/torch/call.h"

#pragma GCC visibility push(hidden)

/* One call of kernel o on CPU tensors (see cpukern.c's DESIGN); throws. */
void opd__torch_cpu_kernel(top_t *o, siv_t *stack, uint64_t n_args,
                           uint64_t n_ret);
/* The function a call the kernel cannot serve goes to (NULL: none). */
void opd__torch_cpu_fallback(opd_torch_fallback_fn fn);

#pragma GCC visibility pop

#endif
