/* float16 / bfloat16 on the CPU: the conversions (every half value, ties
 * to even, overflow, NaN, subnormals) and the ops of the element-wise,
 * row-wise, reduce and matmul families on half tensors, whose results
 * must be the float32 kernel's on the widened inputs, rounded once
 * (within one half ulp of the float32 reference); a strided half input
 * is gathered through its strides. */
#include <math.h>
#include <stdlib.h>

#include "kernels/common/cast.h"
#include "tests/ops/optest.h"

static uint16_t to_half(int32_t dt, float f) {
  return dt == OPD_DTYPE_FLOAT16 ? opd__f32_to_f16(f) : opd__f32_to_bf16(f);
}
static float from_half(int32_t dt, uint16_t h) {
  return dt == OPD_DTYPE_FLOAT16 ? opd__f16_to_f32(h) : opd__bf16_to_f32(h);
}

Test(cast, f16_every_value_round_trips_and_ties_go_to_even) {
  for (uint32_t h = 0; h < 0x10000u; h++) {
    float f = opd__f16_to_f32((uint16_t)h);
    if (isnan(f)) {
      cr_assert((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu), "%x", h);
      cr_assert(isnan(opd__f16_to_f32(opd__f32_to_f16(f))));
      continue;
    }
    cr_assert_eq(opd__f32_to_f16(f), h, "%x -> %g", h, f);
    /* the midpoint to the next half up in magnitude rounds to the even
       one of the two */
    uint16_t up = (uint16_t)(h + 1);
    if ((h & 0x7fffu) >= 0x7bffu) continue; /* 65504 and inf: no neighbour */
    float mid = (f + opd__f16_to_f32(up)) / 2;
    uint16_t even = (h & 1u) ? up : (uint16_t)h;
    cr_assert_eq(opd__f32_to_f16(mid), even, "midpoint %g of %x", mid, h);
  }
  cr_assert_eq(opd__f32_to_f16(65504.0f), 0x7bff);
  cr_assert_eq(opd__f32_to_f16(65519.0f), 0x7bff);
  cr_assert_eq(opd__f32_to_f16(65520.0f), 0x7c00);
  cr_assert_eq(opd__f32_to_f16(-1e10f), 0xfc00);
  cr_assert_eq(opd__f32_to_f16(0x1p-25f), 0x0000); /* tie: to even 0 */
  cr_assert_eq(opd__f32_to_f16(0x1.8p-25f), 0x0001);
  cr_assert_eq(opd__f32_to_f16(-0.0f), 0x8000);
}

