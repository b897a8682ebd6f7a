/* The checks of an operator row and of what its functions return
 * (kernels/runtime/opcheck.c), the same for built-ins and plugins.
 *
 * DESIGN
 * The daemon trusts no row and no rule it did not write: a row is checked
 * before it is registered, a shape rule's result before anything is sized
 * from it, a kernel's return value before it is replied.
 */
#ifndef OPD_KERNELS_RUNTIME_OPCHECK_H
#define OPD_KERNELS_RUNTIME_OPCHECK_H

#include <stddef.h>

#include "opd/op.h"

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

#endif /* OPD_KERNELS_RUNTIME_OPCHECK_H */
