/* The unary family on the GPU (relu, gelu, silu, sigmoid, tanh):
 * y[i] = f(x[i]), float32 / float16 / bfloat16 computed in float, float64
 * in double (rows: ops.c).
 *
 * DESIGN
 * Memory-bound: the goal is copy bandwidth, which on the GPU this was
 * tuned on (bench/results/2026-11-30-h200-kernels.txt) needs about
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
 * at 79% (float32) / 43% (bfloat16) of copy bandwidth, mostly limited by
 * gelu's arithmetic (2026-11-30, bench/results/2026-11-30-h200-kernels.txt);
 * this one has no such record yet (gpu_kernels --bench --op gelu).
 * Variants (every op): tiles of 4 x 256 16-byte packs per block when x and
 * y are 16-byte aligned, else a scalar grid-stride kernel; the dtype is
 * the template parameter, the op a functor. A new op of the family: its
 * functor and its extern "C" entry point at the end of this file.
 * Tests: build/tests/gpu_kernels (op=relu, op=gelu).
 */
#include <string.h>

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

/* ---- float64, every op: the CPU reference's formulas in double
 * (kernels/unary/cpu.c), one element per thread of the scalar grid-stride
 * kernel (float64 is not the bandwidth-tuned path).
 * Test: build/tests/gpu_kernels --op f64 (against the CPU's float64).
 */
template <typename F>
static int unary64(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, F f) {
  int64_t n = call->in[0].numel;
  if (n == 0) return 0;
  unary_scalar<double, F><<<grid_for(n, 256), 256, 0, OPD_STREAM(ctx)>>>(
      (const double *)call->in[0].data, (double *)call->out[0].data, n, f);
  OPD_CUDA_LAUNCHED();
  return 0;
}

struct Relu64 {
  __device__ double operator()(double v) const { return v < 0 ? 0.0 : v; }
};
struct Gelu64 {
  __device__ double operator()(double v) const {
    return 0.5 * v * erfc(-v * 0.70710678118654752440);
  }
};
struct GeluTanh64 {
  __device__ double operator()(double v) const {
    double u = 0.79788456080286535588 * (v + 0.044715 * v * v * v);
    double e = exp(-2.0 * fabs(u)); /* in [0, 1]: never overflows */
    return u >= 0 ? v / (1.0 + e) : v * e / (1.0 + e);
  }
};
struct Silu64 {
  __device__ double operator()(double v) const { return v / (1.0 + exp(-v)); }
};
struct Sigmoid64 {
  __device__ double operator()(double v) const { return 1.0 / (1.0 + exp(-v)); }
};
struct Tanh64 {
  __device__ double operator()(double v) const { return tanh(v); }
};

/* An entry point's float64 call: the op's double functor F64. */
#define UNARY64(F64)                                                         \
  if (call->in[0].dtype == OPD_DTYPE_FLOAT64) return unary64(call, ctx, F64())

/* ---- relu on the GPU: y = x < 0 ? 0 : x (NaN passes through, as torch),
 * float32 / float16 / bfloat16.
 *
 * Variants (the family's, above): 16-byte packs when x and y are
 * 16-byte aligned, else scalar; the dtype is the template parameter.
 * Test: build/tests/gpu_kernels (op=relu); bench: build/tests/gpu_kernels
 * --bench does not time relu (same kernel as gelu, less arithmetic).
 */

struct ReluF {
  __device__ float operator()(float v) const { return v < 0.0f ? 0.0f : v; }
};

extern "C" int opd__relu_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  UNARY64(Relu64);
  return unary_run(call, ctx, ReluF());
}

