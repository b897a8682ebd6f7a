/* Broadcasting elementwise binary ops (add, mul): one shape rule, one
 * reference and one fast kernel, parameterized by the operation.
 *
 * DESIGN
 * add and mul differ only in the scalar operation, so their rows share
 * everything else: torch broadcasting for the output shape, INPLACE
 * (out may be exactly a or b), and the fast paths (equal shapes; one
 * operand repeated along leading dims, e.g. a bias (C) over (N, C); a
 * scalar operand; the general strided case by rows).
 */
#ifndef OPD_KERNELS_BINARY_H
#define OPD_KERNELS_BINARY_H

#include "kernels/kernel.h"

typedef enum { OPD_BIN_ADD, OPD_BIN_MUL } opd_binop_t;

/* Shape rule: out = broadcast(a, b) in a's dtype; OPD_EDTYPE when a and b
 * differ in dtype ("a is float16 but b is float32": no implicit
 * promotion, unlike torch), OPD_ESHAPE naming the dims that do not
 * broadcast. */
int opd__binary_shape(opd_kcall_t *call, opd_tshape_t *out);

/* Kernels: always return 0. */
int opd__binary_ref(opd_kcall_t *call, opd_binop_t op);
int opd__binary_fast(opd_kcall_t *call, opd_binop_t op);

#endif /* OPD_KERNELS_BINARY_H */
