/* Device-side helpers shared by the CUDA kernels (CUDA C++ only): error
 * checks that return, dtype dispatch, 16-byte vector packs, reductions.
 *
 * DESIGN
 * Every kernel computes in float and loads / stores its tensor dtype
 * (float, __half, __nv_bfloat16) through `to_f` / `from_f`, so one
 * template serves the three dtypes; float64 (double) passes through them
 * unchanged, for the kernels whose arithmetic is a template on to_f's
 * type (OPD_FLOAT_DISPATCH64). Memory-bound kernels move 16 bytes per
 * thread per access (Pack<T>: 4 floats or 8 halves) when the pointers are
 * 16-byte aligned and the row length is a multiple of the pack, else one
 * element at a time. Errors never exit: OPD_CUDA_CHECK returns
 * OPD_EBACKEND with "cuda: <message> (file:line)" in call->err (llm.c's
 * cudaCheck, made to return).
 */
#ifndef OPD_KERNELS_CUDA_COMMON_CUH
#define OPD_KERNELS_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cuda/cuda.h"

extern "C" {
#include "kernels/common/kutil.h"
}

/* griddepcontrol (PTX ISA 7.8, sm_90), both no-ops in a kernel that was not
 * a dependent launch: wait for the kernel before on the stream to end (its
 * writes visible); let the kernel after start (it waits for our end). */
__device__ __forceinline__ void opd__pdl_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void opd__pdl_trigger(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* A launch of grid x block on st as a programmatic dependent launch of the
 * kernel before it on the stream (kernels/cuda/cuda.h, opd__cuda_pdl_offer);
 * *at is the one attribute's storage. */
static inline cudaLaunchConfig_t opd__pdl_config(dim3 grid, dim3 block, cudaStream_t st,
                                                 cudaLaunchAttribute *at) {
  cudaLaunchConfig_t cfg = {};
  at->id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at->val.programmaticStreamSerializationAllowed = 1;
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.stream = st;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  return cfg;
}

/* Sets call->err to "cuda: <msg> (file:line)"; returns OPD_EBACKEND. */
static inline int opd__cuda_fail(opd_kcall_t *call, cudaError_t e,
                                 const char *file, int line) {
  return opd__kerr(call, OPD_EBACKEND, "cuda: %s (%s:%d)",
                   cudaGetErrorString(e), file, line);
}

/* Evaluates a cudaError_t expression; on failure returns from the
 * enclosing function with OPD_EBACKEND (needs `call` in scope). */
#define OPD_CUDA_CHECK(expr)                                            \
  do {                                                                  \
    cudaError_t e_ = (expr);                                            \
    if (e_ != cudaSuccess) return opd__cuda_fail(call, e_, __FILE__, __LINE__); \
  } while (0)

/* After a <<<>>> launch: returns OPD_EBACKEND if the launch failed. */
#define OPD_CUDA_LAUNCHED() OPD_CUDA_CHECK(cudaGetLastError())

#define OPD_STREAM(ctx) ((cudaStream_t)(ctx)->stream)

/* ---- dtypes ------------------------------------------------------------ */
__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f<__half>(float v) {
  return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

/* float64: loaded and stored as it is, computed in double by the
 * families whose functors are templates on the compute type (from_f<T>
 * of a double picks this overload). */
__device__ __forceinline__ double to_f(double v) { return v; }
template <typename T> __device__ __forceinline__ T from_f(double v);
template <> __device__ __forceinline__ double from_f<double>(double v) { return v; }

/* Runs the statements after `bad` with T bound to the element type of
 * float dtype `dt` (float32, float16, bfloat16); other dtypes run `bad`. */
#define OPD_FLOAT_DISPATCH(dt, bad, ...)                                  \
  switch (dt) {                                                          \
    case OPD_DTYPE_FLOAT32: { typedef float T; __VA_ARGS__ } break;         \
    case OPD_DTYPE_FLOAT16: { typedef __half T; __VA_ARGS__ } break;        \
    case OPD_DTYPE_BFLOAT16: { typedef __nv_bfloat16 T; __VA_ARGS__ } break; \
    default: bad;                                                        \
  }

/* OPD_FLOAT_DISPATCH and float64 (T = double), for the kernels that
 * compute in to_f's type. */
#define OPD_FLOAT_DISPATCH64(dt, bad, ...)                                \
  switch (dt) {                                                          \
    case OPD_DTYPE_FLOAT32: { typedef float T; __VA_ARGS__ } break;         \
    case OPD_DTYPE_FLOAT16: { typedef __half T; __VA_ARGS__ } break;        \
    case OPD_DTYPE_BFLOAT16: { typedef __nv_bfloat16 T; __VA_ARGS__ } break; \
    case OPD_DTYPE_FLOAT64: { typedef double T; __VA_ARGS__ } break;        \
    default: bad;                                                        \
  }

/* Returns OPD_EDTYPE (defensive: the schema and the table already keep
 * other dtypes out). */
static inline int opd__cuda_bad_dtype(opd_kcall_t *call, int32_t dt) {
  return opd__kerr(call, OPD_EDTYPE, "dtype %d has no CUDA kernel", (int)dt);
}

/* ---- 16-byte packs ----------------------------------------------------- */
template <typename T> struct Pack {
  static constexpr int N = 16 / sizeof(T);
  union {
    int4 raw;
    T v[16 / sizeof(T)];
  };
};

template <typename T>
__device__ __forceinline__ Pack<T> load_pack(const T *p) {
  Pack<T> k;
  k.raw = __ldg(reinterpret_cast<const int4 *>(p));
  return k;
}
/* Streaming load for data read once (evict-first in L1/L2). */
template <typename T>
__device__ __forceinline__ Pack<T> load_pack_cs(const T *p) {
  Pack<T> k;
  k.raw = __ldcs(reinterpret_cast<const int4 *>(p));
  return k;
}
template <typename T>
__device__ __forceinline__ void store_pack(T *p, const Pack<T> &k) {
  *reinterpret_cast<int4 *>(p) = k.raw;
}

static inline bool aligned16(const void *p) {
  return ((uintptr_t)p & 15u) == 0;
}

/* ---- reductions -------------------------------------------------------- */
/* Sum over the `width` lanes of a group inside a warp (width a power of
 * two <= 32); every lane of the group gets the result. */
template <int width>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = width / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o, width);
  return v;
}
template <int width>
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int o = width / 2; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o, width));
  return v;
}

/* Sum over a whole block of THREADS threads (a multiple of 32, <= 1024);
 * every thread gets the result. `sh` holds 32 floats; the function syncs
 * before returning so sh may be reused. */
template <int THREADS>
__device__ __forceinline__ float block_sum(float v, float *sh) {
  v = group_sum<32>(v);
  if (THREADS == 32) return v;
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < THREADS / 32 ? sh[lane] : 0.0f;
  v = group_sum<32>(v);
  __syncthreads();
  return v;
}

/* Blocks for a grid-stride loop over n items of `threads` threads: enough
 * to fill every SM a few times over, no more. */
static inline unsigned grid_for(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  const int64_t cap = 132 * 16; /* 132 SMs x 16 blocks of 128..256 */
  if (b > cap) b = cap;
  return (unsigned)(b < 1 ? 1 : b);
}

#endif /* OPD_KERNELS_CUDA_COMMON_CUH */
