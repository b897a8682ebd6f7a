/* noop on the CPU: returns at once.
 *
 * Variants: cpu_ref only (there is nothing to make faster).
 */
#include "kernels/common/cpu.h"

OPD_OP_DECLARE(noop);

int opd__noop_cpu_ref(opd_kcall_t *call) {
  (void)call;
  return 0;
}
