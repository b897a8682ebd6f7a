/* Row-major float32 (and float64) GEMM for the CPU kernels; see gemm.h for the DESIGN.
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
 *   gemv2     two rows of A at a time against four of B (linear's batches
 *             4..9 through opd__sgemv_rows_t, spread as opd__sgemv_t)
 *   tiles     batches 10..64 of C = A B^T: gemm_wt.c (opd__sgemm_wt)
 *   BLAS      cblas_sgemm on one thread (set at load), a large product
 *             cut into blocks of rows over the caller's exec (opd__sgemm_ex)
 *   OPD_NO_BLAS  plain float loops: gemv for every row of A against B^T;
 *             for B, rows of C accumulated as C[i,:] += A[i,k] * B[k,:]
 *   dgemm     float64 (opd__dgemm): cblas_dgemm, or with OPD_NO_BLAS (and
 *             past BLAS's int) the same plain loops in double
 * Test: build/tests/ops, suites matmul, linear, gru_cell, gemm_wt.
 */
#include "kernels/common/gemm.h"

#ifndef OPD_NO_BLAS
#include <cblas.h>
#include <pthread.h>
#include <unistd.h>
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

/* c0[j] = a0 . B[j, :], c1[j] = a1 . B[j, :] (+ beta c): two rows of A
 * in one pass over B (four rows of B at a time, 8 accumulators). */
__attribute__((optimize("fp-contract=fast")))
OPD_FAST static void gemv2(int64_t N, int64_t K, const float *a0, const float *a1,
                           const float *B, float beta, float *c0, float *c1) {
  int64_t j = 0;
  for (; j + 4 <= N; j += 4) {
    const float *b[4] = {B + j * K, B + (j + 1) * K, B + (j + 2) * K, B + (j + 3) * K};
    opd_v8f s[2][4];
    for (int r = 0; r < 4; r++) s[0][r] = s[1][r] = opd__v8_splat(0);
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
      opd_v8f v0 = opd__v8_load(a0 + k), v1 = opd__v8_load(a1 + k);
      for (int r = 0; r < 4; r++) {
        opd_v8f w = opd__v8_load(b[r] + k);
        s[0][r] += w * v0;
        s[1][r] += w * v1;
      }
    }
    for (int r = 0; r < 4; r++) {
      float t0 = opd__v8_hsum(s[0][r]), t1 = opd__v8_hsum(s[1][r]);
      for (int64_t q = k; q < K; q++) {
        t0 += b[r][q] * a0[q];
        t1 += b[r][q] * a1[q];
      }
      c0[j + r] = beta == 0.0f ? t0 : t0 + beta * c0[j + r];
      c1[j + r] = beta == 0.0f ? t1 : t1 + beta * c1[j + r];
    }
  }
  if (j < N) {
    gemv(N - j, K, a0, B + j * K, beta, c0 + j);
    gemv(N - j, K, a1, B + j * K, beta, c1 + j);
  }
}

typedef struct gemv_job {
  int64_t M, N, K;                 /* rows of A, rows of B, row length */
  const float *A, *B;              /* A (M, K), B (N, K) */
  float beta;
  float *C;                        /* C (M, N) */
} gemv_job_t;

/* Rows [j0, j1) of B against every row of A, two rows of A at a time. */
static void gemv_range(void *arg, int64_t j0, int64_t j1) {
  const gemv_job_t *g = arg;
  const float *B = g->B + j0 * g->K;
  int64_t i = 0;
  for (; i + 2 <= g->M; i += 2)
    gemv2(j1 - j0, g->K, g->A + i * g->K, g->A + (i + 1) * g->K, B, g->beta,
          g->C + i * g->N + j0, g->C + (i + 1) * g->N + j0);
  if (i < g->M) gemv(j1 - j0, g->K, g->A + i * g->K, B, g->beta, g->C + i * g->N + j0);
}

void opd__sgemv_rows_t(const opd_exec_t *ex, int64_t M, int64_t N, int64_t K,
                       const float *A, const float *B, float beta, float *C) {
  gemv_job_t g = {M, N, K, A, B, beta, C};
  int64_t per_row = M * K; /* multiply-adds per row of B */
  int64_t grain = per_row > 0 ? GEMV_GRAIN / per_row : N;
  if (!ex || N * per_row <= GEMV_GRAIN) {
    gemv_range(&g, 0, N);
    return;
  }
  ex->parallel_for(ex, N, grain < 4 ? 4 : grain, gemv_range, &g);
}

