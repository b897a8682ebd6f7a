/* The small-batch tiles C = A @ W^T (+ bias, relu) of
 * kernels/common/gemm_wt.c against a double reference: every tail of rows
 * (tiles of 12 or 6, 4, 1) and columns (panels of 16), serial and on
 * pools, the AVX2 tiles also where the CPU has AVX-512,
 * and the shapes it must decline; the linear op at small batches. */
#include <math.h>
#include <stdlib.h>

#include "kernels/common/gemm.h"
#include "tests/ops/optest.h"

static float *randv(int64_t n, unsigned seed, float lo, float hi) {
  float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    v[i] = lo + (hi - lo) * (float)((seed >> 8) & 0xffff) / 65536.0f;
  }
  return v;
}

Test(gemm_wt, matches_double_reference) {
  static const int64_t shapes[][3] = {
      {32, 512, 256}, {32, 512, 512}, {10, 16, 1}, {11, 17, 5},
      {16, 23, 33},   {17, 100, 7},   {40, 61, 64}, {63, 19, 130},
      {64, 512, 256}, {33, 6, 3},     {48, 1031, 9}};
  if (opd__gemm_wt_isa() == OPD_GEMM_ISA_NONE) return; /* declines: fallback */
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
    if (N < OPD_GEMM_WT_NMIN) N = OPD_GEMM_WT_NMIN + N; /* tails past 16 */
    float *A = randv(M * K, 1 + s, -2, 2), *W = randv(N * K, 7 + s, -0.3f, 0.3f);
    float *b = randv(N, 9 + s, -1, 1), *C = malloc((size_t)(M * N) * sizeof(float));
    double *want = malloc((size_t)(M * N) * sizeof(double));
    for (int variant = 0; variant < 4; variant++) {
      int relu = variant & 1;
      const float *bias = variant & 2 ? b : NULL;
      for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
          double v = bias ? bias[n] : 0.0;
          for (int64_t k = 0; k < K; k++) v += (double)A[m * K + k] * W[n * K + k];
          want[m * N + n] = relu && v < 0 ? 0.0 : v;
        }
      const opd_exec_t *exs[] = {NULL, &opd__exec_serial, ot_pool(2), ot_pool(4)};
      for (int e = 0; e < 5; e++) {
        for (int64_t i = 0; i < M * N; i++) C[i] = NAN; /* poison */
        if (e < 4) /* the best ISA */
          cr_assert_eq(opd__sgemm_wt(exs[e], M, N, K, A, W, bias, relu, C), 1,
                       "shape %zu: declined", s);
        else /* AVX2 on a CPU that has AVX-512 too (else the same again) */
          cr_assert_eq(opd__sgemm_wt_isa(OPD_GEMM_ISA_AVX2, ot_pool(2), M, N, K, A, W, bias,
                                         relu, C),
                       1, "shape %zu: AVX2 declined", s);
        for (int64_t i = 0; i < M * N; i++)
          cr_assert(fabs(C[i] - want[i]) <= 1e-5 + 1e-4 * fabs(want[i]),
                    "shape %zu (M %lld N %lld K %lld) variant %d exec %d: C[%lld] = %g, "
                    "want %g",
                    s, (long long)M, (long long)N, (long long)K, variant, e, (long long)i,
                    C[i], want[i]);
      }
    }
    free(A), free(W), free(b), free(C), free(want);
  }
}

/* matmul's form C = A @ B through the tiles (B's columns as the panels,
 * C stored as it comes), against a double reference, and its bounds. */
Test(gemm_wt, nn_matches_double_reference) {
  static const int64_t shapes[][3] = {/* M, N, K */
                                      {512, 32, 256}, {100, 10, 7}, {17, 64, 33},
                                      {16, 23, 1},    {30, 45, 130}};
  if (opd__gemm_wt_isa() == OPD_GEMM_ISA_NONE) return;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
    float *A = randv(M * K, 3 + s, -1, 1), *B = randv(K * N, 5 + s, -1, 1);
    float *C = malloc((size_t)(M * N) * sizeof(float));
    const opd_exec_t *exs[] = {NULL, ot_pool(2), ot_pool(4)};
    for (int e = 0; e < 3; e++) {
      for (int64_t i = 0; i < M * N; i++) C[i] = NAN;
      cr_assert_eq(opd__sgemm_nn_small(exs[e], M, N, K, A, B, C), 1, "shape %zu declined", s);
      for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
          double want = 0;
          for (int64_t k = 0; k < K; k++) want += (double)A[m * K + k] * B[k * N + n];
          cr_assert(fabs(C[m * N + n] - want) <= 1e-5 + 1e-4 * fabs(want),
                    "shape %zu exec %d: C[%lld, %lld] = %g, want %g", s, e, (long long)m,
                    (long long)n, C[m * N + n], want);
        }
    }
    free(A), free(B), free(C);
  }
  float A[65 * 16] = {0}, B[16 * 65] = {0}, C[65 * 65];
  C[0] = 42;
  cr_assert_eq(opd__sgemm_nn_small(NULL, 16, OPD_GEMM_WT_MMIN - 1, 16, A, B, C), 0);
  cr_assert_eq(opd__sgemm_nn_small(NULL, 16, OPD_GEMM_WT_MMAX + 1, 16, A, B, C), 0);
  cr_assert_eq(opd__sgemm_nn_small(NULL, OPD_GEMM_WT_NMIN - 1, 16, 16, A, B, C), 0);
  cr_assert_eq(C[0], 42, "a declined call wrote C");
}

