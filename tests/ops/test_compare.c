/* The compare family (eq, ne, lt, le, gt, ge): bool results against C's
 * own comparisons, broadcast, every dtype (float16 / bfloat16 compared as
 * float32, NaN unequal to everything), the pooled run equal to the serial
 * one; the refusals name mixed dtypes and shapes that do not broadcast. */
#include <math.h>
#include <string.h>

#include "kernels/common/cast.h"
#include "tests/ops/optest.h"

static const char *const OPS[] = {"eq", "ne", "lt", "le", "gt", "ge"};

static int want(int k, double x, double y) {
  switch (k) {
    case 0: return x == y;
    case 1: return x != y;
    case 2: return x < y;
    case 3: return x <= y;
    case 4: return x > y;
    default: return x >= y;
  }
}

Test(compare, float32_broadcast_and_nan) {
  float a[2 * 3] = {1.0f, NAN, -2.0f, 3.0f, 0.0f, -0.0f}, b[3] = {1.0f, NAN, 0.0f};
  for (int k = 0; k < 6; k++) {
    opd_kcall_t *c = ot_new(OPS[k]);
    ot_in(c, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(2, 3), a);
    ot_in(c, 1, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(3), b);
    ot_ready(c);
    cr_assert(c->out[0].dtype == OPD_DTYPE_BOOL && c->out[0].rank == 2);
    ot_check_fast(c, 0, 0);
    const uint8_t *o = c->out[0].data;
    for (int i = 0; i < 6; i++)
      cr_assert_eq(o[i], want(k, a[i], b[i % 3]), "%s[%d]", OPS[k], i);
    ot_free(c);
  }
}

Test(compare, every_dtype_over_the_pool) {
  static uint8_t a[64 * 257 * 8], b[257 * 8];
  for (size_t i = 0; i < sizeof a; i++) a[i] = (uint8_t)((i * 2654435761u) >> 9 & 7);
  for (size_t i = 0; i < sizeof b; i++) b[i] = (uint8_t)((i * 40503u) >> 5 & 7);
  int32_t dts[] = {OPD_DTYPE_FLOAT16, OPD_DTYPE_BFLOAT16, OPD_DTYPE_FLOAT64, OPD_DTYPE_INT8,
                   OPD_DTYPE_UINT8, OPD_DTYPE_INT32, OPD_DTYPE_INT64, OPD_DTYPE_BOOL};
  for (int t = 0; t < 8; t++)
    for (int k = 0; k < 6; k++) {
      opd_kcall_t *c = ot_new(OPS[k]);
      ot_in(c, 0, dts[t], 2, OT_SHAPE(64, 257), a);
      ot_in(c, 1, dts[t], 1, OT_SHAPE(257), b);
      ot_ready(c);
      ot_check_fast(c, 0, 0);
      /* element [3, 100] against the dtype's values */
      int64_t i = 3 * 257 + 100;
      double x, y;
      if (dts[t] == OPD_DTYPE_FLOAT16) {
        x = opd__f16_to_f32(((uint16_t *)a)[i]);
        y = opd__f16_to_f32(((uint16_t *)b)[100]);
      } else if (dts[t] == OPD_DTYPE_BFLOAT16) {
        x = opd__bf16_to_f32(((uint16_t *)a)[i]);
        y = opd__bf16_to_f32(((uint16_t *)b)[100]);
      } else if (dts[t] == OPD_DTYPE_FLOAT64) {
        x = ((double *)a)[i];
        y = ((double *)b)[100];
      } else if (dts[t] == OPD_DTYPE_INT8) {
        x = ((int8_t *)a)[i];
        y = ((int8_t *)b)[100];
      } else if (dts[t] == OPD_DTYPE_INT32) {
        x = ((int32_t *)a)[i];
        y = ((int32_t *)b)[100];
      } else if (dts[t] == OPD_DTYPE_INT64) {
        x = (double)((int64_t *)a)[i];
        y = (double)((int64_t *)b)[100];
      } else {
        x = a[i];
        y = b[100];
      }
      if (x == x && y == y)          /* a NaN pattern: checked by the float32 test */
        cr_assert_eq(((uint8_t *)c->out[0].data)[i], want(k, x, y), "%s dtype %d", OPS[k],
                     dts[t]);
      ot_free(c);
    }
}

Test(compare, int64_compares_exactly) {
  int64_t a[2] = {INT64_MAX, INT64_MAX - 1}, b[1] = {INT64_MAX - 1};
  opd_kcall_t *c = ot_new("gt");
  ot_in(c, 0, OPD_DTYPE_INT64, 1, OT_SHAPE(2), a);
  ot_in(c, 1, OPD_DTYPE_INT64, 0, NULL, b);
  ot_ready(c);
  ot_check_fast(c, 0, 0);
  const uint8_t *o = c->out[0].data;
  cr_assert(o[0] == 1 && o[1] == 0);      /* not equal as doubles would say */
}

Test(compare, refusals) {
  opd_kcall_t *c = ot_new("lt");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(3), NULL);
  ot_in(c, 1, OPD_DTYPE_INT64, 1, OT_SHAPE(3), NULL);
  ot_expect_err(c, OPD_EDTYPE, "a is float32 but b is int64", NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(4), NULL);
  ot_expect_err(c, OPD_ESHAPE, "a [3] and b [4] do not broadcast together", NULL);
}
