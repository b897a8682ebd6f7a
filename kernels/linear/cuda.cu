/* linear on the GPU: out (M, N) = act(x (M, K) @ weight (N, K)^T + bias),
 * float32 (true fp32, TF32 off, as torch's default), float16 and bfloat16
 * (fp32 accumulation), float64 (cuBLASLt in double, then bias and act in
 * double: linear64, every variant).
 *
 * Variants (opd__linear_cuda_variant, linear.h; AUTO is what
 * opd__linear_cuda runs):
 *   gemv    M <= 8 (x's leading dims): a GEMV kernel of our own, one
 *           launch, bias and act on the fp32 sum, one rounding
 *   blaslt  M > 8: cuBLASLt (kernels/cuda/gemm.cu) with its epilogues
 *
 * DESIGN
 * At batch 1 (the trading MLP's 256 -> 512 -> 512 -> 1) the product is
 * a matrix-vector one: reading W once is the whole cost, while cuBLASLt
 * runs a GEMM tile kernel for M = 1 (and, outside a CUDA graph, asks its
 * heuristic on the host at every call). That MLP through opd as a graph
 * on device tensors took p50 49.1 us per request against 30.4 us for
 * torch's own CUDA graph replay (2026-12-07,
 * bench/results/2026-12-07-h100-graph-mlp.txt); `gpu_kernels --bench --op
 * linear` times both variants side by side.
 * gemv_kernel: W is in torch's (N, K) layout, so output n reads one
 * contiguous row. A block of 4 warps takes 4 rows (a warp per row: N =
 * 512 gives 128 blocks, about one per SM), or 2 / 1 rows whose K is split
 * over S = 2 / 4 warps when the rows give few warps and K is long (S
 * doubles while N * S < 1024 and every lane keeps >= 4 vectors: 512 -> 1
 * stays one warp, 8192 -> 1 takes 4). Each lane loads 16 bytes of W at a
 * time (4 floats, 8 halves) when W's address and a row's bytes allow it,
 * else 4 bytes (2 halves) or one element (arena offsets may leave W
 * 4-byte aligned only), 4 loads in flight. x is staged in shared memory
 * as float, once per block, a chunk of K at a time (at most 4096 floats:
 * all of K up to 4096 at M = 1, 512 per chunk at M = 8; read 16 bytes at
 * a time where x's address and K's bytes allow, else an element at a
 * time), while the lane's first W vectors are prefetched; every lane
 * accumulates all M rows in fp32 (fmaf: no TF32), then a warp-shuffle sum
 * (a shared-memory sum over the S warps), the bias, act and one store per
 * output, one rounding.
 * The bound M <= 8: W is read once whatever M, but each 16 bytes of W
 * take M 16-byte reads of x from shared memory. At M = 8 those are 8x
 * W's bytes, about where shared memory's bandwidth per SM (128 B per
 * clock) meets an SM's share of DRAM's (some 15 B per clock); past it a
 * tiled GEMM that reuses W over M in registers (cuBLASLt) wins.
 * cuBLASLt variants, by activation, with a 16-byte aligned bias or none
 * (cuBLASLt's epilogues, applied to the fp32 accumulator, one rounding):
 *   none       EPILOGUE_BIAS (DEFAULT without bias)
 *   relu       EPILOGUE_RELU_BIAS (RELU)
 *   gelu_tanh  EPILOGUE_GELU_BIAS (GELU): cuBLASLt's GELU is the tanh form
 *   gelu, silu EPILOGUE_BIAS (DEFAULT), then act_kernel over the output
 *              (cuBLASLt has no erf gelu or silu)
 * A bias that is not 16-byte aligned (an arena offset of 4 mod 16, say),
 * or an epilogue cuBLASLt has no algorithm for (opd__cuda_gemm's
 * OPD_EINVAL), is added by act_kernel after a plain GEMM, together with
 * the activation. K == 0: the output is zeroed (cudaMemsetAsync) and
 * act_kernel writes act(bias) (gemv writes act(bias) itself). Everything
 * is enqueued on ctx's stream: no allocation, no synchronization, no host
 * read, so the call can be captured into a CUDA graph. Neither path takes
 * the programmatic dependent launch (kernels/cuda/cuda.h).
 * LinAct's formulas (in float, both paths): gelu 0.5v erfc(-v/sqrt2),
 * gelu_tanh v / (1 + e^(-2u)), silu v / (1 + e^(-v)), relu v < 0 ? 0 : v
 * (NaN passes; cuBLASLt's RELU epilogue may turn a NaN into 0, which only
 * an input holding NaN or inf can produce).
 * Test: build/tests/gpu_kernels --op linear (every act, bias or not, a
 * misaligned bias, W / x / bias off 16-byte alignment, M = 1, 3, 8, 9,
 * odd K, N = 1, each dtype, M <= 8 through both variants); bench:
 * build/tests/gpu_kernels --bench --op linear (both variants, and the
 * 3-layer MLP captured into a CUDA graph with each).
 */
