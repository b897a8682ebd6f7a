/* The norm family on the CPU in float64 (softmax, log_softmax, layernorm,
 * rmsnorm; contract: norm64.h).
 *
 * DESIGN
 * float64 is the precision path: the float32 references' algorithms
 * (cpu.c, in double already) over double rows, with no vector variant;
 * the cast wrapper (kernels/common/cast.h) hands these kernels calls whose
 * float tensors are all float64.
 *
 * Variants: one per op, for both cpu_ref and cpu_fast (double is the
 * reference's own precision):
 *   softmax      per column (o, i) along the dim: max, sum of exp(x -
 *                max), then y; a column holding NaN gives NaN, +inf or
 *                all -inf NaN, -inf entries 0 (log_softmax -inf), as the
 *                float32 reference
 *   layernorm    per row: mean, the deviations with the two-pass
 *                correction, biased variance, y = (x - mean) rstd w + b
 *   rmsnorm      per row: y = x / sqrt(mean(x^2) + eps) w
 * Rows (softmax: outer indices) spread over call->exec; y may be x (each
 * pass reads an element before the last one writes it).
 * Test: build/tests/ops, suite dtypes64 (against long double).
 */
#include <math.h>

#include "kernels/common/kutil.h"
#include "kernels/norm/dims.h"
#include "kernels/norm/norm64.h"

typedef struct n64_job {
  const double *x;                 /* input */
  double *y;                       /* output, may be x */
  const double *w, *b;             /* (C) or NULL */
  int64_t C;                       /* normalized length */
  int64_t inner;                   /* softmax: stride of the dim */
  double eps;                      /* norms: added before the sqrt */
  int lg;                          /* softmax: 1 for log_softmax */
} n64_job_t;

/* Outer indices [b, e) of softmax: each column along the dim. */
static void sm64(void *arg, int64_t b, int64_t e) {
  const n64_job_t *j = arg;
  int64_t C = j->C, in = j->inner;
  for (int64_t o = b; o < e; o++)
    for (int64_t k = 0; k < in; k++) {
      const double *x = j->x + o * C * in + k;
      double *y = j->y + o * C * in + k;
      double m = -INFINITY, s = 0;
      int nan = 0;
      for (int64_t i = 0; i < C; i++) {
        if (isnan(x[i * in])) nan = 1;
        if (x[i * in] > m) m = x[i * in];
      }
      for (int64_t i = 0; i < C; i++) s += exp(x[i * in] - m);
      double ls = log(s);
      for (int64_t i = 0; i < C; i++) {
        double d = x[i * in] - m;
        y[i * in] = nan ? NAN : j->lg ? d - ls : exp(d) / s;
      }
    }
}

int opd__softmax64(opd_kcall_t *call, int lg) {
  int64_t outer;
  n64_job_t j = {.x = call->in[0].data, .y = call->out[0].data, .lg = lg};
  opd__sm_geom(&call->in[0], call->attr[0].i, &outer, &j.C, &j.inner);
  if (call->in[0].numel == 0) return 0;
  call->exec->parallel_for(call->exec, outer, opd__row_grain(j.C * j.inner),
                           sm64, &j);
  return 0;
}

OPD_LN_ROW_EXACT(ln64_row, double)

/* Rows [b, e) of layernorm. */
static void ln64(void *arg, int64_t b, int64_t e) {
  const n64_job_t *j = arg;
  for (int64_t r = b; r < e; r++)
    ln64_row(j->x + r * j->C, j->y + r * j->C, j->w, j->b, j->C, j->eps);
}

/* Rows [b, e) of rmsnorm. */
static void rms64(void *arg, int64_t b, int64_t e) {
  const n64_job_t *j = arg;
  int64_t C = j->C;
  for (int64_t r = b; r < e; r++) {
    const double *x = j->x + r * C;
    double *y = j->y + r * C, ss = 0;
    for (int64_t i = 0; i < C; i++) ss += x[i] * x[i];
    double rr = 1.0 / sqrt(ss / (double)C + j->eps);
    for (int64_t i = 0; i < C; i++) y[i] = j->w ? x[i] * rr * j->w[i] : x[i] * rr;
  }
}

/* A norm's job and its rows over call->exec. */
static int norm64(opd_kcall_t *call, opd_range_fn rows) {
  n64_job_t j = {.x = call->in[0].data, .y = call->out[0].data,
                 .C = opd__norm_len(call), .eps = call->attr[0].f};
  if (call->n_in > 1) j.w = call->in[1].data;
  if (call->n_in > 2) j.b = call->in[2].data;
  call->exec->parallel_for(call->exec, opd__rows(&call->in[0], j.C),
                           opd__row_grain(j.C), rows, &j);
  return 0;
}

int opd__layernorm64(opd_kcall_t *call) { return norm64(call, ln64); }
int opd__rmsnorm64(opd_kcall_t *call) { return norm64(call, rms64); }
