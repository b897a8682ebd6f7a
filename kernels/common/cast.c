/* Float dtype conversions and the cast wrapper of the CPU kernels (the
 * contract: cast.h).
 *
 * DESIGN
 * A converted input is gathered through its strides (a strided or
 * broadcast view becomes a contiguous tensor of its shape); an output is
 * written back through its strides; both by innermost rows spread over
 * call->exec, float32 <-> half rows in plain vectorizable loops. The scratch is the call's own
 * (malloc'd here, freed before returning), so a wrapped kernel needs no
 * workspace and graphs need nothing from it.
 * Test: build/tests/ops, suites cast and dtypes64 (tests/ops/test_cast.c,
 * tests/ops/test_dtypes64.c).
 */
#include "kernels/common/cast.h"

#include <stdlib.h>

#include "common/dtype.h" /* opd__dtype_size */
#include "kernels/common/kutil.h"

/* float32 <-> float16 / bfloat16 (bf: bfloat16), the wrapper's common
 * case: plain loops of the inline conversions, for the vectorizer. */
OPD_FAST static void from_f32(uint16_t *d, const float *s, int64_t n, int bf) {
  if (bf)
    for (int64_t i = 0; i < n; i++) d[i] = opd__f32_to_bf16(s[i]);
  else
    for (int64_t i = 0; i < n; i++) d[i] = opd__f32_to_f16(s[i]);
}
OPD_FAST static void to_f32(float *d, const uint16_t *s, int64_t n, int bf) {
  if (bf)
    for (int64_t i = 0; i < n; i++) d[i] = opd__bf16_to_f32(s[i]);
  else
    for (int64_t i = 0; i < n; i++) d[i] = opd__f16_to_f32(s[i]);
}

static int is_half(int32_t dt) {
  return dt == OPD_DTYPE_FLOAT16 || dt == OPD_DTYPE_BFLOAT16;
}

/* dst[i] = src[i] for n elements, converting from `from` to `to`. */
void opd__cast_copy(void *dst, int32_t to, const void *src, int32_t from,
                    int64_t n) {
  if (to == from) {
    memcpy(dst, src, (size_t)n * (size_t)opd__dtype_size(to));
    return;
  }
  if (from == OPD_DTYPE_FLOAT32 && is_half(to)) {
    from_f32(dst, src, n, to == OPD_DTYPE_BFLOAT16);
    return;
  }
  if (to == OPD_DTYPE_FLOAT32 && is_half(from)) {
    to_f32(dst, src, n, from == OPD_DTYPE_BFLOAT16);
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    double v;
    switch (from) {
      case OPD_DTYPE_FLOAT16: v = opd__f16_to_f32(((const uint16_t *)src)[i]); break;
      case OPD_DTYPE_BFLOAT16: v = opd__bf16_to_f32(((const uint16_t *)src)[i]); break;
      case OPD_DTYPE_FLOAT64: v = ((const double *)src)[i]; break;
      default: v = ((const float *)src)[i]; break;
    }
    switch (to) {
      /* a double goes to a half through float (c10::Half and BFloat16
         are made from a float: torch rounds twice too) */
      case OPD_DTYPE_FLOAT16: ((uint16_t *)dst)[i] = opd__f32_to_f16((float)v); break;
      case OPD_DTYPE_BFLOAT16: ((uint16_t *)dst)[i] = opd__f32_to_bf16((float)v); break;
      case OPD_DTYPE_FLOAT64: ((double *)dst)[i] = v; break;
      default: ((float *)dst)[i] = (float)v; break;
    }
  }
}

/* The call's compute dtype (cast.h). */
static int32_t compute_dtype(const opd_kcall_t *call) {
  return call->n_out > 0 && call->out[0].dtype == OPD_DTYPE_FLOAT64
             ? OPD_DTYPE_FLOAT64
             : OPD_DTYPE_FLOAT32;
}

int opd__cast_needed(const opd_kcall_t *call) {
  int32_t c = compute_dtype(call);
  for (int i = 0; i < call->n_in; i++)
    if (opd__is_float_dtype(call->in[i].dtype) && call->in[i].dtype != c) return 1;
  for (int i = 0; i < call->n_out; i++)
    if (opd__is_float_dtype(call->out[i].dtype) && call->out[i].dtype != c) return 1;
  return 0;
}

typedef struct walk_job {
  const opd_tview_t *v;            /* the strided view */
  void *buf;                       /* contiguous, dtype bt */
  int32_t bt;                      /* buf's dtype */
  int to_buf;                      /* 1: gather v -> buf; 0: scatter */
  int64_t n;                       /* elements of a row (v's last dim) */
} walk_job_t;

