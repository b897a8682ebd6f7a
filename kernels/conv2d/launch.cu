/* conv2d's launchers on the GPU (launch.h): the direct 3x3, im2col + GEMM,
 * implicit-GEMM and Winograd variants, each kernel and how it is launched.
 *
 * DESIGN
 * The router (cuda.cu) picks a variant and checks that it applies; each
 * launcher here sizes the grid, takes its scratch from the workspace (past
 * cuBLASLt's share) or from cudaMallocAsync, and launches. The variants,
 * their geometry and AUTO's choice are described at the top of cuda.cu.
 * Test: build/tests/gpu_kernels --op conv2d (every variant).
 */
#include <type_traits>

#include <mma.h>

#include "kernels/cuda/gemm.cuh"

extern "C" {
#include "kernels/conv2d/plan.h"
}
#include "kernels/conv2d/igemm.h"
#include "kernels/conv2d/launch.h"

#define TILE 16                    /* output tile edge (pixels) */
#define KT 16                      /* output channels per block */
#define CC 8                       /* input channels per smem stage */

template <typename T>
__global__ __launch_bounds__(TILE *TILE) void conv3x3_direct(
    const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ bias,
    T *__restrict__ y, int C, int H, int W, int K, int P, int Q, int ph, int pw,
    int tiles_q) {
  __shared__ float xs[CC][TILE + 2][TILE + 2];
  __shared__ float ws[KT][CC][9];
  int n = blockIdx.z, k0 = blockIdx.y * KT;
  int tp = blockIdx.x / tiles_q, tq = blockIdx.x % tiles_q;
  int ty = threadIdx.x / TILE, tx = threadIdx.x % TILE;
  int op = tp * TILE + ty, oq = tq * TILE + tx;
  int ih0 = tp * TILE - ph, iw0 = tq * TILE - pw; /* the tile's input origin */
  float acc[KT];
#pragma unroll
  for (int k = 0; k < KT; k++) acc[k] = 0.0f;
  const T *xn = x + (int64_t)n * C * H * W;
  for (int c0 = 0; c0 < C; c0 += CC) {
    for (int i = threadIdx.x; i < CC * (TILE + 2) * (TILE + 2); i += TILE * TILE) {
      int c = i / ((TILE + 2) * (TILE + 2)), r = i % ((TILE + 2) * (TILE + 2));
      int ih = ih0 + r / (TILE + 2), iw = iw0 + r % (TILE + 2);
      float v = 0.0f;
      if (c0 + c < C && ih >= 0 && ih < H && iw >= 0 && iw < W)
        v = to_f(xn[((int64_t)(c0 + c) * H + ih) * W + iw]);
      xs[c][r / (TILE + 2)][r % (TILE + 2)] = v;
    }
    for (int i = threadIdx.x; i < KT * CC * 9; i += TILE * TILE) {
      int k = i / (CC * 9), c = i / 9 % CC, t = i % 9;
      float v = 0.0f;
      if (k0 + k < K && c0 + c < C) v = to_f(w[((int64_t)(k0 + k) * C + c0 + c) * 9 + t]);
      ws[k][c][t] = v;
    }
    __syncthreads();
#pragma unroll 2
    for (int c = 0; c < CC; c++) {
      float in[9];
#pragma unroll
      for (int t = 0; t < 9; t++) in[t] = xs[c][ty + t / 3][tx + t % 3];
#pragma unroll
      for (int k = 0; k < KT; k++) {
        float s = acc[k];
#pragma unroll
        for (int t = 0; t < 9; t++) s += in[t] * ws[k][c][t];
        acc[k] = s;
      }
    }
    __syncthreads();
  }
  if (op >= P || oq >= Q) return;
#pragma unroll
  for (int k = 0; k < KT; k++) {
    if (k0 + k >= K) break;
    float v = acc[k] + (bias ? to_f(bias[k0 + k]) : 0.0f);
    y[(((int64_t)n * K + k0 + k) * P + op) * Q + oq] = from_f<T>(v);
  }
}

typedef struct im2col_geom {
  int64_t C, H, W, R, S, P, Q;     /* as conv_plan_t */
  int64_t sh, sw, ph, pw, dh, dw;
} im2col_geom_t;

/* cols[i][(c, r, s)][(p, q)] = x[n0 + i][c][p sh - ph + r dh][q sw - pw + s dw]
 * (0 outside), for nimg images: one thread per column element. */