void opd__sgemv_t(const opd_exec_t *ex, int64_t N, int64_t K, const float *a,
                  const float *B, float beta, float *c) {
  opd__sgemv_rows_t(ex, 1, N, K, a, B, beta, c);
}

int opd__gemm_fits(int64_t M, int64_t N, int64_t K) {
  return M <= INT_MAX && N <= INT_MAX && K <= INT_MAX;
}

#ifndef OPD_NO_BLAS
/* OpenBLAS on one thread, for the whole process: every product is spread
 * over the caller's exec instead (opd__sgemm_ex), so that a call takes its
 * threads from the pool as every CPU kernel does, and the pool's threads
 * can each run a sgemm at once (conv2d's tiles and Winograd blocks), which
 * OpenBLAS's threaded level 3 would run one call at a time. For matmul
 * alone it is neither faster nor slower on the loaded 2-vCPU VM: 256^2
 * 395-440 us against 364-404 through OpenBLAS's own two threads, 1024^2
 * 18.9 ms against 16.6-17.7 (2026-12-07, bench/results/
 * 2026-12-07-vm-cpu-vs-torch-2.txt; OpenBLAS's threads showed sched_yield
 * spinning in perf there before). */
void openblas_set_num_threads(int);

/* At most one OpenBLAS call per CPU at a time (the others wait here):
 * OpenBLAS maps a 128 MiB buffer for each call in progress at once and
 * keeps it, and with the pool's threads calling it beside libuv's, the
 * number of such buffers would follow whatever concurrency the clients
 * reached (the chaos tests saw 1-2 more after their warm-up). More calls
 * than CPUs at once only share the cores. */
static pthread_mutex_t blas_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t blas_cv = PTHREAD_COND_INITIALIZER;
static int blas_free = 1;          /* calls that may start now */

__attribute__((constructor)) static void blas_one_thread(void) {
  openblas_set_num_threads(1);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  blas_free = n > 1 ? (int)n : 1;
}

static void blas_enter(void) {
  pthread_mutex_lock(&blas_mu);
  while (blas_free == 0) pthread_cond_wait(&blas_cv, &blas_mu);
  blas_free--;
  pthread_mutex_unlock(&blas_mu);
}

static void blas_leave(void) {
  pthread_mutex_lock(&blas_mu);
  blas_free++;
  pthread_cond_signal(&blas_cv);
  pthread_mutex_unlock(&blas_mu);
}

void opd__sgemm_ld(int trans_b, int64_t M, int64_t N, int64_t K,
                   const float *A, int64_t lda, const float *B, int64_t ldb,
                   float beta, float *C, int64_t ldc) {
  blas_enter();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              (blasint)M, (blasint)N, (blasint)K, 1.0f, A, (blasint)lda, B,
              (blasint)ldb, beta, C, (blasint)ldc);
  blas_leave();
}

void opd__sgemm(int trans_b, int64_t M, int64_t N, int64_t K, const float *A,
                const float *B, float beta, float *C) {
  if (trans_b && M == 1) {
    opd__sgemv_t(NULL, N, K, A, B, beta, C);
    return;
  }
  opd__sgemm_ld(trans_b, M, N, K, A, K, B, trans_b ? K : N, beta, C, N);
}
#else
OPD_FAST static void axpy_rows(int64_t M, int64_t N, int64_t K, const float *A,
                               const float *B, int64_t ldb, float beta, float *C) {
  for (int64_t i = 0; i < M; i++) {
    float *c = C + i * N;
    for (int64_t j = 0; j < N; j++) c[j] = beta == 0.0f ? 0.0f : beta * c[j];
    for (int64_t k = 0; k < K; k++) {
      float a = A[i * K + k];
      const float *b = B + k * ldb;
      for (int64_t j = 0; j < N; j++) c[j] += a * b[j];
    }
  }
}

void opd__sgemm_ld(int trans_b, int64_t M, int64_t N, int64_t K,
                   const float *A, int64_t lda, const float *B, int64_t ldb,
                   float beta, float *C, int64_t ldc) {
  for (int64_t i = 0; i < M; i++) {
    if (trans_b) {
      for (int64_t j = 0; j < N; j++)
        gemv(1, K, A + i * lda, B + j * ldb, beta, C + i * ldc + j);
    } else {
      axpy_rows(1, N, K, A + i * lda, B, ldb, beta, C + i * ldc);
    }
  }
}

void opd__sgemm(int trans_b, int64_t M, int64_t N, int64_t K, const float *A,
                const float *B, float beta, float *C) {
  if (!trans_b) {
    axpy_rows(M, N, K, A, B, N, beta, C);
    return;
  }
  for (int64_t i = 0; i < M; i++) gemv(N, K, A + i * K, B, beta, C + i * N);
}
#endif /* OPD_NO_BLAS */

