/* Elementwise unary kernels on the GPU (relu, gelu): y[i] = f(x[i]).
 *
 * DESIGN
 * One grid-stride kernel over 16-byte packs (4 floats / 8 halves), loads
 * streamed (read once), f applied in float, stored in the tensor dtype;
 * a scalar kernel when x or y is not 16-byte aligned, and for the tail.
 * In place (y == x) is fine: each element is read before it is written by
 * the same thread. The grid is capped (grid_for) so that each thread has
 * several packs, with the next load issued before the previous store.
 */
#ifndef OPD_KERNELS_CUDA_UNARY_CUH
#define OPD_KERNELS_CUDA_UNARY_CUH

#include "kernels/cuda/common.cuh"

template <typename T, typename F>
__global__ void unary_vec(const T *x, T *y,
                          int64_t npack, F f) {
  constexpr int N = Pack<T>::N;
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < npack;
       i += stride) {
    Pack<T> p = load_pack_cs(x + i * N);
#pragma unroll
    for (int k = 0; k < N; k++) p.v[k] = from_f<T>(f(to_f(p.v[k])));
    store_pack(y + i * N, p);
  }
}

template <typename T, typename F>
__global__ void unary_scalar(const T *x, T *y,
                             int64_t begin, int64_t n, F f) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = begin + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride)
    y[i] = from_f<T>(f(to_f(x[i])));
}

/* Runs y = f(x) over x's numel on ctx's stream; 0 or OPD_EBACKEND. */
template <typename F>
static int unary_run(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, F f) {
  const opd_tview_t *xv = &call->in[0];
  int64_t n = xv->numel;
  if (n == 0) return 0;
  cudaStream_t st = OPD_STREAM(ctx);
  OPD_FLOAT_DISPATCH(xv->dtype, return opd__cuda_bad_dtype(call, xv->dtype),
    const T *x = (const T *)xv->data;
    T *y = (T *)call->out[0].data;
    int64_t done = 0;
    if (aligned16(x) && aligned16(y)) {
      int64_t np = n / Pack<T>::N;
      if (np > 0) {
        unary_vec<T, F><<<grid_for(np, 256), 256, 0, st>>>(x, y, np, f);
        done = np * Pack<T>::N;
      }
    }
    if (done < n)
      unary_scalar<T, F><<<grid_for(n - done, 256), 256, 0, st>>>(x, y, done, n, f);
  )
  OPD_CUDA_LAUNCHED();
  return 0;
}

#endif /* OPD_KERNELS_CUDA_UNARY_CUH */
