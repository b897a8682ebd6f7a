/* gather on the GPU: one thread per out element (a grid-stride loop), its
 * x element addressed as on the CPU (kernels/gather/gather.h). An index
 * outside [0, x.size(dim)) gives zeros (no error can come back from a
 * captured graph; the CPU backend refuses it: kernels/gather/op.c).
 *
 * Test: build/tests/gpu_kernels --op gather
 */
#include "kernels/cuda/common.cuh"
#include "kernels/gather/gather.h"
#include "kernels/shape/move.cuh"

template <typename U>
__global__ void gather_kernel(gather_plan_t p, const U *x, const int64_t *idx, U *y,
                              int64_t total) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    int64_t v = idx[i];
    U z;
    memset(&z, 0, sizeof z);
    y[i] = v >= 0 && v < p.n ? x[gather_offset(&p, i, v)] : z;
  }
}

extern "C" int opd__gather_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  const opd_tview_t *x = &call->in[0];
  int64_t total = call->out[0].numel;
  if (total == 0) return 0;
  int r = x->rank ? x->rank : 1;
  int dim = (int)(call->attr[0].i < 0 ? call->attr[0].i + r : call->attr[0].i);
  gather_plan_t p;
  gather_plan(&p, x->shape, call->in[1].shape, x->rank, dim);
  cudaStream_t st = OPD_STREAM(ctx);
  unsigned grid = grid_for(total, 256);
  OPD_MOVE_DISPATCH((int)opd__dtype_size(x->dtype), return opd__cuda_bad_dtype(call, x->dtype),
                    gather_kernel<U><<<grid, 256, 0, st>>>(
                        p, (const U *)x->data, (const int64_t *)call->in[1].data,
                        (U *)call->out[0].data, total););
  OPD_CUDA_LAUNCHED();
  return 0;
}