Test(cast, bf16_round_to_nearest_even_and_nan) {
  for (uint32_t h = 0; h < 0x10000u; h++) {
    float f = opd__bf16_to_f32((uint16_t)h);
    if (isnan(f)) {
      cr_assert(isnan(opd__bf16_to_f32(opd__f32_to_bf16(f))), "%x", h);
      continue;
    }
    cr_assert_eq(opd__f32_to_bf16(f), h, "%x", h);
  }
  cr_assert_eq(opd__f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);          /* tie: even */
  cr_assert_eq(opd__f32_to_bf16(1.0f + 0x1p-7f + 0x1p-8f), 0x3f82); /* tie: even */
  cr_assert_eq(opd__f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  cr_assert_eq(opd__f32_to_bf16(INFINITY), 0x7f80);
  cr_assert(isnan(opd__bf16_to_f32(opd__f32_to_bf16(NAN))));
}

/* Runs op `name` on half inputs (dtype dt; each input's float values
 * rounded to dt) and the float32 reference on the widened values, and
 * asserts output 0 is the reference within one ulp of dt (plus atol). */
typedef struct { int rank; int64_t shape[3]; } shp_t;
static void half_case(const char *name, int32_t dt, int n_in, const shp_t *in,
                      const char *attr, const char *val, double atol) {
  opd_kcall_t *h = ot_new(name), *f = ot_new(name);
  uint16_t *hxs[OPD_MAX_TENSORS];
  for (int i = 0; i < n_in; i++) {
    float *x = ot_in_rand(f, i, in[i].rank, in[i].shape, 20 + (uint64_t)i, -2, 2);
    uint16_t *hx = hxs[i] = malloc((size_t)f->in[i].numel * 2);
    for (int64_t k = 0; k < f->in[i].numel; k++) {
      hx[k] = to_half(dt, x[k]);
      x[k] = from_half(dt, hx[k]);
    }
    ot_in(h, i, dt, in[i].rank, in[i].shape, hx);
  }
  if (attr) {
    ot_set_str(h, attr, val);
    ot_set_str(f, attr, val);
  }
  ot_ready(h);
  ot_ready(f);
  cr_assert_eq(h->out[0].dtype, dt, "%s", name);
  cr_assert_eq(ot_run(f, 0, &opd__exec_serial), 0, "%s: %s", name, f->err);
  double ulp = dt == OPD_DTYPE_FLOAT16 ? 0x1p-10 : 0x1p-7;
  for (int fast = 0; fast < 2; fast++) {
    cr_assert_eq(ot_run(h, fast, fast ? ot_pool(2) : &opd__exec_serial), 0,
                 "%s: %s", name, h->err);
    const uint16_t *y = h->out[0].data;
    const float *w = f->out[0].data;
    for (int64_t k = 0; k < h->out[0].numel; k++) {
      double g = from_half(dt, y[k]);
      cr_assert(fabs(g - w[k]) <= atol + ulp * fabs(w[k]),
                "%s %s (%s): element %lld is %g, expected %g", name,
                dt == OPD_DTYPE_FLOAT16 ? "float16" : "bfloat16",
                fast ? "fast" : "ref", (long long)k, g, w[k]);
    }
  }
  ot_free(h);
  ot_free(f);
  for (int i = 0; i < n_in; i++) free(hxs[i]);
}

Test(cast, halves_through_every_family) {
  const shp_t x = {2, {6, 40}}, row = {1, {40}}, w = {2, {24, 40}},
              b = {1, {24}}, m = {2, {40, 9}};
  int32_t dts[2] = {OPD_DTYPE_FLOAT16, OPD_DTYPE_BFLOAT16};
  for (int d = 0; d < 2; d++) {
    int32_t dt = dts[d];
    half_case("relu", dt, 1, &x, NULL, NULL, 0);
    half_case("gelu", dt, 1, &x, "approximate", "tanh", 1e-6);
    half_case("silu", dt, 1, &x, NULL, NULL, 1e-6);
    half_case("tanh", dt, 1, &x, NULL, NULL, 1e-6);
    half_case("add", dt, 2, (shp_t[]){x, row}, NULL, NULL, 1e-6);
    half_case("div", dt, 2, (shp_t[]){x, row}, NULL, NULL, 1e-3);
    half_case("softmax", dt, 1, &x, NULL, NULL, 1e-6);
    half_case("log_softmax", dt, 1, &x, NULL, NULL, 1e-6);
    half_case("layernorm", dt, 3, (shp_t[]){x, row, row}, NULL, NULL, 1e-5);
    half_case("rmsnorm", dt, 2, (shp_t[]){x, row}, NULL, NULL, 1e-5);
    half_case("sum", dt, 1, &x, NULL, NULL, 1e-5);
    half_case("amax", dt, 1, &x, NULL, NULL, 0);
    half_case("matmul", dt, 2, (shp_t[]){x, m}, NULL, NULL, 1e-4);
    half_case("linear", dt, 3, (shp_t[]){x, w, b}, "act", "gelu", 1e-4);
  }
}

Test(cast, softmax_dtype_float32_of_a_bfloat16_x) {
  opd_kcall_t *c = ot_new("softmax");
  uint16_t hx[8];
  float xf[8];
  for (int i = 0; i < 8; i++) {
    hx[i] = opd__f32_to_bf16((float)i * 0.37f - 1.0f);
    xf[i] = opd__bf16_to_f32(hx[i]);
  }
  ot_in(c, 0, OPD_DTYPE_BFLOAT16, 1, OT_SHAPE(8), hx);
  ot_set_str(c, "dtype", "float32");
  ot_ready(c);
  cr_assert_eq(c->out[0].dtype, OPD_DTYPE_FLOAT32);
  cr_assert_eq(ot_run(c, 1, &opd__exec_serial), 0, "%s", c->err);
  double s = 0, m = xf[7];
  for (int i = 0; i < 8; i++) s += exp((double)xf[i] - m);
  for (int i = 0; i < 8; i++)
    cr_assert(fabs(ot_out(c, 0)[i] - exp((double)xf[i] - m) / s) < 1e-6);
}

Test(cast, strided_and_broadcast_inputs_are_gathered) {
  /* x viewed transposed (strides 1, 4) and b broadcast (stride 0): the
     wrapper gathers both into contiguous float32 copies */
  float xs[12];
  uint16_t hx[12], hb[1] = {opd__f32_to_f16(0.5f)};
  for (int i = 0; i < 12; i++) {
    xs[i] = (float)i - 5.5f;
    hx[i] = opd__f32_to_f16(xs[i]);
  }
  opd_kcall_t *c = ot_new("relu");
  ot_in(c, 0, OPD_DTYPE_FLOAT16, 2, OT_SHAPE(4, 3), hx);
  c->in[0].strides[0] = 1;
  c->in[0].strides[1] = 4; /* x^T of a (3, 4) tensor */
  ot_ready(c);
  cr_assert_eq(opd__cast_run(c, c->op->cpu_fast, NULL), 0, "%s", c->err);
  const uint16_t *y = c->out[0].data;
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 3; j++) {
      float v = xs[j * 4 + i];
      cr_assert_eq(opd__f16_to_f32(y[i * 3 + j]), v < 0 ? 0.0f : v);
    }
  ot_free(c);
  c = ot_new("mul");
  ot_in(c, 0, OPD_DTYPE_FLOAT16, 2, OT_SHAPE(3, 4), hx);
  ot_in(c, 1, OPD_DTYPE_FLOAT16, 2, OT_SHAPE(3, 4), hb);
  c->in[1].strides[0] = c->in[1].strides[1] = 0; /* 0.5 everywhere */
  ot_ready(c);
  cr_assert_eq(opd__cast_run(c, c->op->cpu_ref, NULL), 0, "%s", c->err);
  for (int i = 0; i < 12; i++)
    cr_assert_eq(opd__f16_to_f32(((uint16_t *)c->out[0].data)[i]), xs[i] * 0.5f);
}

Test(cast, no_float64_kernel_is_a_clear_error) {
  double x[2] = {1, 2};
  opd_kcall_t *c = ot_new("relu");
  ot_in(c, 0, OPD_DTYPE_FLOAT64, 1, OT_SHAPE(2), x);
  ot_ready(c);
  c->out[0].dtype = OPD_DTYPE_FLOAT64;
  c->in[0].dtype = OPD_DTYPE_FLOAT16; /* a float64 output: compute float64 */
  cr_assert_eq(opd__cast_run(c, c->op->cpu_fast, NULL), OPD_EDTYPE);
  cr_assert(strstr(c->err, "no float64 kernel"), "%s", c->err);
}
