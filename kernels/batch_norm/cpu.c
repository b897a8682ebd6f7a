/* batch_norm on the CPU (inference), float32 (row: op.c).
 *
 * DESIGN
 * x is (N, C, L) with L the product of the dims after 1 (1 for (N, C)).
 * Variants:
 *   cpu_ref   per element in double: (x - mean) / sqrt(var + eps) w + b
 *             (the truth)
 *   cpu_fast  per channel a scale s = w / sqrt(var + eps) and a shift
 *             b - mean s computed in double once, then y = x s + shift
 *             over each (n, c) run of L elements (vectorized), the runs
 *             spread over call->exec. In place works (element-wise).
 * Test: build/tests/ops, suite batch_norm (tests/ops/test_pool.c).
 */
#include <math.h>

#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"

OPD_OP_DECLARE(batch_norm);

typedef struct bn_job {
  const float *x;                  /* (N, C, L) */
  float *y;                        /* (N, C, L), may be x */
  const float *mean, *var, *w, *b; /* (C); w, b may be NULL */
  int64_t C, L;                    /* channels, elements per (n, c) */
  double eps;                      /* added to var */
} bn_job_t;

static void bn_init(bn_job_t *j, const opd_kcall_t *call) {
  const opd_tview_t *x = &call->in[0];
  j->x = x->data;
  j->y = call->out[0].data;
  j->mean = call->in[1].data;
  j->var = call->in[2].data;
  j->w = call->n_in > 3 ? call->in[3].data : NULL;
  j->b = call->n_in > 4 ? call->in[4].data : NULL;
  j->C = x->shape[1];
  j->L = 1;
  for (int d = 2; d < x->rank; d++) j->L *= x->shape[d];
  j->eps = call->attr[0].f;
}

int opd__batch_norm_cpu_ref(opd_kcall_t *call) {
  bn_job_t j;
  bn_init(&j, call);
  int64_t runs = j.C > 0 ? call->in[0].numel / (j.C * (j.L > 0 ? j.L : 1)) : 0;
  for (int64_t r = 0; r < runs * j.C; r++) {
    int64_t c = r % j.C;
    for (int64_t i = 0; i < j.L; i++) {
      double v = ((double)j.x[r * j.L + i] - j.mean[c]) / sqrt((double)j.var[c] + j.eps);
      if (j.w) v *= j.w[c];
      if (j.b) v += j.b[c];
      j.y[r * j.L + i] = (float)v;
    }
  }
  return 0;
}

OPD_FAST static void bn_runs(void *arg, int64_t b, int64_t e) {
  const bn_job_t *j = arg;
  for (int64_t r = b; r < e; r++) {
    int64_t c = r % j->C;
    double s = 1.0 / sqrt((double)j->var[c] + j->eps);
    if (j->w) s *= j->w[c];
    double sh = (j->b ? j->b[c] : 0.0) - j->mean[c] * s;
    float sf = (float)s, shf = (float)sh;
    const float *x = j->x + r * j->L;
    float *y = j->y + r * j->L;
    for (int64_t i = 0; i < j->L; i++) y[i] = x[i] * sf + shf;
  }
}

int opd__batch_norm_cpu_fast(opd_kcall_t *call) {
  bn_job_t j;
  bn_init(&j, call);
  if (call->in[0].numel == 0) return 0;
  int64_t runs = call->in[0].numel / j.L;
  call->exec->parallel_for(call->exec, runs, opd__row_grain(j.L), bn_runs, &j);
  return 0;
}
