/* conv2d's implicit-GEMM kernels (variant igemm), included by
 * kernels/conv2d/launch.cu, which holds the other variants' kernels and
 * the launches (the choice between them: cuda.cu); this file needs what
 * launch.cu includes before it (the dtype helpers, gemm.cuh, plan.h, and
 * launch.h's IG_BM). */
#ifndef OPD_KERNELS_CONV2D_IGEMM_KERNELS_CUH
#define OPD_KERNELS_CONV2D_IGEMM_KERNELS_CUH

/* ---- implicit GEMM (variant igemm) --------------------------------------
 * The convolution as the GEMM  y (K, N*P*Q) = weight (K, C*R*S) @ cols
 * without cols in memory: a block owns BM output channels x BN output
 * pixels (pixels over all images, so small images fill a tile), and walks
 * the reduction in stages of BK input channels at one tap (r, s): channel
 * chunk outer, taps inner, so the 9 stages of a 3x3 reread the same
 * channels (L1 hits). A thread gathers one pixel's column (bounds decided
 * once per tap) and a few weight elements; the next stage's loads are
 * issued before the current stage's math (registers), and shared memory is
 * double-buffered, so one __syncthreads per stage. Out-of-range channels,
 * output channels, pixels and taps in the padding load as zeros. */

#define TC_BK 32                   /* channels per stage, tensor-core kernel */
#define TC_LD (TC_BK + 8)          /* smem row pitch (elements): 80 bytes, so
                                      the 8 rows of an ldmatrix phase fall on
                                      distinct banks, and rows stay 16-byte
                                      (fragment: 32-byte) aligned */
#define F32_THREADS 128            /* every float32 tile */

typedef struct igemm_geom {
  int C, H, W, K, R, S, P, Q;      /* as conv_plan_t, checked to fit int32 */
  int sh, sw, ph, pw, dh, dw;
  int PQ, NPQ;                     /* output pixels per image, in all */
} igemm_geom_t;

/* The output pixel a thread gathers for and stores: its image's offset in
 * x and y, and the input row / column of tap (0, 0). */
typedef struct ig_pix {
  int64_t xoff;                    /* n*C*H*W */
  int64_t yoff;                    /* n*K*P*Q + p*Q + q */
  int ih0, iw0;                    /* p*sh - ph, q*sw - pw */
  bool ok;                         /* pix < N*P*Q */
} ig_pix_t;

__device__ __forceinline__ ig_pix_t ig_pixel(const igemm_geom_t &g, int pix) {
  ig_pix_t r;
  r.ok = pix < g.NPQ;
  int n = 0, p = 0, q = 0;
  if (r.ok) {
    n = pix / g.PQ;
    int pq = pix - n * g.PQ;
    p = pq / g.Q;
    q = pq - p * g.Q;
  }
  r.xoff = (int64_t)n * g.C * g.H * g.W;
  r.yoff = (int64_t)n * g.K * g.PQ + (int64_t)p * g.Q + q;
  r.ih0 = p * g.sh - g.ph;
  r.iw0 = q * g.sw - g.pw;
  return r;
}

/* Offset of tap (r, s) of pixel px inside its image's channel plane, or
 * -1 when the tap is in the padding (or the pixel past the end). */
__device__ __forceinline__ int ig_tap(const igemm_geom_t &g, const ig_pix_t &px, int r, int s) {
  int ih = px.ih0 + r * g.dh, iw = px.iw0 + s * g.dw;
  bool ok = px.ok && (unsigned)ih < (unsigned)g.H && (unsigned)iw < (unsigned)g.W;
  return ok ? ih * g.W + iw : -1;
}

/* Next stage: taps inner, channel chunks of bk outer. */
__device__ __forceinline__ void ig_advance(const igemm_geom_t &g, int bk, int &c0, int &r, int &s) {
  if (++s == g.S) {
    s = 0;
    if (++r == g.R) {
      r = 0;
      c0 += bk;
    }
  }
}

