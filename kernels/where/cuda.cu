/* where on the GPU: one thread per output element, each input's offset
 * from the output's multi-index and its broadcast strides
 * (kernels/where/where.h); elements moved by size, any dtype.
 *
 * Test: build/tests/gpu_kernels --op where
 */
#include "kernels/cuda/common.cuh"
#include "kernels/shape/move.cuh"

extern "C" {
#include "kernels/where/where.h"
}

template <typename U>
__global__ void where_kernel(const uint8_t *c, const U *x, const U *y, U *o, int64_t n,
                             where_geom_t g) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t rem = i, oc = 0, ox = 0, oy = 0;
    for (int d = g.rank - 1; d >= 0; d--) {
      int64_t k = rem % g.shape[d];
      rem /= g.shape[d];
      oc += k * g.sc[d];
      ox += k * g.sx[d];
      oy += k * g.sy[d];
    }
    o[i] = c[oc] ? x[ox] : y[oy];
  }
}

extern "C" int opd__where_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  const opd_tview_t *out = &call->out[0];
  if (out->numel == 0) return 0;
  where_geom_t g;
  opd__where_geom(call, &g);
  int64_t n = out->numel;
  cudaStream_t st = OPD_STREAM(ctx);
  OPD_MOVE_DISPATCH((int)opd__dtype_size(out->dtype), return opd__cuda_bad_dtype(call, out->dtype),
                    where_kernel<U><<<grid_for(n, 256), 256, 0, st>>>(
                        (const uint8_t *)call->in[0].data, (const U *)call->in[1].data,
                        (const U *)call->in[2].data, (U *)out->data, n, g););
  OPD_CUDA_LAUNCHED();
  return 0;
}
