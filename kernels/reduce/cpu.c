/* The reduce family on the CPU (sum, mean, amax over any set of dims):
 * one body for every op of the family (rows: ops.c).
 *
 * DESIGN
 * Every kernel walks the geometry of geom.h: outputs o, each reducing the
 * elements x[koff(o) + roff(r)], r < nred.
 * Variants (per op, through reduce_ref / reduce_fast):
 *   cpu_ref   per output in double (int64 for integer x): the truth
 *   cpu_fast  three layouts, work spread over call->exec:
 *     rows     the reduced dims are the innermost (one merged dim of
 *              stride 1): each output is a row, 16-lane float sums or
 *              maxima (kernels/common/rowred.h)
 *     columns  the innermost dim is kept (stride 1): outputs in runs of
 *              K neighbours, accumulated in float up to 4096 at a time
 *              (a vectorizable loop over them per reduced element)
 *     general  anything else, integer and float64 x: per output as the
 *              reference
 * float16 / bfloat16 run the float32 kernels on converted copies
 * (kernels/common/cast.h).
 * Semantics: amax gives NaN when any element is NaN (torch.amax); mean
 * is the sum divided by the count (NaN for none); sum of an integer or
 * bool x is int64 (wrapping on overflow, as torch).
 * Test: build/tests/ops, suite reduce (tests/ops/test_reduce.c).
 */
#include <math.h>

#include "kernels/common/cast.h"
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/common/rowred.h"
#include "kernels/reduce/geom.h"

typedef enum { RED_SUM, RED_MEAN, RED_MAX } red_op_t;

/* x[i] of an integer or bool x as int64. */
static int64_t int_at(const void *x, int32_t dt, int64_t i) {
  switch (dt) {
    case OPD_DTYPE_INT8: return ((const int8_t *)x)[i];
    case OPD_DTYPE_UINT8:
    case OPD_DTYPE_BOOL: return ((const uint8_t *)x)[i];
    case OPD_DTYPE_INT32: return ((const int32_t *)x)[i];
    default: return ((const int64_t *)x)[i];
  }
}

typedef struct red_job {
  red_op_t op;                     /* the operation */
  opd_red_geom_t g;                /* geometry */
  const void *x;                   /* input */
  int32_t dtype;                   /* x's dtype */
  void *out;                       /* (nout) float32 / float64, or int64 */
} red_job_t;

/* Outputs [b, e) one by one, in double (float64 x: sums in long double;
 * int64 for integer x). */
static void red_general(void *arg, int64_t b, int64_t e) {
  const red_job_t *j = arg;
  const opd_red_geom_t *g = &j->g;
  for (int64_t o = b; o < e; o++) {
    int64_t base = opd__red_koff(g, o);
    if (j->dtype != OPD_DTYPE_FLOAT32 && j->dtype != OPD_DTYPE_FLOAT64) {
      int64_t s = 0;
      for (int64_t r = 0; r < g->nred; r++)
        s += int_at(j->x, j->dtype, base + opd__red_roff(g, r));
      ((int64_t *)j->out)[o] = s;
      continue;
    }
    if (j->dtype == OPD_DTYPE_FLOAT64) {
      const double *x = j->x;
      long double s = 0;
      double m = -INFINITY;
      for (int64_t r = 0; r < g->nred; r++) {
        double v = x[base + opd__red_roff(g, r)];
        s += v;
        if (v > m || isnan(v)) m = isnan(m) ? m : v;
      }
      ((double *)j->out)[o] = j->op == RED_MAX    ? m
                              : j->op == RED_MEAN ? (double)(s / (long double)g->nred)
                                                  : (double)s;
      continue;
    }
    const float *x = j->x;
    double s = 0, m = -INFINITY;
    for (int64_t r = 0; r < g->nred; r++) {
      float v = x[base + opd__red_roff(g, r)];
      s += v;
      if (v > m || isnan(v)) m = isnan(m) ? m : v;
    }
    float *y = j->out;
    y[o] = (float)(j->op == RED_MAX ? m : j->op == RED_MEAN ? s / (double)g->nred : s);
  }
}

static void job_init(red_job_t *j, opd_kcall_t *call, red_op_t op) {
  j->op = op;
  opd__red_call_geom(call, &j->g);
  j->x = call->in[0].data;
  j->dtype = call->in[0].dtype;
  j->out = call->out[0].data;
}

static int reduce_ref(opd_kcall_t *call, red_op_t op) {
  red_job_t j;
  job_init(&j, call, op);
  red_general(&j, 0, j.g.nout);
  return 0;
}

