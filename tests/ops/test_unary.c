/* relu, gelu, silu, sigmoid, tanh: values by hand, fast vs ref, in place, 0-d. */
#include <math.h>
#include <string.h>

#include "tests/ops/optest.h"

Test(relu, by_hand) {
  float x[5] = {-2, -0.0f, 0, 1.5f, NAN};
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = ot_new("relu");
    ot_in_vals(c, 0, 1, OT_SHAPE(5), x);
    ot_ready(c);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    float *y = ot_out(c, 0);
    cr_assert(y[0] == 0 && y[1] == 0 && y[2] == 0 && y[3] == 1.5f);
    cr_assert(isnan(y[4]), "relu(NaN) must stay NaN, as torch");
    ot_free(c);
  }
}

Test(relu, fast_matches_ref) {
  int64_t shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {1, 1, 100000}, {0, 4, 4}};
  for (int k = 0; k < 4; k++) {
    opd_kcall_t *c = ot_new("relu");
    ot_in_rand(c, 0, 3, shapes[k], k, -1, 1);
    ot_ready(c);
    ot_check_fast(c, 0, 0);
    ot_free(c);
  }
  opd_kcall_t *c = ot_new("relu"); /* 0-d */
  ot_in_rand(c, 0, 0, NULL, 9, -1, 1);
  ot_ready(c);
  ot_check_fast(c, 0, 0);
}

Test(gelu, by_hand) {
  /* gelu(0) = 0; gelu(1) = 0.5 (1 + erf(1/sqrt2)) = 0.841344746;
   * gelu(-1) = -0.158655254; tanh form at 1: 0.5 (1 + tanh(0.7978845608
   * * 1.044715)) = 0.841191990 */
  float x[3] = {0, 1, -1};
  float want_none[3] = {0, 0.841344746f, -0.158655254f};
  float want_tanh[3] = {0, 0.841191990f, -0.158808010f};
  for (int form = 0; form < 2; form++)
    for (int fast = 0; fast < 2; fast++) {
      opd_kcall_t *c = ot_new("gelu");
      if (form) ot_set_str(c, "approximate", "tanh");
      ot_in_vals(c, 0, 1, OT_SHAPE(3), x);
      ot_ready(c);
      cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
      ot_assert_close(ot_out(c, 0), form ? want_tanh : want_none, 3, 1e-7,
                      1e-6, form ? "gelu tanh" : "gelu none");
      ot_free(c);
    }
}

Test(gelu, fast_matches_ref) {
  const char *forms[2] = {"none", "tanh"};
  for (int f = 0; f < 2; f++) {
    int64_t shapes[][2] = {{1, 1}, {7, 13}, {1, 100000}, {0, 3}};
    for (int k = 0; k < 4; k++) {
      opd_kcall_t *c = ot_new("gelu");
      ot_set_str(c, "approximate", forms[f]);
      ot_in_rand(c, 0, 2, shapes[k], 30 + k, -12, 12);
      ot_ready(c);
      ot_check_fast(c, 1e-6, 1e-5);
      ot_free(c);
    }
    /* dense sweep of the interesting range, including tails */
    opd_kcall_t *c = ot_new("gelu");
    ot_set_str(c, "approximate", forms[f]);
    float x[4001];
    for (int i = 0; i <= 4000; i++) x[i] = -20.0f + i * 0.01f;
    ot_in_vals(c, 0, 1, OT_SHAPE(4001), x);
    ot_ready(c);
    ot_check_fast(c, 1e-6, 1e-5);
    ot_free(c);
  }
}

