/* cuBLASLt GEMM for matmul, conv2d, linear and gru_cell; see gemm.cuh for
 * the DESIGN. */
#include <cublasLt.h>

#include "kernels/cuda/gemm.cuh"

/* Largest power of two (<= 256) dividing the address and the batch step. */
static uint32_t align_of(const void *p, int64_t stride_bytes) {
  uint64_t v = (uint64_t)(uintptr_t)p | 256u;
  if (stride_bytes > 0) v |= (uint64_t)stride_bytes;
  return (uint32_t)(v & (~v + 1));
}

#define LT_CHECK(expr)                                                         \
  do {                                                                         \
    cublasStatus_t s_ = (expr);                                                \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                         \
      rc = opd__kerr(call, OPD_EBACKEND, "cublasLt: %s (%s:%d)",               \
                     cublasLtGetStatusString(s_), __FILE__, __LINE__);          \
      goto done;                                                               \
    }                                                                          \
  } while (0)

static cublasLtEpilogue_t lt_epilogue(int e) {
  switch (e) {
    case OPD_GEMM_EPI_BIAS: return CUBLASLT_EPILOGUE_BIAS;
    case OPD_GEMM_EPI_RELU: return CUBLASLT_EPILOGUE_RELU;
    case OPD_GEMM_EPI_RELU_BIAS: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case OPD_GEMM_EPI_GELU: return CUBLASLT_EPILOGUE_GELU;
    case OPD_GEMM_EPI_GELU_BIAS: return CUBLASLT_EPILOGUE_GELU_BIAS;
    default: return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

int opd__cuda_gemm(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, const opd_gemm_t *g) {
  cudaDataType_t dt;
  switch (g->dtype) {
    case OPD_DTYPE_FLOAT32: dt = CUDA_R_32F; break;
    case OPD_DTYPE_FLOAT16: dt = CUDA_R_16F; break;
    case OPD_DTYPE_BFLOAT16: dt = CUDA_R_16BF; break;
    case OPD_DTYPE_FLOAT64: dt = CUDA_R_64F; break;
    default: return opd__cuda_bad_dtype(call, g->dtype);
  }
  /* float64: computed and scaled in double (alpha, beta double) */
  bool f64 = dt == CUDA_R_64F;
  int64_t esz = (int64_t)opd__dtype_size(g->dtype);
  /* C in float for half A and B (gru_cell's scratch): cuBLASLt's
   * 16F/16BF x 16F/16BF -> 32F with COMPUTE_32F */
  bool c_f32 = g->c_float && dt != CUDA_R_32F;
  cudaDataType_t cdt = c_f32 ? CUDA_R_32F : dt;
  int64_t csz = c_f32 ? 4 : esz;
  cublasLtHandle_t lt = (cublasLtHandle_t)ctx->cublaslt;
  cublasLtMatmulDesc_t op = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  cublasLtMatmulHeuristicResult_t res;
  int nres = 0, rc = 0;
  size_t ws = ctx->workspace ? ctx->workspace_bytes : 0;
  if (ws > OPD_CUDA_LT_WORKSPACE) ws = OPD_CUDA_LT_WORKSPACE;
  uint64_t ws64 = ws;
  float alpha = 1.0f, beta = g->beta;
  double alpha64 = 1.0, beta64 = g->beta;
  /* cuBLASLt's A is our B (N x K col-major, ld N; transposed: K x N, ld
   * K, with TRANSA), its B our A (K x M, ld K), C and D ours (N x M, ld
   * N). */
  uint32_t alA = align_of(g->B, g->sB * esz), alB = align_of(g->A, g->sA * esz),
           alC = align_of(g->C, g->sC * csz);
  LT_CHECK(cublasLtMatmulDescCreate(&op, f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F,
                                     f64 ? CUDA_R_64F : CUDA_R_32F));
  if (g->trans_b) {
    cublasOperation_t t = CUBLAS_OP_T;
    LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
    LT_CHECK(cublasLtMatrixLayoutCreate(&la, dt, (uint64_t)g->K, (uint64_t)g->N, g->K));
  } else {
    LT_CHECK(cublasLtMatrixLayoutCreate(&la, dt, (uint64_t)g->N, (uint64_t)g->K, g->N));
  }
  if (g->epilogue != OPD_GEMM_EPI_NONE) {
    cublasLtEpilogue_t e = lt_epilogue(g->epilogue);
    LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
    if (g->bias)
      LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias,
                                              sizeof g->bias));
  }
  LT_CHECK(cublasLtMatrixLayoutCreate(&lb, dt, (uint64_t)g->K, (uint64_t)g->M, g->K));
  LT_CHECK(cublasLtMatrixLayoutCreate(&lc, cdt, (uint64_t)g->N, (uint64_t)g->M, g->N));
  if (g->batch > 1) {
    if (g->batch > INT32_MAX) {
      rc = opd__kerr(call, OPD_ELIMIT, "batch of %lld products is more than cuBLASLt takes",
                     (long long)g->batch);
      goto done;
    }
    int32_t nb = (int32_t)g->batch;
    int64_t s[3] = {g->sB, g->sA, g->sC};
    cublasLtMatrixLayout_t l[3] = {la, lb, lc};
    for (int i = 0; i < 3; i++) {
      LT_CHECK(cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &nb,
                                                sizeof nb));
      LT_CHECK(cublasLtMatrixLayoutSetAttribute(
          l[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s[i], sizeof s[i]));
    }
  }
  LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &ws64, sizeof ws64));
  if (cdt != CUDA_R_32F && !f64) {
    /* Split-K only with its partial sums in float (gemm.cuh: Precision):
     * INPLACE and OUTPUT_TYPE add the parts up in the output type. */
    uint32_t red = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                  &red, sizeof red));
  }
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                &alA, sizeof alA));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                &alB, sizeof alB));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                &alC, sizeof alC));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                &alC, sizeof alC));
  {
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &res,
                                                       &nres);
    if (hs != CUBLAS_STATUS_SUCCESS || nres < 1) {
      /* with an epilogue: OPD_EINVAL, so that the caller can run the GEMM
       * without it and apply the epilogue itself */
      rc = opd__kerr(call, g->epilogue != OPD_GEMM_EPI_NONE ? OPD_EINVAL : OPD_EBACKEND,
                     "cublasLt: no algorithm for (%lld,%lld)@(%lld,%lld) x %lld%s (%s)",
                     (long long)g->M, (long long)g->K, (long long)g->K, (long long)g->N,
                     (long long)g->batch,
                     g->epilogue != OPD_GEMM_EPI_NONE ? " with this epilogue" : "",
                     cublasLtGetStatusString(hs));
      goto done;
    }
  }
  LT_CHECK(cublasLtMatmul(lt, op, f64 ? (const void *)&alpha64 : (const void *)&alpha, g->B,
                          la, g->A, lb, f64 ? (const void *)&beta64 : (const void *)&beta,
                          g->C, lc, g->C, lc,
                          &res.algo, ws ? ctx->workspace : NULL, ws,
                          (cudaStream_t)ctx->stream));
done:
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (lc) cublasLtMatrixLayoutDestroy(lc);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (op) cublasLtMatmulDescDestroy(op);
  return rc;
}