#include "kernels/cuda/gemm.cuh"

extern "C" {
#include "kernels/linear/linear.h"
}

struct LinAct {
  int act;                         /* opd_act_t */
  __device__ float operator()(float v) const {
    switch (act) {
      case OPD_ACT_RELU: return v < 0.0f ? 0.0f : v;
      case OPD_ACT_GELU: return 0.5f * v * erfcf(-v * 0.70710678118654752f);
      case OPD_ACT_GELU_TANH: {
        float u = 0.79788456080286535f * (v + 0.044715f * v * v * v);
        return v / (1.0f + expf(-2.0f * u));
      }
      case OPD_ACT_SILU: return v / (1.0f + expf(-v));
      default: return v;
    }
  }
};

/* y[i] = act(y[i] + bias[i % N]) over the n = M * N outputs (bias may be
 * NULL). */
template <typename T>
__global__ void act_kernel(T *y, const T *bias, int64_t n, int64_t N, LinAct f) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float v = to_f(y[i]);
    if (bias) v += to_f(bias[i % N]);
    y[i] = from_f<T>(f(v));
  }
}

/* ---- GEMV: M <= GEMV_MAX_M ---------------------------------------------- */
#define GEMV_MAX_M 8
#define GEMV_WARPS 4          /* warps per block */
#define GEMV_XS_FLOATS 4096   /* x staged per chunk: MR rows x GEMV_XS_FLOATS/MR */
#define GEMV_UNROLL 4         /* W vectors in flight per lane */

/* The raw word of a VB-byte load. */
template <int VB> struct GemvRaw;
template <> struct GemvRaw<16> { typedef int4 t; };
template <> struct GemvRaw<4> { typedef int t; };
template <> struct GemvRaw<2> { typedef unsigned short t; };

/* VB bytes of W: VB / sizeof(T) elements, loaded at once. */
template <typename T, int VB> struct GemvVec {
  static constexpr int E = VB / (int)sizeof(T);
  union {
    typename GemvRaw<VB>::t raw;
    T v[VB / sizeof(T)];
  };
};

/* acc[m] += sum_j w[j] * xs[m][q*E + j] for the E elements of one W vector
 * (xs: the staged chunk, rows `pitch` floats apart, 16-byte aligned). */
