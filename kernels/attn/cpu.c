/* sdpa on the CPU: out = softmax(q k^T * scale + mask) v per attention,
 * float32 (shapes and semantics: ops.c; sizes: attn.h).
 *
 * DESIGN
 * Variants:
 *   cpu_ref   per query row in double: every score, their max, the sum of
 *             exp(s - max), the weighted sum of v's rows (the truth)
 *   cpu_fast  blocked online softmax (flash-attention's recurrence): a
 *             task is QB query rows of one attention; it walks the keys
 *             KB at a time, keeping per row the running max m, the sum l
 *             and the unnormalized output acc (Dv floats), rescaled by
 *             exp(m_old - m_new) when the max grows; K's block is
 *             transposed (zero-padded to KB) once per task and block so
 *             that a row's KB scores are 8 vector accumulators held in
 *             registers over D, and acc += p_j v_j runs 64 columns at a
 *             time in registers over the block's keys (explicit 8-wide
 *             vectors, kernels/common/rowred.h: the compiler would not
 *             reorder these sums by itself); e^x is opd__v8_expf. Causal
 *             tasks stop at their last row's key. Tasks spread over
 *             call->exec.
 * A masked score is -inf and weighs 0; a row with no key left (all
 * masked, Tk = 0) gives zeros, as torch >= 2.5's sdpa. A NaN score (a
 * NaN in q, k or a float mask) makes its row NaN.
 * Test: build/tests/ops, suite sdpa (fast within 1e-6 + 1e-5|ref|
 * of the reference); tests/python/test_attention_ops.py against numpy.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn/attn.h"
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/common/rowred.h"

OPD_OP_DECLARE(sdpa);

/* Score (i, j) of attention n is masked out (causal or a False bool). */
static inline int masked(const sdpa_dims_t *d, const void *mask, int64_t mbase,
                         int64_t i, int64_t j) {
  if (d->causal) return j > i;
  if (d->mask == SDPA_MASK_BOOL)
    return !((const uint8_t *)mask)[mbase + i * d->mq + j * d->mk];
  return 0;
}

static inline float mask_add(const sdpa_dims_t *d, const void *mask, int64_t mbase,
                             int64_t i, int64_t j) {
  return d->mask == SDPA_MASK_FLOAT
             ? ((const float *)mask)[mbase + i * d->mq + j * d->mk]
             : 0.0f;
}

int opd__sdpa_cpu_ref(opd_kcall_t *call) {
  sdpa_dims_t d = opd__sdpa_dims(call);
  const float *q = call->in[0].data, *k = call->in[1].data, *v = call->in[2].data;
  const void *mask = call->n_in > 3 ? call->in[3].data : NULL;
  float *out = call->out[0].data;
  double *s = malloc(sizeof(double) * (size_t)(d.Tk > 0 ? d.Tk : 1));
  double *acc = malloc(sizeof(double) * (size_t)(d.Dv > 0 ? d.Dv : 1));
  if (!s || !acc) {
    free(s);
    free(acc);
    return opd__kerr(call, OPD_ENOMEM, "no memory for %lld scores",
                     (long long)d.Tk);
  }
  for (int64_t n = 0; n < d.N; n++) {
    int64_t mb = opd__sdpa_mask_base(&d, n);
    for (int64_t i = 0; i < d.Tq; i++) {
      const float *qi = q + (n * d.Tq + i) * d.D;
      double m = -INFINITY, l = 0;
      for (int64_t j = 0; j < d.Tk; j++) {
        const float *kj = k + (n * d.Tk + j) * d.D;
        double dot = 0;
        for (int64_t c = 0; c < d.D; c++) dot += (double)qi[c] * kj[c];
        s[j] = masked(&d, mask, mb, i, j)
                   ? -INFINITY
                   : dot * d.scale + mask_add(&d, mask, mb, i, j);
        if (s[j] > m) m = s[j];
      }
      memset(acc, 0, sizeof(double) * (size_t)d.Dv);
      if (m == -INFINITY) m = 0; /* nothing to attend: every weight is 0 */
      for (int64_t j = 0; j < d.Tk; j++) {
        double p = exp(s[j] - m);
        const float *vj = v + (n * d.Tk + j) * d.Dv;
        l += p;
        for (int64_t c = 0; c < d.Dv; c++) acc[c] += p * vj[c];
      }
      float *o = out + (n * d.Tq + i) * d.Dv;
      for (int64_t c = 0; c < d.Dv; c++) o[c] = l == 0 ? 0.0f : (float)(acc[c] / l);
    }
  }
  free(s);
  free(acc);
  return 0;
}

