/* conv3x3_bias_relu on the GPU (float32, NCHW, stride 1, padding 1).
 *
 * One block computes a 16x16 tile of output pixels for 8 output channels
 * of one image: for each input channel it stages the 18x18 input tile
 * (with the zero halo) and the 8x9 weights in shared memory, and each of
 * its 256 threads accumulates its pixel for the 8 channels in registers;
 * bias starts the sums and ReLU is applied before the one store.
 * grid: (tiles of W x tiles of H, K / 8, N).
 */
#include <opd/op.h>

#define TILE 16
#define KB 8

__global__ void conv3x3_kernel(const float *__restrict__ x,
                               const float *__restrict__ wt,
                               const float *__restrict__ bias,
                               float *__restrict__ y, int C, int H, int W,
                               int K, int tiles_w) {
  __shared__ float xs[TILE + 2][TILE + 2];
  __shared__ float ws[KB][9];
  const int n = blockIdx.z, k0 = blockIdx.y * KB;
  const int th = (blockIdx.x / tiles_w) * TILE, tw = (blockIdx.x % tiles_w) * TILE;
  const int ty = threadIdx.x / TILE, tx = threadIdx.x % TILE;
  const int h = th + ty, w = tw + tx;
  float acc[KB];
#pragma unroll
  for (int q = 0; q < KB; q++) acc[q] = k0 + q < K ? bias[k0 + q] : 0.0f;
  for (int c = 0; c < C; c++) {
    const float *xp = x + ((size_t)n * C + c) * H * W;
    for (int i = threadIdx.x; i < (TILE + 2) * (TILE + 2); i += blockDim.x) {
      int ih = th + i / (TILE + 2) - 1, iw = tw + i % (TILE + 2) - 1;
      xs[i / (TILE + 2)][i % (TILE + 2)] =
          ih >= 0 && ih < H && iw >= 0 && iw < W ? xp[(size_t)ih * W + iw] : 0.0f;
    }
    if (threadIdx.x < KB * 9) {
      int q = threadIdx.x / 9, t = threadIdx.x % 9;
      ws[q][t] = k0 + q < K ? wt[((size_t)(k0 + q) * C + c) * 9 + t] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < 3; r++)
#pragma unroll
      for (int s = 0; s < 3; s++) {
        float v = xs[ty + r][tx + s];
#pragma unroll
        for (int q = 0; q < KB; q++) acc[q] += v * ws[q][r * 3 + s];
      }
    __syncthreads();
  }
  if (h >= H || w >= W) return;
#pragma unroll
  for (int q = 0; q < KB; q++)
    if (k0 + q < K)
      y[(((size_t)n * K + k0 + q) * H + h) * W + w] = fmaxf(acc[q], 0.0f);
}

extern "C" int conv3x3_bias_relu_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  const opd_tview_t *x = &call->in[0];
  int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3],
          K = call->in[1].shape[0];
  if (N == 0 || K == 0 || H == 0 || W == 0) return 0;
  int64_t tiles_w = (W + TILE - 1) / TILE, tiles = tiles_w * ((H + TILE - 1) / TILE);
  if (N > 65535 || (K + KB - 1) / KB > 65535 || tiles > INT32_MAX || C > INT32_MAX ||
      H > INT32_MAX || W > INT32_MAX)
    return opd_kerr(call, OPD_ELIMIT, "cuda: N %lld, K %lld or H x W too large "
                    "for this kernel's grid", (long long)N, (long long)K);
  dim3 grid((unsigned)tiles, (unsigned)((K + KB - 1) / KB), (unsigned)N);
  conv3x3_kernel<<<grid, TILE * TILE, 0, (cudaStream_t)ctx->stream>>>(
      (const float *)x->data, (const float *)call->in[1].data,
      (const float *)call->in[2].data, (float *)call->out[0].data, (int)C,
      (int)H, (int)W, (int)K, (int)tiles_w);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return opd_kerr(call, OPD_EBACKEND, "cuda: %s", cudaGetErrorString(e));
  return 0;
}
