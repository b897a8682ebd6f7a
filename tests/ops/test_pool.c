/* max_pool2d, adaptive_avg_pool2d and batch_norm: values by hand, fast
 * against ref on many geometries, NaN, and bad input. */
#include <math.h>

#include "tests/ops/optest.h"

Test(pool, max_by_hand) {
  /* x 1x1x4x4 = 0..15, kernel 2: [[5, 7], [13, 15]]; kernel 3 stride 2
   * padding 1: windows clipped by the -inf padding */
  float x[16];
  for (int i = 0; i < 16; i++) x[i] = (float)i;
  float want2[4] = {5, 7, 13, 15}, want3[4] = {5, 7, 13, 15};
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = ot_new("max_pool2d");
    ot_in_vals(c, 0, 4, OT_SHAPE(1, 1, 4, 4), x);
    ot_set_ints(c, "kernel", 1, (int64_t[]){2});
    ot_ready(c);
    cr_assert_eq(c->out[0].shape[2], 2);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    ot_assert_close(ot_out(c, 0), want2, 4, 0, 0, "max_pool2d k2");
    ot_free(c);
    c = ot_new("max_pool2d");
    ot_in_vals(c, 0, 3, OT_SHAPE(1, 4, 4), x); /* unbatched */
    ot_set_ints(c, "kernel", 1, (int64_t[]){3});
    ot_set_ints(c, "stride", 1, (int64_t[]){2});
    ot_set_ints(c, "padding", 1, (int64_t[]){1});
    ot_ready(c);
    cr_assert_eq(c->out[0].rank, 3);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    ot_assert_close(ot_out(c, 0), want3, 4, 0, 0, "max_pool2d k3 p1");
    ot_free(c);
  }
}

Test(pool, ceil_mode_and_dilation_sizes) {
  /* torch: H=5, k=2, s=2 -> 2, ceil_mode -> 3; k=3 dil=2 -> 1 */
  opd_kcall_t *c = ot_new("max_pool2d");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 4, OT_SHAPE(2, 3, 5, 5), NULL);
  ot_set_ints(c, "kernel", 1, (int64_t[]){2});
  cr_assert_eq(ot_shape(c), 0);
  cr_assert_eq(c->out[0].shape[2], 2);
  ot_set_int(c, "ceil_mode", 1);
  cr_assert_eq(ot_shape(c), 0);
  cr_assert_eq(c->out[0].shape[2], 3);
  ot_set_int(c, "ceil_mode", 0);
  ot_set_ints(c, "kernel", 1, (int64_t[]){3});
  ot_set_ints(c, "dilation", 1, (int64_t[]){2});
  cr_assert_eq(ot_shape(c), 0);
  cr_assert_eq(c->out[0].shape[2], 1); /* stride = kernel 3: (5-4-1)/3+1 */
}

Test(pool, fast_matches_ref) {
  struct {
    int64_t shape[4], k[2], s[2], p[2], d[2];
    int ceil;
  } cases[] = {
      {{2, 3, 9, 11}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, 0},
      {{1, 2, 10, 7}, {2, 3}, {1, 2}, {0, 1}, {2, 1}, 1},
      {{3, 1, 6, 6}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, 1},
      {{2, 4, 15, 15}, {5, 5}, {3, 3}, {2, 2}, {1, 1}, 1},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    opd_kcall_t *c = ot_new("max_pool2d");
    ot_in_rand(c, 0, 4, cases[k].shape, 20 + k, -3, 3);
    ot_set_ints(c, "kernel", 2, cases[k].k);
    ot_set_ints(c, "stride", 2, cases[k].s);
    ot_set_ints(c, "padding", 2, cases[k].p);
    ot_set_ints(c, "dilation", 2, cases[k].d);
    ot_set_int(c, "ceil_mode", cases[k].ceil);
    ot_ready(c);
    ot_check_fast(c, 0, 0);
    ot_free(c);
  }
  int64_t sizes[][2] = {{1, 1}, {3, 3}, {4, 5}, {7, 7}, {20, 13}};
  for (int k = 0; k < 5; k++) {
    opd_kcall_t *c = ot_new("adaptive_avg_pool2d");
    ot_in_rand(c, 0, 4, OT_SHAPE(2, 3, 14, 13), 30 + k, -3, 3);
    ot_set_ints(c, "size", 2, sizes[k]);
    ot_ready(c);
    ot_check_fast(c, 1e-6, 1e-5);
    ot_free(c);
  }
}

Test(pool, adaptive_by_hand) {
  /* x 1x5 row 0..4 as (1, 1, 5) to size (1, 3): windows [0,2) [1,4) [3,5) */
  float x[5] = {0, 1, 2, 3, 4}, want[3] = {0.5f, 2, 3.5f};
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = ot_new("adaptive_avg_pool2d");
    ot_in_vals(c, 0, 3, OT_SHAPE(1, 1, 5), x);
    ot_set_ints(c, "size", 2, (int64_t[]){1, 3});
    ot_ready(c);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    ot_assert_close(ot_out(c, 0), want, 3, 1e-7, 0, "adaptive_avg_pool2d");
    ot_free(c);
  }
}

