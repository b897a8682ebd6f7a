/* conv3x3_bias_relu on the GPU: y = relu(conv2d(x, w, stride 1, pad 1) +
 * bias), float32, NCHW; products and sums in float32 (no TF32), so the
 * result matches the CPU reference within float32 rounding.
 *
 *   x (N, C, H, W), w (K, C, 3, 3), bias (K) -> y (N, K, H, W)
 *
 * DESIGN
 * Fusing saves a request and a pass over y (conv2d writes y, relu reads
 * and writes it again); it only wins if the fused kernel is itself as
 * fast as the best unfused one. No one kernel is best for every shape,
 * so the call picks one of three (pick_path), as opd's conv2d does:
 *   direct  few input channels (C < 16): a direct convolution. A block
 *           computes a 16x16 tile of pixels for KB output channels of one
 *           image; CB input channels at a time go through shared memory
 *           (18x18 halo tiles and their weights); each thread keeps RPT
 *           rows x KB channels of sums in registers. With C = 3 there is
 *           too little reduction for a GEMM tile to pay for its gathers.
 *   igemm   otherwise: implicit GEMM with FFMA, y (K, N*H*W) = w (K, 9C)
 *           @ columns, the columns gathered from x into shared memory
 *           stage by stage (BK channels at one tap), never written to
 *           memory. A block owns BM output channels x BN pixels (pixels
 *           over all images); each thread a TM x TN block of sums, fed by
 *           float4 shared loads (4 LDS.128 per 64 FFMA on the 8x8 tile).
 *           Bias and ReLU are the epilogue. The tile (L / M / S) is the
 *           largest that still gives every SM two blocks.
 *   gemm    small grid and long reduction (even tile S gives fewer than
 *           two blocks per SM, 9C >= 1024: N8 C256 14x14): im2col of a
 *           chunk of images into the workspace, then one batched cuBLASLt
 *           GEMM in float32, which splits the reduction over the idle SMs
 *           (split-K; igemm cannot). The bias is stored into y first and
 *           added by beta = 1; ReLU is cuBLASLt's epilogue
 *           (CUBLASLT_EPILOGUE_RELU). cuBLASLt's bias epilogue adds per
 *           row of its column-major D, which here is a pixel, not a
 *           channel: hence the pre-stored bias.
 * Workspace (conv3x3_bias_relu_cuda_workspace): only the gemm path asks
 * for scratch, the columns (9C, H*W) of up to 32 MiB of images; a smaller
 * workspace works (fewer images per GEMM, or one image's columns from
 * cudaMallocAsync).
 * Measured (2026-12-01, bench/results/2026-12-01-plugins-fused-h200.txt, per
 * call through the daemon, against conv2d + relu): N1 C3 224² K64 direct
 * 1.81x; N1 C64 56² K64 igemm S 1.34x; N8 C256 14² K256 gemm 1.70x;
 * N32 C64 56² K64 igemm L 1.17x. A 3xTF32 tensor-core variant (WMMA) was
 * slower than the FFMA igemm on all four and less exact.
 * Bench: build/bench/bench_plugins -d cuda (checks odd shapes of every
 * path against opd conv2d + relu, then times the four above); test:
 * tests/python/test_plugins.py and tests/gpu/plugins.sh.
 */
#include <cublasLt.h>

#include <opd/op.h>

/* ---- direct: few input channels ---------------------------------------- */
#define TILE 16
#define CB 4

