/* Row-major float32 GEMM and GEMV on the CPU, shared by matmul, linear
 * and gru_cell.
 *
 * DESIGN
 * One place calls OpenBLAS (cblas_sgemm / cblas_sgemv), so that every op
 * multiplies matrices the same way; built with OPD_NO_BLAS (make BLAS=0)
 * the same functions run a plain float kernel (8 partial sums per dot,
 * vectorized by OPD_FAST). B comes either as (K, N) (matmul) or as
 * (N, K), torch's weight layout (linear, gru_cell: y = x @ W^T); the
 * (N, K) form with M == 1 is a matrix-vector product, which OpenBLAS's
 * sgemv does faster than sgemm for one row. Sizes must fit BLAS's int
 * (callers check: opd__gemm_fits).
 */
#ifndef OPD_KERNELS_COMMON_GEMM_H
#define OPD_KERNELS_COMMON_GEMM_H

#include <stdint.h>

/* 1 when M, N and K all fit BLAS's int. */
int opd__gemm_fits(int64_t M, int64_t N, int64_t K);

/* C (M, N) = A (M, K) @ op(B) + beta * C, all row-major and contiguous;
 * op(B) is B (K, N) when trans_b is 0, B^T for B (N, K) when it is 1
 * (the row-major C, A and B have leading dims N, K and N or K). beta 0
 * ignores what C held (NaN included). M, N, K >= 1. */
void opd__sgemm(int trans_b, int64_t M, int64_t N, int64_t K, const float *A,
                const float *B, float beta, float *C);

#endif /* OPD_KERNELS_COMMON_GEMM_H */
