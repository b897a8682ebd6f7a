/* add on the GPU: out = a + b with torch broadcasting, float32 / float16 /
 * bfloat16 computed in float.
 *
 * Variants (kernels/cuda/binary.cuh): equal shapes (16-byte packs when
 * aligned, else scalar), scalar / rowbias operand, general broadcast.
 * Test: build/tests/gpu_kernels (op=add).
 */
#include "kernels/cuda/binary.cuh"

extern "C" int opd__add_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  return binary_run(call, ctx, AddF());
}
