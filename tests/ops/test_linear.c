/* linear: values by hand, every activation with and without bias against
 * the reference (batch 1, ragged sizes, 1-D and 3-D x, K = 0, empty),
 * and shape errors naming both shapes. */
#include <math.h>

#include "tests/ops/optest.h"

static const char *const ACTS[] = {"none", "relu", "gelu", "gelu_tanh", "silu"};

Test(linear, by_hand) {
  /* x (2,3) @ W^T, W (2,3), + b: row 0 = [1-3+0.5, 3-4], row 1 = [4-6+0.5,
   * 7.5-4] */
  float x[6] = {1, 2, 3, 4, 5, 6}, w[6] = {1, 0, -1, 0.5f, 0.5f, 0.5f};
  float b[2] = {0.5f, -4};
  float want[2][4] = {{-1.5f, -1, -1.5f, 3.5f}, {0, 0, 0, 3.5f}};
  for (int act = 0; act < 2; act++)
    for (int fast = 0; fast < 2; fast++) {
      opd_kcall_t *c = ot_new("linear");
      ot_set_str(c, "act", ACTS[act]);
      ot_in_vals(c, 0, 2, OT_SHAPE(2, 3), x);
      ot_in_vals(c, 1, 2, OT_SHAPE(2, 3), w);
      ot_in_vals(c, 2, 1, OT_SHAPE(2), b);
      ot_ready(c);
      cr_assert_eq(c->out[0].rank, 2);
      cr_assert_eq(c->out[0].shape[1], 2);
      cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
      ot_assert_close(ot_out(c, 0), want[act], 4, 1e-6, 0, ACTS[act]);
      ot_free(c);
    }
}

Test(linear, activations_by_hand) {
  /* one output v = 1 * x: act(v) for v = -1, 0.5 */
  float w[1] = {1};
  float xs[2] = {-1, 0.5f};
  /* gelu(-1) = -0.158655254, gelu(0.5) = 0.345731140; tanh form
   * -0.158808010, 0.345714254; silu -0.268941421, 0.311229666 */
  float want[5][2] = {{-1, 0.5f},
                      {0, 0.5f},
                      {-0.158655254f, 0.345731140f},
                      {-0.158808010f, 0.345714254f},
                      {-0.268941421f, 0.311229666f}};
  for (int act = 0; act < 5; act++)
    for (int fast = 0; fast < 2; fast++) {
      opd_kcall_t *c = ot_new("linear");
      ot_set_str(c, "act", ACTS[act]);
      ot_in_vals(c, 0, 2, OT_SHAPE(2, 1), xs);
      ot_in_vals(c, 1, 2, OT_SHAPE(1, 1), w);
      ot_ready(c);
      cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
      ot_assert_close(ot_out(c, 0), want[act], 2, 1e-7, 1e-6, ACTS[act]);
      ot_free(c);
    }
}

struct lcase {
  int rx;
  int64_t x[3];
  int64_t N;
};

Test(linear, fast_matches_ref) {
  struct lcase cases[] = {
      {2, {1, 256}, 512},    /* batch 1: the trading MLP's first layer */
      {2, {1, 512}, 1},      /* its head */
      {2, {1, 1}, 1},
      {2, {7, 33}, 19},      /* ragged */
      {3, {2, 3, 17}, 5},    /* leading dims fold into M */
      {1, {17}, 4},          /* 1-D x */
      {2, {130, 257}, 67},
      {2, {64, 128}, 300},   /* several pool chunks in the epilogue */
      {2, {1, 1031}, 700},   /* batch 1 past GEMV_GRAIN: rows over the pool */
      {2, {0, 5}, 3},        /* empty */
      {2, {3, 5}, 0},        /* N = 0 */
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (int act = 0; act < 5; act++)
      for (int bias = 0; bias < 2; bias++) {
        opd_kcall_t *c = ot_new("linear");
        ot_set_str(c, "act", ACTS[act]);
        int64_t K = cases[k].x[cases[k].rx - 1], N = cases[k].N;
        ot_in_rand(c, 0, cases[k].rx, cases[k].x, 10 + k, -2, 2);
        ot_in_rand(c, 1, 2, OT_SHAPE(N, K), 20 + k, -0.3f, 0.3f);
        if (bias) ot_in_rand(c, 2, 1, OT_SHAPE(N), 30 + k, -1, 1);
        ot_ready(c);
        cr_assert_eq(c->out[0].rank, cases[k].rx, "case %zu: rank", k);
        cr_assert_eq(c->out[0].shape[cases[k].rx - 1], N, "case %zu: N", k);
        ot_check_fast(c, 1e-5, 1e-4);
        ot_free(c);
      }
}

Test(linear, k_zero_gives_act_of_bias) {
  float b[3] = {-1, 0.5f, 2};
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = ot_new("linear");
    ot_set_str(c, "act", "relu");
    ot_in_rand(c, 0, 2, OT_SHAPE(4, 0), 1, -1, 1);
    ot_in_rand(c, 1, 2, OT_SHAPE(3, 0), 2, -1, 1);
    ot_in_vals(c, 2, 1, OT_SHAPE(3), b);
    ot_ready(c);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    for (int i = 0; i < 4; i++) {
      float want[3] = {0, 0.5f, 2};
      ot_assert_close(ot_out(c, 0) + 3 * i, want, 3, 0, 0, "K = 0");
    }
    ot_free(c);
  }
}

Test(linear, shape_errors) {
  opd_kcall_t *c = ot_new("linear");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(3, 4), NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(5, 6), NULL);
  ot_expect_err(c, OPD_ESHAPE, "[3,4]", "[5,6]", "last dim 4", NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(4, 5), NULL); /* (K, N): wrong */
  ot_expect_err(c, OPD_ESHAPE, "[3,4]", "[4,5]", "(N, K)", NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(4), NULL);
  ot_expect_err(c, OPD_ESHAPE, "[3,4]", "[4]", "exactly 2", NULL);
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 0, NULL, NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(5, 4), NULL);
  ot_expect_err(c, OPD_ESHAPE, "[]", "[5,4]", "at least 1 dim", NULL);
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(3, 4), NULL);
  ot_in(c, 2, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(7), NULL);
  ot_expect_err(c, OPD_ESHAPE, "[5,4]", "[7]", "bias", NULL);
  ot_in(c, 2, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(1, 5), NULL);
  ot_expect_err(c, OPD_ESHAPE, "[5,4]", "[1,5]", NULL);
  ot_in(c, 2, OPD_DTYPE_FLOAT16, 1, OT_SHAPE(5), NULL);
  ot_expect_err(c, OPD_EDTYPE, "float16", "float32", NULL);
  ot_in(c, 2, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(5), NULL);
  cr_assert_eq(ot_shape(c), 0, "%s", c->err);
}
