/* layernorm and rmsnorm over several trailing dims (normalized_shape =
 * weight's shape, or `ndims` without a weight): against a row computed
 * here in double, fast against ref, and the errors. */
#include <math.h>

#include "tests/ops/optest.h"

/* y of one row of n elements (layernorm when ln, else rmsnorm). */
static void want_row(const float *x, const float *w, const float *b, int n,
                     int ln, double eps, float *y) {
  double mean = 0, var = 0;
  for (int i = 0; i < n; i++) mean += x[i];
  mean = ln ? mean / n : 0;
  for (int i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
  var /= n;
  for (int i = 0; i < n; i++)
    y[i] = (float)((x[i] - mean) / sqrt(var + eps) * (w ? w[i] : 1) + (b ? b[i] : 0));
}

Test(norm_dims, two_trailing_dims) {
  for (int ln = 0; ln < 2; ln++)
    for (int nin = 1; nin <= (ln ? 3 : 2); nin++)
      for (int fast = 0; fast < 2; fast++) {
        opd_kcall_t *c = ot_new(ln ? "layernorm" : "rmsnorm");
        float *x = ot_in_rand(c, 0, 3, OT_SHAPE(3, 4, 5), 5, -2, 3);
        float *w = nin > 1 ? ot_in_rand(c, 1, 2, OT_SHAPE(4, 5), 6, 0.5, 2) : NULL;
        float *b = nin > 2 ? ot_in_rand(c, 2, 2, OT_SHAPE(4, 5), 7, -1, 1) : NULL;
        if (nin == 1) ot_set_int(c, "ndims", 2);
        ot_ready(c);
        cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
        float want[60];
        for (int r = 0; r < 3; r++)
          want_row(x + 20 * r, w, b, 20, ln, c->attr[0].f, want + 20 * r);
        ot_assert_close(ot_out(c, 0), want, 60, 1e-5, 1e-4, ln ? "layernorm" : "rmsnorm");
        ot_free(c);
      }
  /* all dims, and ndims = 3 of a larger x: fast against ref */
  opd_kcall_t *c = ot_new("layernorm");
  ot_in_rand(c, 0, 3, OT_SHAPE(6, 50, 70), 8, -2, 3);
  ot_set_int(c, "ndims", 3);
  ot_ready(c);
  ot_check_fast(c, 1e-5, 1e-4);
}

Test(norm_dims, errors) {
  opd_kcall_t *c = ot_new("layernorm");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 3, OT_SHAPE(2, 4, 5), NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(5, 4), NULL);
  ot_expect_err(c, OPD_ESHAPE, "[2,4,5]", "weight", "[5,4]", "[4,5]", "last 2 dims", NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(4, 5), NULL);
  ot_in(c, 2, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(5), NULL);
  ot_expect_err(c, OPD_ESHAPE, "bias", "[5]", "[4,5]", NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 4, OT_SHAPE(1, 2, 4, 5), NULL);
  c->n_in = 2;
  ot_expect_err(c, OPD_EATTR, "weight's rank=4", "1 to 3", NULL);
  opd_kcall_t *r = ot_new("rmsnorm");
  ot_in(r, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(4, 5), NULL);
  ot_set_int(r, "ndims", 3);
  ot_expect_err(r, OPD_EATTR, "ndims=3", "[4,5]", NULL);
  ot_set_int(r, "ndims", 0);
  ot_expect_err(r, OPD_EATTR, "ndims=0", NULL);
  ot_in(r, 1, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(5), NULL);
  ot_set_int(r, "ndims", 2);
  ot_expect_err(r, OPD_EATTR, "ndims=2", "weight has rank 1", NULL);
}

Test(norm_dims, huge_ndims_is_refused) {
  opd_kcall_t *r = ot_new("layernorm");
  ot_in(r, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(4, 5), NULL);
  ot_set_int(r, "ndims", ((int64_t)1 << 32) + 1); /* 1 as an int */
  ot_expect_err(r, OPD_EATTR, "ndims=4294967297", "out of range", NULL);
}
