/* rope and swiglu on the CPU, float32 (shapes and semantics: ops.c;
 * sizes: attn.h).
 *
 * DESIGN
 * Both are one pass over rows of the last dim, rows spread over
 * call->exec in the fast variants.
 *   rope    out[d] = x[d] cos[d] - x[d + h] sin[d],
 *           out[d + h] = x[d + h] cos[d + h] + x[d] sin[d + h], h = D/2
 *           (x * cos + rotate_half(x) * sin); cos / sin rows are found
 *           through their broadcast strides (attn.h).
 *     cpu_ref   in double, rounded once (the truth)
 *     cpu_fast  float, a vectorized loop over d per row (contiguous cos /
 *               sin rows; a broadcast last dim takes the scalar loop)
 *   swiglu  out[j] = silu(x[j]) x[j + d], silu(a) = a / (1 + e^-a)
 *     cpu_ref   in double, rounded once (the truth)
 *     cpu_fast  float, 8 lanes of opd__v8_silu (kernels/common/act.h, the
 *               silu op's own bits), silu(-inf) NaN as torch
 * Test: build/tests/ops, suites rope and swiglu (fast within
 * 1e-6 + 1e-5|ref|); tests/python/test_attention_ops.py against torch.
 */
#include <math.h>

#include "kernels/attn/attn.h"
#include "kernels/common/act.h"
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"

OPD_OP_DECLARE(rope);
OPD_OP_DECLARE(swiglu);

/* ---- rope ---------------------------------------------------------------- */

int opd__rope_cpu_ref(opd_kcall_t *call) {
  rope_dims_t d = opd__rope_dims(call);
  const float *x = call->in[0].data, *cs = call->in[1].data, *sn = call->in[2].data;
  float *out = call->out[0].data;
  int64_t h = d.D / 2, cl = d.cs[d.rank - 1];
  for (int64_t r = 0; r < d.rows; r++) {
    const float *xr = x + r * d.D, *c = cs + opd__rope_row_off(&d, r);
    const float *s = sn + opd__rope_row_off(&d, r);
    float *o = out + r * d.D;
    for (int64_t j = 0; j < h; j++) {
      double a = xr[j], b = xr[j + h];
      o[j] = (float)(a * c[j * cl] - b * s[j * cl]);
      o[j + h] = (float)(b * c[(j + h) * cl] + a * s[(j + h) * cl]);
    }
  }
  return 0;
}

typedef struct rope_job {
  rope_dims_t d;
  const float *x, *cs, *sn;
  float *out;
} rope_job_t;

OPD_FAST static void rope_range(void *arg, int64_t begin, int64_t end) {
  const rope_job_t *job = arg;
  const rope_dims_t *d = &job->d;
  int64_t h = d->D / 2, cl = d->cs[d->rank - 1];
  for (int64_t r = begin; r < end; r++) {
    int64_t off = opd__rope_row_off(d, r);
    const float *xr = job->x + r * d->D, *c = job->cs + off, *s = job->sn + off;
    float *o = job->out + r * d->D;
    if (cl == 1) {
      for (int64_t j = 0; j < h; j++) o[j] = xr[j] * c[j] - xr[j + h] * s[j];
      for (int64_t j = 0; j < h; j++) o[j + h] = xr[j + h] * c[j + h] + xr[j] * s[j + h];
    } else {
      for (int64_t j = 0; j < h; j++) {
        o[j] = xr[j] * c[j * cl] - xr[j + h] * s[j * cl];
        o[j + h] = xr[j + h] * c[(j + h) * cl] + xr[j] * s[(j + h) * cl];
      }
    }
  }
}

int opd__rope_cpu_fast(opd_kcall_t *call) {
  rope_job_t job = {opd__rope_dims(call), call->in[0].data, call->in[1].data,
                    call->in[2].data, call->out[0].data};
  if (job.d.rows == 0 || job.d.D == 0) return 0;
  call->exec->parallel_for(call->exec, job.d.rows, opd__row_grain(job.d.D), rope_range,
                           &job);
  return 0;
}

/* ---- swiglu -------------------------------------------------------------- */

int opd__swiglu_cpu_ref(opd_kcall_t *call) {
  const float *x = call->in[0].data;
  float *out = call->out[0].data;
  int64_t d = call->out[0].shape[call->out[0].rank - 1];
  int64_t rows = opd__rows(&call->out[0], d);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < d; j++) {
      double a = x[r * 2 * d + j], b = x[r * 2 * d + d + j];
      out[r * d + j] = (float)(a / (1.0 + exp(-a)) * b);
    }
  return 0;
}

typedef struct swiglu_job {
  const float *x;
  float *out;
  int64_t d;                       /* out's last dim */
} swiglu_job_t;

OPD_FAST static void swiglu_range(void *arg, int64_t begin, int64_t end) {
  const swiglu_job_t *job = arg;
  int64_t d = job->d;
  for (int64_t r = begin; r < end; r++) {
    const float *a = job->x + r * 2 * d, *b = a + d;
    float *o = job->out + r * d;
    int64_t j = 0;
    for (; j + 8 <= d; j += 8)
      opd__v8_store(o + j, opd__v8_silu(opd__v8_load(a + j)) * opd__v8_load(b + j));
    for (; j < d; j++) o[j] = opd__silu1(a[j]) * b[j];
  }
}

int opd__swiglu_cpu_fast(opd_kcall_t *call) {
  int64_t d = call->out[0].shape[call->out[0].rank - 1];
  swiglu_job_t job = {call->in[0].data, call->out[0].data, d};
  int64_t rows = opd__rows(&call->out[0], d);
  if (rows == 0) return 0;
  call->exec->parallel_for(call->exec, rows, opd__row_grain(2 * d), swiglu_range, &job);
  return 0;
}
