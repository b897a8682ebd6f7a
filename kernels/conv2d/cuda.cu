/* conv2d on the GPU (groups=1), float32 / float16 / bfloat16 (x, weight,
 * bias of one dtype), geometry from the shared plan (kernels/conv2d/plan.h).
 *
 * Variants (opd__conv2d_cuda_variant; opd__conv2d_cuda runs AUTO):
 *   direct3x3  R = S = 3, stride 1, dilation 1, any padding: a direct
 *              kernel. A block computes a 16x16 tile of output pixels for
 *              16 output channels; input channels go through shared memory
 *              8 at a time (an 18x18 halo tile each, zeros outside the
 *              image) with their 16x8x9 weights; each thread accumulates
 *              its pixel's 16 channels in float registers. No scratch.
 *   im2col     every other geometry (stride, padding, dilation, any R x S):
 *              im2col of a chunk of images into the workspace scratch,
 *              cols_n (C*R*S, P*Q), then one strided-batched cuBLASLt GEMM
 *              y_n (K, P*Q) = weight (K, C*R*S) @ cols_n with the weight
 *              repeated (batch stride 0), fp32 accumulation, the bias
 *              pre-filled into y and added through beta = 1. A 1x1 kernel
 *              with stride 1 and no padding skips im2col (cols_n is x_n).
 * Why im2col + cuBLASLt for the general case: it reuses the tuned tensor-
 * core GEMM (fp16/bf16 HGMMA) with a kernel of a few lines, and costs one
 * extra write + read of the columns (R*S times x) through L2-sized
 * chunks; cuDNN would be the library that does conv well, but it is not
 * on the GPU machine (no cudnn headers or libs there), and an implicit-
 * GEMM kernel of our own is far more code to get fast. AUTO picks
 * direct3x3 whenever it applies; --bench times both on the 3x3 cases so
 * the choice can be revisited with numbers.
 * Scratch: when the workspace's scratch holds fewer than one image's
 * columns, one image's worth comes from cudaMallocAsync on the stream and
 * goes back with cudaFreeAsync after the last GEMM (stream-ordered).
 * Test: build/tests/gpu_kernels (op=conv2d); bench: --bench (op=conv2d).
 */
#include "kernels/cuda/gemm.cuh"

extern "C" {
#include "kernels/conv2d/plan.h"
}

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

static bool is_direct(const conv_plan_t *p) {
  return p->R == 3 && p->S == 3 && p->sh == 1 && p->sw == 1 && p->dh == 1 && p->dw == 1 &&
         p->C <= INT32_MAX && p->H < INT32_MAX / 2 && p->W < INT32_MAX / 2 &&
         p->K <= INT32_MAX && p->N <= 65535 && p->ph < (1 << 20) && p->pw < (1 << 20);
}

static bool is_pointwise(const conv_plan_t *p) {
  return p->R == 1 && p->S == 1 && p->sh == 1 && p->sw == 1 && p->ph == 0 && p->pw == 0;
}

extern "C" size_t opd__conv2d_cuda_workspace(const opd_kcall_t *call) {
  conv_plan_t p;
  if (opd__conv2d_plan((opd_kcall_t *)call, &p)) return 0;
  if (is_direct(&p) || is_pointwise(&p)) return 0;
  size_t b = (size_t)(p.C * p.R * p.S * p.P * p.Q) * opd__dtype_size(call->in[0].dtype);
  return (b + 255) & ~(size_t)255;
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
  size_t lt = ctx->workspace_bytes < OPD_CUDA_LT_WORKSPACE ? ctx->workspace_bytes
                                                           : OPD_CUDA_LT_WORKSPACE;
  size_t scratch = ctx->workspace ? ctx->workspace_bytes - lt : 0;
  T *cols = ctx->workspace ? (T *)((char *)ctx->workspace + lt) : NULL;
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

extern "C" int opd__conv2d_cuda_variant(opd_kcall_t *call, const opd_cuda_ctx_t *ctx,
                                        int variant) {
  conv_plan_t p;
  int rc = opd__conv2d_plan(call, &p);
  if (rc) return rc;
  if (p.N == 0 || p.K == 0 || p.P * p.Q == 0) return 0;
  bool direct = variant == OPD_CONV_DIRECT3X3 || (variant == OPD_CONV_AUTO && is_direct(&p));
  if (variant == OPD_CONV_DIRECT3X3 && !is_direct(&p))
    return opd__kerr(call, OPD_EINVAL, "the direct kernel takes 3x3, stride 1, dilation 1 only");
  OPD_FLOAT_DISPATCH(call->out[0].dtype, return opd__cuda_bad_dtype(call, call->out[0].dtype),
    return direct ? run_direct<T>(call, ctx, &p) : run_im2col<T>(call, ctx, &p);
  )
  return 0;
}

extern "C" int opd__conv2d_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  return opd__conv2d_cuda_variant(call, ctx, OPD_CONV_AUTO);
}
