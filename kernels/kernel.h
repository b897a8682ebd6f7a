/* The kernels' side of the operator contract: the registry, helpers, and
 * the macro that declares an op's entry points.
 *
 * DESIGN
 * The row type and the call a kernel receives are the public ABI,
 * include/opd/op.h (read its comments: they are the contract). This header
 * adds what only built-in kernels use: the registry (kernels/registry.c),
 * the serial executor, opd__kerr, and OPD_OP_DECLARE, which each op's op.c
 * and cpu.c use to declare the op's kernels by their conventional names.
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

/* Runs everything on the calling thread (tests, small tensors). */
extern const opd_exec_t opd__exec_serial;

#if defined(__GNUC__) && !defined(__CUDACC__)
#define OPD_CUDA_WEAK __attribute__((weak))
#else
#define OPD_CUDA_WEAK
#endif

/* Declares op `name`'s kernels: opd__<name>_cpu_ref, _cpu_fast (defined in
 * kernels/<name>/cpu.c) and the weak opd__<name>_cuda (kernels/<name>/
 * cuda.cu, NULL without CUDA). Only in C files (op.c, cpu.c): a .cu file
 * defines its kernel with extern "C" and must not see the weak declaration. */
#define OPD_OP_DECLARE(name)                                               \
  int opd__##name##_cpu_ref(opd_kcall_t *call);                           \
  int opd__##name##_cpu_fast(opd_kcall_t *call);                          \
  OPD_CUDA_WEAK int opd__##name##_cuda(opd_kcall_t *call,                 \
                                       const opd_cuda_ctx_t *ctx)

/* Declares the weak opd__<name>_cuda_workspace (for an op.c whose op has
 * a cuda_workspace). */
#define OPD_OP_DECLARE_CUDA_WORKSPACE(name) \
  OPD_CUDA_WEAK size_t opd__##name##_cuda_workspace(const opd_kcall_t *call)

/* The registry (kernels/registry.c): built-ins first, then the plugins'
 * rows in load order; only changed at start-up (before any session). */
#define OPD_MAX_OPS 256
extern const opd_op_def_t *opd__ops[OPD_MAX_OPS]; /* in `opctl ops` order */
extern int opd__n_ops;                           /* rows in use */
extern const int opd__n_builtin_ops;             /* [0, this): built-ins */
const opd_op_def_t *opd__op_find(const char *name);
int opd__op_index(const char *name); /* -1 if unknown */
/* Appends a row; returns its index, or -1 when the table is full. The row
 * is not checked here (opd__op_validate). */
int opd__op_register(const opd_op_def_t *op);
/* Drops the rows at [n, opd__n_ops) (never built-ins). */
void opd__ops_truncate(int n);

/* The checks of kernels/opcheck.c, the same for built-ins and plugins. */
/* Whether `op` is a well-formed row (names, counts, dtype masks, attribute
 * types and defaults, required functions, flags); 0, or OPD_EINVAL with a
 * message naming the field in err. */
int opd__op_validate(const opd_op_def_t *op, char *err, size_t errlen);
/* Runs call->op's shape rule into out[0..op->n_out) and checks what it
 * gave (a known dtype, rank 0..OPD_MAX_RANK, extents >= 0, a byte size
 * that fits in int64): 0, or the rule's own error, or OPD_EINTERNAL with
 * call->err saying what the rule got wrong. */
int opd__op_shape(opd_kcall_t *call, opd_tshape_t *out);
/* The result of a kernel as the daemon replies it: `rc` when it is 0 or a
 * known OPD_E* code, else OPD_EBACKEND with call->err saying which value
 * the kernel returned; call->err is always NUL-terminated after it. */
int opd__kernel_rc(opd_kcall_t *call, int rc);

/* Writes a printf-style message into call->err; returns `code`. */
int opd__kerr(opd_kcall_t *call, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* OPD_KERNEL_H */