/* float16 / bfloat16 on tensor cores (WMMA 16x16x16, float accumulators).
 * BM = 64 output channels x BN pixels, 2*BN threads = BN/16 warps as 2 x
 * BN/32, each warp a 32 x 32 tile (2 x 2 fragments). Per stage: A =
 * weight (64 x 32 channels), row-major As[m][c]; B = the gathered columns,
 * stored pixel-major Bs[pixel][c] (WMMA's col_major B), both with the
 * reduction contiguous; a thread gathers 2 x 8 channels of its pixel and
 * 256/(2*BN) x 8 weights, packed into 16-byte smem stores. Epilogue: the
 * accumulators go through smem (reusing As/Bs) so that y is written
 * pixel-contiguous (coalesced), + bias, rounded to T once. */
template <typename T, int BN>
__global__ __launch_bounds__(2 * BN) void conv_igemm_tc(const T *__restrict__ x,
                                                        const T *__restrict__ w,
                                                        const T *__restrict__ bias,
                                                        T *__restrict__ y, igemm_geom_t g) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using namespace nvcuda;
  constexpr int BM = IG_BM, BK = TC_BK, LD = TC_LD, NT = 2 * BN;
  constexpr int A_TASKS = BM * (BK / 8) / NT; /* 8-channel weight groups per thread */
  typedef uint16_t a_tile_t[BM][LD];
  typedef uint16_t b_tile_t[BN][LD];
  typedef float c_row_t[BN + 4];
  constexpr int AB_BYTES = 2 * (int)(sizeof(a_tile_t) + sizeof(b_tile_t));
  constexpr int C_BYTES = BM * (int)sizeof(c_row_t);
  __shared__ __align__(128) unsigned char smem[AB_BYTES > C_BYTES ? AB_BYTES : C_BYTES];
  a_tile_t *As = reinterpret_cast<a_tile_t *>(smem);                        /* [2] */
  b_tile_t *Bs = reinterpret_cast<b_tile_t *>(smem + 2 * sizeof(a_tile_t)); /* [2] */
  c_row_t *Cs = reinterpret_cast<c_row_t *>(smem);                          /* [BM] */

  const int tid = threadIdx.x, warp = tid / 32, wm = warp % 2, wn = warp / 2;
  const int k0 = blockIdx.y * BM;
  const int j = tid % BN, g0 = tid / BN; /* gathers pixel j, channel groups g0, g0 + 2 */
  const ig_pix_t px = ig_pixel(g, blockIdx.x * BN + j);
  const uint16_t *xn = reinterpret_cast<const uint16_t *>(x) + px.xoff;
  const uint16_t *wb = reinterpret_cast<const uint16_t *>(w);
  const int HW = g.H * g.W, RS = g.R * g.S;

  uint4 rb[2], ra[A_TASKS];
  /* stage (c0, r, s) into registers: 8 channels from c on, n of them real */
  auto gather = [&](int c0, int r, int s) {
    int off = ig_tap(g, px, r, s);
#pragma unroll
    for (int h = 0; h < 2; h++) {
      int c = c0 + (g0 + 2 * h) * 8, n = off >= 0 ? g.C - c : 0;
      const uint16_t *pb = xn + off + (int64_t)c * HW;
      uint32_t v[8];
#pragma unroll
      for (int i = 0; i < 8; i++) v[i] = i < n ? (uint32_t)__ldg(pb + i * HW) : 0u;
      rb[h] = make_uint4(v[0] | v[1] << 16, v[2] | v[3] << 16, v[4] | v[5] << 16,
                         v[6] | v[7] << 16);
    }
#pragma unroll
    for (int a = 0; a < A_TASKS; a++) {
      int e = a * NT + tid, k = k0 + (e >> 2), c = c0 + (e & 3) * 8, n = k < g.K ? g.C - c : 0;
      const uint16_t *pa = wb + ((int64_t)k * g.C + c) * RS + r * g.S + s;
      uint32_t v[8];
#pragma unroll
      for (int i = 0; i < 8; i++) v[i] = i < n ? (uint32_t)__ldg(pa + i * RS) : 0u;
      ra[a] = make_uint4(v[0] | v[1] << 16, v[2] | v[3] << 16, v[4] | v[5] << 16,
                         v[6] | v[7] << 16);
    }
  };
  auto stage = [&](int buf) {
#pragma unroll
    for (int h = 0; h < 2; h++)
      *reinterpret_cast<uint4 *>(&Bs[buf][j][(g0 + 2 * h) * 8]) = rb[h];
#pragma unroll
    for (int a = 0; a < A_TASKS; a++) {
      int e = a * NT + tid;
      *reinterpret_cast<uint4 *>(&As[buf][e >> 2][(e & 3) * 8]) = ra[a];
    }
  };

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int fm = 0; fm < 2; fm++)
#pragma unroll
    for (int fn = 0; fn < 2; fn++) wmma::fill_fragment(acc[fm][fn], 0.0f);

  const int steps = (g.C + BK - 1) / BK * RS;
  int c0 = 0, r = 0, s = 0;
  gather(c0, r, s);
  for (int it = 0; it < steps; it++) {
    const int buf = it & 1, cs = c0; /* cs: this stage's first channel */
    stage(buf);
    __syncthreads(); /* buf complete; every warp is past stage it-1's math on buf^1 */
    ig_advance(g, BK, c0, r, s);
    if (it + 1 < steps) gather(c0, r, s); /* in flight during the math below */
#pragma unroll
    for (int kk = 0; kk < BK / 16; kk++) {
      if (cs + kk * 16 >= g.C) break; /* the all-zero half of a last chunk */
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb[2];
#pragma unroll
      for (int f = 0; f < 2; f++) {
        wmma::load_matrix_sync(fa[f], reinterpret_cast<const T *>(&As[buf][wm * 32 + f * 16][kk * 16]), LD);
        wmma::load_matrix_sync(fb[f], reinterpret_cast<const T *>(&Bs[buf][wn * 32 + f * 16][kk * 16]), LD);
      }
#pragma unroll
      for (int fm = 0; fm < 2; fm++)
#pragma unroll
        for (int fn = 0; fn < 2; fn++) wmma::mma_sync(acc[fm][fn], fa[fm], fb[fn], acc[fm][fn]);
    }
  }
  __syncthreads(); /* Cs overlays As/Bs */