/* ---- cpu_fast --------------------------------------------------------- */

enum { QB = 16, KB = 64 };         /* query rows per task, keys per block */

typedef struct fast_job {
  sdpa_dims_t d;
  const float *q, *k, *v;
  const void *mask;
  float *out;
  int64_t qtiles;                  /* tasks per attention */
  int failed;                      /* a chunk had no scratch (atomic) */
} fast_job_t;

/* Scores of row qi against the KB keys of kt (D x KB, zero past the
 * block's keys) into s: 8 vector accumulators held in registers over D. */
OPD_FAST __attribute__((optimize("fp-contract=fast"))) static void scores(
    const float *qi, const float *kt, int64_t D, float *s) {
  opd_v8f a[KB / 8];
#pragma GCC unroll 8
  for (int v = 0; v < KB / 8; v++) a[v] = opd__v8_splat(0.0f);
  for (int64_t c = 0; c < D; c++) {
    opd_v8f qc = opd__v8_splat(qi[c]);
#pragma GCC unroll 8
    for (int v = 0; v < KB / 8; v++) a[v] += qc * opd__v8_load(kt + c * KB + 8 * v);
  }
#pragma GCC unroll 8
  for (int v = 0; v < KB / 8; v++) opd__v8_store(s + 8 * v, a[v]);
}

/* acc (Dv) += sum over the block's nk keys of p[jj] * vb[jj] (rows of Dv):
 * 64 columns at a time in 8 registers, then 8, then one. */
OPD_FAST __attribute__((optimize("fp-contract=fast"))) static void weigh(
    float *acc, const float *p, const float *vb, int nk, int64_t Dv) {
  int64_t c = 0;
  for (; c + 64 <= Dv; c += 64) {
    opd_v8f a[8];
#pragma GCC unroll 8
    for (int v = 0; v < 8; v++) a[v] = opd__v8_load(acc + c + 8 * v);
    for (int jj = 0; jj < nk; jj++) {
      opd_v8f pj = opd__v8_splat(p[jj]);
      const float *vj = vb + jj * Dv + c;
#pragma GCC unroll 8
      for (int v = 0; v < 8; v++) a[v] += pj * opd__v8_load(vj + 8 * v);
    }
#pragma GCC unroll 8
    for (int v = 0; v < 8; v++) opd__v8_store(acc + c + 8 * v, a[v]);
  }
  for (; c + 8 <= Dv; c += 8) {
    opd_v8f a = opd__v8_load(acc + c);
    for (int jj = 0; jj < nk; jj++) a += opd__v8_splat(p[jj]) * opd__v8_load(vb + jj * Dv + c);
    opd__v8_store(acc + c, a);
  }
  for (; c < Dv; c++)
    for (int jj = 0; jj < nk; jj++) acc[c] += p[jj] * vb[jj * Dv + c];
}

/* One key block [j0, j0 + nk) for rows [i0, i0 + nr) of attention n. kt
 * is K's block transposed (D x KB), s the scores (KB), m / l / acc the
 * rows' running max, sum and output (QB x Dv). */
