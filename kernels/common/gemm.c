/* Row-major float32 GEMM for the CPU kernels; see gemm.h for the DESIGN.
 *
 * Variants:
 *   BLAS      cblas_sgemv for one row times B^T (linear's batch 1),
 *             cblas_sgemm otherwise (threaded by OpenBLAS itself)
 *   OPD_NO_BLAS  plain float loops: for B^T, dots of contiguous rows with
 *             8 partial sums; for B, rows of C accumulated as
 *             C[i,:] += A[i,k] * B[k,:] (both vectorize)
 * Test: build/tests/ops, suites matmul, linear, gru_cell.
 */
#include "kernels/common/gemm.h"

#ifndef OPD_NO_BLAS
#include <cblas.h>
#endif
#include <limits.h>
#include <string.h>

#include "kernels/common/kutil.h"

int opd__gemm_fits(int64_t M, int64_t N, int64_t K) {
  return M <= INT_MAX && N <= INT_MAX && K <= INT_MAX;
}

#ifndef OPD_NO_BLAS
void opd__sgemm(int trans_b, int64_t M, int64_t N, int64_t K, const float *A,
                const float *B, float beta, float *C) {
  if (trans_b && M == 1) {
    /* y (N) = B (N, K) @ a (K) + beta y; y zeroed first for beta 0: some
     * OpenBLAS versions scale y by beta, which keeps a NaN it held */
    if (beta == 0.0f) memset(C, 0, (size_t)N * sizeof(float));
    cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)N, (blasint)K, 1.0f, B,
                (blasint)K, A, 1, beta, C, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              (blasint)M, (blasint)N, (blasint)K, 1.0f, A, (blasint)K, B,
              (blasint)(trans_b ? K : N), beta, C, (blasint)N);
}
#else
/* sum a[k] * b[k] over [0, K) with 8 partial sums. */
OPD_FAST static float dot(const float *a, const float *b, int64_t K) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 8 <= K; k += 8)
    for (int j = 0; j < 8; j++) s[j] += a[k + j] * b[k + j];
  float t = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; k < K; k++) t += a[k] * b[k];
  return t;
}

OPD_FAST static void axpy_rows(int64_t M, int64_t N, int64_t K, const float *A,
                               const float *B, float beta, float *C) {
  for (int64_t i = 0; i < M; i++) {
    float *c = C + i * N;
    for (int64_t j = 0; j < N; j++) c[j] = beta == 0.0f ? 0.0f : beta * c[j];
    for (int64_t k = 0; k < K; k++) {
      float a = A[i * K + k];
      const float *b = B + k * N;
      for (int64_t j = 0; j < N; j++) c[j] += a * b[j];
    }
  }
}

void opd__sgemm(int trans_b, int64_t M, int64_t N, int64_t K, const float *A,
                const float *B, float beta, float *C) {
  if (!trans_b) {
    axpy_rows(M, N, K, A, B, beta, C);
    return;
  }
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      float v = dot(A + i * K, B + j * K, K);
      C[i * N + j] = beta == 0.0f ? v : v + beta * C[i * N + j];
    }
}
#endif /* OPD_NO_BLAS */
