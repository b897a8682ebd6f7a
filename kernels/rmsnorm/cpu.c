/* rmsnorm on the CPU: y = x / sqrt(mean(x^2) + eps) * w per row.
 *
 * Variants:
 *   cpu_ref   per row in double (rms_row_exact): exact to double rounding
 *             for every float32 row, since x^2 of a float32 (at most
 *             1.2e77, at least 2^-298) and any row sum of them is a normal
 *             double (the truth)
 *   cpu_fast  per row in float, 16-lane vectorized sum of squares, one
 *             output pass, rows spread over call->exec. Float is exact to
 *             float rounding while the sum of squares is finite and
 *             mean(x^2) + eps >= 2^-60 (x^2 terms lost to underflow, each
 *             < 2^-126, then do not count): |x| up to ~1.8e19 / sqrt(C),
 *             down to denormals when eps >= 2^-60. A row outside that
 *             (the sum overflowed: 0 above ~1.8e19 before; or a row of
 *             denormals with eps = 0: inf before) is redone by
 *             rms_row_exact in double, as is a row holding inf (y = x * 0:
 *             NaN where x is inf, 0 elsewhere) or NaN (all NaN), which is
 *             what torch gives. The check is two scalar compares per row;
 *             the common case got faster, as the sum of squares is now
 *             inlined into the -O3 AVX2 clone (the previous static helper
 *             was not: "optimize" attribute mismatch; 0.64x the
 *             instructions, bench/results/2026-12-01-numerics.txt).
 * Test: build/tests/ops, suites rmsnorm and numerics
 * Bench: build/bench/bench_cpu_ops
 */
#include <float.h>
#include <math.h>

#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/common/rowred.h"

OPD_OP_DECLARE(rmsnorm);

typedef struct rms_job {
  const float *x;                  /* input (rows, C) */
  float *y;                        /* output (rows, C), may be x */
  const float *w;                  /* (C) or NULL */
  int64_t C;                       /* row length */
  float eps;                       /* added to mean(x^2) */
} rms_job_t;

/* One row of C elements in double; y may be x. */
static void rms_row_exact(const float *x, float *y, const float *w, int64_t C,
                          double eps) {
  double ss = 0;
  for (int64_t i = 0; i < C; i++) ss += (double)x[i] * x[i];
  double rr = 1.0 / sqrt(ss / (double)C + eps);
  for (int64_t i = 0; i < C; i++)
    y[i] = (float)(w ? x[i] * rr * w[i] : x[i] * rr);
}

int opd__rmsnorm_cpu_ref(opd_kcall_t *call) {
  const opd_tview_t *xv = &call->in[0];
  int64_t C = xv->shape[xv->rank - 1], rows = opd__rows(xv, C);
  const float *w = call->n_in > 1 ? call->in[1].data : NULL;
  for (int64_t r = 0; r < rows; r++)
    rms_row_exact((const float *)xv->data + r * C,
                  (float *)call->out[0].data + r * C, w, C, call->attr[0].f);
  return 0;
}

OPD_FAST static void rms_rows(void *arg, int64_t b, int64_t e) {
  const rms_job_t *j = arg;
  int64_t C = j->C;
  const float *w = j->w;
  for (int64_t r = b; r < e; r++) {
    const float *x = j->x + r * C;
    float *y = j->y + r * C;
    float ms = opd__row_sqdev(x, C, 0.0f) / (float)C + j->eps;
    if (!(ms >= 0x1p-60f && ms <= FLT_MAX)) { /* also NaN */
      rms_row_exact(x, y, w, C, j->eps);      /* outside float's range */
      continue;
    }
    float rr = 1.0f / sqrtf(ms);
    if (w)
      for (int64_t i = 0; i < C; i++) y[i] = x[i] * rr * w[i];
    else
      for (int64_t i = 0; i < C; i++) y[i] = x[i] * rr;
  }
}

int opd__rmsnorm_cpu_fast(opd_kcall_t *call) {
  const opd_tview_t *xv = &call->in[0];
  rms_job_t j = {xv->data, call->out[0].data,
                 call->n_in > 1 ? call->in[1].data : NULL,
                 xv->shape[xv->rank - 1], (float)call->attr[0].f};
  call->exec->parallel_for(call->exec, opd__rows(xv, j.C),
                           opd__row_grain(j.C), rms_rows, &j);
  return 0;
}
