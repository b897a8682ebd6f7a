/* conv2d: a 3x3 case by hand, geometry sweep fast vs ref, errors. */
#include "tests/ops/optest.h"

Test(conv2d, by_hand_3x3) {
  /* x = 1..9 as 3x3, weight 2x2 [[1,0],[0,1]] (diagonal sum), bias 10:
   * y = [[1+5, 2+6], [4+8, 5+9]] + 10 = [[16,18],[22,24]];
   * with padding 1 and stride 2: P = (3+2-1-1)/2+1 = 2, taps at
   * (-1,-1),(1,1) -> [[0+1, 0+3]... computed below by hand */
  float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w[4] = {1, 0, 0, 1}, b = 10;
  float want[4] = {16, 18, 22, 24};
  /* padding 1, stride 2: output (p,q) sums x[2p-1, 2q-1] + x[2p, 2q]:
   * (0,0): 0 + x[0,0]=1; (0,1): 0 + x[0,2]=3; (1,0): 0 + x[2,0]=7;
   * (1,1): x[1,1]=5 + x[2,2]=9 = 14; plus bias 10 */
  float want_ps[4] = {11, 13, 17, 24};
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = ot_new("conv2d");
    ot_in_vals(c, 0, 4, OT_SHAPE(1, 1, 3, 3), x);
    ot_in_vals(c, 1, 4, OT_SHAPE(1, 1, 2, 2), w);
    ot_in_vals(c, 2, 1, OT_SHAPE(1), &b);
    ot_ready(c);
    cr_assert_eq(c->out[0].shape[2], 2);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    ot_assert_close(ot_out(c, 0), want, 4, 0, 0, "conv 3x3 by hand");
    ot_free(c);
    c = ot_new("conv2d");
    ot_in_vals(c, 0, 4, OT_SHAPE(1, 1, 3, 3), x);
    ot_in_vals(c, 1, 4, OT_SHAPE(1, 1, 2, 2), w);
    ot_in_vals(c, 2, 1, OT_SHAPE(1), &b);
    ot_set_ints(c, "padding", 1, OT_SHAPE(1));
    ot_set_ints(c, "stride", 1, OT_SHAPE(2));
    ot_ready(c);
    cr_assert_eq(c->out[0].shape[2], 2);
    cr_assert_eq(c->out[0].shape[3], 2);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    ot_assert_close(ot_out(c, 0), want_ps, 4, 0, 0, "conv pad 1 stride 2");
    ot_free(c);
  }
}

Test(conv2d, fast_matches_ref) {
  struct {
    int64_t x[4], w[4];
    int n;                         /* attrs given as n ints */
    int64_t st[2], pad[2], dil[2];
    int bias;
  } cases[] = {
      {{2, 3, 9, 11}, {4, 3, 3, 3}, 1, {1}, {1}, {1}, 1},
      {{1, 2, 8, 8}, {3, 2, 1, 1}, 1, {1}, {0}, {1}, 0},   /* 1x1 direct */
      {{3, 5, 13, 10}, {2, 5, 3, 2}, 2, {2, 1}, {1, 2}, {1, 2}, 1},
      {{1, 1, 7, 7}, {1, 1, 3, 3}, 1, {3}, {0}, {2}, 0},   /* dilation */
      {{2, 4, 5, 5}, {6, 4, 5, 5}, 1, {1}, {0}, {1}, 1},   /* P = Q = 1 */
      {{1, 3, 6, 17}, {5, 3, 2, 4}, 2, {1, 3}, {3, 0}, {1, 1}, 1},
      {{0, 3, 5, 5}, {2, 3, 3, 3}, 1, {1}, {0}, {1}, 1},   /* N = 0 */
      {{2, 3, 5, 5}, {0, 3, 3, 3}, 1, {1}, {0}, {1}, 0},   /* K = 0 */
      {{1, 16, 32, 32}, {8, 16, 3, 3}, 1, {1}, {1}, {1}, 1},
      /* tiles of 15 output rows (col of 576 rows in 1 MiB) and a last
       * one of 1 */
      {{1, 64, 31, 29}, {8, 64, 3, 3}, 1, {1}, {1}, {1}, 1},
      {{2, 32, 40, 40}, {6, 32, 3, 3}, 1, {2}, {1}, {1}, 0},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    opd_kcall_t *c = ot_new("conv2d");
    ot_in_rand(c, 0, 4, cases[k].x, 300 + k, -1, 1);
    ot_in_rand(c, 1, 4, cases[k].w, 400 + k, -1, 1);
    if (cases[k].bias) ot_in_rand(c, 2, 1, &cases[k].w[0], 500 + k, -1, 1);
    ot_set_ints(c, "stride", cases[k].n, cases[k].st);
    ot_set_ints(c, "padding", cases[k].n, cases[k].pad);
    ot_set_ints(c, "dilation", cases[k].n, cases[k].dil);
    ot_ready(c);
    ot_check_fast(c, 1e-5, 1e-4);
    ot_free(c);
  }
}

