/* sum, mean, amax: values by hand, every layout of the fast kernel
 * against the reference, integer sums, NaN, and bad dims. */
#include <math.h>

#include "tests/ops/optest.h"

static const char *const OPS[] = {"sum", "mean", "amax"};

Test(reduce, by_hand) {
  /* x = [[1, 2, 3], [4, 5, 6]] */
  float x[6] = {1, 2, 3, 4, 5, 6};
  struct {
    const char *op;
    int n;
    int64_t dims[2];
    int keep;
    int rank;
    float want[6];
    int nwant;
  } cases[] = {
      {"sum", 0, {0}, 0, 0, {21}, 1},
      {"sum", 1, {0}, 0, 1, {5, 7, 9}, 3},
      {"sum", 1, {-1}, 1, 2, {6, 15}, 2},
      {"mean", 1, {1}, 0, 1, {2, 5}, 2},
      {"mean", 2, {0, 1}, 0, 0, {3.5f}, 1},
      {"amax", 1, {0}, 0, 1, {4, 5, 6}, 3},
      {"amax", 1, {1}, 1, 2, {3, 6}, 2},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (int fast = 0; fast < 2; fast++) {
      opd_kcall_t *c = ot_new(cases[k].op);
      ot_in_vals(c, 0, 2, OT_SHAPE(2, 3), x);
      if (cases[k].n) ot_set_ints(c, "dims", cases[k].n, cases[k].dims);
      ot_set_int(c, "keepdim", cases[k].keep);
      ot_ready(c);
      cr_assert_eq(c->out[0].rank, cases[k].rank, "case %zu", k);
      cr_assert_eq(c->out[0].numel, cases[k].nwant, "case %zu", k);
      cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
      ot_assert_close(ot_out(c, 0), cases[k].want, cases[k].nwant, 1e-6, 1e-6,
                      cases[k].op);
      ot_free(c);
    }
}

Test(reduce, fast_matches_ref) {
  /* rows (innermost reduced), columns (innermost kept), general */
  struct {
    int rank;
    int64_t shape[4];
    int n;
    int64_t dims[3];
  } cases[] = {
      {2, {37, 1000}, 1, {1}},      {2, {1000, 37}, 1, {0}},
      {3, {4, 5, 6}, 1, {1}},       {3, {4, 5, 6}, 2, {0, 2}},
      {4, {2, 3, 4, 5}, 2, {1, 3}}, {4, {2, 1, 4, 1}, 1, {1}},
      {3, {3, 0, 5}, 1, {2}},       {3, {64, 33, 300}, 2, {-1, -3}},
      {1, {100000}, 0, {0}},        {3, {7, 300, 3}, 1, {1}},
      {2, {3, 9000}, 1, {0}},       {3, {2, 3, 5000}, 1, {1}}, /* >1 chunk */
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (int o = 0; o < 3; o++) {
      opd_kcall_t *c = ot_new(OPS[o]);
      ot_in_rand(c, 0, cases[k].rank, cases[k].shape, 10 + k, -3, 3);
      if (cases[k].n) ot_set_ints(c, "dims", cases[k].n, cases[k].dims);
      ot_ready(c);
      ot_check_fast(c, 1e-4, 1e-4);
      ot_free(c);
    }
}

Test(reduce, nan_and_empty) {
  float x[6] = {1, NAN, 3, 4, 5, 6};
  for (int fast = 0; fast < 2; fast++)
    for (int o = 0; o < 3; o++) {
      opd_kcall_t *c = ot_new(OPS[o]);
      ot_in_vals(c, 0, 2, OT_SHAPE(2, 3), x);
      ot_set_ints(c, "dims", 1, (int64_t[]){1});
      ot_ready(c);
      cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
      float *y = ot_out(c, 0);
      cr_assert(isnan(y[0]) && !isnan(y[1]), "%s fast=%d", OPS[o], fast);
      ot_free(c);
      /* columns layout: NaN in a column */
      c = ot_new(OPS[o]);
      ot_in_vals(c, 0, 2, OT_SHAPE(2, 3), x);
      ot_set_ints(c, "dims", 1, (int64_t[]){0});
      ot_ready(c);
      cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
      y = ot_out(c, 0);
      cr_assert(!isnan(y[0]) && isnan(y[1]) && !isnan(y[2]), "%s", OPS[o]);
      ot_free(c);
    }
  /* empty: sum 0, mean NaN, amax refused */
  opd_kcall_t *c = ot_new("sum");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(2, 0), NULL);
  ot_set_ints(c, "dims", 1, (int64_t[]){1});
  ot_ready(c);
  float dummy;
  c->in[0].data = &dummy;
  cr_assert_eq(ot_run(c, 1, &opd__exec_serial), 0);
  cr_assert(ot_out(c, 0)[0] == 0 && ot_out(c, 0)[1] == 0);
  ot_free(c);
  c = ot_new("mean");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(2, 0), &dummy);
  ot_set_ints(c, "dims", 1, (int64_t[]){1});
  ot_ready(c);
  cr_assert_eq(ot_run(c, 1, &opd__exec_serial), 0);
  cr_assert(isnan(ot_out(c, 0)[0]));
  ot_free(c);
  c = ot_new("amax");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(2, 0), &dummy);
  ot_set_ints(c, "dims", 1, (int64_t[]){1});
  ot_expect_err(c, OPD_ESHAPE, "extent 0", NULL);
}

Test(reduce, int_sum_is_int64) {
  int32_t x[6] = {1, -2, 3, 2000000000, 2000000000, 6};
  uint8_t bits[4] = {1, 0, 1, 1};
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = ot_new("sum");
    ot_in(c, 0, OPD_DTYPE_INT32, 2, OT_SHAPE(2, 3), x);
    ot_set_ints(c, "dims", 1, (int64_t[]){1});
    ot_ready(c);
    cr_assert_eq(c->out[0].dtype, OPD_DTYPE_INT64);
    cr_assert_eq(ot_run(c, fast, fast ? ot_pool(2) : &opd__exec_serial), 0);
    int64_t *y = c->out[0].data;
    cr_assert(y[0] == 2 && y[1] == 4000000006LL);
    ot_free(c);
    c = ot_new("sum");
    ot_in(c, 0, OPD_DTYPE_BOOL, 1, OT_SHAPE(4), bits);
    ot_ready(c);
    cr_assert_eq(c->out[0].rank, 0);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    cr_assert_eq(((int64_t *)c->out[0].data)[0], 3);
    ot_free(c);
  }
}

Test(reduce, bad_dims) {
  opd_kcall_t *c = ot_new("sum");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(2, 3), NULL);
  ot_set_ints(c, "dims", 1, (int64_t[]){2});
  ot_expect_err(c, OPD_EATTR, "dims[0]=2", "out of range", "rank 2", NULL);
  ot_set_ints(c, "dims", 2, (int64_t[]){1, -1});
  ot_expect_err(c, OPD_EATTR, "dims[1]=-1", "twice", NULL);
  ot_set_ints(c, "dims", 1, (int64_t[]){-3});
  ot_expect_err(c, OPD_EATTR, "dims[0]=-3", NULL);
  /* a 0-d x takes dim 0 and -1 */
  opd_kcall_t *s = ot_new("mean");
  ot_in(s, 0, OPD_DTYPE_FLOAT32, 0, NULL, NULL);
  ot_set_ints(s, "dims", 1, (int64_t[]){-1});
  cr_assert_eq(ot_shape(s), 0);
  cr_assert_eq(s->out[0].rank, 0);
}
