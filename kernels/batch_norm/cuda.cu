/* batch_norm on the GPU (inference), float32 / float16 / bfloat16 (x and
 * the per-channel tensors of one dtype), computed in float (row: op.c).
 *
 * DESIGN
 * A thread per element (grid-stride) of x seen as (N, C, L): channel
 * c = (i / L) % C, y = (x - mean) rsqrt(var + eps) w + b, the statistics
 * read through the cache (C values shared by every thread). No scratch,
 * no synchronization: it may be captured into a CUDA graph. In place
 * works (element-wise).
 * Test: build/tests/gpu_kernels (op=batch_norm).
 */
#include "kernels/cuda/common.cuh"

template <typename T>
__global__ void bn_kernel(const T *x, T *y, const T *mean, const T *var, const T *w,
                          const T *b, int64_t n, int64_t C, int64_t L, float eps) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t c = (i / L) % C;
    float v = (to_f(x[i]) - to_f(mean[c])) * rsqrtf(to_f(var[c]) + eps);
    if (w) v *= to_f(w[c]);
    if (b) v += to_f(b[c]);
    y[i] = from_f<T>(v);
  }
}

extern "C" int opd__batch_norm_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  const opd_tview_t *xv = &call->in[0];
  int64_t n = xv->numel, C = xv->shape[1], L = 1;
  for (int d = 2; d < xv->rank; d++) L *= xv->shape[d];
  if (n == 0) return 0;
  cudaStream_t st = OPD_STREAM(ctx);
  OPD_FLOAT_DISPATCH(xv->dtype, return opd__cuda_bad_dtype(call, xv->dtype),
    const T *w = call->n_in > 3 ? (const T *)call->in[3].data : NULL;
    const T *b = call->n_in > 4 ? (const T *)call->in[4].data : NULL;
    bn_kernel<T><<<grid_for(n, 256), 256, 0, st>>>(
        (const T *)xv->data, (T *)call->out[0].data, (const T *)call->in[1].data,
        (const T *)call->in[2].data, w, b, n, C, L, (float)call->attr[0].f);
  )
  OPD_CUDA_LAUNCHED();
  return 0;
}
