/* rmsnorm on the CPU: y = x / sqrt(mean(x^2) + eps) * w per row.
 *
 * Variants:
 *   cpu_ref   per row in double (truth)
 *   cpu_fast  per row in float, 16-lane vectorized sum of squares, one
 *             output pass, rows spread over call->exec
 * Test: build/tests/ops, suite rmsnorm
 */
#include <math.h>

#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/common/rowred.h"

typedef struct rms_job {
  const float *x;                  /* input (rows, C) */
  float *y;                        /* output (rows, C), may be x */
  const float *w;                  /* (C) or NULL */
  int64_t C;                       /* row length */
  float eps;                       /* added to mean(x^2) */
} rms_job_t;

int opd__rmsnorm_cpu_ref(opd_kcall_t *call) {
  const opd_tview_t *xv = &call->in[0];
  int64_t C = xv->shape[xv->rank - 1], rows = opd__rows(xv, C);
  const float *w = call->n_in > 1 ? call->in[1].data : NULL;
  for (int64_t r = 0; r < rows; r++) {
    const float *x = (const float *)xv->data + r * C;
    float *y = (float *)call->out[0].data + r * C;
    double ss = 0;
    for (int64_t i = 0; i < C; i++) ss += (double)x[i] * x[i];
    double rr = 1.0 / sqrt(ss / (double)C + call->attr[0].f);
    for (int64_t i = 0; i < C; i++)
      y[i] = (float)(w ? x[i] * rr * w[i] : x[i] * rr);
  }
  return 0;
}

/* Sum of x[i]^2 over [0, n). */
static inline float row_sumsq(const float *x, int64_t n) {
  return opd__row_sqdev(x, n, 0.0f);
}

OPD_FAST static void rms_rows(void *arg, int64_t b, int64_t e) {
  const rms_job_t *j = arg;
  int64_t C = j->C;
  const float *w = j->w;
  for (int64_t r = b; r < e; r++) {
    const float *x = j->x + r * C;
    float *y = j->y + r * C;
    float rr = 1.0f / sqrtf(row_sumsq(x, C) / (float)C + j->eps);
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