/* Outputs [b, e), each a contiguous row of nred floats. */
OPD_FAST static void red_rows(void *arg, int64_t b, int64_t e) {
  const red_job_t *j = arg;
  int64_t n = j->g.nred;
  float *y = j->out;
  for (int64_t o = b; o < e; o++) {
    const float *x = (const float *)j->x + opd__red_koff(&j->g, o);
    if (j->op != RED_MAX) {
      float s = opd__row_sum_dev(x, n, 0.0f);
      y[o] = j->op == RED_MEAN ? s / (float)n : s;
      continue;
    }
    float m = opd__row_max(x, n);
    if (isnan(opd__row_sum_dev(x, n, 0.0f) * 0.0f)) /* NaN or inf inside */
      for (int64_t i = 0; i < n; i++)
        if (isnan(x[i])) m = x[i];
    y[o] = m;
  }
}

/* Units [b, e) of the columns layout: unit u is chunk u % nch (CHUNK
 * outputs at most, nch = ceil(K / CHUNK)) of run u / nch of K neighbouring
 * outputs (the innermost dim, kept, of stride 1), accumulated in float a
 * whole chunk at a time: each reduced element adds one contiguous piece
 * of a row (16 KiB at most). */
#define CHUNK 4096
OPD_FAST static void red_cols(void *arg, int64_t b, int64_t e) {
  const red_job_t *j = arg;
  const opd_red_geom_t *g = &j->g;
  int64_t K = g->kshape[g->nk - 1], nch = (K + CHUNK - 1) / CHUNK;
  float acc[CHUNK];
  for (int64_t u = b; u < e; u++) {
    int64_t q = u / nch, k0 = (u % nch) * CHUNK;
    int64_t base = opd__red_koff(g, q * K);
    int64_t n = K - k0 < CHUNK ? K - k0 : CHUNK;
    float init = j->op == RED_MAX ? -INFINITY : 0.0f;
    for (int64_t k = 0; k < n; k++) acc[k] = init;
    for (int64_t r = 0; r < g->nred; r++) {
      const float *x = (const float *)j->x + base + opd__red_roff(g, r) + k0;
      if (j->op == RED_MAX)
        for (int64_t k = 0; k < n; k++)
          acc[k] = x[k] > acc[k] || x[k] != x[k] ? x[k] : acc[k];
      else
        for (int64_t k = 0; k < n; k++) acc[k] += x[k];
    }
    float *y = (float *)j->out + q * K + k0;
    float sc = j->op == RED_MEAN ? 1.0f / (float)g->nred : 1.0f;
    if (j->op == RED_MEAN && g->nred == 0) sc = NAN;
    for (int64_t k = 0; k < n; k++) y[k] = j->op == RED_MAX ? acc[k] : acc[k] * sc;
  }
}

static int reduce_fast(opd_kcall_t *call, red_op_t op) {
  red_job_t j;
  job_init(&j, call, op);
  const opd_red_geom_t *g = &j.g;
  const opd_exec_t *ex = call->exec;
  if (g->nout == 0) return 0;
  if (j.dtype == OPD_DTYPE_FLOAT32 && g->nr == 1 && g->rstride[0] == 1) {
    ex->parallel_for(ex, g->nout, opd__row_grain(g->nred), red_rows, &j);
  } else if (j.dtype == OPD_DTYPE_FLOAT32 && g->nk > 0 && g->nr > 0 &&
             g->kstride[g->nk - 1] == 1) {
    int64_t K = g->kshape[g->nk - 1], nch = (K + CHUNK - 1) / CHUNK;
    ex->parallel_for(ex, g->nout / K * nch,
                     opd__row_grain((K < CHUNK ? K : CHUNK) * g->nred), red_cols,
                     &j);
  } else {
    ex->parallel_for(ex, g->nout, opd__row_grain(g->nred > 0 ? g->nred : 1),
                     red_general, &j);
  }
  return 0;
}

/* One op of the family: its two CPU entry points, named in its row. */
#define REDUCE_KERNELS(name, op)                                         \
  OPD_OP_DECLARE(name);                                                  \
  static int name##64(opd_kcall_t *call) { return reduce_fast(call, op); } \
  int opd__##name##_cpu_ref(opd_kcall_t *call) {                         \
    OPD_CAST_DISPATCH(call, opd__##name##_cpu_ref, name##64);            \
    return reduce_ref(call, op);                                         \
  }                                                                      \
  int opd__##name##_cpu_fast(opd_kcall_t *call) {                        \
    OPD_CAST_DISPATCH(call, opd__##name##_cpu_fast, name##64);           \
    return reduce_fast(call, op);                                        \
  }

REDUCE_KERNELS(sum, RED_SUM)
REDUCE_KERNELS(mean, RED_MEAN)
REDUCE_KERNELS(amax, RED_MAX)
