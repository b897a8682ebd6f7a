/* softmax: values by hand, numerically large inputs, fast vs ref, errors. */
#include <math.h>
#include <string.h>

#include "kernels/common/cast.h" /* opd__f16_to_f32 */
#include "tests/ops/optest.h"

Test(softmax, by_hand) {
  /* softmax([0, ln 2]) = [1/3, 2/3]; a row shifted by 1000 is the same */
  float x[4] = {0, 0.69314718f, 1000, 1000.69314718f};
  float want[4] = {1 / 3.0f, 2 / 3.0f, 1 / 3.0f, 2 / 3.0f};
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = ot_new("softmax");
    ot_in_vals(c, 0, 2, OT_SHAPE(2, 2), x);
    ot_ready(c);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    ot_assert_close(ot_out(c, 0), want, 4, 1e-6, 1e-4, "softmax");
    ot_free(c);
  }
}

Test(softmax, scalar_is_one) {
  /* torch.softmax(tensor(5.), 0) == 1 */
  float x = 5;
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = ot_new("softmax");
    ot_set_int(c, "dim", 0);
    ot_in_vals(c, 0, 0, NULL, &x);
    ot_ready(c);
    cr_assert_eq(c->out[0].rank, 0);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    cr_assert_float_eq(ot_out(c, 0)[0], 1.0f, 1e-7);
    ot_free(c);
  }
}

Test(softmax, special_values) {
  /* -inf gives 0; a row with NaN is all NaN (as torch) */
  float x[6] = {-INFINITY, 0, 0, NAN, 1, 2};
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = ot_new("softmax");
    ot_in_vals(c, 0, 2, OT_SHAPE(2, 3), x);
    ot_ready(c);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    float *y = ot_out(c, 0);
    cr_assert(y[0] == 0 && fabsf(y[1] - 0.5f) < 1e-6f, "fast=%d", fast);
    cr_assert(isnan(y[3]) && isnan(y[4]) && isnan(y[5]), "fast=%d", fast);
    ot_free(c);
  }
}

Test(softmax, fast_matches_ref) {
  struct {
    int rank;
    int64_t shape[3];
  } cases[] = {{1, {1}},         {2, {5, 1}},       {2, {3, 15}},
               {2, {3, 16}},     {2, {3, 17}},      {3, {4, 7, 33}},
               {2, {1, 100000}}, {2, {2000, 100}},  {2, {0, 8}},
               {2, {8, 0}},      {2, {64, 4096}}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    opd_kcall_t *c = ot_new("softmax");
    ot_in_rand(c, 0, cases[k].rank, cases[k].shape, 40 + k, -30, 30);
    ot_ready(c);
    ot_check_fast(c, 1e-7, 1e-5);
    ot_free(c);
  }
}

Test(softmax, expf_fast_accuracy) {
  /* opd__expf_fast is used for x <= 0: check it against expf there */
  opd_kcall_t *c = ot_new("softmax");
  float x[2001];
  x[0] = 0;
  for (int i = 1; i <= 2000; i++) x[i] = -87.0f * i / 2000;
  ot_in_vals(c, 0, 1, OT_SHAPE(2001), x); /* row max 0: y = exp(x)/sum */
  ot_ready(c);
  ot_check_fast(c, 1e-30, 1e-5);
}

Test(softmax, in_place) {
  opd_kcall_t *c = ot_new("softmax");
  float *x = ot_in_rand(c, 0, 2, OT_SHAPE(100, 77), 7, -5, 5);
  ot_ready(c);
  ot_run(c, 0, &opd__exec_serial);
  float *want = ot_out(c, 0);
  c->out[0].data = x;
  cr_assert_eq(ot_run(c, 1, ot_pool(4)), 0);
  ot_assert_close(x, want, 7700, 1e-7, 1e-5, "softmax in place");
}

Test(softmax, dim_errors) {
  opd_kcall_t *c = ot_new("softmax");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 3, OT_SHAPE(2, 3, 4), NULL);
  ot_set_int(c, "dim", 1); /* any dim is taken (was: only the last) */
  cr_assert_eq(ot_shape(c), 0);
  ot_set_int(c, "dim", -4);
  ot_expect_err(c, OPD_EATTR, "dim=-4", "out of range", "-3..2", NULL);
  ot_set_int(c, "dim", 2);
  cr_assert_eq(ot_shape(c), 0);
  ot_set_int(c, "dim", 5);
  ot_expect_err(c, OPD_EATTR, "dim=5", NULL);
}

/* softmax and log_softmax along every dim of a 3-d x, fast against ref,
 * and ref against a column computed here in double. */
