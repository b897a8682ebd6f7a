/* layernorm and rmsnorm: values by hand, fast vs ref, errors. */
#include <math.h>

#include "tests/ops/optest.h"

Test(layernorm, by_hand) {
  /* x = [1, 2, 3, 4]: mean 2.5, biased var 1.25; (x - 2.5)/sqrt(1.25) =
   * [-1.3416408, -0.4472136, 0.4472136, 1.3416408]; w = 2, b = 1 */
  float x[4] = {1, 2, 3, 4}, w[4] = {2, 2, 2, 2}, b[4] = {1, 1, 1, 1};
  float want[4] = {-1.6832816f, 0.1055728f, 1.8944272f, 3.6832816f};
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = ot_new("layernorm");
    ot_set_float(c, "eps", 0);
    ot_in_vals(c, 0, 1, OT_SHAPE(4), x);
    ot_in_vals(c, 1, 1, OT_SHAPE(4), w);
    ot_in_vals(c, 2, 1, OT_SHAPE(4), b);
    ot_ready(c);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    ot_assert_close(ot_out(c, 0), want, 4, 1e-6, 1e-6, "layernorm");
    ot_free(c);
  }
}

Test(layernorm, eps_default_and_constant_row) {
  /* a constant row normalizes to 0 (var 0, eps keeps it finite) */
  float x[3] = {5, 5, 5};
  opd_kcall_t *c = ot_new("layernorm");
  cr_assert_float_eq(c->attr[0].f, 1e-5, 1e-12);
  ot_in_vals(c, 0, 2, OT_SHAPE(1, 3), x);
  ot_ready(c);
  ot_check_fast(c, 0, 0);
  for (int i = 0; i < 3; i++) cr_assert_eq(ot_out(c, 0)[i], 0.0f);
}

Test(layernorm, fast_matches_ref) {
  int64_t shapes[][2] = {{1, 1}, {3, 7}, {33, 16}, {5, 1000}, {2, 65537},
                         {4000, 64}, {0, 5}};
  for (int k = 0; k < 7; k++)
    for (int nin = 1; nin <= 3; nin++) {
      opd_kcall_t *c = ot_new("layernorm");
      ot_in_rand(c, 0, 2, shapes[k], 50 + k, -3, 5);
      if (nin > 1) ot_in_rand(c, 1, 1, &shapes[k][1], 60 + k, 0.5, 2);
      if (nin > 2) ot_in_rand(c, 2, 1, &shapes[k][1], 70 + k, -1, 1);
      ot_ready(c);
      ot_check_fast(c, 1e-5, 1e-4);
      ot_free(c);
    }
}

Test(layernorm, in_place) {
  opd_kcall_t *c = ot_new("layernorm");
  float *x = ot_in_rand(c, 0, 2, OT_SHAPE(40, 300), 8, -1, 1);
  ot_in_rand(c, 1, 1, OT_SHAPE(300), 9, -1, 1);
  ot_ready(c);
  ot_run(c, 0, &opd__exec_serial);
  float *want = ot_out(c, 0);
  c->out[0].data = x;
  cr_assert_eq(ot_run(c, 1, ot_pool(2)), 0);
  ot_assert_close(x, want, 12000, 1e-5, 1e-4, "layernorm in place");
}

Test(layernorm, shape_errors) {
  opd_kcall_t *c = ot_new("layernorm");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(8, 10), NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(12), NULL);
  ot_expect_err(c, OPD_ESHAPE, "[8,10]", "weight", "[12]", "[10]",
                "last dim", NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(10), NULL);
  ot_in(c, 2, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(1, 10), NULL);
  ot_expect_err(c, OPD_ESHAPE, "bias", "[1,10]", NULL);
  opd_kcall_t *s = ot_new("layernorm");
  ot_in(s, 0, OPD_DTYPE_FLOAT32, 0, NULL, NULL);
  ot_expect_err(s, OPD_ESHAPE, "0-d", NULL);
}

Test(rmsnorm, by_hand) {
  /* x = [3, 4]: mean(x^2) = 12.5, y = x / sqrt(12.5 + eps) * w */
  float x[2] = {3, 4}, w[2] = {1, 2};
  float want[2] = {0.84852814f, 2.26274170f};
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = ot_new("rmsnorm");
    cr_assert_eq(c->attr[0].f, 1.1920928955078125e-07);
    ot_in_vals(c, 0, 1, OT_SHAPE(2), x);
    ot_in_vals(c, 1, 1, OT_SHAPE(2), w);
    ot_ready(c);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    ot_assert_close(ot_out(c, 0), want, 2, 1e-6, 1e-6, "rmsnorm");
    ot_free(c);
  }
}

Test(rmsnorm, fast_matches_ref) {
  int64_t shapes[][2] = {{1, 1}, {3, 7}, {33, 16}, {5, 1000}, {2, 65537},
                         {4000, 64}, {0, 5}, {5, 0}};
  for (int k = 0; k < 8; k++)
    for (int nin = 1; nin <= 2; nin++) {
      opd_kcall_t *c = ot_new("rmsnorm");
      ot_in_rand(c, 0, 2, shapes[k], 80 + k, -3, 5);
      if (nin > 1) ot_in_rand(c, 1, 1, &shapes[k][1], 90 + k, 0.5, 2);
      ot_ready(c);
      ot_check_fast(c, 1e-5, 1e-4);
      ot_free(c);
    }
  float zero[4] = {0}; /* all-zero row: 0 / sqrt(eps) = 0 */
  opd_kcall_t *c = ot_new("rmsnorm");
  ot_in_vals(c, 0, 1, OT_SHAPE(4), zero);
  ot_ready(c);
  ot_check_fast(c, 0, 0);
}

Test(rmsnorm, shape_errors) {
  opd_kcall_t *c = ot_new("rmsnorm");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 3, OT_SHAPE(2, 8, 10), NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(8), NULL);
  ot_expect_err(c, OPD_ESHAPE, "[2,8,10]", "weight", "[8]", "[10]", NULL);
}