template <int RPT, int KB>
__global__ void __launch_bounds__(TILE * (TILE / RPT))
conv3x3_direct(const float *__restrict__ x, const float *__restrict__ wt,
               const float *__restrict__ bias, float *__restrict__ y, int C,
               int H, int W, int K, int tiles_w) {
  constexpr int NT = TILE * (TILE / RPT), XT = (TILE + 2) * (TILE + 2);
  __shared__ float xs[CB][TILE + 2][TILE + 2];
  __shared__ float ws[CB][9][KB];
  const int n = blockIdx.z, k0 = blockIdx.y * KB;
  const int th = (blockIdx.x / tiles_w) * TILE, tw = (blockIdx.x % tiles_w) * TILE;
  const int tx = threadIdx.x % TILE, r0 = (threadIdx.x / TILE) * RPT;
  const size_t plane = (size_t)H * W;
  float acc[RPT][KB];
#pragma unroll
  for (int q = 0; q < KB; q++) {
    float b = k0 + q < K ? bias[k0 + q] : 0.0f;
#pragma unroll
    for (int p = 0; p < RPT; p++) acc[p][q] = b;
  }
  for (int c0 = 0; c0 < C; c0 += CB) {
    for (int i = threadIdx.x; i < CB * XT; i += NT) {
      int cc = i / XT, rem = i % XT, yy = rem / (TILE + 2), xx = rem % (TILE + 2);
      int c = c0 + cc, ih = th + yy - 1, iw = tw + xx - 1;
      xs[cc][yy][xx] = c < C && ih >= 0 && ih < H && iw >= 0 && iw < W
                           ? x[((size_t)n * C + c) * plane + (size_t)ih * W + iw]
                           : 0.0f;
    }
    for (int i = threadIdx.x; i < CB * 9 * KB; i += NT) {
      int cc = i / (9 * KB), rem = i % (9 * KB), t = rem / KB, q = rem % KB;
      int c = c0 + cc, k = k0 + q;
      ws[cc][t][q] = c < C && k < K ? wt[((size_t)k * C + c) * 9 + t] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int cc = 0; cc < CB; cc++) {
      float xv[RPT + 2][3];
#pragma unroll
      for (int a = 0; a < RPT + 2; a++)
#pragma unroll
        for (int s = 0; s < 3; s++) xv[a][s] = xs[cc][r0 + a][tx + s];
#pragma unroll
      for (int t = 0; t < 9; t++)
#pragma unroll
        for (int q = 0; q < KB; q++) {
          float wv = ws[cc][t][q];
#pragma unroll
          for (int p = 0; p < RPT; p++) acc[p][q] += xv[p + t / 3][t % 3] * wv;
        }
    }
    __syncthreads();
  }
  const int w = tw + tx;
  if (w >= W) return;
#pragma unroll
  for (int p = 0; p < RPT; p++) {
    int h = th + r0 + p;
    if (h >= H) continue;
#pragma unroll
    for (int q = 0; q < KB; q++)
      if (k0 + q < K)
        y[((size_t)n * K + k0 + q) * plane + (size_t)h * W + w] = fmaxf(acc[p][q], 0.0f);
  }
}

template <int RPT, int KB>
static void launch_direct(const opd_kcall_t *call, cudaStream_t st, int64_t tiles,
                          int64_t tiles_w) {
  const opd_tview_t *x = &call->in[0];
  int64_t N = x->shape[0], K = call->in[1].shape[0];
  dim3 grid((unsigned)tiles, (unsigned)((K + KB - 1) / KB), (unsigned)N);
  conv3x3_direct<RPT, KB><<<grid, TILE * (TILE / RPT), 0, st>>>(
      (const float *)x->data, (const float *)call->in[1].data,
      (const float *)call->in[2].data, (float *)call->out[0].data,
      (int)x->shape[1], (int)x->shape[2], (int)x->shape[3], (int)K, (int)tiles_w);
}

/* ---- igemm: implicit GEMM, FFMA ------------------------------------------ */
#define IG_THREADS 128

typedef struct geom {
  int C, H, W, K;                  /* checked to fit int32 (igemm_fits) */
  int HW, NHW;                     /* pixels per image, in all */
} geom_t;

/* The output pixel a thread gathers for or stores. */
typedef struct pix {
  int64_t xoff;                    /* n*C*H*W */
  int64_t yoff;                    /* n*K*H*W + h*W + w */
  int h, w;                        /* its row and column */
  bool ok;                         /* pixel < N*H*W */
} pix_t;