Test(pool, nan_wins_the_max) {
  float x[4] = {1, NAN, 3, 4};
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = ot_new("max_pool2d");
    ot_in_vals(c, 0, 3, OT_SHAPE(1, 2, 2), x);
    ot_set_ints(c, "kernel", 1, (int64_t[]){2});
    ot_ready(c);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    cr_assert(isnan(ot_out(c, 0)[0]));
    ot_free(c);
  }
}

Test(pool, errors) {
  opd_kcall_t *c = ot_new("max_pool2d");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(4, 4), NULL);
  ot_set_ints(c, "kernel", 1, (int64_t[]){2});
  ot_expect_err(c, OPD_ESHAPE, "[4,4]", "(N, C, H, W)", NULL);
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 4, OT_SHAPE(1, 1, 4, 4), NULL);
  ot_set_ints(c, "padding", 1, (int64_t[]){2});
  ot_expect_err(c, OPD_EATTR, "padding=[2, 2]", "half the kernel", NULL);
  ot_set_ints(c, "padding", 1, (int64_t[]){0});
  ot_set_ints(c, "kernel", 1, (int64_t[]){5});
  ot_expect_err(c, OPD_ESHAPE, "too small", NULL);
  ot_set_ints(c, "kernel", 3, (int64_t[]){1, 2, 3});
  ot_expect_err(c, OPD_EATTR, "kernel holds 3 ints", NULL);
  ot_set_ints(c, "kernel", 1, (int64_t[]){0});
  ot_expect_err(c, OPD_EATTR, "kernel=[0, 0]", NULL);
  ot_set_ints(c, "kernel", 1, (int64_t[]){2});
  ot_set_ints(c, "stride", 2, (int64_t[]){0, 1});
  ot_expect_err(c, OPD_EATTR, "stride=[0, 1]", NULL);
  opd_kcall_t *a = ot_new("adaptive_avg_pool2d");
  ot_in(a, 0, OPD_DTYPE_FLOAT32, 4, OT_SHAPE(1, 1, 0, 4), NULL);
  ot_set_ints(a, "size", 1, (int64_t[]){2});
  ot_expect_err(a, OPD_ESHAPE, "non-zero", NULL);
  ot_in(a, 0, OPD_DTYPE_FLOAT32, 4, OT_SHAPE(1, 1, 3, 4), NULL);
  ot_set_ints(a, "size", 2, (int64_t[]){2, -1});
  ot_expect_err(a, OPD_EATTR, "size=[2, -1]", NULL);
}

Test(batch_norm, by_hand_and_fast) {
  /* x (2, 2, 3), channel c: (x - m) / sqrt(v + eps) * w + b */
  float x[12], m[2] = {1, -2}, v[2] = {4, 0.25f}, w[2] = {2, -1}, b[2] = {0.5f, 3};
  for (int i = 0; i < 12; i++) x[i] = (float)i - 4;
  for (int nin = 3; nin <= 5; nin += 2)
    for (int fast = 0; fast < 2; fast++) {
      opd_kcall_t *c = ot_new("batch_norm");
      ot_in_vals(c, 0, 3, OT_SHAPE(2, 2, 3), x);
      ot_in_vals(c, 1, 1, OT_SHAPE(2), m);
      ot_in_vals(c, 2, 1, OT_SHAPE(2), v);
      if (nin == 5) {
        ot_in_vals(c, 3, 1, OT_SHAPE(2), w);
        ot_in_vals(c, 4, 1, OT_SHAPE(2), b);
      }
      ot_set_float(c, "eps", 0);
      ot_ready(c);
      cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
      float want[12];
      for (int i = 0; i < 12; i++) {
        int ch = (i / 3) % 2;
        want[i] = (x[i] - m[ch]) / sqrtf(v[ch]);
        if (nin == 5) want[i] = want[i] * w[ch] + b[ch];
      }
      ot_assert_close(ot_out(c, 0), want, 12, 1e-6, 1e-6, "batch_norm");
      ot_free(c);
    }
  int64_t shapes[][4] = {{8, 5, 1, 1}, {3, 7, 9, 11}, {0, 4, 2, 2}};
  int ranks[3] = {2, 4, 4};
  for (int k = 0; k < 3; k++) {
    opd_kcall_t *c = ot_new("batch_norm");
    ot_in_rand(c, 0, ranks[k], shapes[k], 40 + k, -3, 3);
    ot_in_rand(c, 1, 1, &shapes[k][1], 50 + k, -1, 1);
    ot_in_rand(c, 2, 1, &shapes[k][1], 60 + k, 0.1, 2);
    ot_in_rand(c, 3, 1, &shapes[k][1], 70 + k, 0.5, 2);
    ot_in_rand(c, 4, 1, &shapes[k][1], 80 + k, -1, 1);
    ot_ready(c);
    ot_check_fast(c, 1e-5, 1e-5);
    ot_free(c);
  }
}

Test(batch_norm, errors) {
  opd_kcall_t *c = ot_new("batch_norm");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(4), NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(4), NULL);
  ot_in(c, 2, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(4), NULL);
  ot_expect_err(c, OPD_ESHAPE, "[4]", "(N, C, ...)", NULL);
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 3, OT_SHAPE(2, 4, 5), NULL);
  ot_in(c, 2, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(5), NULL);
  ot_expect_err(c, OPD_ESHAPE, "var", "[5]", "[4]", "dim 1", NULL);
}
