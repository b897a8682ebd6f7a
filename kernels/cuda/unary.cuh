/* Elementwise unary kernels on the GPU (relu, gelu): y[i] = f(x[i]).
 *
 * DESIGN
 * Memory-bound: the goal is copy bandwidth, which on the H200 needs about
 * 30 KB of loads in flight per SM. A block of 256 threads owns a tile of
 * 4 x 256 16-byte packs (4 floats / 8 halves each): every thread issues
 * its 4 loads (coalesced: pack k of the tile at k * 256 + thread) before
 * it computes and stores any, so 64 bytes per thread are in flight; the
 * grid is one block per tile (a grid-stride loop over tiles past 2^31
 * blocks). Loads are streamed (read once). f runs in float; 2-byte dtypes
 * are converted in pairs (one cvt for two results, __floats2half2_rn /
 * __floats2bfloat162_rn). The n % 8 (or n % 4) tail after the last whole
 * pack is done by block 0 in the same launch; a scalar grid-stride kernel
 * does everything when x or y is not 16-byte aligned.
 * In place (y == x) is fine: each element is read before it is written by
 * the same thread, and no other thread touches it.
 * f is a functor with `__device__ float operator()(float) const`.
 * The previous layout (one pack per thread per grid-stride iteration, the
 * grid capped at 16 blocks per SM, each element converted alone) ran gelu
 * at 79% (float32) / 43% (bfloat16) of copy bandwidth on the H200, mostly
 * limited by gelu's arithmetic; this one is not yet measured there
 * (gpu_kernels --bench --op gelu).
 */
#ifndef OPD_KERNELS_CUDA_UNARY_CUH
#define OPD_KERNELS_CUDA_UNARY_CUH

#include "kernels/cuda/common.cuh"

#define UNARY_THREADS 256          /* threads per block */
#define UNARY_UNROLL 4             /* 16-byte packs per thread per tile */

/* f over the elements of one pack, computed in float. */
template <typename F>
__device__ __forceinline__ void unary_pack(Pack<float> &p, const F &f) {
#pragma unroll
  for (int k = 0; k < 4; k++) p.v[k] = f(p.v[k]);
}
/* Two 2-byte values in one 32-bit word of a pack: unpacked to float, f,
 * packed back with one cvt (cvt.rn.f16x2.f32 / cvt.rn.bf16x2.f32). */
template <typename H2> union Word2 {
  int i;
  H2 h;
};
template <typename F>
__device__ __forceinline__ int unary_word(int w, const F &f, __half) {
  Word2<__half2> a, r;
  a.i = w;
  float2 v = __half22float2(a.h);
  r.h = __floats2half2_rn(f(v.x), f(v.y));
  return r.i;
}
template <typename F>
__device__ __forceinline__ int unary_word(int w, const F &f, __nv_bfloat16) {
  Word2<__nv_bfloat162> a, r;
  a.i = w;
  float2 v = __bfloat1622float2(a.h);
  r.h = __floats2bfloat162_rn(f(v.x), f(v.y));
  return r.i;
}
template <typename T, typename F>
__device__ __forceinline__ void unary_pack(Pack<T> &p, const F &f) {
  p.raw.x = unary_word(p.raw.x, f, T());
  p.raw.y = unary_word(p.raw.y, f, T());
  p.raw.z = unary_word(p.raw.z, f, T());
  p.raw.w = unary_word(p.raw.w, f, T());
}

/* x, y 16-byte aligned; n elements, npack = n / Pack<T>::N whole packs. */
template <typename T, typename F>
__global__ __launch_bounds__(UNARY_THREADS) void unary_vec(const T *x, T *y, int64_t n,
                                                           int64_t npack, F f) {
  constexpr int N = Pack<T>::N;
  opd__pdl_wait(); /* a dependent launch (opd__cuda_pdl_offer): the kernel */
  opd__pdl_trigger(); /* before has ended; the daemon's word may start */
  const int64_t tile = (int64_t)UNARY_UNROLL * UNARY_THREADS;
  for (int64_t base = (int64_t)blockIdx.x * tile; base < npack;
       base += (int64_t)gridDim.x * tile) {
    Pack<T> p[UNARY_UNROLL];
#pragma unroll
    for (int k = 0; k < UNARY_UNROLL; k++) {
      int64_t i = base + k * UNARY_THREADS + threadIdx.x;
      p[k].raw = make_int4(0, 0, 0, 0);
      if (i < npack) p[k] = load_pack_cs(x + i * N);
    }
#pragma unroll
    for (int k = 0; k < UNARY_UNROLL; k++) unary_pack(p[k], f);
#pragma unroll
    for (int k = 0; k < UNARY_UNROLL; k++) {
      int64_t i = base + k * UNARY_THREADS + threadIdx.x;
      if (i < npack) store_pack(y + i * N, p[k]);
    }
  }
  if (blockIdx.x == 0)
    for (int64_t i = npack * N + threadIdx.x; i < n; i += UNARY_THREADS)
      y[i] = from_f<T>(f(to_f(x[i])));
}

template <typename T, typename F>
__global__ void unary_scalar(const T *x, T *y, int64_t n, F f) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
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
    if (aligned16(x) && aligned16(y)) {
      int64_t np = n / Pack<T>::N;
      int64_t tiles = (np + UNARY_UNROLL * UNARY_THREADS - 1) / (UNARY_UNROLL * UNARY_THREADS);
      unsigned grid = (unsigned)(tiles < 1 ? 1 : tiles > INT32_MAX ? INT32_MAX : tiles);
      if (opd__cuda_pdl_offered()) { /* the daemon's ordered run */
        cudaLaunchAttribute at;
        cudaLaunchConfig_t cfg = opd__pdl_config(dim3(grid), dim3(UNARY_THREADS), st, &at);
        OPD_CUDA_CHECK(cudaLaunchKernelEx(&cfg, unary_vec<T, F>, x, y, n, np, f));
        opd__cuda_pdl_took();
      } else {
        unary_vec<T, F><<<grid, UNARY_THREADS, 0, st>>>(x, y, n, np, f);
      }
    } else {
      unary_scalar<T, F><<<grid_for(n, 256), 256, 0, st>>>(x, y, n, f);
    }
  )
  OPD_CUDA_LAUNCHED();
  return 0;
}

#endif /* OPD_KERNELS_CUDA_UNARY_CUH */