__device__ __forceinline__ pix_t pixel_of(const geom_t &g, int i) {
  pix_t r;
  r.ok = i < g.NHW;
  int n = 0, hw = 0;
  if (r.ok) {
    n = i / g.HW;
    hw = i - n * g.HW;
  }
  r.h = hw / g.W;
  r.w = hw - r.h * g.W;
  r.xoff = (int64_t)n * g.C * g.HW;
  r.yoff = (int64_t)n * g.K * g.HW + hw;
  return r;
}

/* Offset of tap t (= 3r + s) of pixel p in its image's channel plane, or
 * -1 when the tap is in the padding (or the pixel past the end). */
__device__ __forceinline__ int tap_of(const geom_t &g, const pix_t &p, int t) {
  int ih = p.h + t / 3 - 1, iw = p.w + t % 3 - 1;
  bool ok = p.ok && (unsigned)ih < (unsigned)g.H && (unsigned)iw < (unsigned)g.W;
  return ok ? ih * g.W + iw : -1;
}

/* Tile BM x BN, 128 threads, each TM x TN sums (TM, TN of 4 or 8): a
 * thread's rows are tm*4 + {0..3} (+ BM/2 when TM = 8), its pixels
 * tn*4 + {0..3} (+ BN/2 when TN = 8), so a warp's float4 reads are
 * consecutive. A stage is BK channels at one tap: As[c][m], Bs[c][pixel];
 * stages go taps inner, channel chunks outer (the 9 taps reread the same
 * channels from L1). The next stage's loads are issued into registers
 * before this stage's math, and shared memory is double-buffered: one
 * __syncthreads per stage. Zeros load for padding taps and for channels,
 * output channels and pixels past the end. */
template <int BM, int BN, int TM, int TN, int BK>
__global__ __launch_bounds__(IG_THREADS) void conv3x3_igemm(const float *__restrict__ x,
                                                            const float *__restrict__ w,
                                                            const float *__restrict__ bias,
                                                            float *__restrict__ y, geom_t g) {
  constexpr int NT = IG_THREADS, TNX = BN / TN;
  constexpr int QM = TM / 4, QN = TN / 4;           /* float4 groups per thread */
  constexpr int B_PER = BK * BN / NT, A_PER = BK * BM / NT;
  static_assert((BM / TM) * (BN / TN) == NT, "one output block per thread");
  static_assert(NT % BN == 0 && NT % BM == 0 && (BK * BM) % NT == 0, "gather mapping");
  __shared__ __align__(16) float As[2][BK][BM];
  __shared__ __align__(16) float Bs[2][BK][BN];

  const int tid = threadIdx.x, tn = tid % TNX, tm = tid / TNX;
  const int k0 = blockIdx.y * BM, pix0 = blockIdx.x * BN;
  const int j = tid % BN, i0 = tid / BN; /* gathers pixel j, channels i0 + NT/BN * i */
  const pix_t px = pixel_of(g, pix0 + j);
  const float *xn = x + px.xoff;
  const int am = tid % BM, a0 = tid / BM; /* gathers weight row k0 + am, channels a0 + NT/BM * a */
  const int64_t wrow = (int64_t)(k0 + am) * g.C;

  float rb[B_PER], ra[A_PER];
  /* stage (c0, t) into registers; n: how many of the thread's channels are
   * real (0 for a padding tap, a pixel or an output channel past the end) */
  auto gather = [&](int c0, int t) {
    int off = tap_of(g, px, t), cb = c0 + i0, n = off >= 0 ? g.C - cb : 0;
    const float *pb = xn + off + (int64_t)cb * g.HW;
#pragma unroll
    for (int i = 0; i < B_PER; i++)
      rb[i] = i * (NT / BN) < n ? __ldg(pb + (int64_t)i * (NT / BN) * g.HW) : 0.0f;
    int ca = c0 + a0, na = k0 + am < g.K ? g.C - ca : 0;
    const float *pa = w + (wrow + ca) * 9 + t;
#pragma unroll
    for (int a = 0; a < A_PER; a++) ra[a] = a * (NT / BM) < na ? __ldg(pa + a * (NT / BM) * 9) : 0.0f;
  };
  auto stage = [&](int buf) {
#pragma unroll
    for (int i = 0; i < B_PER; i++) Bs[buf][i0 + i * (NT / BN)][j] = rb[i];
#pragma unroll
    for (int a = 0; a < A_PER; a++) As[buf][a0 + a * (NT / BM)][am] = ra[a];
  };

  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; i++)
