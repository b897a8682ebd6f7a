/* The binary family's integer kernels (add, sub, mul of int8, uint8,
 * int32, int64): kernels/binary/int.c (CPU), int.cu (CUDA). The float
 * bodies (cpu.c, cuda.cu) hand an integer call over to these.
 *
 * DESIGN
 * torch's integer arithmetic: a and b of one dtype (the shape rule
 * refuses mixed ones; the Python layers promote first), the result in
 * that dtype, wrapping on overflow (computed in unsigned 64-bit and
 * truncated, which is two's complement wraparound without C's undefined
 * signed overflow), alpha an integer (the shape rule refuses another:
 * torch does too for integer tensors). The op is the row's (add, sub,
 * mul); div of integers is true division in torch, a float result, so
 * its row takes no integer dtype.
 */
#ifndef OPD_KERNELS_BINARY_INT_H
#define OPD_KERNELS_BINARY_INT_H

#ifdef __cplusplus
extern "C" {
#endif
#include "kernels/kernel.h"
#ifdef __cplusplus
}
#endif

/* The integer dtypes add, sub and mul take. */
#define OPD_DT_BIN_INTS \
  (OPD_DT(INT8) | OPD_DT(UINT8) | OPD_DT(INT32) | OPD_DT(INT64))

/* True when dtype code dt is one of them. */
#define OPD_BIN_IS_INT(dt) (((1u << (dt)) & OPD_DT_BIN_INTS) != 0)

#ifdef __cplusplus
extern "C" {
#endif

/* Runs the integer call (its row add, sub or mul) on the CPU over
 * call->exec; returns 0 (or OPD_EDTYPE for a dtype it does not take). */
int opd__binary_int_cpu(opd_kcall_t *call);

/* Queues the integer call on ctx's stream; 0 or a negative OPD_E*. */
int opd__binary_int_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx);

#ifdef __cplusplus
}
#endif

#endif /* OPD_KERNELS_BINARY_INT_H */
