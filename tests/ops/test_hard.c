/* hardtanh, hardsigmoid, hardswish: values by hand (torch's formulas, in
 * torch's order of operations), NaN passing, attributes, fast vs ref. */
#include <math.h>

#include "tests/ops/optest.h"

static float clampf(float v, float lo, float hi) {
  v = v < lo ? lo : v;
  return v > hi ? hi : v;
}

Test(hard, by_hand) {
  float x[8] = {-10, -3, -1.5f, -0.25f, 0, 0.7f, 3, 10};
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = ot_new("hardsigmoid");
    ot_in_vals(c, 0, 1, OT_SHAPE(8), x);
    ot_ready(c);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    float *y = ot_out(c, 0);
    for (int i = 0; i < 8; i++)
      cr_assert(y[i] == clampf(x[i] + 3.0f, 0, 6) / 6.0f, "hardsigmoid(%g) = %g",
                x[i], y[i]);
    ot_free(c);

    c = ot_new("hardswish");
    ot_in_vals(c, 0, 1, OT_SHAPE(8), x);
    ot_ready(c);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    y = ot_out(c, 0);
    for (int i = 0; i < 8; i++)
      cr_assert(y[i] == x[i] * clampf(x[i] + 3.0f, 0, 6) / 6.0f,
                "hardswish(%g) = %g", x[i], y[i]);
    cr_assert(y[0] == 0 && y[7] == 10);
    ot_free(c);

    c = ot_new("hardtanh"); /* the defaults: [-1, 1] */
    ot_in_vals(c, 0, 1, OT_SHAPE(8), x);
    ot_ready(c);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    y = ot_out(c, 0);
    for (int i = 0; i < 8; i++) cr_assert(y[i] == clampf(x[i], -1, 1));
    ot_free(c);

    c = ot_new("hardtanh"); /* relu6 */
    ot_set_float(c, "min_val", 0);
    ot_set_float(c, "max_val", 6);
    ot_in_vals(c, 0, 1, OT_SHAPE(8), x);
    ot_ready(c);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    y = ot_out(c, 0);
    for (int i = 0; i < 8; i++) cr_assert(y[i] == clampf(x[i], 0, 6));
    ot_free(c);
  }
}

Test(hard, nan_and_infinite_bounds) {
  float x[4] = {NAN, -INFINITY, INFINITY, 2};
  const char *ops[3] = {"hardtanh", "hardsigmoid", "hardswish"};
  for (int k = 0; k < 3; k++) {
    opd_kcall_t *c = ot_new(ops[k]);
    if (k == 0) { /* clamp(min=0): no upper bound */
      ot_set_float(c, "min_val", 0);
      ot_set_float(c, "max_val", INFINITY);
    }
    ot_in_vals(c, 0, 1, OT_SHAPE(4), x);
    ot_ready(c);
    cr_assert_eq(ot_run(c, 1, &opd__exec_serial), 0);
    float *y = ot_out(c, 0);
    cr_assert(isnan(y[0]), "%s(NaN) must stay NaN, as torch", ops[k]);
    if (k == 0) cr_assert(y[1] == 0 && y[2] == INFINITY && y[3] == 2);
    if (k == 1) cr_assert(y[1] == 0 && y[2] == 1);
    ot_free(c);
  }
}

Test(hard, fast_matches_ref) {
  const char *ops[3] = {"hardtanh", "hardsigmoid", "hardswish"};
  int64_t shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {1, 1, 100000}, {0, 4, 4}};
  for (int o = 0; o < 3; o++)
    for (int k = 0; k < 4; k++) {
      opd_kcall_t *c = ot_new(ops[o]);
      if (o == 0) {
        ot_set_float(c, "min_val", -0.5);
        ot_set_float(c, "max_val", 2.5);
      }
      ot_in_rand(c, 0, 3, shapes[k], k, -6, 6);
      ot_ready(c);
      ot_check_fast(c, 0, 0);
      ot_free(c);
    }
}
