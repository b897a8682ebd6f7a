/* Row-major float32 GEMM and GEMV on the CPU, shared by matmul, linear
 * and gru_cell.
 *
 * DESIGN
 * One place calls OpenBLAS (cblas_sgemm), so that every op multiplies
 * matrices the same way; built with OPD_NO_BLAS (make BLAS=0) the same
 * functions run plain float loops (vectorized by OPD_FAST). B comes either as (K, N) (matmul) or as
 * (N, K), torch's weight layout (linear, gru_cell: y = x @ W^T); the
 * (N, K) form with M == 1 is a matrix-vector product, done by our own
 * vectorized GEMV on the caller's exec (opd__sgemv_t). Sizes must fit
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

/* c (N) = B (N, K) @ a (K) + beta c: one row times B^T (batch 1 of
 * linear and gru_cell), B's rows spread over ex's threads when the product
 * is large enough to pay for them (ex NULL: on the calling thread). beta 0
 * ignores what c held. N, K >= 0. */
void opd__sgemv_t(const opd_exec_t *ex, int64_t N, int64_t K, const float *a,
                  const float *B, float beta, float *c);

#endif /* OPD_KERNELS_COMMON_GEMM_H */
