/* layernorm and rmsnorm along a dim that is not innermost in memory
 * (kernels/norm/cols.h).
 *
 * Variants: one, used by cpu_fast for such layouts (cpu_ref keeps the
 * tiles of kernels/common/strided_rows.c): per block of up to COLS
 * columns, two passes over its C rows, each row a contiguous run:
 *   stats, per column in double: d = x - x0 (x0 the column's first
 *     element: the terms stay small when the spread is far below the
 *     mean), s1 = sum(d), s2 = sum(d^2); mean = x0 + s1/C, var = s2/C -
 *     (s1/C)^2 (rmsnorm: x0 = 0, mean 0, var = sum(x^2)/C)
 *   output, in the element type: y = ((x - hi) - lo) rstd w + b, the
 *     mean kept as hi + lo (as the row kernel does) so that a column
 *     whose spread is a few ulps of its mean still normalizes
 * A column holding inf or NaN gives NaN throughout, as the row kernels.
 * Whole rows of the memory per block (COLS = 1024 float32: 4 KiB) read
 * fastest: 1024 x 1024 transposed in and out, 646 us against 409 us for
 * the contiguous kernel; blocks of 256 and 512 columns, which keep a
 * block in L2, 1185 and 888 us (serial, 2-core VM, 2026-12-07,
 * bench/results/2026-12-07-vm-strided-2.txt).
 * Test: build/tests/ops, suite strided (layouts "alike", against the
 * contiguous kernel)
 * Bench: build/bench/bench_strided_kern 0 20 layernorm transpose_all
 */
#include <math.h>
#include <string.h>

#include "kernels/common/kutil.h"
#include "kernels/norm/cols.h"
#include "kernels/norm/dims.h"

#define COLS 1024 /* columns per block: whole 4 KiB runs of float32 */

typedef struct cols_job {
  const void *x;                   /* (outer, C, inner) */
  void *y;                         /* the same layout, may be x */
  const void *w, *b;               /* (C) or NULL */
  int64_t C, inner, nblk;          /* nblk: blocks per outer index */
  double eps;                      /* added to the variance */
  int rms;                         /* rmsnorm */
} cols_job_t;

/* Blocks [ub, ue) in element type T. */
#define COLS_RANGE(name, T)                                                 \
  OPD_FAST static void name(void *arg, int64_t ub, int64_t ue) {            \
    const cols_job_t *j = arg;                                              \
    const T *w = j->w, *bb = j->b;                                          \
    double x0[COLS], s1[COLS], s2[COLS];                                    \
    for (int64_t u = ub; u < ue; u++) {                                     \
      int64_t o = u / j->nblk, j0 = u % j->nblk * COLS;                     \
      int64_t n = j->inner - j0 < COLS ? j->inner - j0 : COLS;              \
      const T *x = (const T *)j->x + o * j->C * j->inner + j0;              \
      T *y = (T *)j->y + o * j->C * j->inner + j0;                          \
      for (int64_t i = 0; i < n; i++)                                       \
        x0[i] = j->rms ? 0.0 : (double)x[i], s1[i] = 0, s2[i] = 0;          \
      for (int64_t c = 0; c < j->C; c++) { /* one pass: shifted sums */     \
        const T *xc = x + c * j->inner;                                     \
        for (int64_t i = 0; i < n; i++) {                                   \
          double d = xc[i] - x0[i];                                         \
          s1[i] += d;                                                       \
          s2[i] += d * d;                                                   \
        }                                                                   \
      }                                                                     \
      for (int64_t i = 0; i < n; i++) { /* s1: mean, s2: 1 / std */         \
        double m = s1[i] / (double)j->C, v = s2[i] / (double)j->C - m * m;   \
        s1[i] = j->rms ? 0.0 : x0[i] + m;                                   \
        s2[i] = 1.0 / sqrt((j->rms ? s2[i] / (double)j->C : v < 0 ? 0 : v) + \
                           j->eps);                                         \
      }                                                                     \
      T hi[COLS], lo[COLS], rs[COLS]; /* the mean as hi + lo: a spread  \
                                         of a few ulps of the mean stays */ \
      for (int64_t i = 0; i < n; i++) {                                     \
        hi[i] = (T)s1[i];                                                   \
        lo[i] = (T)(s1[i] - (double)hi[i]);                                 \
        rs[i] = (T)s2[i];                                                   \
      }                                                                     \
      for (int64_t c = 0; c < j->C; c++) {                                  \
        T wc = w ? w[c] : (T)1, bc = bb && !j->rms ? bb[c] : (T)0;          \
        const T *xc = x + c * j->inner;                                     \
        T *yc = y + c * j->inner;                                           \
        for (int64_t i = 0; i < n; i++)                                     \
          yc[i] = ((xc[i] - hi[i]) - lo[i]) * rs[i] * wc + bc;              \
      }                                                                     \
    }                                                                       \
  }

COLS_RANGE(cols_f32, float)
COLS_RANGE(cols_f64, double)

int opd__norm_cols_ok(const opd_kcall_t *call) {
  int32_t dt = call->in[0].dtype;
  if ((dt != OPD_DTYPE_FLOAT32 && dt != OPD_DTYPE_FLOAT64) ||
      call->out[0].dtype != dt || opd__norm_ndims(call) != 1)
    return 0;
  for (int i = 1; i < call->n_in; i++) {
    const opd_tview_t *v = &call->in[i];
    if (v->dtype != dt || v->rank != 1 || (v->shape[0] > 1 && v->strides[0] != 1))
      return 0;
  }
  return 1;
}

int opd__norm_cols(opd_kcall_t *call, int64_t outer, int64_t C, int64_t inner,
                   int rms) {
  cols_job_t j = {call->in[0].data, call->out[0].data,
                  call->n_in > 1 ? call->in[1].data : NULL,
                  call->n_in > 2 ? call->in[2].data : NULL,
                  C, inner, (inner + COLS - 1) / COLS, call->attr[0].f, rms};
  int64_t units = outer * j.nblk, per = C * COLS;
  int64_t grain = OPD_GRAIN_ELEMS / (per > 0 ? per : 1);
  call->exec->parallel_for(call->exec, units, grain < 1 ? 1 : grain,
                           call->in[0].dtype == OPD_DTYPE_FLOAT64 ? cols_f64 : cols_f32,
                           &j);
  return 0;
}
