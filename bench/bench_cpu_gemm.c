/* The small-batch product C = A @ W^T of the CPU linear, in-process, at the
 * trading MLP's layers (K -> N: 256 -> 512, 512 -> 512, 512 -> 1) for
 * batches 2..64: the register-blocked AVX-512 and AVX2 tiles (gemm_wt.c),
 * where it takes the shape, serial and on a pool of every core, against
 * OpenBLAS's sgemm with one thread and with its own threads, and against
 * the GEMV two rows at a time (opd__sgemv_rows_t, linear's batches 4..9);
 * then the MLP's matmul form W @ A^T (matmul_*: opd__sgemm_nn_small, the
 * same tiles storing straight, against OpenBLAS's one-thread sgemm).
 *
 * DESIGN
 * Latency, not bandwidth: the weights stay in cache between calls, as
 * they do when a model runs step after step, so each figure is the median
 * over 9 reps of the mean of a batch of calls (bench_cpu_model's method).
 * The machine is shared: compare lines of one run only. Every impl's
 * answer is checked against the first's (max |diff| printed as err).
 *
 * Usage: build/bench/bench_cpu_gemm [M ...]   (default 2 4 8 16 32 64)
 * Output: one line per case:
 *   bench gemm_wt M=32 K=512 N=512 impl=tiles_avx2 threads=1 us=... gflops=... err=...
 */
#ifndef OPD_NO_BLAS
#include <cblas.h>
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/common/gemm.h"
#include "kernels/runtime/exec.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef struct prob {
  int64_t M, N, K;
  const float *A, *W;
  const float *At;                 /* A^T (K, M): the matmul form's right operand */
  float *C;
  int impl;
  const opd_exec_t *ex;
} prob_t;

enum { I_AVX512, I_AVX2, I_BLAS1, I_BLAS, I_GEMV, I_NN, I_NN_BLAS1, I_N };
static const char *const NAMES[I_N] = {"tiles_avx512", "tiles_avx2", "openblas", "openblas",
                                       "gemv_rows",    "matmul_tiles", "matmul_openblas"};

static void run(prob_t *p) {
  switch (p->impl) {
    case I_AVX512:
      opd__sgemm_wt_isa(OPD_GEMM_ISA_AVX512, p->ex, p->M, p->N, p->K, p->A, p->W, NULL, 0, p->C);
      break;
    case I_AVX2:
      opd__sgemm_wt_isa(OPD_GEMM_ISA_AVX2, p->ex, p->M, p->N, p->K, p->A, p->W, NULL, 0, p->C);
      break;
    case I_BLAS1:
    case I_BLAS:
#ifndef OPD_NO_BLAS
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)p->M, (blasint)p->N,
                  (blasint)p->K, 1.0f, p->A, (blasint)p->K, p->W, (blasint)p->K, 0.0f, p->C,
                  (blasint)p->N);
#endif
      break;
    case I_NN: /* C^T (N, M) = W @ A^T: the MLP's matmul form */
      opd__sgemm_nn_small(p->ex, p->N, p->M, p->K, p->W, p->At, p->C);
      break;
    case I_NN_BLAS1:
#ifndef OPD_NO_BLAS
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)p->N, (blasint)p->M,
                  (blasint)p->K, 1.0f, p->W, (blasint)p->K, p->At, (blasint)p->M, 0.0f, p->C,
                  (blasint)p->M);
#endif
      break;
    default:
      opd__sgemv_rows_t(p->ex, p->M, p->N, p->K, p->A, p->W, 0.0f, p->C);
  }
}

/* Median over 9 reps of the mean time of n calls, in microseconds. */
static double time_us(prob_t *p, int n) {
  double t[9];
  run(p); /* warm */
  for (int r = 0; r < 9; r++) {
    double t0 = now_s();
    for (int i = 0; i < n; i++) run(p);
    t[r] = (now_s() - t0) / n * 1e6;
  }
  qsort(t, 9, sizeof t[0], cmp_double);
  return t[4];
}

