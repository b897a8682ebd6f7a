/* Integration: the view ops (permute, slice, expand) read strided inputs
 * through a real daemon (their rows set OPD_OPF_STRIDED: the view they
 * gather composes with x's strides, no contiguous copy first). */
#include <criterion/criterion.h>
#include <string.h>

#include "tests/integration/harness.h"

TestSuite(shape_ops, .init = th_start_default, .fini = th_stop_default, .timeout = 60);

static opd_attr_t ints_attr(const char *name, int n, const int64_t *v) {
  opd_attr_t a;
  memset(&a, 0, sizeof a);
  a.name = name;
  a.type = OPD_ATTR_INTS;
  a.n = n;
  for (int i = 0; i < n; i++) a.ints[i] = v[i];
  return a;
}

static opd_attr_t int_attr(const char *name, int64_t v) {
  opd_attr_t a;
  memset(&a, 0, sizeof a);
  a.name = name;
  a.type = OPD_ATTR_INT;
  a.i = v;
  return a;
}

/* x (3, 4) = 0..11 at offset 0; xt its transpose (4, 3), strides (1, 4). */
static opd_tensor_t transposed(opd_client_t *c, float **xp, uint64_t *arena, void **base) {
  *arena = th_arena(c, 4096, base);
  float *x = *base;
  for (int i = 0; i < 12; i++) x[i] = (float)i;
  *xp = x;
  opd_tensor_t xt = th_f32(*arena, 0, 2, (int64_t)4, (int64_t)3);
  xt.strided = 1;
  xt.strides[0] = 1;
  xt.strides[1] = 4;
  return xt;
}

Test(shape_ops, permute_of_a_transposed_view_is_the_original) {
  opd_client_t *c = th_connect();
  void *base;
  uint64_t a;
  float *x;
  opd_tensor_t xt = transposed(c, &x, &a, &base);
  opd_tensor_t y = th_f32(a, 256, 2, (int64_t)3, (int64_t)4);
  opd_attr_t dims = ints_attr("dims", 2, (const int64_t[]){1, 0});
  cr_assert_eq(opd_run(c, "permute", &xt, 1, &y, 1, &dims, 1), 0, "%s", opd_last_error());
  cr_assert(memcmp((char *)base + 256, x, 12 * sizeof(float)) == 0);
  opd_close(c);
}

Test(shape_ops, slice_and_expand_of_a_strided_view) {
  opd_client_t *c = th_connect();
  void *base;
  uint64_t a;
  float *x;
  opd_tensor_t xt = transposed(c, &x, &a, &base);
  /* xt[1:4:2] on dim 0: rows 1 and 3 of the transpose = columns 1 and 3 of x */
  opd_tensor_t y = th_f32(a, 256, 2, (int64_t)2, (int64_t)3);
  opd_attr_t s[3] = {int_attr("dim", 0), int_attr("start", 1), int_attr("step", 2)};
  cr_assert_eq(opd_run(c, "slice", &xt, 1, &y, 1, s, 3), 0, "%s", opd_last_error());
  const float *yy = (const float *)((char *)base + 256);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) cr_assert_eq(yy[i * 3 + j], x[j * 4 + 1 + 2 * i]);
  /* column 2 of x, a (3, 1) view with stride 4, expanded to (2, 3, 5) */
  opd_tensor_t col = th_f32(a, 2 * sizeof(float), 2, (int64_t)3, (int64_t)1);
  col.strided = 1;
  col.strides[0] = 4;
  col.strides[1] = 1;
  opd_tensor_t e = th_f32(a, 512, 3, (int64_t)2, (int64_t)3, (int64_t)5);
  opd_attr_t shape = ints_attr("shape", 3, (const int64_t[]){2, -1, 5});
  cr_assert_eq(opd_run(c, "expand", &col, 1, &e, 1, &shape, 1), 0, "%s", opd_last_error());
  const float *ee = (const float *)((char *)base + 512);
  for (int i = 0; i < 30; i++) cr_assert_eq(ee[i], x[(i / 5 % 3) * 4 + 2]);
  opd_close(c);
}