template <typename T>
__global__ void im2col(const T *__restrict__ x, T *__restrict__ cols, int64_t total,
                       im2col_geom_t g) {
  int64_t PQ = g.P * g.Q, CRS = g.C * g.R * g.S;
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
    int64_t pq = e % PQ, row = e / PQ % CRS, img = e / (PQ * CRS);
    int64_t q = pq % g.Q, p = pq / g.Q;
    int64_t s = row % g.S, r = row / g.S % g.R, c = row / (g.S * g.R);
    int64_t ih = p * g.sh - g.ph + r * g.dh, iw = q * g.sw - g.pw + s * g.dw;
    T v = from_f<T>(0.0f);
    if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W)
      v = x[((img * g.C + c) * g.H + ih) * g.W + iw];
    cols[e] = v;
  }
}

/* y[i][k][pq] = bias[k] (bias NULL: 0) over total = n*K*PQ elements. */
template <typename T>
__global__ void fill_bias(T *y, const T *bias, int64_t total, int64_t K, int64_t PQ) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride)
    y[e] = bias ? bias[e / PQ % K] : from_f<T>(0.0f);
}

/* the implicit-GEMM kernels (variant igemm): their own file, included
 * here (one translation unit: run_igemm below instantiates them) */
#include "kernels/conv2d/igemm_kernels.cuh"
/* the Winograd F(2x2, 3x3) transforms (variant winograd) */
#include "kernels/conv2d/winograd_kernels.cuh"

/* ---- running ------------------------------------------------------------ */

/* The op's scratch in ctx's workspace, past cuBLASLt's share: its start
 * (NULL: no workspace) and its size in *bytes. */
static char *op_scratch(const opd_cuda_ctx_t *ctx, size_t *bytes) {
  size_t lt = ctx->workspace_bytes < OPD_CUDA_LT_WORKSPACE ? ctx->workspace_bytes
                                                           : OPD_CUDA_LT_WORKSPACE;
  *bytes = ctx->workspace ? ctx->workspace_bytes - lt : 0;
  return ctx->workspace ? (char *)ctx->workspace + lt : NULL;
}

template <typename T>
static int run_direct(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, const conv_plan_t *p) {
  int tiles_q = (int)((p->Q + TILE - 1) / TILE), tiles_p = (int)((p->P + TILE - 1) / TILE);
  int64_t nt = (int64_t)tiles_q * tiles_p;
  if (nt > INT32_MAX || (p->K + KT - 1) / KT > 65535)
    return opd__kerr(call, OPD_ELIMIT, "output too large for the direct 3x3 kernel");
  dim3 grid((unsigned)nt, (unsigned)((p->K + KT - 1) / KT), (unsigned)p->N);
  conv3x3_direct<T><<<grid, TILE * TILE, 0, OPD_STREAM(ctx)>>>(
      (const T *)call->in[0].data, (const T *)call->in[1].data,
      p->has_bias ? (const T *)call->in[2].data : NULL, (T *)call->out[0].data, (int)p->C,
      (int)p->H, (int)p->W, (int)p->K, (int)p->P, (int)p->Q, (int)p->ph, (int)p->pw, tiles_q);
  OPD_CUDA_LAUNCHED();
  return 0;
}