Test(gelu, in_place_and_scalar) {
  opd_kcall_t *c = ot_new("gelu");
  float *x = ot_in_rand(c, 0, 1, OT_SHAPE(1000), 5, -3, 3);
  ot_ready(c);
  ot_run(c, 0, &opd__exec_serial);
  float want[1000];
  for (int i = 0; i < 1000; i++) want[i] = ot_out(c, 0)[i];
  c->out[0].data = x;
  cr_assert_eq(ot_run(c, 1, ot_pool(2)), 0);
  ot_assert_close(x, want, 1000, 1e-6, 1e-5, "gelu in place");
  ot_free(c);
  c = ot_new("gelu");
  float one = 1;
  ot_in_vals(c, 0, 0, NULL, &one);
  ot_ready(c);
  cr_assert_eq(c->out[0].rank, 0);
  ot_check_fast(c, 1e-6, 1e-5);
}

/* silu, sigmoid, tanh: values by hand, fast vs ref (both tanh ranges, the
 * tails, inf, NaN), in place. */
Test(silu_sigmoid_tanh, by_hand) {
  float x[4] = {0, 1, -1, 0.5f};
  struct { const char *op; float want[4]; } cases[] = {
      {"silu", {0, 0.731058579f, -0.268941421f, 0.311229666f}},
      {"sigmoid", {0.5f, 0.731058579f, 0.268941421f, 0.622459331f}},
      {"tanh", {0, 0.761594156f, -0.761594156f, 0.462117157f}},
  };
  for (int k = 0; k < 3; k++)
    for (int fast = 0; fast < 2; fast++) {
      opd_kcall_t *c = ot_new(cases[k].op);
      ot_in_vals(c, 0, 1, OT_SHAPE(4), x);
      ot_ready(c);
      cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
      ot_assert_close(ot_out(c, 0), cases[k].want, 4, 1e-7, 1e-6, cases[k].op);
      ot_free(c);
    }
}

Test(silu_sigmoid_tanh, fast_matches_ref) {
  const char *ops[3] = {"silu", "sigmoid", "tanh"};
  static const float sp[16] = {0.0f, -0.0f, 1e-40f, 0.6249f, 0.6251f, -0.63f, 9.0f,  -9.0f,
                               50.0f, -50.0f, 100.0f, -100.0f, 3e38f, INFINITY, -INFINITY,
                               NAN};
  for (int o = 0; o < 3; o++) {
    int64_t shapes[][2] = {{1, 1}, {7, 13}, {1, 100003}, {0, 3}};
    for (int k = 0; k < 4; k++) {
      opd_kcall_t *c = ot_new(ops[o]);
      ot_in_rand(c, 0, 2, shapes[k], 100 + k, -12, 12);
      ot_ready(c);
      ot_check_fast(c, 1e-6, 1e-5);
      ot_free(c);
    }
    opd_kcall_t *c = ot_new(ops[o]); /* special values, both lane paths */
    float v[17];
    for (int i = 0; i < 16; i++) v[i] = sp[i];
    v[16] = -3e38f;
    ot_in_vals(c, 0, 1, OT_SHAPE(17), v);
    ot_ready(c);
    ot_check_fast(c, 1e-6, 1e-5);
    float *y = ot_out(c, 0);
    cr_assert(isnan(y[15]), "%s(NaN) must be NaN", ops[o]);
    if (o == 0) cr_assert(isnan(y[14]), "silu(-inf) is NaN, as torch");
    if (o == 1) cr_assert(y[13] == 1.0f && y[14] == 0.0f, "sigmoid(+-inf)");
    if (o == 2) cr_assert(y[13] == 1.0f && y[14] == -1.0f, "tanh(+-inf)");
    ot_free(c);
    c = ot_new(ops[o]); /* in place */
    float *x = ot_in_rand(c, 0, 1, OT_SHAPE(1001), 7, -5, 5);
    ot_ready(c);
    cr_assert_eq(ot_run(c, 0, &opd__exec_serial), 0);
    float want[1001];
    memcpy(want, ot_out(c, 0), sizeof want);
    c->out[0].data = x;
    cr_assert_eq(ot_run(c, 1, ot_pool(2)), 0);
    ot_assert_close(x, want, 1001, 1e-6, 1e-5, "in place");
    ot_free(c);
  }
}
