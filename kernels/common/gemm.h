/* Row-major float32 GEMM and GEMV (and a float64 GEMM) on the CPU, shared by matmul, linear
 * and gru_cell.
 *
 * DESIGN
 * One place calls OpenBLAS (cblas_sgemm), so that every op multiplies
 * matrices the same way; OpenBLAS runs on one thread and a large product
 * is cut into blocks of rows over the caller's exec (opd__sgemm_ex); built with OPD_NO_BLAS (make BLAS=0) the same
 * functions run plain float loops (vectorized by OPD_FAST). B comes either as (K, N) (matmul) or as
 * (N, K), torch's weight layout (linear, gru_cell: y = x @ W^T); the
 * (N, K) form with M == 1 is a matrix-vector product, done by our own
 * vectorized GEMV on the caller's exec (opd__sgemv_t), and linear's small
 * batches run our own kernels on the caller's exec too rather than on
 * OpenBLAS's threads: the GEMV two rows at a time (opd__sgemv_rows_t) and
 * register-blocked tiles (opd__sgemm_wt, gemm_wt.c), which also take
 * matmul's products with few columns (opd__sgemm_nn_small). Sizes must fit
 * BLAS's int (callers check: opd__gemm_fits).
 */
#ifndef OPD_KERNELS_COMMON_GEMM_H
#define OPD_KERNELS_COMMON_GEMM_H

#include <stdint.h>

#include "kernels/kernel.h"

/* 1 when M, N and K all fit BLAS's int. */
int opd__gemm_fits(int64_t M, int64_t N, int64_t K);

/* C (M, N) = A (M, K) @ op(B) + beta * C, all row-major and contiguous;
 * op(B) is B (K, N) when trans_b is 0, B^T for B (N, K) when it is 1
 * (the row-major C, A and B have leading dims N, K and N or K). beta 0
 * ignores what C held (NaN included). M, N, K >= 1. */
void opd__sgemm(int trans_b, int64_t M, int64_t N, int64_t K, const float *A,
                const float *B, float beta, float *C);

/* opd__sgemm with leading dims (lda, ldb, ldc: the row strides of A, B
 * and C), for blocks of a larger matrix. M, N, K >= 1. */
void opd__sgemm_ld(int trans_b, int64_t M, int64_t N, int64_t K,
                   const float *A, int64_t lda, const float *B, int64_t ldb,
                   float beta, float *C, int64_t ldc);

/* opd__sgemm spread over ex's threads (ex NULL: the calling thread): C's
 * rows in blocks (of 16 rows or more; its columns where M is small), one
 * single-threaded OpenBLAS call per chunk of blocks. OpenBLAS itself runs
 * on one thread in opd (gemm.c sets it at load): every large product goes
 * through here. Products below ~1M multiply-adds stay on the caller. */
void opd__sgemm_ex(const opd_exec_t *ex, int trans_b, int64_t M, int64_t N,
                   int64_t K, const float *A, const float *B, float beta,
                   float *C);

/* C (M, N) = A (M, K) @ op(B) in float64, op(B) as opd__sgemm's: OpenBLAS
 * dgemm, or plain loops (OPD_NO_BLAS, or sizes past BLAS's int). M, N,
 * K >= 0 (K == 0 gives zeros). */
void opd__dgemm(int trans_b, int64_t M, int64_t N, int64_t K, const double *A,
                const double *B, double *C);

/* c (N) = B (N, K) @ a (K) + beta c: one row times B^T (batch 1 of
 * linear and gru_cell), B's rows spread over ex's threads when the product
 * is large enough to pay for them (ex NULL: on the calling thread). beta 0
 * ignores what c held. N, K >= 0. */
void opd__sgemv_t(const opd_exec_t *ex, int64_t N, int64_t K, const float *a,
                  const float *B, float beta, float *c);

/* C (M, N) = A (M, K) @ B (N, K)^T + beta C for a few rows of A: the GEMV
 * two rows of A at a time, B's rows spread over ex's threads as
 * opd__sgemv_t's. M, N, K >= 0. Worth it from OPD_GEMV_ROWS_MMIN rows
 * (below OPD_GEMM_WT_MMIN): at 2 rows OpenBLAS's sgemm took 7-8 us against
 * its 12-14 for (2, 256) @ (256, 512)^T, at 4 rows 35-45 (one thread) and
 * 64-82 (its own two) against 24-29 (the compiler folds each load of B
 * into both rows' FMAs, so the rows share no loads) (2026-12-07,
 * bench/results/2026-12-07-vm-cpu-gemm.txt, A and A2). */
#define OPD_GEMV_ROWS_MMIN 4
void opd__sgemv_rows_t(const opd_exec_t *ex, int64_t M, int64_t N, int64_t K,
                       const float *A, const float *B, float beta, float *C);

/* Batches opd__sgemm_wt takes (below 10 the padding to 16 columns costs
 * more than opd__sgemv_rows_t: 93-106 us against 67-72 at batch 8 for
 * (8, 512) @ (512, 512)^T, 2026-12-07, bench/results/2026-12-07-vm-cpu-gemm.txt,
 * A2; past 64 OpenBLAS's cache blocking is left to pay), and the fewest rows
 * of W for which packing A pays (below, OpenBLAS's sgemm). */
#define OPD_GEMM_WT_MMIN 10
#define OPD_GEMM_WT_MMAX 64
#define OPD_GEMM_WT_NMIN 16

/* Micro-kernel ISAs of opd__sgemm_wt (gemm_wt.c). */
enum { OPD_GEMM_ISA_NONE, OPD_GEMM_ISA_AVX2, OPD_GEMM_ISA_AVX512 };

/* The best ISA this CPU runs (from cpuid, once): OPD_GEMM_ISA_*. */
int opd__gemm_wt_isa(void);

/* C (M, N) = A (M, K) @ W (N, K)^T (+ bias (N) when not NULL; relu'd
 * when relu), all row-major and contiguous, by register-blocked tiles of
 * AVX2+FMA, W's rows spread over ex's threads (ex NULL: the calling
 * thread). Returns 1 when done, 0 when it declines (no AVX2, M outside
 * [OPD_GEMM_WT_MMIN, OPD_GEMM_WT_MMAX], N < OPD_GEMM_WT_NMIN, K < 1, no
 * memory for the
 * packed A): C is then untouched and the caller uses opd__sgemm.
 * opd__sgemm_wt_isa forces an ISA (tests, benchmarks; one the CPU lacks
 * must not be asked for). */
int opd__sgemm_wt(const opd_exec_t *ex, int64_t M, int64_t N, int64_t K,
                  const float *A, const float *W, const float *bias, int relu,
                  float *C);
int opd__sgemm_wt_isa(int isa, const opd_exec_t *ex, int64_t M, int64_t N,
                      int64_t K, const float *A, const float *W,
                      const float *bias, int relu, float *C);

/* C (M, N) = A (M, K) @ B (K, N) (matmul's form) by the same tiles, A's
 * rows as W's and B's columns as the batch: done (1) for N in
 * [OPD_GEMM_WT_MMIN, OPD_GEMM_WT_MMAX] and M >= OPD_GEMM_WT_NMIN, else
 * declined (0, C untouched; opd__sgemm then). */
int opd__sgemm_nn_small(const opd_exec_t *ex, int64_t M, int64_t N, int64_t K,
                        const float *A, const float *B, float *C);

#endif /* OPD_KERNELS_COMMON_GEMM_H */