Test(conv2d, shape_errors) {
  opd_kcall_t *c = ot_new("conv2d");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 4, OT_SHAPE(1, 3, 8, 8), NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 4, OT_SHAPE(4, 2, 3, 3), NULL);
  ot_expect_err(c, OPD_ESHAPE, "channels", "[1,3,8,8]", "[4,2,3,3]",
                "groups", NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 4, OT_SHAPE(4, 3, 9, 3), NULL);
  ot_expect_err(c, OPD_ESHAPE, "height", "not positive", NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 4, OT_SHAPE(4, 3, 3, 3), NULL);
  ot_in(c, 2, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(5), NULL);
  ot_expect_err(c, OPD_ESHAPE, "bias", "[5]", "[4]", NULL);
  ot_in(c, 2, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(4), NULL);
  cr_assert_eq(ot_shape(c), 0);
  ot_set_ints(c, "stride", 1, OT_SHAPE(0));
  ot_expect_err(c, OPD_EATTR, "stride", "not positive", NULL);
  ot_set_ints(c, "stride", 1, OT_SHAPE(1));
  ot_set_ints(c, "padding", 2, OT_SHAPE(1, -1));
  ot_expect_err(c, OPD_EATTR, "padding", "negative", NULL);
  ot_set_ints(c, "padding", 3, OT_SHAPE(1, 1, 1));
  ot_expect_err(c, OPD_EATTR, "padding", "3 values", NULL);
  ot_set_ints(c, "padding", 1, OT_SHAPE(0));
  ot_set_ints(c, "dilation", 1, OT_SHAPE(-2));
  ot_expect_err(c, OPD_EATTR, "dilation", NULL);
  ot_set_ints(c, "dilation", 1, OT_SHAPE(1));
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(8, 8), NULL); /* 3 dims: unbatched */
  ot_expect_err(c, OPD_ESHAPE, "4 dims", NULL);
}

Test(conv2d, winograd_matches_ref) {
  /* 3x3, stride 1, one group, C and K >= 16: cpu_fast is Winograd
   * F(2x2, 3x3) (kernels/conv2d/wino_cpu.c); odd P and Q (clipped tiles),
   * padding 0, 1, 2 and asymmetric, several blocks of tile rows per image
   * (64 channels of 56x56: rows of 3 tiles at 1.5 MiB per block), batches */
  struct {
    int64_t x[4], k;
    int n;                         /* padding given as n ints */
    int64_t pad[4];
    int bias;
  } cases[] = {
      {{1, 16, 8, 8}, 16, 1, {1}, 1},
      {{2, 16, 9, 7}, 24, 1, {0}, 0},           /* P = 7, Q = 5 */
      {{1, 20, 11, 13}, 17, 1, {2}, 1},
      {{1, 16, 6, 10}, 16, 4, {0, 1, 2, 0}, 1}, /* asymmetric */
      {{1, 64, 56, 56}, 64, 1, {1}, 1},
      {{3, 32, 15, 15}, 40, 2, {1, 0}, 0},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int64_t w[4] = {cases[k].k, cases[k].x[1], 3, 3};
    opd_kcall_t *c = ot_new("conv2d");
    ot_in_rand(c, 0, 4, cases[k].x, 900 + k, -1, 1);
    ot_in_rand(c, 1, 4, w, 950 + k, -1, 1);
    if (cases[k].bias) ot_in_rand(c, 2, 1, &w[0], 990 + k, -1, 1);
    ot_set_ints(c, "padding", cases[k].n, cases[k].pad);
    ot_ready(c);
    ot_check_fast(c, 1e-5, 1e-4);
    ot_free(c);
  }
}
