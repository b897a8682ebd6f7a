/* matmul: torch.matmul's cases, by hand and fast vs ref, and errors. */
#include "tests/ops/optest.h"

Test(matmul, by_hand_2d) {
  /* [[1,2],[3,4]] @ [[5,6],[7,8]] = [[19,22],[43,50]] */
  float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, want[4] = {19, 22, 43, 50};
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = ot_new("matmul");
    ot_in_vals(c, 0, 2, OT_SHAPE(2, 2), a);
    ot_in_vals(c, 1, 2, OT_SHAPE(2, 2), b);
    ot_ready(c);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    ot_assert_close(ot_out(c, 0), want, 4, 0, 0, "matmul 2x2");
    ot_free(c);
  }
}

Test(matmul, by_hand_vectors) {
  float v[3] = {1, 2, 3}, w[3] = {4, 5, 6};
  float m[6] = {1, 0, 0, 1, 1, 1}; /* (3,2) */
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = ot_new("matmul"); /* dot: 4+10+18 = 32, 0-d */
    ot_in_vals(c, 0, 1, OT_SHAPE(3), v);
    ot_in_vals(c, 1, 1, OT_SHAPE(3), w);
    ot_ready(c);
    cr_assert_eq(c->out[0].rank, 0);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    cr_assert_eq(ot_out(c, 0)[0], 32.0f);
    ot_free(c);
    c = ot_new("matmul"); /* (3) @ (3,2) = [1+3, 2+3] */
    ot_in_vals(c, 0, 1, OT_SHAPE(3), v);
    ot_in_vals(c, 1, 2, OT_SHAPE(3, 2), m);
    ot_ready(c);
    cr_assert_eq(c->out[0].rank, 1);
    cr_assert_eq(c->out[0].shape[0], 2);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    cr_assert(ot_out(c, 0)[0] == 4 && ot_out(c, 0)[1] == 5);
    ot_free(c);
    c = ot_new("matmul"); /* (2,3)ᵀ-ish: m as (2,3) @ (3) */
    ot_in_vals(c, 0, 2, OT_SHAPE(2, 3), m);
    ot_in_vals(c, 1, 1, OT_SHAPE(3), v);
    ot_ready(c);
    cr_assert_eq(c->out[0].rank, 1);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    /* rows [1,0,0] and [1,1,1]: 1 and 6 */
    cr_assert(ot_out(c, 0)[0] == 1 && ot_out(c, 0)[1] == 6);
    ot_free(c);
  }
}

struct mcase {
  int ra;
  int64_t a[5];
  int rb;
  int64_t b[5];
  int ro;
  int64_t o[5];
};

Test(matmul, shapes_and_fast) {
  struct mcase cases[] = {
      {2, {17, 33}, 2, {33, 9}, 2, {17, 9}},
      {3, {4, 5, 6}, 2, {6, 7}, 3, {4, 5, 7}},            /* fold */
      {2, {5, 6}, 3, {4, 6, 7}, 3, {4, 5, 7}},
      {4, {3, 1, 5, 6}, 3, {2, 6, 7}, 4, {3, 2, 5, 7}},   /* broadcast */
      {3, {2, 5, 6}, 1, {6}, 2, {2, 5}},
      {1, {6}, 3, {2, 6, 7}, 2, {2, 7}},
      {1, {1000}, 1, {1000}, 0, {0}},
      {2, {1, 1}, 2, {1, 1}, 2, {1, 1}},
      {2, {3, 0}, 2, {0, 4}, 2, {3, 4}},                  /* K = 0: zeros */
      {2, {0, 5}, 2, {5, 4}, 2, {0, 4}},
      {3, {0, 2, 3}, 2, {3, 4}, 3, {0, 2, 4}},
      {3, {64, 8, 8}, 3, {64, 8, 8}, 3, {64, 8, 8}},      /* pooled items */
      {2, {130, 257}, 2, {257, 67}, 2, {130, 67}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    opd_kcall_t *c = ot_new("matmul");
    ot_in_rand(c, 0, cases[k].ra, cases[k].a, 100 + k, -1, 1);
    ot_in_rand(c, 1, cases[k].rb, cases[k].b, 200 + k, -1, 1);
    ot_ready(c);
    cr_assert_eq(c->out[0].rank, cases[k].ro, "case %zu: rank", k);
    for (int d = 0; d < cases[k].ro; d++)
      cr_assert_eq(c->out[0].shape[d], cases[k].o[d], "case %zu: dim %d", k,
                   d);
    ot_check_fast(c, 1e-5, 1e-4);
    if (cases[k].a[cases[k].ra - 1] == 0)
      for (int64_t i = 0; i < c->out[0].numel; i++)
        cr_assert_eq(ot_out(c, 0)[i], 0.0f, "K=0 must give zeros");
    ot_free(c);
  }
}

Test(matmul, shape_errors) {
  opd_kcall_t *c = ot_new("matmul");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(3, 4), NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(5, 6), NULL);
  ot_expect_err(c, OPD_ESHAPE, "[3,4]", "[5,6]", "inner", NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 0, NULL, NULL);
  ot_expect_err(c, OPD_ESHAPE, "at least 1 dim", NULL);
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 3, OT_SHAPE(2, 3, 4), NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 3, OT_SHAPE(3, 4, 5), NULL);
  ot_expect_err(c, OPD_ESHAPE, "batch", NULL);
}