template <typename T, int VB, int MR>
__device__ __forceinline__ void gemv_fma(float *acc, const GemvVec<T, VB> &w, const float *xs,
                                         int pitch, int q, int M) {
  constexpr int E = GemvVec<T, VB>::E;
  float wf[E];
#pragma unroll
  for (int j = 0; j < E; j++) wf[j] = to_f(w.v[j]);
#pragma unroll
  for (int m = 0; m < MR; m++) {
    if (m >= M) break;
    const float *xr = xs + m * pitch + q * E;
    float xv[E];
    if constexpr (E % 4 == 0) {
#pragma unroll
      for (int j = 0; j < E; j += 4) {
        float4 t = *reinterpret_cast<const float4 *>(xr + j);
        xv[j] = t.x, xv[j + 1] = t.y, xv[j + 2] = t.z, xv[j + 3] = t.w;
      }
    } else if constexpr (E == 2) {
      float2 t = *reinterpret_cast<const float2 *>(xr);
      xv[0] = t.x, xv[1] = t.y;
    } else {
      xv[0] = xr[0];
    }
#pragma unroll
    for (int j = 0; j < E; j++) acc[m] = fmaf(wf[j], xv[j], acc[m]);
  }
}

/* A gemv_kernel launch: pointers to the call's dtype, the split S, the
 * staged chunk's row pitch, whether x takes 16-byte loads. */
struct GemvArgs {
  const void *x, *w, *bias;        /* x (M, K), w (N, K), bias (N) or NULL */
  void *y;                         /* (M, N) */
  int M, N;
  int64_t K;
  int S;                           /* warps per row: 1, 2 or 4 */
  int pitch;                       /* floats per staged row of x, a multiple of 8 */
  int xvec;                        /* x and K's bytes 16-byte aligned */
  LinAct f;
};

/* xs (M, pitch) = x[:, k0:k0+kc] as float, by the whole block: 16 bytes
 * of x per load when a.xvec, else one element. */
template <typename T>
__device__ __forceinline__ void gemv_stage(float *xs, const GemvArgs &a, int64_t k0, int kc) {
  const T *x = (const T *)a.x;
  if (a.xvec) {
    constexpr int P = Pack<T>::N;
    int np = kc / P, n = a.M * np;
#pragma unroll 4
    for (int i = threadIdx.x; i < n; i += GEMV_WARPS * 32) {
      int m = i / np, j = (i - m * np) * P;
      Pack<T> t = load_pack(x + m * a.K + k0 + j);
#pragma unroll
      for (int e = 0; e < P; e++) xs[m * a.pitch + j + e] = to_f(t.v[e]);
    }
  } else {
    int n = a.M * kc;
#pragma unroll 4
    for (int i = threadIdx.x; i < n; i += GEMV_WARPS * 32) {
      int m = i / kc, j = i - m * kc;
      xs[m * a.pitch + j] = to_f(x[m * a.K + k0 + j]);
    }
  }
}

/* y (M, N) = act(x (M, K) @ w (N, K)^T + bias), M <= MR. A block is
 * GEMV_WARPS warps on GEMV_WARPS / S rows; the S warps of a row split its
 * K (S = 1, 2 or 4). Per chunk of K: the block stages x's chunk in shared
 * memory as float, then each lane reads its W vectors (VB bytes each;
 * VB divides w's address and K's bytes, so every row is aligned) and
 * accumulates all M rows in fp32. A warp-shuffle sum (and, for S > 1, a
 * sum over the S warps in shared memory), the bias and act, and lane m
 * stores y[m, n]. */
