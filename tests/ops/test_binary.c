/* add, mul, sub, div: broadcasting, fast paths, in place, shape errors. */
#include <math.h>

#include "tests/ops/optest.h"

Test(binary, by_hand) {
  float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {10, 20, 30};
  float add_want[6] = {11, 22, 33, 14, 25, 36};
  float mul_want[6] = {10, 40, 90, 40, 100, 180};
  const char *ops[2] = {"add", "mul"};
  const float *want[2] = {add_want, mul_want};
  for (int o = 0; o < 2; o++)
    for (int fast = 0; fast < 2; fast++) {
      opd_kcall_t *c = ot_new(ops[o]);
      ot_in_vals(c, 0, 2, OT_SHAPE(2, 3), a);
      ot_in_vals(c, 1, 1, OT_SHAPE(3), b);
      ot_ready(c);
      cr_assert_eq(c->out[0].rank, 2);
      cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
      ot_assert_close(ot_out(c, 0), want[o], 6, 0, 0, ops[o]);
      ot_free(c);
    }
}

Test(binary, column_broadcast_by_hand) {
  /* (2,1) + (1,3) -> (2,3) */
  float a[2] = {1, 2}, b[3] = {10, 20, 30};
  float want[6] = {11, 21, 31, 12, 22, 32};
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = ot_new("add");
    ot_in_vals(c, 0, 2, OT_SHAPE(2, 1), a);
    ot_in_vals(c, 1, 2, OT_SHAPE(1, 3), b);
    ot_ready(c);
    cr_assert_eq(c->out[0].shape[0], 2);
    cr_assert_eq(c->out[0].shape[1], 3);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    ot_assert_close(ot_out(c, 0), want, 6, 0, 0, "add (2,1)+(1,3)");
    ot_free(c);
  }
}

struct bcase {
  int ra;
  int64_t a[4];
  int rb;
  int64_t b[4];
};

Test(binary, fast_matches_ref) {
  struct bcase cases[] = {
      {2, {37, 129}, 2, {37, 129}},      /* equal */
      {2, {300, 257}, 1, {257}},         /* bias over rows */
      {1, {257}, 2, {300, 257}},         /* bias on the left */
      {4, {2, 3, 17, 19}, 2, {17, 19}},  /* trailing block */
      {3, {5, 7, 9}, 0, {0}},            /* scalar */
      {0, {0}, 3, {5, 7, 9}},            /* scalar on the left */
      {2, {64, 1}, 2, {1, 333}},         /* outer product */
      {3, {4, 1, 6}, 3, {1, 5, 1}},      /* general */
      {4, {3, 1, 4, 1}, 3, {2, 1, 7}},   /* general, rank mismatch */
      {2, {300, 1}, 1, {1}},             /* row length 1 */
      {2, {0, 5}, 1, {5}},               /* empty */
      {2, {3, 0}, 2, {3, 1}},            /* empty, broadcast */
      {0, {0}, 0, {0}},                  /* 0-d */
      {1, {100000}, 1, {100000}},        /* long */
  };
  const char *ops[2] = {"add", "mul"};
  for (int o = 0; o < 2; o++)
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
      opd_kcall_t *c = ot_new(ops[o]);
      ot_in_rand(c, 0, cases[k].ra, cases[k].a, 10 + k, -2, 2);
      ot_in_rand(c, 1, cases[k].rb, cases[k].b, 20 + k, -2, 2);
      ot_ready(c);
      ot_check_fast(c, 0, 0);
      ot_free(c);
    }
}

Test(binary, in_place) {
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = ot_new("mul");
    float *a = ot_in_rand(c, 0, 2, OT_SHAPE(50, 33), 3, -1, 1);
    float *b = ot_in_rand(c, 1, 1, OT_SHAPE(33), 4, -1, 1);
    ot_ready(c);
    float want[50 * 33];
    for (int i = 0; i < 50 * 33; i++) want[i] = a[i] * b[i % 33];
    c->out[0].data = a; /* out is exactly a */
    cr_assert_eq(ot_run(c, fast, ot_pool(2)), 0);
    ot_assert_close(a, want, 50 * 33, 0, 0, "mul in place");
    ot_free(c);
  }
}

Test(binary, shape_errors) {
  opd_kcall_t *c = ot_new("add");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(8, 10), NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(12), NULL);
  ot_expect_err(c, OPD_ESHAPE, "[8,10]", "[12]", "broadcast", NULL);
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 3, OT_SHAPE(2, 3, 4), NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 3, OT_SHAPE(5, 3, 4), NULL);
  ot_expect_err(c, OPD_ESHAPE, "[2,3,4]", "[5,3,4]", NULL);
}

