/* layernorm on the CPU: y = (x - mean) / sqrt(var + eps) * w + b per row,
 * var biased (divided by C).
 *
 * Variants:
 *   cpu_ref   per row in double (ln_row_exact): the mean, then the
 *             deviations from it with the two-pass correction (mean +=
 *             sum(d)/C, var = (sum(d^2) - sum(d)^2/C)/C). Exact to double
 *             rounding for every finite float32 row: a square of a float32
 *             difference (at most 4.6e77, at least 2^-298) and any row sum
 *             of them is a normal double. (the truth)
 *   cpu_fast  per row in float, 16-lane vectorized sums, three passes:
 *             hi = x0 + sum(x - x0)/C (x0 = x[0]: the terms stay small
 *             when the spread is far below the mean); d = x - hi, sum(d)
 *             and sum(d^2) in one pass, lo = sum(d)/C, var = (sum(d^2) -
 *             sum(d) lo)/C; y = ((x - hi) - lo) rstd w + b, the mean kept
 *             as the pair (hi, lo) so that a row whose spread is a few
 *             ulps of its mean (1e30 and its neighbour) still normalizes.
 *             Float is exact to float rounding while every d^2 and their
 *             sum stay finite and var + eps >= 2^-60 (d^2 terms lost to
 *             underflow, < 2^-126 each, then do not count): |x| below
 *             ~1e18, down to denormals when eps >= 2^-60. A row outside
 *             that (a sum not finite, or var + eps < 2^-60: |x| ~1e20 gave
 *             0 before, a row of denormals with eps = 0 NaN) is redone by
 *             ln_row_exact in double; so is a row holding inf or NaN,
 *             which gives NaN throughout, as torch 1.13. The check is a
 *             few scalar tests per row, so the common case costs what it
 *             did (bench/results/2026-12-01-numerics.txt).
 *             Rows spread over call->exec.
 * In place (y == x) works: the output pass reads each element before
 * writing it.
 * Test: build/tests/ops, suites layernorm (fast within 1e-5+1e-4|ref|)
 * and numerics (extremes, inf, NaN against float64 and torch 1.13)
 * Bench: build/bench/bench_cpu_ops
 */
#include <float.h>
#include <math.h>

#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/common/rowred.h"

OPD_OP_DECLARE(layernorm);

typedef struct ln_job {
  const float *x;                  /* input (rows, C) */
  float *y;                        /* output (rows, C), may be x */
  const float *w;                  /* (C) or NULL */
  const float *b;                  /* (C) or NULL */
  int64_t C;                       /* row length */
  float eps;                       /* added to the variance */
} ln_job_t;

static ln_job_t ln_job(const opd_kcall_t *call) {
  const opd_tview_t *x = &call->in[0];
  ln_job_t j = {x->data, call->out[0].data, NULL, NULL,
                x->shape[x->rank - 1], (float)call->attr[0].f};
  if (call->n_in > 1) j.w = call->in[1].data;
  if (call->n_in > 2) j.b = call->in[2].data;
  return j;
}

/* One row of C elements in double (see the header); y may be x. A row
 * holding inf or NaN has a NaN variance and gives NaN throughout. */
static void ln_row_exact(const float *x, float *y, const float *w,
                         const float *b, int64_t C, double eps) {
  double mean = 0, s1 = 0, s2 = 0;
  for (int64_t i = 0; i < C; i++) mean += x[i];
  mean /= (double)C;
  for (int64_t i = 0; i < C; i++) {
    double d = x[i] - mean;
    s1 += d;
    s2 += d * d;
  }
  double lo = s1 / (double)C, var = (s2 - s1 * lo) / (double)C;
  mean += lo;
  double rstd = 1.0 / sqrt((var < 0 ? 0 : var) + eps);
  for (int64_t i = 0; i < C; i++) {
    double v = (x[i] - mean) * rstd;
    if (w) v *= w[i];
    if (b) v += b[i];
    y[i] = (float)v;
  }
}

int opd__layernorm_cpu_ref(opd_kcall_t *call) {
  ln_job_t j = ln_job(call);
  int64_t C = j.C, rows = opd__rows(&call->in[0], C);
  for (int64_t r = 0; r < rows; r++)
    ln_row_exact(j.x + r * C, j.y + r * C, j.w, j.b, C, call->attr[0].f);
  return 0;
}

/* fp-contract=fast: the x86-64-v3 clone fuses d * d + q and the output's
 * multiply-adds into FMAs, which pays for the sum(d) that the two-pass
 * correction adds (valgrind: as many instructions per row as before). */
__attribute__((optimize("fp-contract=fast")))
OPD_FAST static void ln_rows(void *arg, int64_t b, int64_t e) {
  const ln_job_t *j = arg;
  int64_t C = j->C;
  const float *w = j->w, *bb = j->b;
  for (int64_t r = b; r < e; r++) {
    const float *x = j->x + r * C;
    float *y = j->y + r * C;
    float hi = opd__row_sum_dev(x, C, 0.0f) / (float)C, sd;
    float sq = opd__row_dev2(x, C, hi, &sd);
    float lo = sd / (float)C, q = sq - sd * lo;
    float ve = (q < 0 ? 0 : q) / (float)C + j->eps;
    /* q >= sq / 256: hi was within 16 std of the mean, so sum(d^2) lost
     * at most 8 bits to the correction */
    if (!(isfinite(hi) && isfinite(lo) && isfinite(q) && q >= sq * 0x1p-8f &&
          ve >= 0x1p-60f && ve <= FLT_MAX)) {
      ln_row_exact(x, y, w, bb, C, j->eps); /* outside float's range */
      continue;
    }
    float rstd = 1.0f / sqrtf(ve), m = hi + lo;
    if (m * m > 0x1p12f * (q / (float)C)) { /* |mean| > 64 std: keep (hi, lo) */
      if (w && bb)
        for (int64_t i = 0; i < C; i++) y[i] = ((x[i] - hi) - lo) * rstd * w[i] + bb[i];
      else if (w)
        for (int64_t i = 0; i < C; i++) y[i] = ((x[i] - hi) - lo) * rstd * w[i];
      else
        for (int64_t i = 0; i < C; i++) y[i] = ((x[i] - hi) - lo) * rstd;
    } else if (w && bb) { /* m is within 2^-18 std of the mean */
      for (int64_t i = 0; i < C; i++) y[i] = (x[i] - m) * rstd * w[i] + bb[i];
    } else if (w) {
      for (int64_t i = 0; i < C; i++) y[i] = (x[i] - m) * rstd * w[i];
    } else {
      for (int64_t i = 0; i < C; i++) y[i] = (x[i] - m) * rstd;
    }
  }
}

int opd__layernorm_cpu_fast(opd_kcall_t *call) {
  ln_job_t j = ln_job(call);
  int64_t rows = opd__rows(&call->in[0], j.C);
  call->exec->parallel_for(call->exec, rows, opd__row_grain(j.C), ln_rows,
                           &j);
  return 0;
}
