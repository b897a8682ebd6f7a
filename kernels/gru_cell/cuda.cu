/* gru_cell on the GPU: one torch.nn.GRUCell step, float32 / float16 /
 * bfloat16 (gates computed in float; formulas and shapes: op.c, gru.h).
 *
 * Variant (one): two cuBLASLt GEMMs (kernels/cuda/gemm.cu; fp32 without
 * TF32, half types with fp32 accumulation) into float32 scratch (the half
 * types' products are not rounded to 16 bits before the gates: the one
 * rounding is h'), gi = x @ w_ih^T and gh = h @ w_hh^T (B, 3H) each, then
 * gate_kernel: one thread per output element adds the biases and
 * computes r, z, n and h' in float.
 * Scratch: gi and gh, each rounded up to 256 bytes, from the workspace
 * past cuBLASLt's share (opd__gru_cell_cuda_workspace asks for them);
 * with a smaller workspace, from cudaMallocAsync on the stream, freed
 * behind the gate kernel. Nothing synchronizes: with the workspace the
 * daemon sizes from the row, the call can be captured into a CUDA graph.
 * I == 0 zeroes gi (cudaMemsetAsync).
 * Test: build/tests/gpu_kernels --op gru_cell.
 */
#include "kernels/cuda/gemm.cuh"

extern "C" {
#include "kernels/gru_cell/gru.h"
}

static size_t round256(size_t b) { return (b + 255) & ~(size_t)255; }

/* Bytes of one of gi / gh (float32). */
static size_t part_bytes(const gru_dims_t *d) {
  return round256((size_t)(3 * d->B * d->H) * sizeof(float));
}

extern "C" size_t opd__gru_cell_cuda_workspace(const opd_kcall_t *call) {
  gru_dims_t d = opd__gru_dims(call);
  return 2 * part_bytes(&d);
}

template <typename T>
__global__ void gate_kernel(const float *gi, const float *gh, const T *bi, const T *bh,
                            const T *h, T *y, int64_t B, int64_t H) {
  int64_t n = B * H, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
    int64_t b = e / H, k = e % H, o = b * 3 * H + k;
    float ir = gi[o], iz = gi[o + H], in = gi[o + 2 * H];
    float hr = gh[o], hz = gh[o + H], hn = gh[o + 2 * H];
    if (bi) ir += to_f(bi[k]), iz += to_f(bi[k + H]), in += to_f(bi[k + 2 * H]);
    if (bh) hr += to_f(bh[k]), hz += to_f(bh[k + H]), hn += to_f(bh[k + 2 * H]);
    float r = 1.0f / (1.0f + expf(-(ir + hr)));
    float z = 1.0f / (1.0f + expf(-(iz + hz)));
    float nn = tanhf(in + r * hn);
    y[e] = from_f<T>((1.0f - z) * nn + z * to_f(h[e]));
  }
}

extern "C" int opd__gru_cell_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  gru_dims_t d = opd__gru_dims(call);
  if (d.B == 0 || d.H == 0) return 0;
  int32_t dt = call->out[0].dtype;
  cudaStream_t st = OPD_STREAM(ctx);
  size_t part = part_bytes(&d);
  size_t lt = ctx->workspace_bytes < OPD_CUDA_LT_WORKSPACE ? ctx->workspace_bytes
                                                           : OPD_CUDA_LT_WORKSPACE;
  size_t have = ctx->workspace ? ctx->workspace_bytes - lt : 0;
  char *base = ctx->workspace ? (char *)ctx->workspace + lt : NULL;
  void *own = NULL;
  if (have < 2 * part) {
    OPD_CUDA_CHECK(cudaMallocAsync(&own, 2 * part, st));
    base = (char *)own;
  }
  void *gi = base, *gh = base + part;
  int rc = 0;
  opd_gemm_t g = {dt, d.B, 3 * d.H, d.I, call->in[0].data, call->in[2].data, gi, 0, 0, 0, 1,
                  0.0f, 1, OPD_GEMM_EPI_NONE, NULL, 1};
  if (d.I == 0) {
    cudaError_t e = cudaMemsetAsync(gi, 0, (size_t)(3 * d.B * d.H) * sizeof(float), st);
    if (e != cudaSuccess) rc = opd__cuda_fail(call, e, __FILE__, __LINE__);
  } else {
    rc = opd__cuda_gemm(call, ctx, &g);
  }
  if (rc == 0) {
    g.K = d.H;
    g.A = call->in[1].data;
    g.B = call->in[3].data;
    g.C = gh;
    rc = opd__cuda_gemm(call, ctx, &g);
  }
  if (rc == 0) {
    int64_t n = d.B * d.H;
    OPD_FLOAT_DISPATCH(dt, rc = opd__cuda_bad_dtype(call, dt),
      gate_kernel<T><<<grid_for(n, 256), 256, 0, st>>>(
          (const float *)gi, (const float *)gh, d.has_bih ? (const T *)call->in[4].data : NULL,
          d.has_bhh ? (const T *)call->in[5].data : NULL, (const T *)call->in[1].data,
          (T *)call->out[0].data, d.B, d.H);
    )
    cudaError_t e = cudaGetLastError();
    if (rc == 0 && e != cudaSuccess) rc = opd__cuda_fail(call, e, __FILE__, __LINE__);
  }
  if (own) {
    cudaError_t e = cudaFreeAsync(own, st);
    if (e != cudaSuccess && rc == 0) rc = opd__cuda_fail(call, e, __FILE__, __LINE__);
  }
  return rc;
}
