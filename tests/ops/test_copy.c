/* copy: strided views of any dtype into contiguous outputs. */
#include <string.h>

#include "tests/ops/optest.h"

/* Sets input 0 to a strided view over `base`. */
static void strided(opd_kcall_t *c, int32_t dtype, int rank,
                    const int64_t *shape, const int64_t *strides,
                    void *base) {
  ot_in(c, 0, dtype, rank, shape, base);
  for (int d = 0; d < rank; d++) c->in[0].strides[d] = strides[d];
}

Test(copy, transpose_by_hand) {
  /* base is 2x3 [[0,1,2],[3,4,5]]; the view is its transpose (3,2) */
  float base[6] = {0, 1, 2, 3, 4, 5};
  opd_kcall_t *c = ot_new("copy");
  strided(c, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(3, 2), OT_SHAPE(1, 3), base);
  ot_ready(c);
  cr_assert_eq(c->out[0].rank, 2);
  cr_assert_eq(c->out[0].shape[0], 3);
  float want[6] = {0, 3, 1, 4, 2, 5};
  for (int fast = 0; fast < 2; fast++) {
    memset(c->out[0].data, 0, sizeof want);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    cr_assert(memcmp(c->out[0].data, want, sizeof want) == 0,
              "fast=%d transpose wrong", fast);
  }
}

Test(copy, dtypes_and_layouts) {
  static uint8_t base[1 << 18];
  for (size_t i = 0; i < sizeof base; i++) base[i] = (uint8_t)(i * 131 + 7);
  int32_t dts[] = {OPD_DTYPE_INT8, OPD_DTYPE_FLOAT16, OPD_DTYPE_FLOAT32,
                   OPD_DTYPE_INT64};
  struct {
    int rank;
    int64_t shape[4], strides[4];
  } cases[] = {
      {1, {100}, {1}},                   /* contiguous */
      {1, {50}, {3}},                    /* strided 1-D */
      {2, {7, 9}, {9, 1}},               /* contiguous 2-D */
      {2, {9, 7}, {1, 9}},               /* transposed */
      {3, {4, 1, 5}, {20, 999, 2}},      /* size-1 dim, inner stride 2 */
      {3, {3, 4, 5}, {0, 5, 1}},         /* broadcast (stride 0) */
      {4, {2, 3, 4, 5}, {120, 40, 10, 2}}, /* every dim strided */
      {2, {0, 5}, {5, 1}},               /* empty */
      {0, {0}, {0}},                     /* scalar */
      {2, {300, 33}, {66, 2}},           /* enough rows for the pool */
  };
  for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
      opd_kcall_t *c = ot_new("copy");
      strided(c, dts[d], cases[k].rank, cases[k].shape, cases[k].strides,
              base + 64);
      ot_ready(c);
      cr_assert_eq(c->out[0].dtype, dts[d]);
      ot_check_fast(c, 0, 0);
      ot_free(c);
    }
}

Test(copy, big_contiguous_pooled) {
  opd_kcall_t *c = ot_new("copy");
  ot_in_rand(c, 0, 2, OT_SHAPE(512, 1000), 1, -1, 1);
  ot_ready(c);
  ot_check_fast(c, 0, 0);
  cr_assert(memcmp(c->out[0].data, c->in[0].data, 512 * 1000 * 4) == 0);
}
