/* add and sub with alpha (torch's alpha=): out = a + alpha b, a - alpha
 * b, in every layout of the fast kernel (equal, scalar, row-bias with the
 * full operand on either side, general), against values computed here. */
#include "kernels/common/kutil.h"
#include "tests/ops/optest.h"

Test(binary_alpha, every_layout) {
  struct {
    int ra, rb;
    int64_t sa[3], sb[3];
  } cases[] = {
      {2, 2, {5, 7}, {5, 7}},      /* equal */
      {2, 0, {5, 7}, {0}},         /* scalar b */
      {0, 2, {0}, {5, 7}},         /* scalar a */
      {2, 1, {5, 7}, {7}},         /* row-bias, full a */
      {1, 2, {7}, {5, 7}},         /* row-bias, full b */
      {3, 3, {4, 1, 6}, {1, 5, 1}} /* general */
  };
  const char *ops[2] = {"add", "sub"};
  const double alphas[3] = {1.0, 2.5, -0.5};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (int o = 0; o < 2; o++)
      for (int al = 0; al < 3; al++) {
        opd_kcall_t *c = ot_new(ops[o]);
        float *a = ot_in_rand(c, 0, cases[k].ra, cases[k].sa, 3 + k, -2, 2);
        float *b = ot_in_rand(c, 1, cases[k].rb, cases[k].sb, 30 + k, -2, 2);
        ot_set_float(c, "alpha", alphas[al]);
        ot_ready(c);
        ot_check_fast(c, 0, 1e-6); /* the outputs hold the reference */
        /* the reference against a + alpha b through broadcast strides */
        const opd_tview_t *ov = &c->out[0];
        int64_t sa[OPD_MAX_RANK], sb[OPD_MAX_RANK], idx[OPD_MAX_RANK] = {0};
        opd__bcast_strides(c->in[0].shape, c->in[0].rank, ov->rank, sa);
        opd__bcast_strides(c->in[1].shape, c->in[1].rank, ov->rank, sb);
        float *y = ot_out(c, 0);
        for (int64_t e = 0; e < ov->numel; e++) {
          int64_t ia = 0, ib = 0;
          for (int d = 0; d < ov->rank; d++) ia += idx[d] * sa[d], ib += idx[d] * sb[d];
          float bb = (float)alphas[al] * b[ib];
          float want = o ? a[ia] - bb : a[ia] + bb;
          cr_assert_float_eq(y[e], want, 1e-6, "%s alpha=%g case %zu [%lld]", ops[o],
                             alphas[al], k, (long long)e);
          for (int d = ov->rank - 1; d >= 0; d--) {
            if (++idx[d] < ov->shape[d]) break;
            idx[d] = 0;
          }
        }
        ot_free(c);
      }
}

Test(binary_alpha, only_add_and_sub_take_it) {
  cr_assert_eq(opd__op_find("add")->n_attrs, 1);
  cr_assert_str_eq(opd__op_find("sub")->attrs[0].name, "alpha");
  cr_assert_eq(opd__op_find("mul")->n_attrs, 0);
  cr_assert_eq(opd__op_find("div")->n_attrs, 0);
}
