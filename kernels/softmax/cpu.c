/* softmax on the CPU, along the last dim: y = exp(x - max) / sum.
 *
 * Variants:
 *   cpu_ref   per row in double: max, sum of exp(x - max), divide (truth)
 *   cpu_fast  per row in float, three vectorized passes (max with 16
 *             lanes; e = opd__expf_fast(x - max) stored into y while
 *             summing; y *= 1/sum, as torch's CPU kernel), rows spread
 *             over call->exec
 * Float range: exact (to expf_fast's 2 ulp) for every finite row, huge or
 * denormal: x - max <= 0, so no exp overflows; a difference past -FLT_MAX
 * rounds to -inf, whose exp is 0, as the true e^(x - max) < 1e-38 is; the
 * sum is in [1, C]. No rescaling is needed.
 * A row holding NaN gives NaN (max skips it, exp(NaN) does not), a row
 * holding +inf or of all -inf gives NaN, -inf entries 0: torch 1.13's
 * values. In place (y == x) works: every pass reads an element before
 * writing it.
 * Test: build/tests/ops, suites softmax (fast within 1e-7+1e-5|ref|) and
 * numerics (extremes, inf, NaN)
 * Bench: build/bench/bench_cpu_ops
 */
#include <math.h>

#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/common/rowred.h"

OPD_OP_DECLARE(softmax);

typedef struct sm_job {
  const float *x;                  /* input (rows, C) */
  float *y;                        /* output (rows, C), may be x */
  int64_t C;                       /* row length */
} sm_job_t;

static int64_t row_len(const opd_tview_t *x) {
  return x->rank > 0 ? x->shape[x->rank - 1] : 1;
}

int opd__softmax_cpu_ref(opd_kcall_t *call) {
  const opd_tview_t *xv = &call->in[0];
  int64_t C = row_len(xv), rows = opd__rows(xv, C);
  for (int64_t r = 0; r < rows; r++) {
    const float *x = (const float *)xv->data + r * C;
    float *y = (float *)call->out[0].data + r * C;
    double m = -INFINITY, s = 0;
    int nan = 0;
    for (int64_t i = 0; i < C; i++) {
      if (isnan(x[i])) nan = 1;
      if (x[i] > m) m = x[i];
    }
    for (int64_t i = 0; i < C; i++) s += exp((double)x[i] - m);
    for (int64_t i = 0; i < C; i++)
      y[i] = nan ? NAN : (float)(exp((double)x[i] - m) / s);
  }
  return 0;
}

/* fp-contract=fast: the x86-64-v3 clone fuses the exponential's
 * multiply-adds into FMAs (its range reduction only gets more exact):
 * 1.25-1.35x the rows per second on the 2-core VM (bench_cpu_ops,
 * 2026-12-05). */
__attribute__((optimize("fp-contract=fast")))
OPD_FAST static void sm_rows(void *arg, int64_t b, int64_t e) {
  const sm_job_t *j = arg;
  int64_t C = j->C;
  for (int64_t r = b; r < e; r++) {
    const float *x = j->x + r * C;
    float *y = j->y + r * C;
    float m = opd__row_max(x, C);
    opd_v8f s0 = opd__v8_splat(0.0f), s1 = s0, mv = opd__v8_splat(m);
    int64_t i = 0;
    for (; i + 16 <= C; i += 16) {
      opd_v8f e0 = opd__v8_expf(opd__v8_load(x + i) - mv);
      opd_v8f e1 = opd__v8_expf(opd__v8_load(x + i + 8) - mv);
      opd__v8_store(y + i, e0);
      opd__v8_store(y + i + 8, e1);
      s0 += e0;
      s1 += e1;
    }
    float sum = opd__v8_hsum(s0 + s1);
    for (; i < C; i++) {
      float v = opd__expf_fast(x[i] - m);
      y[i] = v;
      sum += v;
    }
    float inv = 1.0f / sum;
    for (i = 0; i < C; i++) y[i] *= inv;
  }
}

int opd__softmax_cpu_fast(opd_kcall_t *call) {
  const opd_tview_t *xv = &call->in[0];
  sm_job_t j = {xv->data, call->out[0].data, row_len(xv)};
  int64_t rows = opd__rows(xv, j.C);
  call->exec->parallel_for(call->exec, rows, opd__row_grain(j.C), sm_rows,
                           &j);
  return 0;
}
