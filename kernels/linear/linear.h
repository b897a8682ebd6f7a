/* linear's plan: how a call maps onto one (M, K) @ (K, N) product plus an
 * epilogue, shared by its shape rule (op.c) and kernels (cpu.c, cuda.cu).
 *
 * DESIGN
 * x's leading dims fold into M (x is C-contiguous, so x (..., K) is the
 * matrix (M, K) over the same bytes, and out (..., N) the matrix (M, N));
 * weight stays in torch's (N, K) layout and the kernels multiply by its
 * transpose. The activation is the `act` attribute, which the daemon
 * checked against the row's choices; the kernels read it as an enum.
 */
#ifndef OPD_KERNELS_LINEAR_H
#define OPD_KERNELS_LINEAR_H

#include <string.h>

#include "kernels/kernel.h"

/* The activations of linear's `act`, in the order of its choices. */
typedef enum {
  OPD_ACT_NONE = 0,
  OPD_ACT_RELU,
  OPD_ACT_GELU,                    /* exact: 0.5x(1+erf(x/sqrt2)) */
  OPD_ACT_GELU_TANH,               /* 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))) */
  OPD_ACT_SILU,                    /* x sigmoid(x) */
} opd_act_t;

typedef struct linear_plan {
  int64_t M, K, N;                 /* out (M, N) = x (M, K) @ weight^T */
  int has_bias;                    /* bias (N) given (input 2) */
  opd_act_t act;                   /* the epilogue's activation */
} linear_plan_t;

/* linear's CUDA variants, for tests and benchmarks (kernels/linear/cuda.cu
 * says which M takes which): OPD_LINEAR_AUTO is what opd__linear_cuda
 * runs; OPD_LINEAR_GEMV returns OPD_EINVAL for x of more than 8 rows
 * (its leading dims' product); OPD_LINEAR_BLASLT is cuBLASLt at any M.
 * Defined only in a CUDA build. */
enum { OPD_LINEAR_AUTO = 0, OPD_LINEAR_GEMV = 1, OPD_LINEAR_BLASLT = 2 };
int opd__linear_cuda_variant(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, int variant);

/* Fills *p and, when out is not NULL, out's shape. Returns 0, or
 * OPD_ESHAPE with call->err naming the shapes that disagree. */
int opd__linear_plan(opd_kcall_t *call, linear_plan_t *p, opd_tshape_t *out);

#endif /* OPD_KERNELS_LINEAR_H */
