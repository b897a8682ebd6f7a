/* fault on the GPU (test builds only): one thread stores to address 8,
 * an illegal address that leaves the CUDA context unusable. Variants: one.
 * Run: bash tests/gpu/run.sh (the poisoned-context drill). */
#ifdef OPD_TEST_OPS
#include "kernels/cuda/common.cuh"

__global__ void fault_kernel(int *p) { *p = 1; }

extern "C" int opd__fault_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  fault_kernel<<<1, 1, 0, (cudaStream_t)ctx->stream>>>((int *)8);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return opd__kerr(call, OPD_EBACKEND, "cuda: %s", cudaGetErrorString(e));
  return 0;
}
#endif
