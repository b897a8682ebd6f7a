/* scale on the GPU: y = a*x + b, float32, on the daemon's stream. */
#include <opd/op.h>

__global__ void scale_kernel(const float *x, float *y, int64_t n, float a, float b) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    y[i] = a * x[i] + b;
}

extern "C" int scale_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  int64_t n = call->in[0].numel;
  if (n == 0) return 0;
  int blocks = (int)(n / 256 + 1 < 65536 ? n / 256 + 1 : 65536);
  scale_kernel<<<blocks, 256, 0, (cudaStream_t)ctx->stream>>>(
      (const float *)call->in[0].data, (float *)call->out[0].data, n,
      (float)call->attr[0].f, (float)call->attr[1].f);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return opd_kerr(call, OPD_EBACKEND, "cuda: %s", cudaGetErrorString(e));
  return 0;
}