/* sub and div: operand order by hand through every fast layout (the full
 * operand on either side), fast vs ref exactly, shape errors. */
Test(binary, sub_div_order_by_hand) {
  float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {10, 20, 40};
  float s[1] = {2};
  for (int fast = 0; fast < 2; fast++) {
    /* (2,3) - (3), (3) - (2,3), (2,3) / scalar, scalar / (2,3) */
    struct { const char *op; int ra; const int64_t *sa; const float *va; int rb;
             const int64_t *sb; const float *vb; float want[6]; } cases[] = {
        {"sub", 2, OT_SHAPE(2, 3), a, 1, OT_SHAPE(3), b, {-9, -18, -37, -6, -15, -34}},
        {"sub", 1, OT_SHAPE(3), b, 2, OT_SHAPE(2, 3), a, {9, 18, 37, 6, 15, 34}},
        {"div", 2, OT_SHAPE(2, 3), a, 0, NULL, s, {0.5f, 1, 1.5f, 2, 2.5f, 3}},
        {"div", 0, NULL, s, 2, OT_SHAPE(2, 3), a, {2, 1, 2.0f / 3, 0.5f, 0.4f, 2.0f / 6}},
        {"div", 1, OT_SHAPE(3), b, 2, OT_SHAPE(2, 3), a, {10, 10, 40.0f / 3, 2.5f, 4, 40.0f / 6}},
        {"sub", 2, OT_SHAPE(2, 3), a, 2, OT_SHAPE(2, 3), a, {0, 0, 0, 0, 0, 0}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
      opd_kcall_t *c = ot_new(cases[k].op);
      ot_in_vals(c, 0, cases[k].ra, cases[k].sa, cases[k].va);
      ot_in_vals(c, 1, cases[k].rb, cases[k].sb, cases[k].vb);
      ot_ready(c);
      cr_assert_eq(c->out[0].numel, 6);
      cr_assert_eq(ot_run(c, fast, ot_pool(2)), 0);
      ot_assert_close(ot_out(c, 0), cases[k].want, 6, 0, 0, cases[k].op);
      ot_free(c);
    }
  }
}

Test(binary, sub_div_fast_matches_ref) {
  struct bcase cases[] = {
      {2, {37, 129}, 2, {37, 129}},      {2, {300, 257}, 1, {257}},
      {1, {257}, 2, {300, 257}},         {4, {2, 3, 17, 19}, 2, {17, 19}},
      {2, {17, 19}, 4, {2, 3, 17, 19}},  {3, {5, 7, 9}, 0, {0}},
      {0, {0}, 3, {5, 7, 9}},            {2, {64, 1}, 2, {1, 333}},
      {3, {4, 1, 6}, 3, {1, 5, 1}},      {4, {3, 1, 4, 1}, 3, {2, 1, 7}},
      {2, {1, 7}, 2, {5, 1}},            {2, {0, 5}, 1, {5}},
      {1, {100000}, 1, {100000}},
  };
  const char *ops[2] = {"sub", "div"};
  for (int o = 0; o < 2; o++)
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
      opd_kcall_t *c = ot_new(ops[o]);
      ot_in_rand(c, 0, cases[k].ra, cases[k].a, 30 + k, -2, 2);
      ot_in_rand(c, 1, cases[k].rb, cases[k].b, 40 + k, -2, 2);
      ot_ready(c);
      ot_check_fast(c, 0, 0);
      ot_free(c);
    }
  opd_kcall_t *c = ot_new("div"); /* IEEE: x/0 is +-inf, 0/0 NaN */
  float x[3] = {1, -1, 0}, z[1] = {0};
  ot_in_vals(c, 0, 1, OT_SHAPE(3), x);
  ot_in_vals(c, 1, 0, NULL, z);
  ot_ready(c);
  ot_check_fast(c, 0, 0);
  cr_assert(isinf(ot_out(c, 0)[0]) && ot_out(c, 0)[0] > 0);
  cr_assert(isinf(ot_out(c, 0)[1]) && ot_out(c, 0)[1] < 0);
  cr_assert(isnan(ot_out(c, 0)[2]));
  c = ot_new("sub");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(8, 10), NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(12), NULL);
  ot_expect_err(c, OPD_ESHAPE, "[8,10]", "[12]", "broadcast", NULL);
}
