/* copy on the GPU: a strided device view into a contiguous output, any
 * dtype (x.contiguous()). Host <-> device transfers are not this op: the
 * daemon uses cudaMemcpyAsync for those.
 *
 * Variants:
 *   flat     dims merged where x is contiguous across them (as the CPU fast
 *            kernel); a view that merges into one contiguous run is one
 *            cudaMemcpyAsync device-to-device
 *   gather   otherwise, one thread per output element (writes coalesced),
 *            its source offset from the merged multi-index; typed loads of
 *            1, 2, 4 or 8 bytes by element size
 * Test: build/tests/gpu_kernels (op=copy).
 */
#include "kernels/cuda/common.cuh"

typedef struct copy_geom {
  int rank;                        /* merged dims */
  int64_t shape[OPD_MAX_RANK];     /* merged extents */
  int64_t strides[OPD_MAX_RANK];   /* merged strides, in elements */
} copy_geom_t;

template <typename U>
__global__ void copy_gather(const U *x, U *y, int64_t n, copy_geom_t g) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    int64_t rem = i, off = 0;
    for (int d = g.rank - 1; d >= 0; d--) {
      off += (rem % g.shape[d]) * g.strides[d];
      rem /= g.shape[d];
    }
    y[i] = x[off];
  }
}

extern "C" int opd__copy_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  const opd_tview_t *x = &call->in[0];
  if (x->numel == 0) return 0;
  size_t esz = opd__dtype_size(x->dtype);
  cudaStream_t st = OPD_STREAM(ctx);
  copy_geom_t g;
  g.rank = 0;
  for (int d = 0; d < x->rank; d++) {
    if (x->shape[d] == 1) continue;
    if (g.rank > 0 && g.strides[g.rank - 1] == x->strides[d] * x->shape[d]) {
      g.shape[g.rank - 1] *= x->shape[d];
      g.strides[g.rank - 1] = x->strides[d];
    } else {
      g.shape[g.rank] = x->shape[d];
      g.strides[g.rank] = x->strides[d];
      g.rank++;
    }
  }
  if (g.rank == 0 || (g.rank == 1 && g.strides[0] == 1)) {
    OPD_CUDA_CHECK(cudaMemcpyAsync(call->out[0].data, x->data, (size_t)x->numel * esz,
                                   cudaMemcpyDeviceToDevice, st));
    return 0;
  }
  int64_t n = x->numel;
  unsigned grid = grid_for(n, 256);
  switch (esz) {
    case 1: copy_gather<uint8_t><<<grid, 256, 0, st>>>((const uint8_t *)x->data, (uint8_t *)call->out[0].data, n, g); break;
    case 2: copy_gather<uint16_t><<<grid, 256, 0, st>>>((const uint16_t *)x->data, (uint16_t *)call->out[0].data, n, g); break;
    case 4: copy_gather<uint32_t><<<grid, 256, 0, st>>>((const uint32_t *)x->data, (uint32_t *)call->out[0].data, n, g); break;
    case 8: copy_gather<uint64_t><<<grid, 256, 0, st>>>((const uint64_t *)x->data, (uint64_t *)call->out[0].data, n, g); break;
    default: return opd__kerr(call, OPD_EDTYPE, "element size %zu has no CUDA copy", esz);
  }
  OPD_CUDA_LAUNCHED();
  return 0;
}
