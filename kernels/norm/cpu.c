/* The norm family on the CPU (softmax, log_softmax, layernorm, rmsnorm):
 * row-wise normalizations, float32 (rows: ops.c; which elements form a
 * row: dims.h); float64 runs cpu64.c, float16 / bfloat16 the float32
 * kernels on converted copies (kernels/common/cast.h), which is also how
 * softmax's dtype= converts.
 *
 * DESIGN
 * The three ops reduce each row to statistics and rewrite it from them
 * (softmax: max and sum of exponentials; layernorm: mean and variance;
 * rmsnorm: mean of squares), sharing the row reductions of
 * kernels/common/rowred.h and one layout for the fast kernels: rows
 * spread over call->exec, a vectorizable pass per statistic. Each op's
 * section below says its formulas, variants and float range. A new op of
 * the family: its row in ops.c, its section here and in cuda.cu.
 */
#include <float.h>
#include <math.h>

#include "kernels/common/cast.h"
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/common/rowred.h"
#include "kernels/norm/dims.h"
#include "kernels/norm/norm64.h"

OPD_OP_DECLARE(softmax);
OPD_OP_DECLARE(log_softmax);
OPD_OP_DECLARE(layernorm);
OPD_OP_DECLARE(rmsnorm);

/* ---- softmax and log_softmax on the CPU, along any dim (x seen as
 * (outer, C, inner), dims.h): y = exp(x - max) / sum, log_softmax
 * y = (x - max) - log(sum), sum = sum of exp(x - max) along the dim.
 *
 * Variants:
 *   cpu_ref   per row (column when inner > 1) in double: max, sum of
 *             exp(x - max), then y (the truth)
 *   cpu_fast  inner == 1 (the last dim): per row in float, vectorized
 *             passes (max with 16 lanes; e = opd__expf_fast(x - max)
 *             stored into y while summing (log_softmax: summed only);
 *             y *= 1/sum, as torch's CPU kernel, or y = (x - max) -
 *             log(sum)); inner > 1: up to 1024 columns at a time, the
 *             same passes over the C rows of the chunk, per-column max
 *             and sum in arrays (sm_chunk). Rows, or (outer index,
 *             chunk) units, spread over call->exec.
 * Float range: exact (to expf_fast's 2 ulp) for every finite row, huge or
 * denormal: x - max <= 0, so no exp overflows; a difference past -FLT_MAX
 * rounds to -inf, whose exp is 0, as the true e^(x - max) < 1e-38 is; the
 * sum is in [1, C]. No rescaling is needed.
 * A row holding NaN gives NaN (max skips it, exp(NaN) does not), a row
 * holding +inf or of all -inf gives NaN, -inf entries 0 (log_softmax:
 * -inf): torch's values. In place (y == x) works: every pass reads an
 * element before writing it. dtype= converts x to that dtype first (the
 * cast wrapper), so these kernels see x and y of one dtype.
 * Test: build/tests/ops, suites softmax (fast within 1e-7+1e-5|ref|),
 * softmax_dims and numerics (extremes, inf, NaN)
 * Bench: build/bench/bench_cpu_ops
 */

typedef struct sm_job {
  const float *x;                  /* input (outer, C, inner) */
  float *y;                        /* output, may be x */
  int64_t C;                       /* length of the normalized dim */
  int64_t inner;                   /* stride of the normalized dim */
  int lg;                          /* 1: log_softmax */
} sm_job_t;

/* The job of a float32 softmax call. Returns 0. */
static int sm_job(opd_kcall_t *call, int lg, sm_job_t *j, int64_t *outer) {
  j->x = call->in[0].data;
  j->y = call->out[0].data;
  j->lg = lg;
  opd__sm_geom(&call->in[0], call->attr[0].i, outer, &j->C, &j->inner);
  return 0;
}

static int sm_ref(opd_kcall_t *call, int lg) {
  sm_job_t j;
  int64_t outer;
  int rc = sm_job(call, lg, &j, &outer);
  if (rc) return rc;
  int64_t C = j.C, in = j.inner;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t k = 0; k < in; k++) {
      const float *x = j.x + o * C * in + k;
      float *y = j.y + o * C * in + k;
      double m = -INFINITY, s = 0;
      int nan = 0;
      for (int64_t i = 0; i < C; i++) {
        if (isnan(x[i * in])) nan = 1;
        if (x[i * in] > m) m = x[i * in];
      }
      for (int64_t i = 0; i < C; i++) s += exp((double)x[i * in] - m);
      double ls = log(s);
      for (int64_t i = 0; i < C; i++) {
        double d = (double)x[i * in] - m;
        y[i * in] = nan ? NAN : (float)(lg ? d - ls : exp(d) / s);
      }
    }
  return 0;
}