static float *filled(int64_t n, int seed) {
  float *v = malloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++)
    v[i] = (float)(((i + seed) * 7919) % 1000) * 0.001f - 0.5f;
  return v;
}

int main(int argc, char **argv) {
  static const int64_t layers[][2] = {{256, 512}, {512, 512}, {512, 1}};
  int64_t ms[16] = {2, 4, 8, 16, 32, 64};
  int nm = 6;
  if (argc > 1)
    for (nm = 0; nm < argc - 1 && nm < 16; nm++) ms[nm] = atoll(argv[nm + 1]);
  opd_exec_t pool;
  int nproc = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (opd__exec_pool_create(&pool, nproc)) return 1;
  int isa = opd__gemm_wt_isa();
  printf("# bench_cpu_gemm: weights in cache, median of 9 reps; isa=%s nproc=%d\n",
         isa == OPD_GEMM_ISA_AVX512 ? "avx512" : isa == OPD_GEMM_ISA_AVX2 ? "avx2" : "none",
         nproc);
  for (int im = 0; im < nm; im++)
    for (size_t l = 0; l < sizeof layers / sizeof layers[0]; l++) {
      int64_t M = ms[im], K = layers[l][0], N = layers[l][1];
      float *A = filled(M * K, 1), *W = filled(N * K, 2), *ref = NULL;
      float *At = malloc((size_t)(M * K) * sizeof(float));
      for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) At[k * M + m] = A[m * K + k];
      prob_t p = {M, N, K, A, W, At, calloc((size_t)(M * N), sizeof(float)), 0, NULL};
      int n = (int)(2e7 / (double)(M * N * K)) + 5;
      for (int impl = 0; impl < I_N; impl++)
        for (int pooled = 0; pooled < 2; pooled++) {
          if (impl == I_AVX512 && isa != OPD_GEMM_ISA_AVX512) continue;
          if (impl == I_NN && (isa == OPD_GEMM_ISA_NONE || M < OPD_GEMM_WT_MMIN ||
                               M > OPD_GEMM_WT_MMAX || N < OPD_GEMM_WT_NMIN))
            continue;
          if (impl <= I_AVX2 && (isa == OPD_GEMM_ISA_NONE || M < OPD_GEMM_WT_MMIN ||
                                  M > OPD_GEMM_WT_MMAX || N < OPD_GEMM_WT_NMIN))
            continue; /* declined: nothing to time */
          int threads = pooled ? nproc : 1;
#ifdef OPD_NO_BLAS
          if (impl == I_BLAS1 || impl == I_BLAS || impl == I_NN_BLAS1) continue;
#else
          if ((impl == I_BLAS1 || impl == I_NN_BLAS1) && pooled) continue;
          if (impl == I_BLAS && !pooled) continue;
          openblas_set_num_threads(impl == I_BLAS1 || impl == I_NN_BLAS1 ? 1 : nproc);
#endif
          p.impl = impl;
          p.ex = pooled ? &pool : NULL;
          memset(p.C, 0, (size_t)(M * N) * sizeof(float));
          double us = time_us(&p, n);
          double err = 0;
          if (!ref) {
            ref = malloc((size_t)(M * N) * sizeof(float));
            memcpy(ref, p.C, (size_t)(M * N) * sizeof(float));
          }
          int tr = impl == I_NN || impl == I_NN_BLAS1; /* C^T (N, M) */
          for (int64_t r = 0; r < M; r++)
            for (int64_t q = 0; q < N; q++)
              err = fmax(err, fabs(p.C[tr ? q * M + r : r * N + q] - ref[r * N + q]));
          printf("bench gemm_wt M=%lld K=%lld N=%lld impl=%s threads=%d us=%.2f gflops=%.1f "
                 "err=%.1e\n",
                 (long long)M, (long long)K, (long long)N, NAMES[impl], threads, us,
                 2e-3 * (double)(M * N * K) / us, err);
          fflush(stdout);
        }
      free(A), free(W), free(At), free(p.C), free(ref);
    }
  opd__exec_pool_destroy(&pool);
  return 0;
}