/* Multiply-adds below which opd__sgemm_ex stays on the calling thread
 * (~10 us of sgemm), and the fewest rows of a block (OpenBLAS's sgemm
 * kernels take rows 16 at a time). */
#define SGEMM_GRAIN (1 << 20)
#define SGEMM_MB 16

typedef struct sgemm_job {
  int trans_b;                     /* B is (N, K) */
  int64_t M, N, K;                 /* the product */
  const float *A, *B;              /* operands */
  float beta;
  float *C;                        /* C (M, N) */
  int64_t rows;                    /* rows of C per block (split by rows), or 0 */
  int64_t cols;                    /* columns of C per block (split by columns) */
} sgemm_job_t;

/* Blocks [b, e) of C: rows [b*rows, e*rows) or columns [b*cols, e*cols). */
static void sgemm_blocks(void *arg, int64_t b, int64_t e) {
  const sgemm_job_t *j = arg;
  if (j->rows) {
    int64_t r0 = b * j->rows, r1 = e * j->rows < j->M ? e * j->rows : j->M;
    opd__sgemm(j->trans_b, r1 - r0, j->N, j->K, j->A + r0 * j->K, j->B, j->beta,
               j->C + r0 * j->N);
    return;
  }
  int64_t c0 = b * j->cols, c1 = e * j->cols < j->N ? e * j->cols : j->N;
  opd__sgemm_ld(j->trans_b, j->M, c1 - c0, j->K, j->A, j->K,
                j->B + (j->trans_b ? c0 * j->K : c0), j->trans_b ? j->K : j->N,
                j->beta, j->C + c0, j->N);
}

void opd__sgemm_ex(const opd_exec_t *ex, int trans_b, int64_t M, int64_t N,
                   int64_t K, const float *A, const float *B, float beta,
                   float *C) {
  int nt = ex ? ex->nthreads : 1;
  if (nt <= 1 || M * N * K <= SGEMM_GRAIN || (M == 1 && trans_b)) {
    opd__sgemm(trans_b, M, N, K, A, B, beta, C);
    return;
  }
  /* two blocks per thread: a thread that another process holds back
     leaves the caller the rest, at a block's cost */
  sgemm_job_t j = {trans_b, M, N, K, A, B, beta, C, 0, 0};
  int64_t want = 2 * (int64_t)nt, n;
  if (M >= want * SGEMM_MB) {
    j.rows = (M + want - 1) / want;
    j.rows = (j.rows + SGEMM_MB - 1) / SGEMM_MB * SGEMM_MB;
    n = (M + j.rows - 1) / j.rows;
  } else {
    j.cols = (N + want - 1) / want;
    j.cols = j.cols < 64 ? 64 : (j.cols + 15) / 16 * 16;
    n = (N + j.cols - 1) / j.cols;
  }
  ex->parallel_for(ex, n, 1, sgemm_blocks, &j);
}

/* The float64 product in plain loops: C[i,:] += A[i,k] * B[k,:] for B
 * (K, N), a dot product per element for B (N, K). */
OPD_FAST static void dgemm_loops(int trans_b, int64_t M, int64_t N, int64_t K,
                                 const double *A, const double *B, double *C) {
  for (int64_t i = 0; i < M; i++) {
    double *c = C + i * N;
    const double *a = A + i * K;
    if (trans_b) {
      for (int64_t j = 0; j < N; j++) {
        double t = 0;
        for (int64_t k = 0; k < K; k++) t += a[k] * B[j * K + k];
        c[j] = t;
      }
      continue;
    }
    for (int64_t j = 0; j < N; j++) c[j] = 0;
    for (int64_t k = 0; k < K; k++)
      for (int64_t j = 0; j < N; j++) c[j] += a[k] * B[k * N + j];
  }
}

void opd__dgemm(int trans_b, int64_t M, int64_t N, int64_t K, const double *A,
                const double *B, double *C) {
#ifndef OPD_NO_BLAS
  if (opd__gemm_fits(M, N, K) && K > 0) {
    blas_enter();
    cblas_dgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                (blasint)M, (blasint)N, (blasint)K, 1.0, A, (blasint)K, B,
                (blasint)(trans_b ? K : N), 0.0, C, (blasint)N);
    blas_leave();
    return;
  }
#endif
  dgemm_loops(trans_b, M, N, K, A, B, C);
}