/* One row of C elements (lg: log_softmax), lg a constant where it is
 * inlined, so that each copy's loops are plain vector loops. */
static inline __attribute__((always_inline)) void sm_row(const float *x, float *y,
                                                         int64_t C, const int lg) {
  float m = opd__row_max(x, C);
  opd_v8f s0 = opd__v8_splat(0.0f), s1 = s0, mv = opd__v8_splat(m);
  int64_t i = 0;
  for (; i + 16 <= C; i += 16) {
    /* the next row (softmax's rows are contiguous), a line per 16
       elements, while this one's exponentials keep the core busy */
    __builtin_prefetch(x + C + i);
    opd_v8f e0 = opd__v8_expf_neg(opd__v8_load(x + i) - mv);
    opd_v8f e1 = opd__v8_expf_neg(opd__v8_load(x + i + 8) - mv);
    if (!lg) {
      opd__v8_store(y + i, e0);
      opd__v8_store(y + i + 8, e1);
    }
    s0 += e0;
    s1 += e1;
  }
  float sum = opd__v8_hsum(s0 + s1);
  for (; i < C; i++) {
    float v = opd__expf_fast(x[i] - m);
    if (!lg) y[i] = v;
    sum += v;
  }
  if (lg) {
    float ls = logf(sum);
    for (i = 0; i < C; i++) y[i] = (x[i] - m) - ls;
    return;
  }
  float inv = 1.0f / sum;
  for (i = 0; i < C; i++) y[i] *= inv;
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
    if (j->lg)
      sm_row(j->x + r * C, j->y + r * C, C, 1);
    else
      sm_row(j->x + r * C, j->y + r * C, C, 0);
  }
}

/* One chunk of n <= SM_COLS columns over the C rows of a dim with inner >
 * 1 (lg: log_softmax, a constant where inlined): x, y at the chunk's
 * first element, rows `in` apart. The per-column max and sum live in
 * arrays of the chunk's width, so every pass reads each row's n
 * contiguous elements (4 KiB at most) with 8-lane vector ops. */
#define SM_COLS 1024
static inline __attribute__((always_inline)) void sm_chunk(const float *x, float *y,
                                                           int64_t C, int64_t in,
                                                           int64_t n, const int lg) {
  float m[SM_COLS], s[SM_COLS];
  int64_t nv = n & ~(int64_t)7, k;
  for (k = 0; k < n; k++) m[k] = -INFINITY, s[k] = 0.0f;
  for (int64_t i = 0; i < C; i++) {
    const float *r = x + i * in;
    for (k = 0; k < nv; k += 8)
      opd__v8_store(m + k, opd__v8_max(opd__v8_load(r + k), opd__v8_load(m + k)));
    for (; k < n; k++) m[k] = r[k] > m[k] ? r[k] : m[k];
  }
  for (int64_t i = 0; i < C; i++) {
    const float *r = x + i * in;
    float *w = y + i * in;
    for (k = 0; k < nv; k += 8) {
      opd_v8f e = opd__v8_expf(opd__v8_load(r + k) - opd__v8_load(m + k));
      if (!lg) opd__v8_store(w + k, e);
      opd__v8_store(s + k, opd__v8_load(s + k) + e);
    }
    for (; k < n; k++) {
      float v = opd__expf_fast(r[k] - m[k]);
      if (!lg) w[k] = v;
      s[k] += v;
    }
  }
  for (k = 0; k < n; k++) s[k] = lg ? logf(s[k]) : 1.0f / s[k];
  for (int64_t i = 0; i < C; i++) {
    const float *r = x + i * in;
    float *w = y + i * in;
    for (k = 0; k < nv; k += 8) {
      opd_v8f v = lg ? (opd__v8_load(r + k) - opd__v8_load(m + k)) - opd__v8_load(s + k)
                     : opd__v8_load(w + k) * opd__v8_load(s + k);
      opd__v8_store(w + k, v);
    }
    for (; k < n; k++) w[k] = lg ? (r[k] - m[k]) - s[k] : w[k] * s[k];
  }
}

/* Units [b, e) of a dim with inner > 1: unit u is chunk u % nch of outer
 * index u / nch, nch = ceil(inner / SM_COLS). */
