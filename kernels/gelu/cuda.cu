/* gelu on the GPU, float32 / float16 / bfloat16, computed in float.
 *
 * Forms (attribute approximate):
 *   none  y = x * Phi(x) with CUDA's normcdff (= 0.5 erfc(-x/sqrt2)):
 *         no cancellation for negative x, unlike 0.5x(1+erf(x/sqrt2)).
 *         Measured on the H200: 79% of copy bandwidth (fp32), 43% (bf16),
 *         torch 97% / 71%; a branch to erff above x = -3 was slower
 *         (52% / 27%), so the gap is in the instruction mix, not the
 *         function: the next step is fewer instructions per element.
 *   tanh  y = x / (1 + exp(-2u)), u = sqrt(2/pi)(x + 0.044715x^3), which
 *         equals 0.5x(1+tanh(u)) (the CPU fast kernel's form)
 * Variants (kernels/cuda/unary.cuh): 16-byte packs when aligned, else
 * scalar. Test: build/tests/gpu_kernels (op=gelu); bench:
 * build/tests/gpu_kernels --bench (op=gelu).
 */
#include <string.h>

#include "kernels/cuda/unary.cuh"

struct GeluErf {
  __device__ float operator()(float v) const { return v * normcdff(v); }
};
struct GeluTanh {
  __device__ float operator()(float v) const {
    float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
    return v / (1.0f + expf(-2.0f * u));
  }
};

extern "C" int opd__gelu_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  if (call->attr[0].type == OPD_ATTR_STR && strcmp(call->attr[0].s, "tanh") == 0)
    return unary_run(call, ctx, GeluTanh());
  return unary_run(call, ctx, GeluErf());
}