template <typename T>
static int run_im2col(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, const conv_plan_t *p) {
  cudaStream_t st = OPD_STREAM(ctx);
  const T *x = (const T *)call->in[0].data, *w = (const T *)call->in[1].data;
  const T *bias = p->has_bias ? (const T *)call->in[2].data : NULL;
  T *y = (T *)call->out[0].data;
  int64_t PQ = p->P * p->Q, CRS = p->C * p->R * p->S, K = p->K;
  int64_t esz = (int64_t)sizeof(T);
  if (CRS == 0 || p->has_bias) {
    int64_t total = p->N * K * PQ;
    fill_bias<T><<<grid_for(total, 256), 256, 0, st>>>(y, bias, total, K, PQ);
    OPD_CUDA_LAUNCHED();
    if (CRS == 0) return 0;
  }
  float beta = p->has_bias ? 1.0f : 0.0f;
  opd_gemm_t g = {call->out[0].dtype, K, PQ, CRS, w, x, y, 0, CRS * PQ, K * PQ, p->N, beta};
  if (is_pointwise(p)) return opd__cuda_gemm(call, ctx, &g);
  /* im2col in chunks of images that fit the scratch */
  int64_t colb = CRS * PQ * esz;
  size_t scratch;
  T *cols = (T *)op_scratch(ctx, &scratch);
  int64_t per = (int64_t)(scratch / (size_t)colb);
  void *own = NULL;
  int rc = 0;
  if (per < 1) {
    OPD_CUDA_CHECK(cudaMallocAsync(&own, (size_t)colb, st));
    cols = (T *)own;
    per = 1;
  }
  im2col_geom_t ig = {p->C, p->H, p->W, p->R, p->S, p->P, p->Q,
                      p->sh, p->sw, p->ph, p->pw, p->dh, p->dw};
  for (int64_t n0 = 0; n0 < p->N && rc == 0; n0 += per) {
    int64_t nb = p->N - n0 < per ? p->N - n0 : per;
    int64_t total = nb * CRS * PQ;
    im2col<T><<<grid_for(total, 256), 256, 0, st>>>(x + n0 * p->C * p->H * p->W, cols, total,
                                                    ig);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
      rc = opd__cuda_fail(call, e, __FILE__, __LINE__);
      break;
    }
    g.B = cols;
    g.C = y + n0 * K * PQ;
    g.batch = nb;
    rc = opd__cuda_gemm(call, ctx, &g);
  }
  if (own) {
    cudaError_t e = cudaFreeAsync(own, st);
    if (e != cudaSuccess && rc == 0) rc = opd__cuda_fail(call, e, __FILE__, __LINE__);
  }
  return rc;
}


template <typename T>
static int run_igemm(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, const conv_plan_t *p,
                     int tile) {
  igemm_geom_t g = {(int)p->C,  (int)p->H,  (int)p->W,  (int)p->K,  (int)p->R,
                    (int)p->S,  (int)p->P,  (int)p->Q,  (int)p->sh, (int)p->sw,
                    (int)p->ph, (int)p->pw, (int)p->dh, (int)p->dw, (int)(p->P * p->Q),
                    (int)(p->N * p->P * p->Q)};
  const T *x = (const T *)call->in[0].data, *w = (const T *)call->in[1].data;
  const T *bias = p->has_bias ? (const T *)call->in[2].data : NULL;
  T *y = (T *)call->out[0].data;
  cudaStream_t st = OPD_STREAM(ctx);
  unsigned kt64 = (unsigned)((p->K + 63) / 64), kt32 = (unsigned)((p->K + 31) / 32);
  auto px = [&](int bn) { return (unsigned)((g.NPQ + bn - 1) / bn); };
  if constexpr (std::is_same<T, float>::value) {
    if (tile == OPD_IGEMM_TILE_L)
      conv_igemm_f32<64, 128, 8, 8, 8><<<dim3(px(128), kt64), F32_THREADS, 0, st>>>(x, w, bias, y, g);
    else if (tile == OPD_IGEMM_TILE_M)
      conv_igemm_f32<64, 64, 8, 4, 16><<<dim3(px(64), kt64), F32_THREADS, 0, st>>>(x, w, bias, y, g);
    else
      conv_igemm_f32<32, 64, 4, 4, 32><<<dim3(px(64), kt32), F32_THREADS, 0, st>>>(x, w, bias, y, g);
  } else {
    if (tile == OPD_IGEMM_TILE_L)
      conv_igemm_tc<T, 128><<<dim3(px(128), kt64), 256, 0, st>>>(x, w, bias, y, g);
    else if (tile == OPD_IGEMM_TILE_M)
      conv_igemm_tc<T, 64><<<dim3(px(64), kt64), 128, 0, st>>>(x, w, bias, y, g);
    else
      conv_igemm_tc<T, 32><<<dim3(px(32), kt64), 64, 0, st>>>(x, w, bias, y, g);
  }
  OPD_CUDA_LAUNCHED();
  return 0;
}

/* Winograd F(2x2, 3x3) (winograd_kernels.cuh): V once, then per chunk of
 * images the input transform, the 16 GEMMs in one batched cuBLASLt call,
 * the output transform (+ bias). The scratch is the workspace's past
 * cuBLASLt's share, else (a smaller workspace than asked for) one chunk's
 * worth from cudaMallocAsync, freed on the stream after the last kernel. */
