/* embedding on the GPU: one thread per unit of y (the widest of 16..1
 * bytes dividing a row and the addresses: kernels/shape/move.cuh), its
 * row's index read once per unit. An index outside [0, V) gives a row of
 * zeros (no error can come back from a captured graph; the CPU backend
 * refuses it: kernels/embedding/op.c).
 *
 * Test: build/tests/gpu_kernels --op embedding
 */
#include "kernels/cuda/common.cuh"
#include "kernels/shape/move.cuh"

template <typename U, typename I>
__global__ void embedding_kernel(const U *w, const I *idx, U *y, int64_t total, int64_t row,
                                 int64_t V) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    int64_t r = i / row, c = i - r * row;
    int64_t v = (int64_t)idx[r];
    U z;
    memset(&z, 0, sizeof z);
    y[i] = v >= 0 && v < V ? w[v * row + c] : z;
  }
}

extern "C" int opd__embedding_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  const opd_tview_t *w = &call->in[0], *idx = &call->in[1];
  int64_t bytes = w->shape[1] * (int64_t)opd__dtype_size(w->dtype);
  if (bytes == 0 || idx->numel == 0) return 0;
  int unit = opd__move_unit((uint64_t)bytes | (uint64_t)(uintptr_t)w->data |
                            (uint64_t)(uintptr_t)call->out[0].data);
  int64_t row = bytes / unit, total = row * idx->numel;
  cudaStream_t st = OPD_STREAM(ctx);
  unsigned grid = grid_for(total, 256);
  if (idx->dtype == OPD_DTYPE_INT32) {
    OPD_MOVE_DISPATCH(unit, return opd__cuda_bad_dtype(call, w->dtype),
                      embedding_kernel<U, int32_t><<<grid, 256, 0, st>>>(
                          (const U *)w->data, (const int32_t *)idx->data,
                          (U *)call->out[0].data, total, row, w->shape[0]););
  } else {
    OPD_MOVE_DISPATCH(unit, return opd__cuda_bad_dtype(call, w->dtype),
                      embedding_kernel<U, int64_t><<<grid, 256, 0, st>>>(
                          (const U *)w->data, (const int64_t *)idx->data,
                          (U *)call->out[0].data, total, row, w->shape[0]););
  }
  OPD_CUDA_LAUNCHED();
  return 0;
}