#pragma unroll
    for (int jj = 0; jj < TN; jj++) acc[i][jj] = 0.0f;

  const int steps = (g.C + BK - 1) / BK * 9;
  int c0 = 0, t = 0;
  gather(c0, t);
  for (int it = 0; it < steps; it++) {
    const int buf = it & 1;
    stage(buf);
    __syncthreads(); /* buf complete; every warp is past stage it-1's math on buf^1 */
    if (++t == 9) {
      t = 0;
      c0 += BK;
    }
    if (it + 1 < steps) gather(c0, t); /* in flight during the math below */
#pragma unroll
    for (int kk = 0; kk < BK; kk++) {
      float a[TM], b[TN];
#pragma unroll
      for (int q = 0; q < QM; q++) {
        float4 v = *reinterpret_cast<const float4 *>(&As[buf][kk][q * (BM / QM) + tm * 4]);
        a[4 * q] = v.x, a[4 * q + 1] = v.y, a[4 * q + 2] = v.z, a[4 * q + 3] = v.w;
      }
#pragma unroll
      for (int q = 0; q < QN; q++) {
        float4 v = *reinterpret_cast<const float4 *>(&Bs[buf][kk][q * (BN / QN) + tn * 4]);
        b[4 * q] = v.x, b[4 * q + 1] = v.y, b[4 * q + 2] = v.z, b[4 * q + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < TM; i++)
#pragma unroll
        for (int jj = 0; jj < TN; jj++) acc[i][jj] = fmaf(a[i], b[jj], acc[i][jj]);
    }
  }
  /* epilogue, the fused part: + bias, ReLU (NaN -> 0, as cpu_ref), one
   * store straight from registers */
  float bv[TM];
#pragma unroll
  for (int i = 0; i < TM; i++) {
    int k = k0 + (i / 4) * (BM / QM) + tm * 4 + i % 4;
    bv[i] = k < g.K ? __ldg(bias + k) : 0.0f;
  }
#pragma unroll
  for (int jj = 0; jj < TN; jj++) {
    pix_t po = pixel_of(g, pix0 + (jj / 4) * (BN / QN) + tn * 4 + jj % 4);
    if (!po.ok) continue;
#pragma unroll
    for (int i = 0; i < TM; i++) {
      int k = k0 + (i / 4) * (BM / QM) + tm * 4 + i % 4;
      if (k < g.K) y[po.yoff + (int64_t)k * g.HW] = fmaxf(acc[i][jj] + bv[i], 0.0f);
    }
  }
}

/* igemm's tiles: L 64x128 (8x8 per thread), M 64x64 (8x4), S 32x64 (4x4);
 * BK 8 / 16 / 32 so that a stage is 512 FMAs per thread on each. */
enum { TILE_L, TILE_M, TILE_S };
static const int tile_bm[] = {64, 64, 32}, tile_bn[] = {128, 64, 64};

static int64_t igemm_blocks(int64_t NHW, int64_t K, int t) {
  return (K + tile_bm[t] - 1) / tile_bm[t] * ((NHW + tile_bn[t] - 1) / tile_bn[t]);
}

/* igemm indexes in int32: offsets in one image of x and in w, pixel
 * numbers over N*H*W (+ a tile) */
static bool igemm_fits(int64_t N, int64_t C, int64_t H, int64_t W, int64_t K) {
  const int64_t lim = INT32_MAX;
  return C * H * W <= lim && K * C * 9 <= lim && N * H * W <= lim - 256 &&
         (K + 31) / 32 <= 65535;
}

/* ---- gemm: im2col + cuBLASLt -------------------------------------------- */
/* cols (nb images, 9C, H*W): cols[((n*C + c)*9 + t)*HW + hw] = the input
 * under tap t of pixel hw, 0 in the padding */
