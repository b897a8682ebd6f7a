/* layernorm on the CPU: y = (x - mean) / sqrt(var + eps) * w + b per row,
 * var biased (divided by C).
 *
 * Variants:
 *   cpu_ref   per row in double, two passes for mean and variance (truth)
 *   cpu_fast  per row in float, 16-lane vectorized sums (mean, then the
 *             squared deviations: no cancellation), one fused output pass,
 *             rows spread over call->exec
 * In place (y == x) works: the output pass reads each element before
 * writing it.
 * Test: build/tests/ops, suite layernorm (fast within 1e-5+1e-4|ref|)
 * Bench: build/bench/bench_cpu_ops
 */
#include <math.h>

#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/common/rowred.h"

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

int opd__layernorm_cpu_ref(opd_kcall_t *call) {
  ln_job_t j = ln_job(call);
  int64_t C = j.C, rows = opd__rows(&call->in[0], C);
  double eps = call->attr[0].f;
  for (int64_t r = 0; r < rows; r++) {
    const float *x = j.x + r * C;
    float *y = j.y + r * C;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < C; i++) mean += x[i];
    mean /= (double)C;
    for (int64_t i = 0; i < C; i++) var += (x[i] - mean) * (x[i] - mean);
    var /= (double)C;
    double rstd = 1.0 / sqrt(var + eps);
    for (int64_t i = 0; i < C; i++) {
      double v = (x[i] - mean) * rstd;
      if (j.w) v *= j.w[i];
      if (j.b) v += j.b[i];
      y[i] = (float)v;
    }
  }
  return 0;
}

OPD_FAST static void ln_rows(void *arg, int64_t b, int64_t e) {
  const ln_job_t *j = arg;
  int64_t C = j->C;
  const float *w = j->w, *bb = j->b;
  for (int64_t r = b; r < e; r++) {
    const float *x = j->x + r * C;
    float *y = j->y + r * C;
    float mean = opd__row_sum(x, C) / (float)C;
    float var = opd__row_sqdev(x, C, mean) / (float)C;
    float rstd = 1.0f / sqrtf(var + j->eps);
    if (w && bb)
      for (int64_t i = 0; i < C; i++) y[i] = (x[i] - mean) * rstd * w[i] + bb[i];
    else if (w)
      for (int64_t i = 0; i < C; i++) y[i] = (x[i] - mean) * rstd * w[i];
    else
      for (int64_t i = 0; i < C; i++) y[i] = (x[i] - mean) * rstd;
  }
}

int opd__layernorm_cpu_fast(opd_kcall_t *call) {
  ln_job_t j = ln_job(call);
  int64_t rows = opd__rows(&call->in[0], j.C);
  call->exec->parallel_for(call->exec, rows, opd__row_grain(j.C), ln_rows,
                           &j);
  return 0;
}
