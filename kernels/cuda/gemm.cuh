/* Row-major batched GEMM through cuBLASLt, shared by matmul, conv2d,
 * linear and gru_cell.
 *
 * DESIGN
 * opd's tensors are row-major; cuBLASLt is column-major. A row-major
 * C (M, N) = A (M, K) @ B (K, N) is the column-major C^T (N, M) =
 * B^T (N, K) @ A^T (K, M) over the same bytes, so the call passes B as
 * cuBLASLt's A and A as its B, with no transposes. Batches are strided
 * (a stride of 0 repeats one matrix: torch's broadcast batch dims and
 * conv2d's shared weight). Precision: float32 runs CUBLAS_COMPUTE_32F
 * (true fp32; TF32 off, so that results match the CPU reference and
 * torch's default allow_tf32=False for matmul), float64 runs
 * CUBLAS_COMPUTE_64F (alpha and beta in double), float16 and bfloat16 run
 * with fp32 accumulation and fp32 alpha/beta, and split-K only with the
 * COMPUTE_TYPE reduction (the parts summed in float in the workspace, the
 * result rounded once): cuBLASLt's default also allows INPLACE and
 * OUTPUT_TYPE, which round each part (or the running sum) to the 16-bit
 * output type; its heuristic picks split-K for small outputs with a long
 * reduction. conv2d im2col (24, 1170) @ (1170, 100) failed so on the GPU machine:
 * errors up to 2^-6 in float16 and 2^-2 in bfloat16, 11% / 81% of
 * outputs near zero, as a simulation of parts rounded to 16 bits gives
 * (one rounding of a float sum: none past the test's tolerance). torch's
 * allow_{fp16,bf16}_reduced_precision_reduction=False sets the same mask.
 * The algorithm comes from cuBLASLt's heuristic, told the real pointer
 * alignment and the workspace share (OPD_CUDA_LT_WORKSPACE) it may use.
 * B may come transposed, as torch's (N, K) weights (linear, gru_cell):
 * that row-major (N, K) is the column-major (K, N), passed with TRANSA.
 * An epilogue (bias, relu, the tanh-form gelu) runs on the fp32
 * accumulator before the one rounding to the output type; the bias must
 * be 16-byte aligned (cuBLASLt's kernels read it in vectors: callers with
 * another bias add it themselves).
 */
#ifndef OPD_KERNELS_CUDA_GEMM_CUH
#define OPD_KERNELS_CUDA_GEMM_CUH

#include "kernels/cuda/common.cuh"

typedef struct opd_gemm {
  int32_t dtype;                   /* OPD_DTYPE_FLOAT32/FLOAT16/BFLOAT16,
                                      or FLOAT64 (no epilogue) */
  int64_t M, N, K;                 /* C_i (M, N) = A_i (M, K) @ B_i (K, N) */
  const void *A, *B;               /* row-major, contiguous per item */
  void *C;                         /* row-major (M, N) per item */
  int64_t sA, sB, sC;              /* batch strides in elements (0: repeat) */
  int64_t batch;                   /* items */
  float beta;                      /* C = A@B + beta*C */
  int trans_b;                     /* 1: B is stored (N, K) and used as
                                      B^T (torch's weight layout) */
  int epilogue;                    /* OPD_GEMM_EPI_*: on the accumulator */
  const void *bias;                /* (N) in dtype, for the *_BIAS
                                      epilogues; 16-byte aligned */
  int c_float;                     /* 1: C is float32 whatever dtype (the
                                      half types' products kept in float) */
} opd_gemm_t;

/* Epilogues (cuBLASLt's): BIAS adds bias[n] to column n of C; RELU is
 * max(v, 0); GELU is the tanh form, 0.5v(1+tanh(sqrt(2/pi)(v+0.044715v^3))). */
enum {
  OPD_GEMM_EPI_NONE = 0,
  OPD_GEMM_EPI_BIAS,
  OPD_GEMM_EPI_RELU,
  OPD_GEMM_EPI_RELU_BIAS,
  OPD_GEMM_EPI_GELU,
  OPD_GEMM_EPI_GELU_BIAS,
};

/* Enqueues the GEMM on ctx's stream. Returns 0, or OPD_EBACKEND with
 * "cublasLt: ..." in call->err (nothing enqueued); OPD_EINVAL when
 * cuBLASLt has no algorithm for the epilogue asked for (the caller may
 * run it without and apply the epilogue itself). M, N, K > 0. */
int opd__cuda_gemm(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, const opd_gemm_t *g);

#endif /* OPD_KERNELS_CUDA_GEMM_CUH */