__global__ void im2col3x3(const float *__restrict__ x, float *__restrict__ cols,
                          int64_t total, int H, int W) {
  const int64_t HW = (int64_t)H * W;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t hw = i % HW, row = i / HW, nc = row / 9;
    int t = (int)(row % 9), h = (int)(hw / W), w = (int)(hw % W);
    int ih = h + t / 3 - 1, iw = w + t % 3 - 1;
    cols[i] = (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W
                  ? x[nc * HW + (int64_t)ih * W + iw]
                  : 0.0f;
  }
}

/* y[n][k][hw] = bias[k]: the C that the GEMM adds (beta = 1) */
__global__ void store_bias(float *__restrict__ y, const float *__restrict__ bias, int64_t total,
                           int64_t K, int64_t HW) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x)
    y[i] = bias[(i / HW) % K];
}

static unsigned grid_for(int64_t n) {
  int64_t b = (n + 255) / 256;
  return (unsigned)(b < 8192 ? (b > 0 ? b : 1) : 8192);
}

/* Largest power of two (<= 256) dividing the address and the batch step:
 * cuBLASLt may otherwise pick a kernel that assumes 256-byte alignment. */
static uint32_t align_of(const void *p, int64_t step_bytes) {
  uint64_t v = (uint64_t)(uintptr_t)p | 256u;
  if (step_bytes > 0) v |= (uint64_t)step_bytes;
  return (uint32_t)(v & (~v + 1));
}

#define LT_CHECK(expr)                                                          \
  do {                                                                          \
    cublasStatus_t s_ = (expr);                                                 \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                          \
      rc = opd_kerr(call, OPD_EBACKEND, "cublasLt: %s (%s:%d)",                 \
                    cublasLtGetStatusString(s_), __FILE__, __LINE__);           \
      goto done;                                                                \
    }                                                                           \
  } while (0)

/* y of nb images = relu(w @ cols + y) through cuBLASLt, in its column-major
 * terms: D (HW x K, ld HW) = A (HW x 9C: cols, ld HW) @ B (9C x K: w,
 * ld 9C), batched over the images (w repeated: batch step 0). */
static int lt_gemm_relu(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, const float *cols,
                        const float *w, float *y, int64_t nb, int64_t HW, int64_t CRS,
                        int64_t K) {
  cublasLtHandle_t lt = (cublasLtHandle_t)ctx->cublaslt;
  cublasLtMatmulDesc_t op = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  cublasLtMatmulHeuristicResult_t res;
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_RELU;
  int nres = 0, rc = 0;
  int32_t batch = (int32_t)nb;
  int64_t steps[3] = {CRS * HW, 0, K * HW};
  uint32_t al[3] = {align_of(cols, steps[0] * 4), align_of(w, 0), align_of(y, steps[2] * 4)};
  size_t ws = ctx->workspace ? ctx->workspace_bytes : 0;
  if (ws > OPD_CUDA_LT_WORKSPACE) ws = OPD_CUDA_LT_WORKSPACE;
  uint64_t ws64 = ws;
  float alpha = 1.0f, beta = 1.0f;
  LT_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F)); /* no TF32 */
  LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  LT_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, (uint64_t)HW, (uint64_t)CRS, HW));
  LT_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, (uint64_t)CRS, (uint64_t)K, CRS));
  LT_CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, (uint64_t)HW, (uint64_t)K, HW));
  {
    cublasLtMatrixLayout_t l[3] = {la, lb, lc};
    for (int i = 0; i < 3; i++) {
      LT_CHECK(cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                                sizeof batch));
      LT_CHECK(cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                &steps[i], sizeof steps[i]));
    }
  }
  LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &ws64, sizeof ws64));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                &al[0], sizeof al[0]));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                &al[1], sizeof al[1]));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                &al[2], sizeof al[2]));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                &al[2], sizeof al[2]));
  LT_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &res, &nres));
  if (nres < 1) {
    rc = opd_kerr(call, OPD_EBACKEND, "cublasLt: no algorithm for (%lld x %lld) @ (%lld x %lld)"
                  " x %lld with a ReLU epilogue", (long long)HW, (long long)CRS,
                  (long long)CRS, (long long)K, (long long)nb);
    goto done;
  }
  LT_CHECK(cublasLtMatmul(lt, op, &alpha, cols, la, w, lb, &beta, y, lc, y, lc, &res.algo,
                          ws ? ctx->workspace : NULL, ws, (cudaStream_t)ctx->stream));