OPD_FAST static void key_block(const fast_job_t *job, int64_t n, int64_t i0, int nr,
                               int64_t j0, int nk, float *kt, float *s, float *m,
                               float *l, float *acc) {
  const sdpa_dims_t *d = &job->d;
  const int64_t D = d->D, Dv = d->Dv;
  const float *kb = job->k + (n * d->Tk + j0) * D;
  const float *vb = job->v + (n * d->Tk + j0) * Dv;
  int64_t mb = opd__sdpa_mask_base(d, n);
  for (int64_t c = 0; c < D; c++) {
    for (int jj = 0; jj < nk; jj++) kt[c * KB + jj] = kb[jj * D + c];
    for (int jj = nk; jj < KB; jj++) kt[c * KB + jj] = 0.0f;
  }
  for (int r = 0; r < nr; r++) {
    int64_t i = i0 + r;
    scores(job->q + (n * d->Tq + i) * D, kt, D, s);
    if (d->mask == SDPA_MASK_NONE && !(d->causal && j0 + nk - 1 > i)) {
      for (int jj = 0; jj < KB; jj++) s[jj] *= d->scale;
    } else {
      for (int jj = 0; jj < nk; jj++) {
        int64_t j = j0 + jj;
        s[jj] = masked(d, job->mask, mb, i, j)
                    ? -INFINITY
                    : s[jj] * d->scale + mask_add(d, job->mask, mb, i, j);
      }
    }
    for (int jj = nk; jj < KB; jj++) s[jj] = -INFINITY;
    opd_v8f bv = opd__v8_load(s);
    for (int v = 1; v < KB / 8; v++) bv = opd__v8_max(opd__v8_load(s + 8 * v), bv);
    float bm = m[r];
    for (int e = 0; e < 8; e++) bm = bv[e] > bm ? bv[e] : bm;
    float muse = bm == -INFINITY ? 0.0f : bm;
    float alpha = opd__expf_fast(m[r] - muse);
    opd_v8f sum = opd__v8_splat(0.0f), mu = opd__v8_splat(muse);
    for (int v = 0; v < KB / 8; v++) {
      opd_v8f e = opd__v8_expf(opd__v8_load(s + 8 * v) - mu);
      opd__v8_store(s + 8 * v, e);
      sum += e;
    }
    m[r] = bm;
    l[r] = l[r] * alpha + opd__v8_hsum(sum);
    float *a = acc + r * Dv;
    if (alpha != 1.0f)
      for (int64_t c = 0; c < Dv; c++) a[c] *= alpha;
    weigh(a, s, vb, nk, Dv);
  }
}

static void fast_range(void *arg, int64_t begin, int64_t end) {
  fast_job_t *job = arg;
  const sdpa_dims_t *d = &job->d;
  size_t nf = (size_t)(d->D * KB + KB + 2 * QB + QB * d->Dv);
  float *buf = malloc(nf * sizeof(float));
  if (!buf) {
    __atomic_store_n(&job->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  float *kt = buf, *s = kt + d->D * KB, *m = s + KB, *l = m + QB, *acc = l + QB;
  for (int64_t t = begin; t < end; t++) {
    int64_t n = t / job->qtiles, i0 = (t % job->qtiles) * QB;
    int nr = (int)(d->Tq - i0 < QB ? d->Tq - i0 : QB);
    int64_t kend = d->causal && i0 + nr < d->Tk ? i0 + nr : d->Tk;
    for (int r = 0; r < nr; r++) m[r] = -INFINITY, l[r] = 0.0f;
    memset(acc, 0, sizeof(float) * (size_t)(nr * d->Dv));
    for (int64_t j0 = 0; j0 < kend; j0 += KB)
      key_block(job, n, i0, nr, j0, (int)(kend - j0 < KB ? kend - j0 : KB), kt, s, m, l,
                acc);
    for (int r = 0; r < nr; r++) {
      float *o = job->out + (n * d->Tq + i0 + r) * d->Dv;
      float inv = l[r] == 0.0f ? 0.0f : 1.0f / l[r];
      for (int64_t c = 0; c < d->Dv; c++) o[c] = l[r] == 0.0f ? 0.0f : acc[r * d->Dv + c] * inv;
    }
  }
  free(buf);
}

int opd__sdpa_cpu_fast(opd_kcall_t *call) {
  fast_job_t job = {.d = opd__sdpa_dims(call),
                    .q = call->in[0].data,
                    .k = call->in[1].data,
                    .v = call->in[2].data,
                    .mask = call->n_in > 3 ? call->in[3].data : NULL,
                    .out = call->out[0].data};
  const sdpa_dims_t *d = &job.d;
  if (d->N == 0 || d->Tq == 0 || d->Dv == 0) return 0;
  job.qtiles = (d->Tq + QB - 1) / QB;
  /* a task is about QB * Tk * (D + Dv) multiply-adds: chunks of >= 256k */
  int64_t work = QB * (d->Tk + 1) * (d->D + d->Dv + 1);
  int64_t grain = work >= 262144 ? 1 : 262144 / work;
  call->exec->parallel_for(call->exec, d->N * job.qtiles, grain, fast_range, &job);
  if (job.failed)
    return opd__kerr(call, OPD_ENOMEM, "no memory for the scratch of Dv = %lld",
                     (long long)d->Dv);
  return 0;
}