/* ---- gelu on the GPU, float32 / float16 / bfloat16, computed in float.
 *
 * Forms (attribute approximate):
 *   none  y = x Phi(x), Phi(x) = 0.5 erfc(-x/sqrt2), through
 *         q = Phi(-|x|) = 0.5 erfc(|x|/sqrt2) in (0, 1/2]:
 *           x < 0:  y = x q          (no cancellation: q keeps its
 *                                     relative accuracy far into the tail)
 *           x >= 0: y = x (1 - q)    (q <= 1/2: 1 - q loses nothing)
 *         with q from one formula, no branch (GeluErf below):
 *           t = 1 / (1 + kappa a),  q = t 2^(P(t) - a^2 log2(e) / 2),
 *         P a minimax polynomial in t over a = |x| in [0, 14] (beyond 14
 *         q < 1e-44 is 0 in float), fitted in the log2 domain so the error
 *         of q is relative; rcp and ex2 are the MUFU approximations
 *         (rcp.approx / ex2.approx.ftz, 1-2 ulp). Two fits:
 *           float32            degree 7, fit error 2.4e-7 relative
 *           float16, bfloat16  degree 5, fit error 6.4e-6 relative (1/40
 *                              of a float16 ulp, 1/300 of a bfloat16 ulp)
 *         End to end (simulated in float32 against mpmath, per |x| bin),
 *         float32 relative error: <= 6e-7 for |x| < 2, 1.3e-6 for
 *         |x| < 4, 3e-6 at x = -6 (where a 1-ulp change of x itself moves y
 *         by a^2 * 6e-8: the rounding of a^2 costs the same), i.e. < 4% of
 *         gpu_kernels' float32 tolerance 1e-6 + 1e-5|ref| everywhere.
 *         About 16 float instructions + 2 MUFU per element, against CUDA's
 *         normcdff (erfcf with its extra-precision steps), which made the
 *         previous kernel compute-bound: 164 us for float32 and 159 us for
 *         bfloat16 on 8192 x 8192 (79% / 43% of copy bandwidth; torch
 *         130 us / 90 us: 2026-11-30,
 *         bench/results/2026-11-30-h200-kernels.txt).
 *         x = +inf gives +inf, x = -inf gives NaN (= -inf * 0, as the CPU
 *         reference and torch's 0.5x(1+erf) form), NaN gives NaN.
 *   tanh  y = x / (1 + 2^(-2 log2(e) u)), u = sqrt(2/pi)(x + 0.044715x^3),
 *         which equals 0.5x(1+tanh(u)) without its cancellation for
 *         negative x; ex2.approx and rcp.approx (was: expf and an IEEE
 *         division).
 * Float range, both forms: exact (to the errors above) for every finite
 * x. At the ends nothing saturates: for x far below 0 the exponent is
 * +inf (x^3 overflows in tanh's), ex2 gives inf, rcp(inf) 0 and y = x * 0
 * = -0 (the CPU fast kernel's expf saturated there and gave -1.5 at
 * -3.4e38 before it was fixed); erf's t = rcp(1 + kappa |x|) flushes to 0
 * and q = 0. Results below ~1e-38 in magnitude (x in [-10.1, -10] for tanh,
 * near -13 for erf) come out 0 (the .ftz approximations). x = +inf gives
 * +inf, -inf NaN, NaN NaN in both forms: torch 1.13's values. The same in
 * float16 and bfloat16, whose values convert to float exactly.
 * Variants (the family's, above): tiles of 4 x 256 16-byte packs per
 * block when x and y are 16-byte aligned, else a scalar grid-stride
 * kernel.
 * Test: build/tests/gpu_kernels --op gelu (shapes with odd tails, x in
 * [-6, 6], each dtype, both forms: "gpu op=gelu" and "gpu op=gelu[tanh]"
 * lines; "[extreme]" ones for +-FLT_MAX .. denormals, inf, NaN); bench: build/tests/gpu_kernels --bench --op gelu ("bench
 * op=gelu" lines, pct_copy against a D2D copy of the same bytes; float32,
 * float16, bfloat16 8192 x 8192). The new form has no bench/results
 * record yet.
 */

__device__ __forceinline__ float rcp_approx(float v) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}
__device__ __forceinline__ float ex2_approx(float v) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}