done:
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (lc) cublasLtMatrixLayoutDestroy(lc);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (op) cublasLtMatmulDescDestroy(op);
  return rc;
}

#define CUDA_CHECK(expr)                                                         \
  do {                                                                           \
    cudaError_t e_ = (expr);                                                     \
    if (e_ != cudaSuccess) {                                                     \
      rc = opd_kerr(call, OPD_EBACKEND, "cuda: %s (%s:%d)", cudaGetErrorString(e_), \
                    __FILE__, __LINE__);                                         \
      goto done;                                                                 \
    }                                                                            \
  } while (0)

/* columns per batched GEMM: a small batch is one im2col and one GEMM, and
 * the GEMM reads the columns back mostly from L2 (50-60 MiB on sm_90 cards) */
#define CHUNK_BYTES ((size_t)32 << 20)

static int run_gemm(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, int64_t N, int64_t C,
                    int64_t H, int64_t W, int64_t K) {
  cudaStream_t st = (cudaStream_t)ctx->stream;
  const float *x = (const float *)call->in[0].data, *w = (const float *)call->in[1].data;
  float *y = (float *)call->out[0].data;
  const int64_t HW = H * W, CRS = 9 * C, colb = CRS * HW * 4;
  size_t lt = ctx->workspace_bytes < OPD_CUDA_LT_WORKSPACE ? ctx->workspace_bytes
                                                           : OPD_CUDA_LT_WORKSPACE;
  size_t scratch = ctx->workspace ? ctx->workspace_bytes - lt : 0;
  float *cols = ctx->workspace ? (float *)((char *)ctx->workspace + lt) : NULL;
  int64_t per = (int64_t)(scratch / (size_t)colb);
  void *own = NULL;
  int rc = 0;
  if (per > INT32_MAX) per = INT32_MAX;
  store_bias<<<grid_for(N * K * HW), 256, 0, st>>>(y, (const float *)call->in[2].data,
                                                   N * K * HW, K, HW);
  CUDA_CHECK(cudaGetLastError());
  if (per < 1) { /* a workspace smaller than asked for */
    CUDA_CHECK(cudaMallocAsync(&own, (size_t)colb, st));
    cols = (float *)own;
    per = 1;
  }
  for (int64_t n0 = 0; n0 < N; n0 += per) {
    int64_t nb = N - n0 < per ? N - n0 : per;
    im2col3x3<<<grid_for(nb * CRS * HW), 256, 0, st>>>(x + n0 * C * HW, cols, nb * CRS * HW,
                                                        (int)H, (int)W);
    CUDA_CHECK(cudaGetLastError());
    rc = lt_gemm_relu(call, ctx, cols, w, y + n0 * K * HW, nb, HW, CRS, K);
    if (rc) goto done;
  }
done:
  if (own) {
    cudaError_t e = cudaFreeAsync(own, st);
    if (e != cudaSuccess && rc == 0)
      rc = opd_kerr(call, OPD_EBACKEND, "cuda: %s", cudaGetErrorString(e));
  }
  return rc;
}

/* ---- the choice ----------------------------------------------------------- */
enum { PATH_DIRECT, PATH_IGEMM, PATH_GEMM };

static int sm_count(int device) {
  int sms;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    (void)cudaGetLastError(); /* must not surface at a later launch */
    return 132;                 /* an sm_90 card's count */
  }
  return sms;
}

