/* conv3x3_bias_relu on the GPU (float32, NCHW, stride 1, padding 1).
 *
 * One block computes a 16x16 tile of output pixels for KB output channels
 * of one image. Per stage of CB input channels it copies the CB 18x18
 * input tiles (with the zero halo) and their CB x 9 x KB weights into
 * shared memory; each thread then holds RPT rows of one pixel column for
 * the KB channels in registers (RPT*KB sums), reads the (RPT+2) x 3 inputs
 * it needs once per channel and each weight once for all RPT rows (a
 * shared-memory broadcast), so it does RPT*KB*9 FMAs per 9*KB + 3*(RPT+2)
 * shared loads. Bias starts the sums; ReLU comes before the one store.
 * Two shapes of the same kernel: <RPT 4, KB 16> (64 threads) when that
 * gives the GPU enough blocks, else <RPT 2, KB 8> (128 threads, 4x the
 * blocks) for small images or few channels.
 * grid: (tiles of W x tiles of H, ceil(K / KB), N).
 */
#include <opd/op.h>

#define TILE 16
#define CB 4

template <int RPT, int KB>
__global__ void __launch_bounds__(TILE * (TILE / RPT))
conv3x3_kernel(const float *__restrict__ x, const float *__restrict__ wt,
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
static void launch(const opd_kcall_t *call, cudaStream_t st, int64_t tiles,
                   int64_t tiles_w) {
  const opd_tview_t *x = &call->in[0];
  int64_t N = x->shape[0], K = call->in[1].shape[0];
  dim3 grid((unsigned)tiles, (unsigned)((K + KB - 1) / KB), (unsigned)N);
  conv3x3_kernel<RPT, KB><<<grid, TILE * (TILE / RPT), 0, st>>>(
      (const float *)x->data, (const float *)call->in[1].data,
      (const float *)call->in[2].data, (float *)call->out[0].data,
      (int)x->shape[1], (int)x->shape[2], (int)x->shape[3], (int)K, (int)tiles_w);
}

extern "C" int conv3x3_bias_relu_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  const opd_tview_t *x = &call->in[0];
  int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3],
          K = call->in[1].shape[0];
  if (N == 0 || K == 0 || H == 0 || W == 0) return 0;
  int64_t tiles_w = (W + TILE - 1) / TILE, tiles = tiles_w * ((H + TILE - 1) / TILE);
  if (N > 65535 || K > 65535 || tiles > INT32_MAX || C > INT32_MAX ||
      H > INT32_MAX || W > INT32_MAX || (int64_t)H * W > INT32_MAX)
    return opd_kerr(call, OPD_ELIMIT, "cuda: N %lld, K %lld or H x W too large "
                    "for this kernel's grid", (long long)N, (long long)K);
  cudaStream_t st = (cudaStream_t)ctx->stream;
  /* enough blocks of the big shape for two per SM of a large GPU? */
  if (tiles * ((K + 15) / 16) * N >= 264) launch<4, 16>(call, st, tiles, tiles_w);
  else launch<2, 8>(call, st, tiles, tiles_w);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return opd_kerr(call, OPD_EBACKEND, "cuda: %s", cudaGetErrorString(e));
  return 0;
}