template <typename T, int VB, int MR>
__global__ void __launch_bounds__(GEMV_WARPS * 32) gemv_kernel(const GemvArgs a) {
  constexpr int E = GemvVec<T, VB>::E;
  extern __shared__ __align__(16) float xs[]; /* (M, pitch) */
  __shared__ float part[GEMV_WARPS][MR];
  const int M = a.M, S = a.S, pitch = a.pitch;
  const int64_t K = a.K;
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int64_t n = (int64_t)blockIdx.x * (GEMV_WARPS / S) + warp / S;
  int sub = warp % S, step = S * 32;
  bool live = n < a.N;
  const T *wr = (const T *)a.w + (live ? n : 0) * K;
  float acc[MR];
#pragma unroll
  for (int m = 0; m < MR; m++) acc[m] = 0.0f;
  if (live) /* the first W vectors on their way while x is staged */
    for (int u = 0; u < GEMV_UNROLL; u++) {
      int64_t q = sub * 32 + lane + (int64_t)u * step;
      if (q * E >= K) break;
      asm volatile("prefetch.L1 [%0];" ::"l"(wr + q * E));
    }
  for (int64_t k0 = 0; k0 < K; k0 += pitch) {
    int kc = (int)(K - k0 < pitch ? K - k0 : pitch); /* a multiple of E */
    if (k0) __syncthreads();                         /* the last chunk is used */
    gemv_stage<T>(xs, a, k0, kc);
    __syncthreads();
    if (!live) continue;
    const GemvVec<T, VB> *wv = reinterpret_cast<const GemvVec<T, VB> *>(wr + k0);
    int nq = kc / E;
    for (int q0 = sub * 32 + lane; q0 < nq; q0 += GEMV_UNROLL * step) {
      GemvVec<T, VB> v[GEMV_UNROLL];
#pragma unroll
      for (int u = 0; u < GEMV_UNROLL; u++) {
        int q = q0 + u * step;
        if (q < nq) v[u].raw = __ldg(&wv[q].raw);
      }
#pragma unroll
      for (int u = 0; u < GEMV_UNROLL; u++) {
        int q = q0 + u * step;
        if (q < nq) gemv_fma<T, VB, MR>(acc, v[u], xs, pitch, q, M);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < MR; m++) acc[m] = group_sum<32>(acc[m]);
  if (S > 1) {
    if (lane == 0)
#pragma unroll
      for (int m = 0; m < MR; m++) part[warp][m] = acc[m];
    __syncthreads();
    if (sub == 0)
#pragma unroll
      for (int m = 0; m < MR; m++) {
        float s = 0.0f;
        for (int i = 0; i < S; i++) s += part[warp + i][m];
        acc[m] = s;
      }
  }
  if (!live || sub != 0 || lane >= M) return;
  float v = 0.0f;
#pragma unroll
  for (int m = 0; m < MR; m++)
    if (m == lane) v = acc[m];
  if (a.bias) v += to_f(((const T *)a.bias)[n]);
  ((T *)a.y)[(int64_t)lane * a.N + n] = from_f<T>(a.f(v));
}

/* The cuBLASLt epilogue for act with or without the bias, and whether
 * act_kernel must still apply act. */
static int epilogue_for(opd_act_t act, bool bias, bool *post) {
  *post = false;
  switch (act) {
    case OPD_ACT_NONE: return bias ? OPD_GEMM_EPI_BIAS : OPD_GEMM_EPI_NONE;
    case OPD_ACT_RELU: return bias ? OPD_GEMM_EPI_RELU_BIAS : OPD_GEMM_EPI_RELU;
    case OPD_ACT_GELU_TANH: return bias ? OPD_GEMM_EPI_GELU_BIAS : OPD_GEMM_EPI_GELU;
    default: *post = true; return bias ? OPD_GEMM_EPI_BIAS : OPD_GEMM_EPI_NONE;
  }
}

/* The widest load, 16 or 4 bytes or one element, whose size divides the
 * matrix's address and its rows' bytes (K elements of esz), so that every
 * row starts aligned to it. */
static int gemv_vec_bytes(const void *m, int64_t K, size_t esz) {
  uint64_t a = (uint64_t)(uintptr_t)m | (uint64_t)K * esz;
  if (a % 16 == 0) return 16;
  if (a % 4 == 0 && esz < 4) return 4;
  return (int)esz;
}

template <typename T, int VB>
static void gemv_launch_vb(int MR, dim3 grid, size_t smem, cudaStream_t st, const GemvArgs &a) {
  switch (MR) {
    case 1: gemv_kernel<T, VB, 1><<<grid, GEMV_WARPS * 32, smem, st>>>(a); break;
    case 2: gemv_kernel<T, VB, 2><<<grid, GEMV_WARPS * 32, smem, st>>>(a); break;
    case 4: gemv_kernel<T, VB, 4><<<grid, GEMV_WARPS * 32, smem, st>>>(a); break;
    default: gemv_kernel<T, VB, 8><<<grid, GEMV_WARPS * 32, smem, st>>>(a); break;
  }
}

/* out (M, N) through gemv_kernel; M <= GEMV_MAX_M, N <= INT32_MAX. */
static int linear_gemv(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, const linear_plan_t *p,
                       const void *bias) {
  int32_t dt = call->out[0].dtype;
  size_t esz = opd__dtype_size(dt);
  GemvArgs a = {call->in[0].data, call->in[1].data, bias, call->out[0].data, (int)p->M,
                (int)p->N, p->K, 1, 0, 0, {(int)p->act}};
  int MR = a.M <= 1 ? 1 : a.M <= 2 ? 2 : a.M <= 4 ? 4 : 8;
  int vb = gemv_vec_bytes(a.w, p->K, esz);
  a.xvec = gemv_vec_bytes(a.x, p->K, esz) == 16;
  int64_t nvec = p->K / (vb / (int64_t)esz);
  /* split K over S warps while the rows give few warps and each lane keeps
   * a full round of loads */
  while (a.S < GEMV_WARPS && p->N * a.S < 1024 &&
         nvec >= (int64_t)a.S * 2 * 32 * GEMV_UNROLL)
    a.S *= 2;
  int64_t kr = (p->K + 7) / 8 * 8;
  a.pitch = (int)(kr < GEMV_XS_FLOATS / MR ? kr : GEMV_XS_FLOATS / MR);
  int64_t rows = GEMV_WARPS / a.S;
  dim3 grid((unsigned)((p->N + rows - 1) / rows));
  size_t smem = (size_t)a.M * a.pitch * sizeof(float);
  cudaStream_t st = OPD_STREAM(ctx);
  OPD_FLOAT_DISPATCH(dt, return opd__cuda_bad_dtype(call, dt),
    if (vb == 16) gemv_launch_vb<T, 16>(MR, grid, smem, st, a);
    else if (vb == 4) gemv_launch_vb<T, 4>(MR, grid, smem, st, a);
    else gemv_launch_vb<T, sizeof(T)>(MR, grid, smem, st, a);
  )
  OPD_CUDA_LAUNCHED();
  return 0;
}

/* out (M, N) through cuBLASLt, its epilogue or act_kernel after it. */
static int linear_blaslt(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, const linear_plan_t *p,
                         const void *bias) {
  int32_t dt = call->out[0].dtype;
  void *y = call->out[0].data;
  cudaStream_t st = OPD_STREAM(ctx);
  bool post = true;
  const void *post_bias = bias; /* the bias act_kernel adds, if any */
  if (p->K == 0) {
    OPD_CUDA_CHECK(cudaMemsetAsync(y, 0, (size_t)(p->M * p->N) * opd__dtype_size(dt), st));
  } else {
    bool lt_bias = bias && aligned16(bias);
    opd_gemm_t g = {dt, p->M, p->N, p->K, call->in[0].data, call->in[1].data, y, 0, 0, 0, 1, 0.0f,
                    1, OPD_GEMM_EPI_NONE, NULL};
    if (!bias || lt_bias) {
      g.epilogue = epilogue_for(p->act, lt_bias, &post);
      g.bias = lt_bias ? bias : NULL;
      post_bias = NULL;
    }
    int rc = opd__cuda_gemm(call, ctx, &g);
    if (rc == OPD_EINVAL) { /* no algorithm with that epilogue: act_kernel does it */
      g.epilogue = OPD_GEMM_EPI_NONE;
      g.bias = NULL;
      post = true;
      post_bias = bias;
      rc = opd__cuda_gemm(call, ctx, &g);
    }
    if (rc) return rc;
  }
  if (!post_bias && !(post && p->act != OPD_ACT_NONE)) return 0;
  int64_t n = p->M * p->N;
  LinAct f = {(int)p->act};
  OPD_FLOAT_DISPATCH(dt, return opd__cuda_bad_dtype(call, dt),
    act_kernel<T><<<grid_for(n, 256), 256, 0, st>>>((T *)y, (const T *)post_bias, n, p->N, f);
  )
  OPD_CUDA_LAUNCHED();
  return 0;
}

/* float64: y = act(y + bias) per element in double, after the GEMM. */
__global__ void act64_kernel(double *y, const double *bias, int64_t n, int64_t N, int act) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    double v = y[i] + (bias ? bias[i % N] : 0.0);
    switch (act) {
      case OPD_ACT_RELU: v = v < 0 ? 0.0 : v; break;
      case OPD_ACT_GELU: v = 0.5 * v * erfc(-v * 0.70710678118654752440); break;
      case OPD_ACT_GELU_TANH: {
        double u = 0.79788456080286535588 * (v + 0.044715 * v * v * v);
        double e = exp(-2.0 * fabs(u));
        v = u >= 0 ? v / (1.0 + e) : v * e / (1.0 + e);
        break;
      }
      case OPD_ACT_SILU: v = v / (1.0 + exp(-v)); break;
      default: break;
    }
    y[i] = v;
  }
}

