/* The per-launch offer of a dependent launch (kernels/cuda/cuda.h): the
 * daemon's launch thread offers it before an op's launch, the op's kernel
 * says whether it took it, the launch thread reads and clears the answer.
 *
 * DESIGN
 * Thread-local: one launch at a time per thread, so neither side needs a
 * lock, and a kernel run outside the daemon (tests/gpu_kernels) sees no
 * offer. It is the kernels' half of the contract; the daemon's kernels
 * that write the flag word after an op that took it live in
 * daemon/backend/cuda/flag.cu.
 */
#include "kernels/cuda/cuda.h"

/* The launch thread's offer to the op it is launching, and whether the op
 * took it. */
static __thread int pdl_offer, pdl_took;

extern "C" void opd__cuda_pdl_offer(int on) {
  pdl_offer = on;
  pdl_took = 0;
}
extern "C" int opd__cuda_pdl_offered(void) { return pdl_offer; }
extern "C" void opd__cuda_pdl_took(void) { pdl_took = 1; }
extern "C" int opd__cuda_pdl_taken(void) {
  int t = pdl_took;
  pdl_took = pdl_offer = 0;
  return t;
}
