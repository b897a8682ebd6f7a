/* add on the CPU: out = a + b, broadcasting.
 *
 * Variants (both in kernels/common/binary.c):
 *   cpu_ref   multi-index walk through broadcast strides
 *   cpu_fast  equal / row-bias / scalar / general-by-rows loops, pooled
 * Test: build/tests/ops, suite binary
 */
#include "kernels/common/binary.h"
#include "kernels/common/cpu.h"

OPD_OP_DECLARE(add);

int opd__add_cpu_ref(opd_kcall_t *call) {
  return opd__binary_ref(call, OPD_BIN_ADD);
}

int opd__add_cpu_fast(opd_kcall_t *call) {
  return opd__binary_fast(call, OPD_BIN_ADD);
}