Test(softmax_dims, every_dim_fast_matches_ref) {
  const char *ops[2] = {"softmax", "log_softmax"};
  int64_t shapes[][3] = {{4, 7, 33}, {3, 100, 70}, {2, 1, 5}, {5, 0, 3}};
  for (int o = 0; o < 2; o++)
    for (int k = 0; k < 4; k++)
      for (int dim = -3; dim < 3; dim++) {
        opd_kcall_t *c = ot_new(ops[o]);
        ot_in_rand(c, 0, 3, shapes[k], 60 + k, -20, 20);
        ot_set_int(c, "dim", dim);
        ot_ready(c);
        ot_check_fast(c, 1e-6, 1e-5);
        ot_free(c);
      }
  /* x (2, 3, 4) along dim 1: column (0, :, 2) by hand */
  float x[24];
  for (int i = 0; i < 24; i++) x[i] = (float)((i * 7) % 11) - 5;
  for (int o = 0; o < 2; o++) {
    opd_kcall_t *c = ot_new(ops[o]);
    ot_in_vals(c, 0, 3, OT_SHAPE(2, 3, 4), x);
    ot_set_int(c, "dim", 1);
    ot_ready(c);
    cr_assert_eq(ot_run(c, 1, &opd__exec_serial), 0);
    double m = fmax(fmax(x[2], x[6]), x[10]);
    double s = exp(x[2] - m) + exp(x[6] - m) + exp(x[10] - m);
    for (int i = 0; i < 3; i++) {
      double want = o ? x[2 + 4 * i] - m - log(s) : exp(x[2 + 4 * i] - m) / s;
      cr_assert_float_eq(ot_out(c, 0)[2 + 4 * i], want, 1e-5, "%s", ops[o]);
    }
    ot_free(c);
  }
}

Test(softmax_dims, log_softmax_special_values_and_dtype) {
  /* -inf gives -inf; a NaN row is all NaN; a 0-d x gives 0 */
  float x[6] = {-INFINITY, 0, 0, NAN, 1, 2};
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = ot_new("log_softmax");
    ot_in_vals(c, 0, 2, OT_SHAPE(2, 3), x);
    ot_ready(c);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    float *y = ot_out(c, 0);
    cr_assert(isinf(y[0]) && y[0] < 0 && fabsf(y[1] + logf(2)) < 1e-6f);
    cr_assert(isnan(y[3]) && isnan(y[4]) && isnan(y[5]));
    ot_free(c);
    float z = 3;
    c = ot_new("log_softmax");
    ot_in_vals(c, 0, 0, NULL, &z);
    ot_ready(c);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    cr_assert_eq(ot_out(c, 0)[0], 0.0f);
    ot_free(c);
  }
  /* dtype: float32 is the input's; float16 computes in float32 and
   * stores rounded (the float32 result within half's rounding) */
  opd_kcall_t *c = ot_new("softmax");
  ot_in_rand(c, 0, 2, OT_SHAPE(2, 5), 3, -1, 1);
  ot_set_str(c, "dtype", "float32");
  ot_ready(c);
  cr_assert_eq(c->out[0].dtype, OPD_DTYPE_FLOAT32);
  ot_check_fast(c, 1e-7, 1e-5);
  ot_set_str(c, "dtype", "float16");
  cr_assert_eq(ot_shape(c), 0);
  cr_assert_eq(c->out[0].dtype, OPD_DTYPE_FLOAT16);
  cr_assert_eq(ot_run(c, 1, &opd__exec_serial), 0, "%s", c->err);
  const uint16_t *h = c->out[0].data;
  float want[10];
  ot_set_str(c, "dtype", "float32");
  ot_ready(c);
  cr_assert_eq(ot_run(c, 0, &opd__exec_serial), 0);
  memcpy(want, ot_out(c, 0), sizeof want);
  for (int i = 0; i < 10; i++)
    cr_assert(fabsf(opd__f16_to_f32(h[i]) - want[i]) <= 1e-3f * want[i],
              "%d: %g vs %g", i, opd__f16_to_f32(h[i]), want[i]);
}

Test(softmax_dims, in_place_on_a_leading_dim) {
  const char *ops[2] = {"softmax", "log_softmax"};
  for (int o = 0; o < 2; o++) {
    opd_kcall_t *c = ot_new(ops[o]);
    float *x = ot_in_rand(c, 0, 3, OT_SHAPE(30, 7, 70), 9, -5, 5);
    ot_set_int(c, "dim", 0);
    ot_ready(c);
    cr_assert_eq(ot_run(c, 0, &opd__exec_serial), 0);
    float *want = ot_out(c, 0);
    c->out[0].data = x;
    cr_assert_eq(ot_run(c, 1, ot_pool(2)), 0);
    ot_assert_close(x, want, 30 * 7 * 70, 1e-6, 1e-5, ops[o]);
  }
}