#pragma unroll
  for (int fm = 0; fm < 2; fm++)
#pragma unroll
    for (int fn = 0; fn < 2; fn++)
      wmma::store_matrix_sync(&Cs[wm * 32 + fm * 16][wn * 32 + fn * 16], acc[fm][fn], BN + 4,
                              wmma::mem_row_major);
  __syncthreads();
  if (!px.ok) return;
  for (int m = g0; m < BM && k0 + m < g.K; m += NT / BN) {
    float v = Cs[m][j] + (bias ? to_f(bias[k0 + m]) : 0.0f);
    y[px.yoff + (int64_t)(k0 + m) * g.PQ] = from_f<T>(v);
  }
#else
  __trap(); /* never launched: the host checks for sm_80 */
#endif
}

/* float32 with FFMA (no TF32: products and sums stay float32). Tile BM x
 * BN, 128 threads, each a TM x TN block of outputs (TM, TN of 4 or 8) so
 * that every 4 or 8 smem floats feed TM*TN FMAs: per reduction step a
 * thread reads TM/4 + TN/4 float4 and issues TM*TN FFMA (8x8: 4 LDS.128 per
 * 64 FFMA; the old direct kernel read one smem weight per FMA). A thread's
 * rows are tm*4 + {0..3} (+ BM/2 when TM = 8), its pixels tn*4 + {0..3}
 * (+ BN/2 when TN = 8): the float4 reads of a warp are consecutive (no bank
 * conflicts). Stage: As[c][m], Bs[c][pixel] for BK channels; a thread
 * gathers BK*BN/128 channels of its one pixel and BK*BM/128 channels of
 * its one weight row. BK is 8 / 16 / 32 for tiles L / M / S, so that a
 * stage is 512 / 512 / 512 FMAs per thread whatever the tile: the smaller
 * tiles run where blocks are few (one or two per SM), and there each
 * stage's math must cover the latency of the next stage's loads. */
