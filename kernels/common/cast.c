/* Float dtype conversions and the cast wrapper of the CPU kernels (the
 * contract: cast.h).
 *
 * DESIGN
 * A converted input is gathered through its strides (a strided or
 * broadcast view becomes a contiguous tensor of its shape); an output is
 * written back through its strides. The scratch is the call's own
 * (malloc'd here, freed before returning), so a wrapped kernel needs no
 * workspace and graphs need nothing from it.
 * Test: build/tests/ops, suites cast and dtypes64 (tests/ops/test_cast.c,
 * tests/ops/test_dtypes64.c).
 */
#include "kernels/common/cast.h"

#include <stdlib.h>

#include "common/dtype.h" /* opd__dtype_size */

/* dst[i] = src[i] for n elements, converting from `from` to `to`. */
void opd__cast_copy(void *dst, int32_t to, const void *src, int32_t from,
                    int64_t n) {
  if (to == from) {
    memcpy(dst, src, (size_t)n * (size_t)opd__dtype_size(to));
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
      /* a double goes to a half through float: rounding twice differs
         from rounding once only at exact ties of the float, which a
         double rarely is; torch rounds double -> half the same way */
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

/* Walks the view's elements in C order, one innermost row at a time:
 * converts between the view (strided, dtype v->dtype) and the contiguous
 * buffer `buf` of dtype bt; to_buf 1 gathers, 0 scatters. */
static void walk(const opd_tview_t *v, void *buf, int32_t bt, int to_buf) {
  if (v->numel == 0) return;
  size_t vs = (size_t)opd__dtype_size(v->dtype), bs = (size_t)opd__dtype_size(bt);
  int last = v->rank - 1;
  int64_t n = v->rank > 0 ? v->shape[last] : 1;
  int64_t st = v->rank > 0 ? v->strides[last] : 1;
  int64_t rows = n > 0 ? v->numel / n : 0, idx[OPD_MAX_RANK] = {0};
  for (int64_t r = 0; r < rows; r++) {
    int64_t off = 0;
    for (int d = 0; d < last; d++) off += idx[d] * v->strides[d];
    char *row = (char *)v->data + off * (int64_t)vs;
    char *b = (char *)buf + (size_t)(r * n) * bs;
    if (st == 1) {
      if (to_buf) opd__cast_copy(b, bt, row, v->dtype, n);
      else opd__cast_copy(row, v->dtype, b, bt, n);
    } else {
      for (int64_t i = 0; i < n; i++) {
        char *e = row + i * st * (int64_t)vs;
        if (to_buf) opd__cast_copy(b + (size_t)i * bs, bt, e, v->dtype, 1);
        else opd__cast_copy(e, v->dtype, b + (size_t)i * bs, bt, 1);
      }
    }
    for (int d = last - 1; d >= 0; d--) {
      if (++idx[d] < v->shape[d]) break;
      idx[d] = 0;
    }
  }
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
    else walk(&call->in[i], k->in[i].data, c, 1);
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
      if (rc == 0) walk(&call->out[i], k->out[i].data, c, 0);
      free(k->out[i].data);
    }
  for (int i = 0; i < call->n_in; i++)
    if (k->in[i].data != call->in[i].data) free(k->in[i].data);
  free(k);
  return rc;
}