/* gelu(x) = x Phi(x); DEG 7 (float32) or 5 (half types), see the header.
 * kappa and the coefficients of P come from a linear-programming minimax
 * fit of P(t) = log2(q / t) + a^2 log2(e) / 2 on a dense grid of t (mpmath
 * for erfc), kappa chosen to minimize the fit error for the degree. */
template <int DEG>
struct GeluErf {
  __device__ float operator()(float x) const {
    float a = fabsf(x), t, p;
    if (DEG == 7) {
      t = rcp_approx(fmaf(a, 3.344667554e-01f, 1.0f)); /* kappa */
      p = -2.834053338e-01f;
      p = fmaf(p, t, 1.240591884e+00f);
      p = fmaf(p, t, -1.910109282e+00f);
      p = fmaf(p, t, 1.027321935e+00f);
      p = fmaf(p, t, -2.488401979e-01f);
      p = fmaf(p, t, 6.471383572e-01f);
      p = fmaf(p, t, 1.432634234e+00f);
      p = fmaf(p, t, -2.905332088e+00f);
    } else {
      t = rcp_approx(fmaf(a, 3.495646119e-01f, 1.0f));
      p = 3.334463835e-01f;
      p = fmaf(p, t, -1.053597927e+00f);
      p = fmaf(p, t, 7.443009615e-01f);
      p = fmaf(p, t, 3.456268311e-01f);
      p = fmaf(p, t, 1.474286795e+00f);
      p = fmaf(p, t, -2.844053745e+00f);
    }
    /* q = t 2^(P(t) - a^2 log2(e)/2) = Phi(-|x|) */
    float q = t * ex2_approx(fmaf(a * -7.213475108e-01f, a, p));
    return x * (x < 0.0f ? q : 1.0f - q);
  }
};

struct GeluTanh {
  __device__ float operator()(float x) const {
    /* -2 log2(e) sqrt(2/pi) and that times 0.044715 */
    const float k = -2.302208198144325f, k3 = -0.10294324054522f;
    float e = ex2_approx(x * fmaf(k3, x * x, k));
    return x * rcp_approx(1.0f + e);
  }
};

extern "C" int opd__gelu_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  if (call->attr[0].type == OPD_ATTR_STR && strcmp(call->attr[0].s, "tanh") == 0) {
    UNARY64(GeluTanh64);
    return unary_run(call, ctx, GeluTanh());
  }
  UNARY64(Gelu64);
  if (call->in[0].dtype == OPD_DTYPE_FLOAT32) return unary_run(call, ctx, GeluErf<7>());
  return unary_run(call, ctx, GeluErf<5>());
}

/* ---- silu, sigmoid, tanh on the GPU, float32 / float16 / bfloat16,
 * computed in float with CUDA's accurate expf / tanhf (2 ulp; these are
 * not the bandwidth-tuned ops): silu v / (1 + e^-v), sigmoid 1 / (1 +
 * e^-v), tanh tanhf(v). silu(-inf) is NaN, as the CPU reference.
 * Variants (the family's, above).
 * Test: build/tests/gpu_kernels (op=silu, op=sigmoid, op=tanh).
 */

struct SiluF {
  __device__ float operator()(float v) const { return v / (1.0f + expf(-v)); }
};
struct SigmoidF {
  __device__ float operator()(float v) const { return 1.0f / (1.0f + expf(-v)); }
};
struct TanhF {
  __device__ float operator()(float v) const { return tanhf(v); }
};

extern "C" int opd__silu_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  UNARY64(Silu64);
  return unary_run(call, ctx, SiluF());
}
extern "C" int opd__sigmoid_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  UNARY64(Sigmoid64);
  return unary_run(call, ctx, SigmoidF());
}
extern "C" int opd__tanh_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  UNARY64(Tanh64);
  return unary_run(call, ctx, TanhF());
}