/* relu as the op's: NaN passes, negatives become 0, in the 8 x 8 blocks
 * and at the edges alike. */
Test(gemm_wt, relu_passes_nan) {
  enum { M = 19, N = 21, K = 3 };
  float A[M * K], W[N * K], C[M * N];
  for (int i = 0; i < M * K; i++) A[i] = 1.0f;
  for (int n = 0; n < N; n++) W[n * K] = W[n * K + 1] = W[n * K + 2] = n % 2 ? -1.0f : 1.0f;
  A[3 * K + 1] = NAN;  /* row 3 of C: all NaN */
  A[12 * K + 1] = NAN; /* row 12: past the 8 x 8 blocks of panel 0 */
  A[17 * K] = NAN;     /* row 17: in the second panel */
  if (opd__gemm_wt_isa() == OPD_GEMM_ISA_NONE) return;
  cr_assert_eq(opd__sgemm_wt(NULL, M, N, K, A, W, NULL, 1, C), 1);
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      float y = C[m * N + n];
      if (m == 3 || m == 12 || m == 17)
        cr_assert(isnan(y), "C[%d, %d] = %g, want NaN", m, n, y);
      else
        cr_assert_eq(y, n % 2 ? 0.0f : 3.0f, "C[%d, %d] = %g", m, n, y);
    }
}

Test(gemm_wt, declines_what_it_does_not_take) {
  float A[65 * 16] = {0}, W[16 * 16] = {0}, C[65 * 16];
  C[0] = 42;
  cr_assert_eq(opd__sgemm_wt(NULL, OPD_GEMM_WT_MMIN - 1, 16, 16, A, W, NULL, 0, C), 0);
  cr_assert_eq(opd__sgemm_wt(NULL, OPD_GEMM_WT_MMAX + 1, 16, 16, A, W, NULL, 0, C), 0);
  cr_assert_eq(opd__sgemm_wt(NULL, 16, OPD_GEMM_WT_NMIN - 1, 16, A, W, NULL, 0, C), 0);
  cr_assert_eq(opd__sgemm_wt(NULL, 16, 16, 0, A, W, NULL, 0, C), 0);
  cr_assert_eq(opd__sgemm_wt_isa(OPD_GEMM_ISA_NONE, NULL, 16, 16, 16, A, W, NULL, 0, C), 0);
  cr_assert_eq(C[0], 42, "a declined call wrote C");
}

/* linear at the batches of the GEMV two rows at a time (4, 5, 9) and of
 * the tiles (10, 32, 45), every activation, with and without bias, fast
 * against ref on serial and pooled execs. */
Test(gemm_wt, linear_by_batch) {
  static const char *const acts[] = {"none", "relu", "gelu", "silu"};
  static const int64_t shapes[][3] = {{4, 40, 21},     {5, 64, 700}, {9, 33, 16},
                                      {32, 256, 512}, {10, 33, 16}, {45, 70, 29}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int a = 0; a < 4; a++)
      for (int bias = 0; bias < 2; bias++) {
        int64_t M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
        opd_kcall_t *c = ot_new("linear");
        ot_set_str(c, "act", acts[a]);
        ot_in_rand(c, 0, 2, OT_SHAPE(M, K), 40 + s, -2, 2);
        ot_in_rand(c, 1, 2, OT_SHAPE(N, K), 50 + s, -0.3f, 0.3f);
        if (bias) ot_in_rand(c, 2, 1, OT_SHAPE(N), 60 + s, -1, 1);
        ot_ready(c);
        ot_check_fast(c, 1e-5, 1e-4);
        ot_free(c);
      }
}

/* matmul through opd__sgemm_nn_small: the MLP's matmul form (w1 @ x^T),
 * a's batch folded into M, per-item products, fast against ref on serial
 * and pooled execs. */
Test(gemm_wt, matmul_small_n) {
  static const int64_t shapes[][6] = {/* rank a, a..., rank b, b... as 2-D or 3-D */
                                      {2, 512, 256, 32, 0, 0},
                                      {3, 3, 20, 33, 12, 0},
                                      {3, 2, 40, 17, 64, 1}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    const int64_t *d = shapes[s];
    opd_kcall_t *c = ot_new("matmul");
    if (d[0] == 2) { /* (M, K) @ (K, N) */
      ot_in_rand(c, 0, 2, OT_SHAPE(d[1], d[2]), 70 + s, -1, 1);
      ot_in_rand(c, 1, 2, OT_SHAPE(d[2], d[3]), 80 + s, -1, 1);
    } else if (!d[5]) { /* (B, M, K) @ (K, N): the batch folds into M */
      ot_in_rand(c, 0, 3, OT_SHAPE(d[1], d[2], d[3]), 70 + s, -1, 1);
      ot_in_rand(c, 1, 2, OT_SHAPE(d[3], d[4]), 80 + s, -1, 1);
    } else { /* (B, M, K) @ (B, K, N): one product per item */
      ot_in_rand(c, 0, 3, OT_SHAPE(d[1], d[2], d[3]), 70 + s, -1, 1);
      ot_in_rand(c, 1, 3, OT_SHAPE(d[1], d[3], d[4]), 80 + s, -1, 1);
    }
    ot_ready(c);
    ot_check_fast(c, 1e-5, 1e-4);
    ot_free(c);
  }
}
