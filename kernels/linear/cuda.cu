/* linear on the GPU: out (M, N) = act(x (M, K) @ weight (N, K)^T + bias)
 * through cuBLASLt (kernels/cuda/gemm.cu), float32 (true fp32, TF32 off,
 * as torch's default), float16 and bfloat16 (fp32 accumulation).
 *
 * Variants, by activation, with a 16-byte aligned bias or none (cuBLASLt's
 * epilogues, applied to the fp32 accumulator, one rounding):
 *   none       EPILOGUE_BIAS (DEFAULT without bias)
 *   relu       EPILOGUE_RELU_BIAS (RELU)
 *   gelu_tanh  EPILOGUE_GELU_BIAS (GELU): cuBLASLt's GELU is the tanh form
 *   gelu, silu EPILOGUE_BIAS (DEFAULT), then act_kernel over the output
 *              (cuBLASLt has no erf gelu or silu)
 * A bias that is not 16-byte aligned (an arena offset of 4 mod 16, say),
 * or an epilogue cuBLASLt has no algorithm for (opd__cuda_gemm's
 * OPD_EINVAL), is added by act_kernel after a plain GEMM, together with
 * the activation. K == 0: the output is zeroed (cudaMemsetAsync) and
 * act_kernel writes act(bias). Everything is enqueued on ctx's stream:
 * no allocation, no synchronization, so the call can be captured into a
 * CUDA graph.
 * act_kernel's formulas (in float): gelu 0.5v erfc(-v/sqrt2), gelu_tanh
 * v / (1 + e^(-2u)), silu v / (1 + e^(-v)), relu v < 0 ? 0 : v (NaN
 * passes; cuBLASLt's RELU epilogue may turn a NaN into 0, which only an
 * input holding NaN or inf can produce).
 * Test: build/tests/gpu_kernels --op linear (every act, bias or not, a
 * misaligned bias, batch 1, odd sizes, each dtype).
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

extern "C" int opd__linear_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  linear_plan_t p;
  int rc = opd__linear_plan(call, &p, NULL);
  if (rc) return rc;
  if (p.M == 0 || p.N == 0) return 0;
  int32_t dt = call->out[0].dtype;
  void *y = call->out[0].data;
  const void *bias = p.has_bias ? call->in[2].data : NULL;
  cudaStream_t st = OPD_STREAM(ctx);
  bool post = true;
  const void *post_bias = bias; /* the bias act_kernel adds, if any */
  if (p.K == 0) {
    OPD_CUDA_CHECK(cudaMemsetAsync(y, 0, (size_t)(p.M * p.N) * opd__dtype_size(dt), st));
  } else {
    bool lt_bias = bias && aligned16(bias);
    opd_gemm_t g = {dt, p.M, p.N, p.K, call->in[0].data, call->in[1].data, y, 0, 0, 0, 1, 0.0f,
                    1, OPD_GEMM_EPI_NONE, NULL};
    if (!bias || lt_bias) {
      g.epilogue = epilogue_for(p.act, lt_bias, &post);
      g.bias = lt_bias ? bias : NULL;
      post_bias = NULL;
    }
    rc = opd__cuda_gemm(call, ctx, &g);
    if (rc == OPD_EINVAL) { /* no algorithm with that epilogue: act_kernel does it */
      g.epilogue = OPD_GEMM_EPI_NONE;
      g.bias = NULL;
      post = true;
      post_bias = bias;
      rc = opd__cuda_gemm(call, ctx, &g);
    }
    if (rc) return rc;
  }
  if (!post_bias && !(post && p.act != OPD_ACT_NONE)) return 0;
  int64_t n = p.M * p.N;
  LinAct f = {(int)p.act};
  OPD_FLOAT_DISPATCH(dt, return opd__cuda_bad_dtype(call, dt),
    act_kernel<T><<<grid_for(n, 256), 256, 0, st>>>((T *)y, (const T *)post_bias, n, p.N, f);
  )
  OPD_CUDA_LAUNCHED();
  return 0;
}