/* out (M, N) in float64: cuBLASLt in double (no epilogue), then
 * act64_kernel for the bias and act; K == 0 zeroes first. */
static int linear64(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, const linear_plan_t *p,
                    const void *bias) {
  double *y = (double *)call->out[0].data;
  cudaStream_t st = OPD_STREAM(ctx);
  if (p->K == 0) {
    OPD_CUDA_CHECK(cudaMemsetAsync(y, 0, (size_t)(p->M * p->N) * sizeof(double), st));
  } else {
    opd_gemm_t g = {OPD_DTYPE_FLOAT64, p->M, p->N, p->K, call->in[0].data, call->in[1].data,
                    y, 0, 0, 0, 1, 0.0f, 1, OPD_GEMM_EPI_NONE, NULL};
    int rc = opd__cuda_gemm(call, ctx, &g);
    if (rc) return rc;
  }
  if (!bias && p->act == OPD_ACT_NONE) return 0;
  int64_t n = p->M * p->N;
  act64_kernel<<<grid_for(n, 256), 256, 0, st>>>(y, (const double *)bias, n, p->N, (int)p->act);
  OPD_CUDA_LAUNCHED();
  return 0;
}

extern "C" int opd__linear_cuda_variant(opd_kcall_t *call, const opd_cuda_ctx_t *ctx,
                                        int variant) {
  linear_plan_t p;
  int rc = opd__linear_plan(call, &p, NULL);
  if (rc) return rc;
  bool small = p.M <= GEMV_MAX_M && p.N <= INT32_MAX;
  if (variant == OPD_LINEAR_GEMV && !small)
    return opd__kerr(call, OPD_EINVAL,
                     "the gemv variant takes x of at most %d rows and weight of at "
                     "most %d rows; x has %lld rows, weight %lld",
                     GEMV_MAX_M, INT32_MAX, (long long)p.M, (long long)p.N);
  if (p.M == 0 || p.N == 0) return 0;
  const void *bias = p.has_bias ? call->in[2].data : NULL;
  if (call->out[0].dtype == OPD_DTYPE_FLOAT64) return linear64(call, ctx, &p, bias);
  if (variant == OPD_LINEAR_GEMV || (variant == OPD_LINEAR_AUTO && small))
    return linear_gemv(call, ctx, &p, bias);
  return linear_blaslt(call, ctx, &p, bias);
}

extern "C" int opd__linear_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  return opd__linear_cuda_variant(call, ctx, OPD_LINEAR_AUTO);
}
