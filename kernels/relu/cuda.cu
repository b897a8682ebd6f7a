/* relu on the GPU: y = x < 0 ? 0 : x (NaN passes through, as torch),
 * float32 / float16 / bfloat16.
 *
 * Variants (kernels/cuda/unary.cuh): 16-byte packs when x and y are
 * 16-byte aligned, else scalar; the dtype is the template parameter.
 * Test: build/tests/gpu_kernels (op=relu); bench: build/tests/gpu_kernels
 * --bench does not time relu (same kernel as gelu, less arithmetic).
 */
#include "kernels/cuda/unary.cuh"

struct ReluF {
  __device__ float operator()(float v) const { return v < 0.0f ? 0.0f : v; }
};

extern "C" int opd__relu_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  return unary_run(call, ctx, ReluF());
}
