/* add, sub and mul of integer tensors (kernels/binary/int.c): torch's
 * results computed here by index math (wraparound on overflow, alpha),
 * broadcasting, every integer dtype, the pooled run equal to the serial
 * one; the refusals: a non-integral alpha, div of integers, mixed dtypes. */
#include <string.h>

#include "tests/ops/optest.h"

/* a (2, 3) op b (3) with alpha al, int64, against index math. */
static void check64(const char *op, double al) {
  int64_t a[6] = {1, -2, 3, INT64_MAX, -5, 6}, b[3] = {7, 8, -9};
  opd_kcall_t *c = ot_new(op);
  ot_in(c, 0, OPD_DTYPE_INT64, 2, OT_SHAPE(2, 3), a);
  ot_in(c, 1, OPD_DTYPE_INT64, 1, OT_SHAPE(3), b);
  if (strcmp(op, "mul") != 0) ot_set_float(c, "alpha", al);
  ot_ready(c);
  cr_assert(c->out[0].dtype == OPD_DTYPE_INT64);
  cr_assert_eq(ot_run(c, 0, &opd__exec_serial), 0);
  const int64_t *o = c->out[0].data;
  for (int i = 0; i < 6; i++) {
    uint64_t x = (uint64_t)a[i], y = (uint64_t)b[i % 3], k = (uint64_t)(int64_t)al;
    uint64_t want = op[0] == 'a' ? x + k * y : op[0] == 's' ? x - k * y : x * y;
    cr_assert_eq(o[i], (int64_t)want, "%s[%d]: %lld", op, i, (long long)o[i]);
  }
  ot_check_fast(c, 0, 0);
}

Test(binary_int, add_sub_mul_int64_with_alpha_and_wraparound) {
  check64("add", 1);
  check64("add", -3);
  check64("sub", 1);
  check64("sub", 2);
  check64("mul", 1);
}

Test(binary_int, every_integer_dtype_broadcasts_and_wraps) {
  static uint8_t a[64 * 300 * 4], b[300 * 4];
  for (size_t i = 0; i < sizeof a; i++) a[i] = (uint8_t)(i * 131 + 7);
  for (size_t i = 0; i < sizeof b; i++) b[i] = (uint8_t)(i * 17 + 200);
  int32_t dts[] = {OPD_DTYPE_INT8, OPD_DTYPE_UINT8, OPD_DTYPE_INT32, OPD_DTYPE_INT64};
  const char *ops[] = {"add", "sub", "mul"};
  for (int t = 0; t < 4; t++)
    for (int k = 0; k < 3; k++) {
      opd_kcall_t *c = ot_new(ops[k]);
      ot_in(c, 0, dts[t], 3, OT_SHAPE(64, 1, 300), a);
      ot_in(c, 1, dts[t], 2, OT_SHAPE(1, 300), b);
      ot_ready(c);
      ot_check_fast(c, 0, 0);
      /* element [5, 0, 7] against the dtype's own wrapping arithmetic */
      int64_t i = 5 * 300 + 7;
      if (dts[t] == OPD_DTYPE_INT8) {
        int8_t x = ((int8_t *)a)[i], y = ((int8_t *)b)[7];
        int8_t want = (int8_t)(k == 0 ? x + y : k == 1 ? x - y : x * y);
        cr_assert_eq(((int8_t *)c->out[0].data)[i], want);
      } else if (dts[t] == OPD_DTYPE_UINT8) {
        uint8_t x = a[i], y = b[7];
        uint8_t want = (uint8_t)(k == 0 ? x + y : k == 1 ? x - y : x * y);
        cr_assert_eq(((uint8_t *)c->out[0].data)[i], want);
      } else if (dts[t] == OPD_DTYPE_INT32) {
        uint32_t x = ((uint32_t *)a)[i], y = ((uint32_t *)b)[7];
        uint32_t want = k == 0 ? x + y : k == 1 ? x - y : x * y;
        cr_assert_eq(((uint32_t *)c->out[0].data)[i], want);
      }
      ot_free(c);
    }
}

Test(binary_int, refusals) {
  opd_kcall_t *c = ot_new("add");
  ot_in(c, 0, OPD_DTYPE_INT32, 1, OT_SHAPE(3), NULL);
  ot_in(c, 1, OPD_DTYPE_INT32, 1, OT_SHAPE(3), NULL);
  ot_set_float(c, "alpha", 0.5);
  ot_expect_err(c, OPD_EATTR, "alpha = 0.5 is not an integer, which int32 tensors need", NULL);
  opd_kcall_t *m = ot_new("mul");
  ot_in(m, 0, OPD_DTYPE_INT32, 1, OT_SHAPE(3), NULL);
  ot_in(m, 1, OPD_DTYPE_INT64, 1, OT_SHAPE(3), NULL);
  ot_expect_err(m, OPD_EDTYPE, NULL);
}
