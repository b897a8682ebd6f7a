/* The kernels' side of the operator contract: what a built-in op's files
 * use, and nothing of the runtime that calls them.
 *
 * DESIGN
 * The row type and the call a kernel receives are the public ABI,
 * include/opd/op.h (read its comments: they are the contract). This header
 * adds what only built-in kernels use: opd__kerr (kernels/common/kerr.c)
 * and OPD_OP_DECLARE, which each op's row file and cpu.c use to declare the
 * op's kernels by their conventional names. The runtime that registers,
 * checks and runs the rows (the registry, the row checks, plugins, the
 * executor) has its own headers under kernels/runtime/; no kernel includes
 * them, so no kernel object calls into the runtime.
 *
 * The CUDA entry points are declared weak: a build without CUDA compiles
 * no .cu file, so `opd__<op>_cuda` stays undefined and its address, hence
 * the row's `cuda` field, is NULL; no CUDA code or library is linked, and
 * binaries linked from the C objects alone (tests/ops, bench) work the same
 * way in a CUDA build. A program that must run CUDA kernels links the .cu
 * objects (the daemon, tests/unit, tests/gpu_kernels).
 */
#ifndef OPD_KERNEL_H
#define OPD_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#include "opd/op.h"
#include "opd/protocol.h"

#if defined(__GNUC__) && !defined(__CUDACC__)
#define OPD_CUDA_WEAK __attribute__((weak))
#else
#define OPD_CUDA_WEAK
#endif

/* Declares op `name`'s kernels: opd__<name>_cpu_ref, _cpu_fast (defined in
 * kernels/<name>/cpu.c, or its family's kernels/<family>/cpu.c) and the
 * weak opd__<name>_cuda (the folder's cuda.cu, NULL without CUDA). Only in
 * C files (op.c or ops.c, cpu.c): a .cu file
 * defines its kernel with extern "C" and must not see the weak declaration. */
#define OPD_OP_DECLARE(name)                                               \
  int opd__##name##_cpu_ref(opd_kcall_t *call);                           \
  int opd__##name##_cpu_fast(opd_kcall_t *call);                          \
  OPD_CUDA_WEAK int opd__##name##_cuda(opd_kcall_t *call,                 \
                                       const opd_cuda_ctx_t *ctx)

/* The kernel fields of op `name`'s row, by their conventional names (for
 * a family's row macro: kernels/<family>/ops.c). */
#define OPD_ROW_KERNELS(name)                                              \
  .cpu_ref = opd__##name##_cpu_ref, .cpu_fast = opd__##name##_cpu_fast,    \
  .cuda = opd__##name##_cuda

/* Declares the weak opd__<name>_cuda_workspace (for an op.c whose op has
 * a cuda_workspace). */
#define OPD_OP_DECLARE_CUDA_WORKSPACE(name) \
  OPD_CUDA_WEAK size_t opd__##name##_cuda_workspace(const opd_kcall_t *call)

/* Writes a printf-style message into call->err; returns `code`. */
int opd__kerr(opd_kcall_t *call, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* OPD_KERNEL_H */
