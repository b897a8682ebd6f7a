/* Row-major float32 GEMM for the CPU kernels; see gemm.h for the DESIGN.
 *
 * Variants:
 *   gemv      one row times B^T (linear's and gru_cell's batch 1) with B
 *             up to GEMV_OWN elements, in both builds: four rows of B at
 *             a time against the row of A, 8-lane partial sums (FMA in the
 *             AVX2 clone), on the calling thread. OpenBLAS's sgemv wakes
 *             its threads for these sizes: 13 us against 7 us for
 *             (1, 256) @ (256, 512) on the 2-core VM (2026-12-07,
 *             bench_cpu_ops-style loop of 20000 calls), and this kernel
 *             matches its single-threaded speed.
 *   BLAS      cblas_sgemv for a larger B (threads pay off), cblas_sgemm
 *             otherwise (threaded by OpenBLAS itself)
 *   OPD_NO_BLAS  plain float loops: gemv for every row of A against B^T;
 *             for B, rows of C accumulated as C[i,:] += A[i,k] * B[k,:]
 * Test: build/tests/ops, suites matmul, linear, gru_cell.
 */
#include "kernels/common/gemm.h"

#ifndef OPD_NO_BLAS
#include <cblas.h>
#endif
#include <limits.h>
#include <string.h>

#include "kernels/common/kutil.h"
#include "kernels/common/rowred.h"

/* B^T products at batch 1 with B of at most this many elements (4 MiB)
 * run gemv on the calling thread. */
#define GEMV_OWN (1 << 20)

/* c[j] = a . B[j, :] (+ beta c[j]) for the N rows of B (N, K). */
__attribute__((optimize("fp-contract=fast")))
OPD_FAST static void gemv(int64_t N, int64_t K, const float *a, const float *B,
                          float beta, float *c) {
  int64_t j = 0;
  for (; j + 4 <= N; j += 4) {
    const float *b0 = B + j * K, *b1 = b0 + K, *b2 = b1 + K, *b3 = b2 + K;
    opd_v8f s0 = opd__v8_splat(0), s1 = s0, s2 = s0, s3 = s0;
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
      opd_v8f v = opd__v8_load(a + k);
      s0 += opd__v8_load(b0 + k) * v;
      s1 += opd__v8_load(b1 + k) * v;
      s2 += opd__v8_load(b2 + k) * v;
      s3 += opd__v8_load(b3 + k) * v;
    }
    float t[4] = {opd__v8_hsum(s0), opd__v8_hsum(s1), opd__v8_hsum(s2),
                  opd__v8_hsum(s3)};
    for (; k < K; k++) {
      t[0] += b0[k] * a[k];
      t[1] += b1[k] * a[k];
      t[2] += b2[k] * a[k];
      t[3] += b3[k] * a[k];
    }
    for (int r = 0; r < 4; r++)
      c[j + r] = beta == 0.0f ? t[r] : t[r] + beta * c[j + r];
  }
  for (; j < N; j++) {
    const float *b = B + j * K;
    opd_v8f s = opd__v8_splat(0);
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) s += opd__v8_load(b + k) * opd__v8_load(a + k);
    float t = opd__v8_hsum(s);
    for (; k < K; k++) t += b[k] * a[k];
    c[j] = beta == 0.0f ? t : t + beta * c[j];
  }
}

int opd__gemm_fits(int64_t M, int64_t N, int64_t K) {
  return M <= INT_MAX && N <= INT_MAX && K <= INT_MAX;
}

#ifndef OPD_NO_BLAS
void opd__sgemm(int trans_b, int64_t M, int64_t N, int64_t K, const float *A,
                const float *B, float beta, float *C) {
  if (trans_b && M == 1 && N * K <= GEMV_OWN) {
    gemv(N, K, A, B, beta, C);
    return;
  }
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
  for (int64_t i = 0; i < M; i++) gemv(N, K, A + i * K, B, beta, C + i * N);
}
#endif /* OPD_NO_BLAS */