__attribute__((optimize("fp-contract=fast")))
OPD_FAST static void sm_cols(void *arg, int64_t b, int64_t e) {
  const sm_job_t *j = arg;
  int64_t C = j->C, in = j->inner, nch = (in + SM_COLS - 1) / SM_COLS;
  for (int64_t u = b; u < e; u++) {
    int64_t o = u / nch, k0 = (u % nch) * SM_COLS;
    int64_t n = in - k0 < SM_COLS ? in - k0 : SM_COLS;
    const float *x = j->x + o * C * in + k0;
    float *y = j->y + o * C * in + k0;
    if (j->lg)
      sm_chunk(x, y, C, in, n, 1);
    else
      sm_chunk(x, y, C, in, n, 0);
  }
}

static int sm_fast(opd_kcall_t *call, int lg) {
  sm_job_t j;
  int64_t outer;
  int rc = sm_job(call, lg, &j, &outer);
  if (rc || call->in[0].numel == 0) return rc;
  const opd_exec_t *ex = call->exec;
  if (j.inner == 1)
    ex->parallel_for(ex, outer, opd__row_grain(j.C), sm_rows, &j);
  else
    ex->parallel_for(ex, outer * ((j.inner + SM_COLS - 1) / SM_COLS),
                     opd__row_grain(j.C * (j.inner < SM_COLS ? j.inner : SM_COLS)),
                     sm_cols, &j);
  return 0;
}

static int softmax64(opd_kcall_t *call) { return opd__softmax64(call, 0); }
static int log_softmax64(opd_kcall_t *call) { return opd__softmax64(call, 1); }

int opd__softmax_cpu_ref(opd_kcall_t *call) {
  OPD_CAST_DISPATCH(call, opd__softmax_cpu_ref, softmax64);
  return sm_ref(call, 0);
}
int opd__softmax_cpu_fast(opd_kcall_t *call) {
  OPD_CAST_DISPATCH(call, opd__softmax_cpu_fast, softmax64);
  return sm_fast(call, 0);
}
int opd__log_softmax_cpu_ref(opd_kcall_t *call) {
  OPD_CAST_DISPATCH(call, opd__log_softmax_cpu_ref, log_softmax64);
  return sm_ref(call, 1);
}
int opd__log_softmax_cpu_fast(opd_kcall_t *call) {
  OPD_CAST_DISPATCH(call, opd__log_softmax_cpu_fast, log_softmax64);
  return sm_fast(call, 1);
}

/* ---- layernorm on the CPU: y = (x - mean) / sqrt(var + eps) * w + b per row,
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
  ln_job_t j = {x->data, call->out[0].data, NULL, NULL, opd__norm_len(call),
                (float)call->attr[0].f};
  if (call->n_in > 1) j.w = call->in[1].data;
  if (call->n_in > 2) j.b = call->in[2].data;
  return j;
}

/* One row of C elements in double (see the header and norm64.h). */
OPD_LN_ROW_EXACT(ln_row_exact, float)

int opd__layernorm_cpu_ref(opd_kcall_t *call) {
  OPD_CAST_DISPATCH(call, opd__layernorm_cpu_ref, opd__layernorm64);
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
  OPD_CAST_DISPATCH(call, opd__layernorm_cpu_fast, opd__layernorm64);
  ln_job_t j = ln_job(call);
  int64_t rows = opd__rows(&call->in[0], j.C);
  call->exec->parallel_for(call->exec, rows, opd__row_grain(j.C), ln_rows,
                           &j);
  return 0;
}

/* ---- rmsnorm on the CPU: y = x / sqrt(mean(x^2) + eps) * w per row.
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
  OPD_CAST_DISPATCH(call, opd__rmsnorm_cpu_ref, opd__rmsnorm64);
  const opd_tview_t *xv = &call->in[0];
  int64_t C = opd__norm_len(call), rows = opd__rows(xv, C);
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
  OPD_CAST_DISPATCH(call, opd__rmsnorm_cpu_fast, opd__rmsnorm64);
  const opd_tview_t *xv = &call->in[0];
  rms_job_t j = {xv->data, call->out[0].data,
                 call->n_in > 1 ? call->in[1].data : NULL,
                 opd__norm_len(call), (float)call->attr[0].f};
  call->exec->parallel_for(call->exec, opd__rows(xv, j.C),
                           opd__row_grain(j.C), rms_rows, &j);
  return 0;
}
