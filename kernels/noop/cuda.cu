/* noop on the GPU: launches nothing (the round trip of a run on the CUDA
 * backend, without a kernel). Test: build/tests/gpu_kernels (op=noop). */
#include "kernels/cuda/common.cuh"

extern "C" int opd__noop_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  (void)call;
  (void)ctx;
  return 0;
}