template <int BM, int BN, int TM, int TN, int BK>
__global__ __launch_bounds__(F32_THREADS) void conv_igemm_f32(const float *__restrict__ x,
                                                              const float *__restrict__ w,
                                                              const float *__restrict__ bias,
                                                              float *__restrict__ y,
                                                              igemm_geom_t g) {
  constexpr int NT = F32_THREADS, TNX = BN / TN;
  constexpr int QM = TM / 4, QN = TN / 4;           /* float4 groups per thread */
  constexpr int B_PER = BK * BN / NT, A_PER = BK * BM / NT;
  static_assert((BM / TM) * (BN / TN) == NT, "one output block per thread");
  static_assert(NT % BN == 0 && NT % BM == 0 && (BK * BM) % NT == 0, "gather mapping");
  __shared__ __align__(16) float As[2][BK][BM];
  __shared__ __align__(16) float Bs[2][BK][BN];

  const int tid = threadIdx.x, tn = tid % TNX, tm = tid / TNX;
  const int k0 = blockIdx.y * BM, pix0 = blockIdx.x * BN;
  const int j = tid % BN, i0 = tid / BN; /* gathers pixel j, channels i0 + NT/BN * i */
  const ig_pix_t px = ig_pixel(g, pix0 + j);
  const float *xn = x + px.xoff;
  const int HW = g.H * g.W, RS = g.R * g.S;

  const int am = tid % BM, a0 = tid / BM; /* gathers weight row k0 + am, channels a0 + NT/BM * a */
  const int64_t wrow = (int64_t)(k0 + am) * g.C;

  float rb[B_PER], ra[A_PER];
  /* stage (c0, r, s) into registers; n: how many of the thread's channels
   * are real (0 for a padding tap, a pixel or row past the end) */
  auto gather = [&](int c0, int r, int s) {
    int off = ig_tap(g, px, r, s), cb = c0 + i0, n = off >= 0 ? g.C - cb : 0;
    const float *pb = xn + off + (int64_t)cb * HW;
#pragma unroll
    for (int i = 0; i < B_PER; i++) rb[i] = i * (NT / BN) < n ? __ldg(pb + i * (NT / BN) * HW) : 0.0f;
    int ca = c0 + a0, na = k0 + am < g.K ? g.C - ca : 0;
    const float *pa = w + (wrow + ca) * RS + r * g.S + s;
#pragma unroll
    for (int a = 0; a < A_PER; a++) ra[a] = a * (NT / BM) < na ? __ldg(pa + a * (NT / BM) * RS) : 0.0f;
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

  const int steps = (g.C + BK - 1) / BK * RS;
  int c0 = 0, r = 0, s = 0;
  gather(c0, r, s);
  for (int it = 0; it < steps; it++) {
    const int buf = it & 1;
    stage(buf);
    __syncthreads(); /* buf complete; every warp is past stage it-1's math on buf^1 */
    ig_advance(g, BK, c0, r, s);
    if (it + 1 < steps) gather(c0, r, s); /* in flight during the math below */
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
  /* epilogue: straight from registers (16 threads of a warp store 16
   * pixels 4 apart of one row per instruction) */
  float bv[TM];
#pragma unroll
  for (int i = 0; i < TM; i++) {
    int k = k0 + (i / 4) * (BM / QM) + tm * 4 + i % 4;
    bv[i] = bias && k < g.K ? __ldg(bias + k) : 0.0f;
  }
#pragma unroll
  for (int jj = 0; jj < TN; jj++) {
    ig_pix_t po = ig_pixel(g, pix0 + (jj / 4) * (BN / QN) + tn * 4 + jj % 4);
    if (!po.ok) continue;
#pragma unroll
    for (int i = 0; i < TM; i++) {
      int k = k0 + (i / 4) * (BM / QM) + tm * 4 + i % 4;
      if (k < g.K) y[po.yoff + (int64_t)k * g.PQ] = acc[i][jj] + bv[i];
    }
  }
}

#endif /* OPD_KERNELS_CONV2D_IGEMM_KERNELS_CUH */