/* Rows [b, e) of the walk: row r is v's innermost run at outer index r. */
static void walk_rows(void *arg, int64_t b, int64_t e) {
  const walk_job_t *j = arg;
  const opd_tview_t *v = j->v;
  size_t vs = (size_t)opd__dtype_size(v->dtype), bs = (size_t)opd__dtype_size(j->bt);
  int last = v->rank - 1;
  int64_t n = j->n, st = v->rank > 0 ? v->strides[last] : 1;
  for (int64_t r = b; r < e; r++) {
    int64_t off = 0, rem = r;
    for (int d = last - 1; d >= 0; d--) {
      off += rem % v->shape[d] * v->strides[d];
      rem /= v->shape[d];
    }
    char *row = (char *)v->data + off * (int64_t)vs;
    char *bp = (char *)j->buf + (size_t)(r * n) * bs;
    if (st == 1) {
      if (j->to_buf) opd__cast_copy(bp, j->bt, row, v->dtype, n);
      else opd__cast_copy(row, v->dtype, bp, j->bt, n);
      continue;
    }
    for (int64_t i = 0; i < n; i++) {
      char *el = row + i * st * (int64_t)vs;
      if (j->to_buf) opd__cast_copy(bp + (size_t)i * bs, j->bt, el, v->dtype, 1);
      else opd__cast_copy(el, v->dtype, bp + (size_t)i * bs, j->bt, 1);
    }
  }
}

/* Converts between the view v (strided, dtype v->dtype) and the
 * contiguous buffer buf of dtype bt in C order, rows spread over ex (NULL:
 * this thread); to_buf 1 gathers, 0 scatters. */
static void walk(const opd_exec_t *ex, const opd_tview_t *v, void *buf, int32_t bt,
                 int to_buf) {
  if (v->numel == 0) return;
  walk_job_t j = {v, buf, bt, to_buf, v->rank > 0 ? v->shape[v->rank - 1] : 1};
  int64_t rows = v->numel / j.n;
  if (ex) ex->parallel_for(ex, rows, opd__row_grain(j.n), walk_rows, &j);
  else walk_rows(&j, 0, rows);
}

/* Points view v at a fresh contiguous buffer of dtype c (its shape kept).
 * Returns the buffer, NULL when out of memory. */
static void *retarget(opd_tview_t *v, int32_t c) {
  size_t bytes = (size_t)(v->numel > 0 ? v->numel : 1) * (size_t)opd__dtype_size(c);
  void *buf = malloc(bytes);
  if (buf == NULL) return NULL;
  v->data = buf;
  v->dtype = c;
  int64_t s = 1;
  for (int d = v->rank - 1; d >= 0; d--) {
    v->strides[d] = s;
    s *= v->shape[d];
  }
  return buf;
}

int opd__cast_run(opd_kcall_t *call, opd_cpu_fn f32, opd_cpu_fn f64) {
  int32_t c = compute_dtype(call);
  opd_cpu_fn f = c == OPD_DTYPE_FLOAT64 ? f64 : f32;
  if (f == NULL)
    return opd__kerr(call, OPD_EDTYPE, "the cpu backend has no float64 kernel "
                     "for this op; convert to float32");
  opd_kcall_t *k = malloc(sizeof *k);
  if (k == NULL) return opd__kerr(call, OPD_ENOMEM, "out of memory");
  memcpy(k, call, sizeof *k);
  int rc = 0;
  for (int i = 0; i < call->n_in && rc == 0; i++) {
    if (!opd__is_float_dtype(call->in[i].dtype) || call->in[i].dtype == c) continue;
    if (retarget(&k->in[i], c) == NULL) rc = OPD_ENOMEM;
    else walk(call->exec, &call->in[i], k->in[i].data, c, 1);
  }
  for (int i = 0; i < call->n_out && rc == 0; i++) {
    if (!opd__is_float_dtype(call->out[i].dtype) || call->out[i].dtype == c) continue;
    if (retarget(&k->out[i], c) == NULL) rc = OPD_ENOMEM;
  }
  if (rc == 0) {
    k->err[0] = '\0';
    rc = f(k);
    if (rc != 0) memcpy(call->err, k->err, sizeof call->err);
  } else {
    opd__kerr(call, OPD_ENOMEM, "out of memory for the %s copies of the "
              "inputs and outputs", c == OPD_DTYPE_FLOAT64 ? "float64" : "float32");
  }
  for (int i = 0; i < call->n_out; i++)
    if (k->out[i].data != call->out[i].data) {
      if (rc == 0) walk(call->exec, &call->out[i], k->out[i].data, c, 0);
      free(k->out[i].data);
    }
  for (int i = 0; i < call->n_in; i++)
    if (k->in[i].data != call->in[i].data) free(k->in[i].data);
  free(k);
  return rc;
}
