/* fault: an operator of test builds only (make TEST_OPS=1). On a CUDA
 * device it launches a kernel that writes to an invalid address, which
 * poisons the CUDA context: the drill for the daemon's poisoned-context
 * handling (tests/gpu/run.sh). On the cpu it fails cleanly. */
#ifdef OPD_TEST_OPS
#include "kernels/kernel.h"

OPD_CUDA_WEAK int opd__fault_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx);

static int fault_shape(opd_kcall_t *call, opd_tshape_t *out) {
  (void)call;
  (void)out;
  return 0;
}

static int fault_cpu(opd_kcall_t *call) {
  return opd__kerr(call, OPD_EDEVICE, "only faults on a cuda device");
}

const opd_op_def_t opd__op_fault = {
    .name = "fault",
    .summary = "TEST BUILD ONLY: a CUDA kernel that writes to an invalid address",
    .n_in_min = 0,
    .n_in_max = 0,
    .n_out = 0,
    .shape_doc = "-> nothing (poisons the CUDA context)",
    .shape = fault_shape,
    .cpu_ref = fault_cpu,
    .cuda = opd__fault_cuda,
    .cuda_dtypes = OPD_DT_ANY,
};
#else
typedef int opd_fault_unused_t; /* ISO C: no empty translation unit */
#endif
