/* The norm family's float64 kernels on the CPU (cpu64.c) and the GPU
 * (cuda64.cu), which the family's entry points (cpu.c, cuda.cu) run for a
 * float64 call.
 *
 * DESIGN
 * One function per op, used by both variants (cpu_ref and cpu_fast): each
 * computes in double per row (softmax: per column along its dim), rows
 * spread over call->exec. The call's float tensors are all float64 (the
 * cast wrapper, kernels/common/cast.h, made them so); shapes and
 * attributes are as the float32 kernels take them.
 */
#ifndef OPD_KERNELS_NORM_NORM64_H
#define OPD_KERNELS_NORM_NORM64_H

#include "kernels/kernel.h"

/* Defines `static void name(const T *x, T *y, const T *w, const T *b,
 * int64_t C, double eps)`: one layernorm row of C elements in double
 * (the float32 reference's rows, cpu.c, and the float64 kernel's,
 * cpu64.c): the mean, the deviations with the two-pass correction
 * (mean += sum(d)/C, var = (sum(d^2) - sum(d)^2/C)/C), then y = (x -
 * mean) rstd w + b (w, b may be NULL); y may be x. A row holding inf or
 * NaN has a NaN variance and gives NaN throughout. */
#define OPD_LN_ROW_EXACT(name, T)                                           \
  static void name(const T *x, T *y, const T *w, const T *b, int64_t C,    \
                   double eps) {                                            \
    double mean = 0, s1 = 0, s2 = 0;                                        \
    for (int64_t i = 0; i < C; i++) mean += x[i];                           \
    mean /= (double)C;                                                      \
    for (int64_t i = 0; i < C; i++) {                                       \
      double d = x[i] - mean;                                               \
      s1 += d;                                                              \
      s2 += d * d;                                                          \
    }                                                                       \
    double lo = s1 / (double)C, var = (s2 - s1 * lo) / (double)C;          \
    mean += lo;                                                             \
    double rstd = 1.0 / sqrt((var < 0 ? 0 : var) + eps);                    \
    for (int64_t i = 0; i < C; i++) {                                       \
      double v = (x[i] - mean) * rstd;                                      \
      if (w) v *= w[i];                                                     \
      if (b) v += b[i];                                                     \
      y[i] = (T)v;                                                          \
    }                                                                       \
  }

/* softmax (lg 0) or log_softmax (lg 1) along attr 0's dim. Returns 0. */
int opd__softmax64(opd_kcall_t *call, int lg);
/* layernorm / rmsnorm over the trailing dims (norm/dims.h). Return 0. */
int opd__layernorm64(opd_kcall_t *call);
int opd__rmsnorm64(opd_kcall_t *call);

/* The same on the GPU (cuda64.cu, a CUDA build only), queued on ctx's
 * stream; softmax also when only one of x and y is float64 (dtype=).
 * Return 0, or OPD_EBACKEND / OPD_EDTYPE with call->err set. */
int opd__softmax64_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, int lg);
int opd__layernorm64_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx);
int opd__rmsnorm64_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx);

#endif /* OPD_KERNELS_NORM_NORM64_H */
