/* gru_cell: one step by hand, fast vs ref over batch 1, ragged sizes,
 * unbatched, I = 0, scratch on the stack and malloc'd, with 0, 1 or 2
 * biases; shape errors naming the shapes. */
#include <math.h>

#include "tests/ops/optest.h"

Test(gru_cell, by_hand) {
  /* H = I = 1: r = sig(0.1 + 0.4*0.5 + 0.1), z = sig(0.2 + 0.5*0.5 + 0.1),
   * n = tanh(0.3 + r (0.6*0.5 + 0.1)), h' = (1 - z) n + z 0.5 */
  float x[1] = {1}, h[1] = {0.5f}, wi[3] = {0.1f, 0.2f, 0.3f},
        wh[3] = {0.4f, 0.5f, 0.6f}, bi[3] = {0, 0, 0}, bh[3] = {0.1f, 0.1f, 0.1f};
  float want[1] = {0.497289130f};
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = ot_new("gru_cell");
    ot_in_vals(c, 0, 2, OT_SHAPE(1, 1), x);
    ot_in_vals(c, 1, 2, OT_SHAPE(1, 1), h);
    ot_in_vals(c, 2, 2, OT_SHAPE(3, 1), wi);
    ot_in_vals(c, 3, 2, OT_SHAPE(3, 1), wh);
    ot_in_vals(c, 4, 1, OT_SHAPE(3), bi);
    ot_in_vals(c, 5, 1, OT_SHAPE(3), bh);
    ot_ready(c);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    ot_assert_close(ot_out(c, 0), want, 1, 1e-7, 1e-6, "gru_cell");
    ot_free(c);
  }
}

Test(gru_cell, fast_matches_ref) {
  struct { int64_t B, I, H; int unbatched; } cases[] = {
      {1, 256, 128, 0},  /* batch 1, scratch on the stack */
      {1, 64, 512, 0},   /* batch 1, 3072 floats each */
      {1, 1, 1, 0},
      {3, 7, 5, 0},      /* ragged */
      {16, 40, 133, 0},  /* scratch malloc'd, several pool chunks */
      {1, 300, 700, 0},  /* batch 1 past GEMV_GRAIN: rows over the pool */
      {1, 9, 11, 1},     /* unbatched x (I), h (H) */
      {2, 0, 3, 0},      /* I = 0 */
      {0, 4, 3, 0},      /* empty batch */
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (int nb = 0; nb <= 2; nb++) {
      int64_t B = cases[k].B, I = cases[k].I, H = cases[k].H;
      int r = cases[k].unbatched ? 1 : 2;
      opd_kcall_t *c = ot_new("gru_cell");
      const int64_t xs[2] = {B, I}, hs[2] = {B, H};
      ot_in_rand(c, 0, r, xs + 2 - r, 40 + k, -2, 2);
      ot_in_rand(c, 1, r, hs + 2 - r, 50 + k, -1, 1);
      ot_in_rand(c, 2, 2, OT_SHAPE(3 * H, I), 60 + k, -0.4f, 0.4f);
      ot_in_rand(c, 3, 2, OT_SHAPE(3 * H, H), 70 + k, -0.4f, 0.4f);
      if (nb > 0) ot_in_rand(c, 4, 1, OT_SHAPE(3 * H), 80 + k, -1, 1);
      if (nb > 1) ot_in_rand(c, 5, 1, OT_SHAPE(3 * H), 90 + k, -1, 1);
      ot_ready(c);
      cr_assert_eq(c->out[0].rank, r, "case %zu", k);
      cr_assert_eq(c->out[0].shape[r - 1], H, "case %zu", k);
      ot_check_fast(c, 1e-5, 1e-4);
      ot_free(c);
    }
}

Test(gru_cell, shape_errors) {
  opd_kcall_t *c = ot_new("gru_cell");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(2, 3), NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(4, 5), NULL);
  ot_in(c, 2, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(15, 3), NULL);
  ot_in(c, 3, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(15, 5), NULL);
  ot_expect_err(c, OPD_ESHAPE, "[2,3]", "[4,5]", "batch", NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(5), NULL);
  ot_expect_err(c, OPD_ESHAPE, "[2,3]", "[5]", NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(2, 5), NULL);
  cr_assert_eq(ot_shape(c), 0, "%s", c->err);
  ot_in(c, 2, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(15, 4), NULL);
  ot_expect_err(c, OPD_ESHAPE, "w_ih", "[15,4]", "[2,3]", "[15,3]", NULL);
  ot_in(c, 2, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(15, 3), NULL);
  ot_in(c, 3, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(5, 15), NULL);
  ot_expect_err(c, OPD_ESHAPE, "w_hh", "[5,15]", "[2,5]", "[15,5]", NULL);
  ot_in(c, 3, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(15, 5), NULL);
  ot_in(c, 4, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(5), NULL);
  ot_expect_err(c, OPD_ESHAPE, "b_ih", "[5]", "[15]", NULL);
  ot_in(c, 4, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(15), NULL);
  ot_in(c, 5, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(1, 15), NULL);
  ot_expect_err(c, OPD_ESHAPE, "b_hh", "[1,15]", "[15]", NULL);
  ot_in(c, 5, OPD_DTYPE_BFLOAT16, 1, OT_SHAPE(15), NULL);
  ot_expect_err(c, OPD_EDTYPE, "bfloat16", NULL);
}
