/* Row-major float32 GEMM for the CPU kernels; see gemm.h for the DESIGN.
 *
 * Variants:
 *   gemv      one row times B^T (linear's and gru_cell's batch 1), in
 *             both builds: four rows of B at a time against the row of A,
 *             8-lane partial sums (FMA in the AVX2 clone); opd__sgemv_t
 *             spreads the rows of a large product over the caller's exec
 *             (chunks of at least GEMV_GRAIN multiply-adds), as every CPU
 *             kernel takes its threads, rather than OpenBLAS's own
 *             threads, and runs small ones inline: 5.9 us against
 *             OpenBLAS sgemv's 11.0 for (1, 256) @ (256, 512)^T, 14.4
 *             against 17.7 for 512 x 512, in one run on the shared 2-core
 *             VM (2026-12-07, bench/results/2026-12-07-vm-cpu-model.txt, B)
 *   BLAS      cblas_sgemm (threaded by OpenBLAS itself)
 *   OPD_NO_BLAS  plain float loops: gemv for every row of A against B^T;
 *             for B, rows of C accumulated as C[i,:] += A[i,k] * B[k,:]
 * Test: build/tests/ops, suites matmul, linear, gru_cell.
 */
#include "kernels/common/gemm.h"

#ifndef OPD_NO_BLAS
#include <cblas.h>
#endif
#include <limits.h>

#include "kernels/common/kutil.h"
#include "kernels/common/rowred.h"

/* Multiply-adds per parallel chunk of opd__sgemv_t (~20 us of gemv): the
 * trading MLP's layers (up to 512 x 512) stay on the calling thread, where
 * they took 6-18 us against 10-27 us spread over a pool of 2 on the shared
 * 2-core VM (2026-12-07, bench/results/2026-12-07-vm-cpu-model.txt, A). */
#define GEMV_GRAIN (1 << 19)

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

typedef struct gemv_job {
  int64_t K;                       /* row length */
  const float *a, *B;              /* a (K), B (N, K) */
  float beta;
  float *c;                        /* c (N) */
} gemv_job_t;

static void gemv_range(void *arg, int64_t j0, int64_t j1) {
  const gemv_job_t *g = arg;
  gemv(j1 - j0, g->K, g->a, g->B + j0 * g->K, g->beta, g->c + j0);
}

void opd__sgemv_t(const opd_exec_t *ex, int64_t N, int64_t K, const float *a,
                  const float *B, float beta, float *c) {
  gemv_job_t g = {K, a, B, beta, c};
  int64_t grain = K > 0 ? GEMV_GRAIN / K : N;
  if (!ex || N * K <= GEMV_GRAIN) {
    gemv_range(&g, 0, N);
    return;
  }
  ex->parallel_for(ex, N, grain < 4 ? 4 : grain, gemv_range, &g);
}

int opd__gemm_fits(int64_t M, int64_t N, int64_t K) {
  return M <= INT_MAX && N <= INT_MAX && K <= INT_MAX;
}

#ifndef OPD_NO_BLAS
void opd__sgemm(int trans_b, int64_t M, int64_t N, int64_t K, const float *A,
                const float *B, float beta, float *C) {
  if (trans_b && M == 1) {
    opd__sgemv_t(NULL, N, K, A, B, beta, C);
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