/* The kernel for the shape (see DESIGN); *tile: igemm's tile. */
static int pick_path(int64_t N, int64_t C, int64_t H, int64_t W, int64_t K, int sms, int *tile) {
  int64_t NHW = N * H * W;
  *tile = TILE_S;
  if (C < 16 || !igemm_fits(N, C, H, W, K)) return PATH_DIRECT;
  if (igemm_blocks(NHW, K, TILE_S) < 2 * (int64_t)sms && 9 * C >= 1024) return PATH_GEMM;
  for (int t = TILE_L; t < TILE_S; t++)
    if (igemm_blocks(NHW, K, t) >= 2 * (int64_t)sms) {
      *tile = t;
      break;
    }
  return PATH_IGEMM;
}

/* Scratch for the gemm path: the columns of as many images as fit in
 * CHUNK_BYTES (at least one); none for the others. */
extern "C" size_t conv3x3_bias_relu_cuda_workspace(const opd_kcall_t *call) {
  const opd_tview_t *x = &call->in[0];
  int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3],
          K = call->in[1].shape[0];
  int dev = 0, tile;
  if (N == 0 || K == 0 || H * W == 0) return 0;
  if (cudaGetDevice(&dev) != cudaSuccess) (void)cudaGetLastError();
  if (pick_path(N, C, H, W, K, sm_count(dev), &tile) != PATH_GEMM) return 0;
  size_t img = (size_t)(9 * C * H * W) * sizeof(float);
  size_t n = img >= CHUNK_BYTES ? 1 : CHUNK_BYTES / img;
  if (n > (size_t)N) n = (size_t)N;
  return (n * img + 255) & ~(size_t)255;
}

extern "C" int conv3x3_bias_relu_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  const opd_tview_t *x = &call->in[0];
  int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3],
          K = call->in[1].shape[0];
  cudaStream_t st = (cudaStream_t)ctx->stream;
  if (N == 0 || K == 0 || H == 0 || W == 0) return 0;
  int tile, path = pick_path(N, C, H, W, K, sm_count(ctx->device), &tile);
  if (path == PATH_GEMM) return run_gemm(call, ctx, N, C, H, W, K);
  if (path == PATH_IGEMM) {
    geom_t g = {(int)C, (int)H, (int)W, (int)K, (int)(H * W), (int)(N * H * W)};
    const float *xp = (const float *)x->data, *wp = (const float *)call->in[1].data,
                *bp = (const float *)call->in[2].data;
    float *yp = (float *)call->out[0].data;
    dim3 grid((unsigned)((g.NHW + tile_bn[tile] - 1) / tile_bn[tile]),
              (unsigned)((K + tile_bm[tile] - 1) / tile_bm[tile]));
    if (tile == TILE_L)
      conv3x3_igemm<64, 128, 8, 8, 8><<<grid, IG_THREADS, 0, st>>>(xp, wp, bp, yp, g);
    else if (tile == TILE_M)
      conv3x3_igemm<64, 64, 8, 4, 16><<<grid, IG_THREADS, 0, st>>>(xp, wp, bp, yp, g);
    else
      conv3x3_igemm<32, 64, 4, 4, 32><<<grid, IG_THREADS, 0, st>>>(xp, wp, bp, yp, g);
  } else {
    int64_t tiles_w = (W + TILE - 1) / TILE, tiles = tiles_w * ((H + TILE - 1) / TILE);
    if (N > 65535 || K > 65535 || tiles > INT32_MAX || C > INT32_MAX ||
        H > INT32_MAX || W > INT32_MAX || (int64_t)H * W > INT32_MAX)
      return opd_kerr(call, OPD_ELIMIT, "cuda: N %lld, K %lld or H x W too large "
                      "for this kernel's grid", (long long)N, (long long)K);
    /* enough blocks of the big shape for two per SM? else 4x the blocks */
    if (tiles * ((K + 15) / 16) * N >= 2 * sm_count(ctx->device))
      launch_direct<4, 16>(call, st, tiles, tiles_w);
    else
      launch_direct<2, 8>(call, st, tiles, tiles_w);
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return opd_kerr(call, OPD_EBACKEND, "cuda: %s", cudaGetErrorString(e));
  return 0;
}