template <typename T>
static int run_winograd(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, const conv_plan_t *p) {
  cudaStream_t st = OPD_STREAM(ctx);
  const T *x = (const T *)call->in[0].data, *w = (const T *)call->in[1].data;
  const T *bias = p->has_bias ? (const T *)call->in[2].data : NULL;
  T *y = (T *)call->out[0].data;
  size_t scratch;
  char *base = op_scratch(ctx, &scratch);
  int64_t nb = wino_chunk(p);
  while (nb > 1 && wino_bytes(p, nb) > scratch) nb = (nb + 1) / 2;
  /* one thread per element of V, U or M: grids of int32 blocks of 256 */
  const int64_t most = (int64_t)INT32_MAX * 256, tp = wino_pitch(p, nb);
  if (p->K * p->C > most || p->C * tp > most || p->K * tp > most)
    return opd__kerr(call, OPD_ELIMIT, "too large for the Winograd kernels' grids");
  void *own = NULL;
  int rc = 0;
  if (wino_bytes(p, nb) > scratch) {
    OPD_CUDA_CHECK(cudaMallocAsync(&own, wino_bytes(p, nb), st));
    base = (char *)own;
  }
  const int64_t f = (int64_t)sizeof(float), tiles = wino_tiles(p);
  float *V = (float *)base;
  float *U = (float *)(base + round256(16 * p->K * p->C * f));
  float *M = (float *)((char *)U + round256(16 * p->C * tp * f));
  auto blocks = [](int64_t n) { return (unsigned)((n + 255) / 256); };
  wino_filter<T><<<blocks(p->K * p->C), 256, 0, st>>>(w, V, p->K, p->C);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) rc = opd__cuda_fail(call, e, __FILE__, __LINE__);
  for (int64_t n0 = 0; n0 < p->N && rc == 0; n0 += nb) {
    int64_t cn = p->N - n0 < nb ? p->N - n0 : nb;
    wino_geom_t g = {p->C,  p->H,  p->W, p->K, p->P, p->Q, p->ph, p->pw, (p->P + 1) / 2,
                     (p->Q + 1) / 2, cn * tiles, wino_pitch(p, cn)};
    wino_input<T><<<blocks(p->C * g.Tpad), 256, 0, st>>>(x + n0 * p->C * p->H * p->W, U, g);
    if ((e = cudaGetLastError()) != cudaSuccess) {
      rc = opd__cuda_fail(call, e, __FILE__, __LINE__);
      break;
    }
    opd_gemm_t gm = {OPD_DTYPE_FLOAT32, p->K, g.Tpad, p->C, V, U, M,
                     p->K * p->C, p->C * g.Tpad, p->K * g.Tpad, 16, 0.0f};
    if ((rc = opd__cuda_gemm(call, ctx, &gm))) break;
    wino_output<T><<<blocks(p->K * g.T), 256, 0, st>>>(M, bias, y + n0 * p->K * p->P * p->Q,
                                                       g);
    if ((e = cudaGetLastError()) != cudaSuccess) rc = opd__cuda_fail(call, e, __FILE__, __LINE__);
  }
  if (own) {
    e = cudaFreeAsync(own, st);
    if (e != cudaSuccess && rc == 0) rc = opd__cuda_fail(call, e, __FILE__, __LINE__);
  }
  return rc;
}

/* ---- the launchers (launch.h): each variant in the call's dtype ---------- */

int opd__conv2d_run_direct(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, const conv_plan_t *p) {
  int32_t dt = call->out[0].dtype;
  OPD_FLOAT_DISPATCH(dt, return opd__cuda_bad_dtype(call, dt),
    return run_direct<T>(call, ctx, p);
  )
  return 0;
}

int opd__conv2d_run_im2col(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, const conv_plan_t *p) {
  int32_t dt = call->out[0].dtype;
  OPD_FLOAT_DISPATCH(dt, return opd__cuda_bad_dtype(call, dt),
    return run_im2col<T>(call, ctx, p);
  )
  return 0;
}

int opd__conv2d_run_igemm(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, const conv_plan_t *p,
                          int tile) {
  int32_t dt = call->out[0].dtype;
  OPD_FLOAT_DISPATCH(dt, return opd__cuda_bad_dtype(call, dt),
    return run_igemm<T>(call, ctx, p, tile);
  )
  return 0;
}

int opd__conv2d_run_winograd(opd_kcall_t *call, const opd_cuda_ctx_t *ctx,
                             const conv_plan_t *p) {
  int32_t dt = call->out[0].dtype;
  OPD_FLOAT_DISPATCH(dt, return opd__cuda_bad_dtype(call, dt),
    return run_winograd<T>(call, ctx, p);
  )
  return 0;
}
