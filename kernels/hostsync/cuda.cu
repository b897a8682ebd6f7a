/* hostsync on the GPU (test builds only): y = x on the stream, then the
 * host waits for the stream, which a stream capture refuses
 * (cudaErrorStreamCaptureUnsupported, the capture invalidated). Run:
 * build-test/opd with tests/gpu/graph_gpu.c's capture checks. */
#ifdef OPD_TEST_OPS
#include "kernels/cuda/common.cuh"

extern "C" int opd__hostsync_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  cudaStream_t s = (cudaStream_t)ctx->stream;
  cudaError_t e = cudaMemcpyAsync(call->out[0].data, call->in[0].data,
                                  (size_t)call->in[0].numel * 4,
                                  cudaMemcpyDeviceToDevice, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  if (e != cudaSuccess)
    return opd__kerr(call, OPD_EBACKEND, "cuda: %s", cudaGetErrorString(e));
  return 0;
}
#endif
