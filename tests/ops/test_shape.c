/* The data movement ops (permute, reshape, slice, cat, expand of the shape
 * family; embedding; where): each kernel against values computed here by
 * index math, the fast kernels against the reference (serial and pooled),
 * several dtypes (only the element size matters), and the shape rules'
 * refusals naming what was wrong. */
#include <string.h>

#include "common/dtype.h"
#include "tests/ops/optest.h"

/* n int32 values 0, 1, 2, ... (the value says where it came from), from
 * a static pool (a test process is short-lived: nothing is freed). */
static int32_t *iota32(int64_t n) {
  static int32_t pool[4096];
  static int64_t used;
  cr_assert(used + n <= 4096, "iota32: pool exhausted");
  int32_t *p = pool + used;
  used += n > 0 ? n : 1;
  for (int64_t i = 0; i < n; i++) p[i] = (int32_t)i;
  return p;
}

/* Runs ref and fast (ot_check_fast) and returns output 0 as int32s. */
static const int32_t *run32(opd_kcall_t *c) {
  ot_check_fast(c, 0, 0);
  return c->out[0].data;
}

Test(shape, permute_3d_matches_index_math) {
  int32_t *x = iota32(2 * 3 * 4);
  opd_kcall_t *c = ot_new("permute");
  ot_in(c, 0, OPD_DTYPE_INT32, 3, OT_SHAPE(2, 3, 4), x);
  ot_set_ints(c, "dims", 3, OT_SHAPE(2, 0, -2)); /* -2 is dim 1 */
  ot_ready(c);
  cr_assert_eq(c->out[0].rank, 3);
  cr_assert(c->out[0].shape[0] == 4 && c->out[0].shape[1] == 2 && c->out[0].shape[2] == 3);
  const int32_t *y = run32(c);
  for (int k = 0; k < 4; k++)
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 3; j++)
        cr_assert_eq(y[(k * 2 + i) * 3 + j], x[(i * 3 + j) * 4 + k]);
}

Test(shape, permute_every_element_size_and_a_strided_x) {
  static uint8_t base[1 << 16];
  for (size_t i = 0; i < sizeof base; i++) base[i] = (uint8_t)(i * 37 + 1);
  int32_t dts[] = {OPD_DTYPE_BOOL, OPD_DTYPE_BFLOAT16, OPD_DTYPE_FLOAT32, OPD_DTYPE_FLOAT64};
  for (int d = 0; d < 4; d++) {
    opd_kcall_t *c = ot_new("permute");
    ot_in(c, 0, dts[d], 4, OT_SHAPE(2, 5, 16, 8), base);
    ot_set_ints(c, "dims", 4, OT_SHAPE(0, 2, 1, 3)); /* (B,T,H,D) -> (B,H,T,D) */
    ot_ready(c);
    ot_check_fast(c, 0, 0);
    ot_free(c);
  }
  /* x a transposed view (strides 1, 6) of a 6x4 int32 matrix: permuting
   * it back gives the matrix itself */
  int32_t *m = iota32(24);
  opd_kcall_t *c = ot_new("permute");
  ot_in(c, 0, OPD_DTYPE_INT32, 2, OT_SHAPE(4, 6), m);
  c->in[0].strides[0] = 1;
  c->in[0].strides[1] = 4;
  ot_set_ints(c, "dims", 2, OT_SHAPE(1, 0));
  ot_ready(c);
  cr_assert(memcmp(run32(c), m, 24 * 4) == 0);
}

Test(shape, permute_refuses_bad_dims) {
  opd_kcall_t *c = ot_new("permute");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 3, OT_SHAPE(2, 3, 4), NULL);
  ot_set_ints(c, "dims", 2, OT_SHAPE(1, 0));
  ot_expect_err(c, OPD_EATTR, "dims [1,0] has 2 entries but x [2,3,4] has rank 3", NULL);
  ot_set_ints(c, "dims", 3, OT_SHAPE(0, 3, 1));
  ot_expect_err(c, OPD_EATTR, "dims[1] = 3 is out of range", "-3..2", NULL);
  ot_set_ints(c, "dims", 3, OT_SHAPE(0, 1, -2));
  ot_expect_err(c, OPD_EATTR, "repeats dim 1", NULL);
}

Test(shape, reshape_infers_and_copies) {
  int32_t *x = iota32(24);
  opd_kcall_t *c = ot_new("reshape");
  ot_in(c, 0, OPD_DTYPE_INT32, 3, OT_SHAPE(2, 3, 4), x);
  ot_set_ints(c, "shape", 3, OT_SHAPE(4, -1, 2));
  ot_ready(c);
  cr_assert(c->out[0].rank == 3 && c->out[0].shape[1] == 3);
  cr_assert(memcmp(run32(c), x, 24 * 4) == 0);
  /* in place: y exactly x's bytes, nothing to do */
  c->out[0].data = x;
  cr_assert_eq(ot_run(c, 0, &opd__exec_serial), 0);
  cr_assert_eq(ot_run(c, 1, &opd__exec_serial), 0);
  int32_t *w = iota32(24);
  cr_assert(memcmp(x, w, 24 * 4) == 0);
  /* a big one over the pool */
  opd_kcall_t *b = ot_new("reshape");
  ot_in_rand(b, 0, 2, OT_SHAPE(300, 1000), 3, -1, 1);
  ot_set_ints(b, "shape", 3, OT_SHAPE(-1, 10, 100));
  ot_ready(b);
  ot_check_fast(b, 0, 0);
  cr_assert(memcmp(b->out[0].data, b->in[0].data, 300000 * 4) == 0);
}

Test(shape, reshape_refuses_other_counts) {
  opd_kcall_t *c = ot_new("reshape");
  ot_in(c, 0, OPD_DTYPE_FLOAT16, 2, OT_SHAPE(2, 3), NULL);
  ot_set_ints(c, "shape", 2, OT_SHAPE(4, 2));
  ot_expect_err(c, OPD_ESHAPE, "cannot reshape x [2,3] (6 elements) into [4,2] (8 elements)",
                NULL);
  ot_set_ints(c, "shape", 2, OT_SHAPE(4, -1));
  ot_expect_err(c, OPD_ESHAPE, "cannot reshape x [2,3] (6 elements) into [4,-1]", NULL);
  ot_set_ints(c, "shape", 2, OT_SHAPE(-1, -1));
  ot_expect_err(c, OPD_EATTR, "more than one -1", NULL);
  ot_set_ints(c, "shape", 2, OT_SHAPE(-2, 3));
  ot_expect_err(c, OPD_EATTR, "shape[0] = -2 is negative", NULL);
  opd_kcall_t *e = ot_new("reshape");
  ot_in(e, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(0, 3), NULL);
  ot_set_ints(e, "shape", 2, OT_SHAPE(0, -1));
  ot_expect_err(e, OPD_ESHAPE, "the -1 could be any extent", NULL);
}

/* Python's len(range(*slice(start, end, step).indices(n))). */
static int64_t py_len(int64_t n, int64_t start, int64_t end, int64_t step, int64_t *first) {
  int64_t s = start < 0 ? (start + n < 0 ? 0 : start + n) : (start > n ? n : start);
  int64_t e = end < 0 ? (end + n < 0 ? 0 : end + n) : (end > n ? n : end);
  *first = s;
  return e > s ? (e - s + step - 1) / step : 0;
}

Test(shape, slice_matches_python) {
  int32_t *x = iota32(3 * 10 * 2);
  struct { int64_t start, end, step; } cases[] = {
      {0, INT64_MAX, 1}, {2, 7, 1}, {-3, INT64_MAX, 1}, {1, -1, 3}, {-100, 100, 2},
      {7, 2, 1}, {10, 12, 1}, {0, 10, 20}, {-1, INT64_MAX, 1}, {INT64_MIN, INT64_MAX, 4},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    opd_kcall_t *c = ot_new("slice");
    ot_in(c, 0, OPD_DTYPE_INT32, 3, OT_SHAPE(3, 10, 2), x);
    ot_set_int(c, "dim", -2);
    ot_set_int(c, "start", cases[k].start);
    ot_set_int(c, "end", cases[k].end);
    ot_set_int(c, "step", cases[k].step);
    ot_ready(c);
    int64_t first, len = py_len(10, cases[k].start, cases[k].end, cases[k].step, &first);
    cr_assert_eq(c->out[0].shape[1], len, "case %zu: extent %lld, want %lld", k,
                 (long long)c->out[0].shape[1], (long long)len);
    const int32_t *y = run32(c);
    for (int i = 0; i < 3; i++)
      for (int64_t j = 0; j < len; j++)
        for (int l = 0; l < 2; l++)
          cr_assert_eq(y[(i * len + j) * 2 + l], x[(i * 10 + first + j * cases[k].step) * 2 + l],
                       "case %zu", k);
    ot_free(c);
  }
}

Test(shape, slice_defaults_and_refusals) {
  opd_kcall_t *c = ot_new("slice");
  ot_in(c, 0, OPD_DTYPE_INT8, 1, OT_SHAPE(5), NULL);
  ot_ready(c); /* dim 0, start 0, end: the end, step 1 */
  cr_assert_eq(c->out[0].shape[0], 5);
  ot_set_int(c, "step", 0);
  ot_expect_err(c, OPD_EATTR, "step must be >= 1, got 0", NULL);
  ot_set_int(c, "step", 1);
  ot_set_int(c, "dim", 1);
  ot_expect_err(c, OPD_EATTR, "dim 1 is out of range for x [5] of rank 1", NULL);
  opd_kcall_t *s = ot_new("slice");
  ot_in(s, 0, OPD_DTYPE_INT8, 0, NULL, NULL);
  ot_expect_err(s, OPD_ESHAPE, "x is 0-d", NULL);
}

Test(shape, cat_along_each_dim) {
  int32_t *a = iota32(2 * 3 * 4), *b = iota32(2 * 5 * 4), *z = iota32(1);
  for (int i = 0; i < 40; i++) b[i] += 1000;
  opd_kcall_t *c = ot_new("cat");
  ot_in(c, 0, OPD_DTYPE_INT32, 3, OT_SHAPE(2, 3, 4), a);
  ot_in(c, 1, OPD_DTYPE_INT32, 3, OT_SHAPE(2, 0, 4), z); /* empty: contributes nothing */
  ot_in(c, 2, OPD_DTYPE_INT32, 3, OT_SHAPE(2, 5, 4), b);
  ot_set_int(c, "dim", -2);
  ot_ready(c);
  cr_assert_eq(c->out[0].shape[1], 8);
  const int32_t *y = run32(c);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 8; j++)
      for (int k = 0; k < 4; k++)
        cr_assert_eq(y[(i * 8 + j) * 4 + k],
                     j < 3 ? a[(i * 3 + j) * 4 + k] : b[(i * 5 + j - 3) * 4 + k]);
  /* dim 0 and the last dim, float16, enough elements for the pool */
  for (int dim = 0; dim < 2; dim++) {
    opd_kcall_t *h = ot_new("cat");
    static uint16_t big[3][400 * 300];
    for (int k = 0; k < 3; k++)
      for (int i = 0; i < 400 * 300; i++) big[k][i] = (uint16_t)(i * 7 + k);
    ot_in(h, 0, OPD_DTYPE_FLOAT16, 2, dim ? OT_SHAPE(400, 100) : OT_SHAPE(100, 300), big[0]);
    ot_in(h, 1, OPD_DTYPE_FLOAT16, 2, dim ? OT_SHAPE(400, 300) : OT_SHAPE(400, 300), big[1]);
    ot_in(h, 2, OPD_DTYPE_FLOAT16, 2, dim ? OT_SHAPE(400, 1) : OT_SHAPE(7, 300), big[2]);
    ot_set_int(h, "dim", dim);
    ot_ready(h);
    ot_check_fast(h, 0, 0);
    ot_free(h);
  }
}

Test(shape, cat_refusals) {
  opd_kcall_t *c = ot_new("cat");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(2, 3), NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT16, 2, OT_SHAPE(2, 3), NULL);
  ot_expect_err(c, OPD_EDTYPE, "input 1 is float16 but input 0 is float32", NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(3, 3), NULL);
  ot_set_int(c, "dim", 1);
  ot_expect_err(c, OPD_ESHAPE, "input 1 has shape [3,3] but input 0 has [2,3]",
                "except on dim 1", NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(0), NULL);
  ot_expect_err(c, OPD_ESHAPE, "input 1 has shape [0]", NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(2, 3), NULL);
  ot_set_int(c, "dim", 2);
  ot_expect_err(c, OPD_EATTR, "dim 2 is out of range for inputs of rank 2", NULL);
  opd_kcall_t *s = ot_new("cat");
  ot_in(s, 0, OPD_DTYPE_FLOAT32, 0, NULL, NULL);
  ot_expect_err(s, OPD_ESHAPE, "input 0 is 0-d", NULL);
}

Test(shape, expand_repeats_dims_of_one) {
  int32_t *x = iota32(3);
  opd_kcall_t *c = ot_new("expand");
  ot_in(c, 0, OPD_DTYPE_INT32, 2, OT_SHAPE(3, 1), x);
  ot_set_ints(c, "shape", 3, OT_SHAPE(2, -1, 4));
  ot_ready(c);
  cr_assert(c->out[0].rank == 3 && c->out[0].shape[0] == 2 && c->out[0].shape[1] == 3 &&
            c->out[0].shape[2] == 4);
  const int32_t *y = run32(c);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 4; k++) cr_assert_eq(y[(i * 3 + j) * 4 + k], j);
  ot_set_ints(c, "shape", 2, OT_SHAPE(3, 0)); /* a dim of 1 may become 0 */
  ot_ready(c);
  cr_assert_eq(c->out[0].numel, 0);
  cr_assert_eq(ot_run(c, 1, &opd__exec_serial), 0);
}

Test(shape, expand_refusals) {
  opd_kcall_t *c = ot_new("expand");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(3, 1), NULL);
  ot_set_ints(c, "shape", 2, OT_SHAPE(4, 5));
  ot_expect_err(c, OPD_ESHAPE, "cannot expand x [3,1] to [4,5]", "dim 0 has extent 3", NULL);
  ot_set_ints(c, "shape", 1, OT_SHAPE(3));
  ot_expect_err(c, OPD_EATTR, "shape [3] has 1 dims, fewer than x [3,1]", NULL);
  ot_set_ints(c, "shape", 3, OT_SHAPE(-1, 3, 2));
  ot_expect_err(c, OPD_EATTR, "shape[0] = -1: a new leading dim", NULL);
  ot_set_ints(c, "shape", 2, OT_SHAPE(3, -5));
  ot_expect_err(c, OPD_EATTR, "shape[1] = -5 is negative", NULL);
}

Test(shape, embedding_rows_by_index) {
  float w[5 * 3];
  for (int i = 0; i < 15; i++) w[i] = (float)i * 0.5f;
  int64_t idx64[6] = {4, 0, 0, 2, 1, 4};
  int32_t idx32[6] = {4, 0, 0, 2, 1, 4};
  for (int t = 0; t < 2; t++) {
    opd_kcall_t *c = ot_new("embedding");
    ot_in(c, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(5, 3), w);
    ot_in(c, 1, t ? OPD_DTYPE_INT32 : OPD_DTYPE_INT64, 2, OT_SHAPE(2, 3),
          t ? (void *)idx32 : (void *)idx64);
    ot_ready(c);
    cr_assert(c->out[0].rank == 3 && c->out[0].shape[2] == 3);
    ot_check_fast(c, 0, 0);
    const float *y = c->out[0].data;
    for (int i = 0; i < 6; i++)
      for (int j = 0; j < 3; j++) cr_assert_eq(y[i * 3 + j], w[idx64[i] * 3 + j]);
    ot_free(c);
  }
  /* GPT-2's shape over the pool, bfloat16 rows */
  static uint16_t table[1000 * 64];
  static int64_t many[4096];
  for (int i = 0; i < 1000 * 64; i++) table[i] = (uint16_t)(i * 3);
  for (int i = 0; i < 4096; i++) many[i] = (i * 7919) % 1000;
  opd_kcall_t *g = ot_new("embedding");
  ot_in(g, 0, OPD_DTYPE_BFLOAT16, 2, OT_SHAPE(1000, 64), table);
  ot_in(g, 1, OPD_DTYPE_INT64, 2, OT_SHAPE(4, 1024), many);
  ot_ready(g);
  ot_check_fast(g, 0, 0);
  const uint16_t *y = g->out[0].data;
  cr_assert(memcmp(&y[100 * 64], &table[many[100] * 64], 128) == 0);
}

Test(shape, embedding_refuses_bad_indices_and_shapes) {
  float w[6] = {0};
  int64_t idx[3] = {0, 3, 1};
  opd_kcall_t *c = ot_new("embedding");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(3, 2), w);
  ot_in(c, 1, OPD_DTYPE_INT64, 1, OT_SHAPE(3), idx);
  ot_ready(c);
  for (int fast = 0; fast < 2; fast++) {
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), OPD_EINVAL);
    cr_assert(strstr(c->err, "indices[1] (flat) = 3 is out of range [0, 3)"), "%s", c->err);
  }
  idx[1] = -1;
  cr_assert_eq(ot_run(c, 1, &opd__exec_serial), OPD_EINVAL);
  cr_assert(strstr(c->err, "indices[1] (flat) = -1"), "%s", c->err);
  opd_kcall_t *s = ot_new("embedding");
  ot_in(s, 0, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(6), NULL);
  ot_in(s, 1, OPD_DTYPE_INT64, 1, OT_SHAPE(3), NULL);
  ot_expect_err(s, OPD_ESHAPE, "weight has shape [6]; expected (V, D)", NULL);
}

Test(shape, where_broadcasts) {
  uint8_t cond[3] = {1, 0, 1};        /* (3) */
  int64_t x[2] = {10, 20};            /* (2, 1) */
  int64_t y[1] = {-1};                /* () */
  opd_kcall_t *c = ot_new("where");
  ot_in(c, 0, OPD_DTYPE_BOOL, 1, OT_SHAPE(3), cond);
  ot_in(c, 1, OPD_DTYPE_INT64, 2, OT_SHAPE(2, 1), x);
  ot_in(c, 2, OPD_DTYPE_INT64, 0, NULL, y);
  ot_ready(c);
  cr_assert(c->out[0].rank == 2 && c->out[0].shape[0] == 2 && c->out[0].shape[1] == 3);
  ot_check_fast(c, 0, 0);
  const int64_t *o = c->out[0].data;
  int64_t want[6] = {10, -1, 10, 20, -1, 20};
  cr_assert(memcmp(o, want, sizeof want) == 0);
  /* uint8 cond, every element size, big enough for the pool */
  static uint8_t cb[64 * 513], xb[64 * 513 * 8], yb[513 * 8];
  for (size_t i = 0; i < sizeof cb; i++) cb[i] = (uint8_t)((i * 2654435761u) >> 7 & 3);
  for (size_t i = 0; i < sizeof xb; i++) xb[i] = (uint8_t)i;
  for (size_t i = 0; i < sizeof yb; i++) yb[i] = (uint8_t)(255 - i);
  int32_t dts[] = {OPD_DTYPE_INT8, OPD_DTYPE_FLOAT16, OPD_DTYPE_FLOAT32, OPD_DTYPE_FLOAT64};
  for (int d = 0; d < 4; d++) {
    opd_kcall_t *b = ot_new("where");
    ot_in(b, 0, OPD_DTYPE_UINT8, 2, OT_SHAPE(64, 513), cb);
    ot_in(b, 1, dts[d], 2, OT_SHAPE(64, 513), xb);
    ot_in(b, 2, dts[d], 1, OT_SHAPE(513), yb);
    ot_ready(b);
    ot_check_fast(b, 0, 0);
    ot_free(b);
  }
}

Test(shape, where_refusals) {
  opd_kcall_t *c = ot_new("where");
  ot_in(c, 0, OPD_DTYPE_BOOL, 1, OT_SHAPE(3), NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(3), NULL);
  ot_in(c, 2, OPD_DTYPE_FLOAT16, 1, OT_SHAPE(3), NULL);
  ot_expect_err(c, OPD_EDTYPE, "x is float32 but y is float16", NULL);
  ot_in(c, 2, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(4), NULL);
  ot_expect_err(c, OPD_ESHAPE, "cond [3], x [3] and y [4] do not broadcast together", NULL);
}

/* gather against index math: out[i][j] = x[idx[i][j]][j] (dim 0) and
 * x[i][idx[i][j]] (dim 1, index narrower than x on dim 0 and wider on 1) */
Test(shape, gather_matches_index_math) {
  int32_t *x = iota32(4 * 5);                            /* (4, 5) */
  int64_t i0[3 * 5], i1[2 * 7];
  for (int k = 0; k < 15; k++) i0[k] = (k * 7) % 4;
  for (int k = 0; k < 14; k++) i1[k] = (k * 3) % 5;
  opd_kcall_t *c = ot_new("gather");
  ot_in(c, 0, OPD_DTYPE_INT32, 2, OT_SHAPE(4, 5), x);
  ot_in(c, 1, OPD_DTYPE_INT64, 2, OT_SHAPE(3, 5), i0);
  ot_set_int(c, "dim", 0);
  ot_ready(c);
  cr_assert(c->out[0].rank == 2 && c->out[0].shape[0] == 3 && c->out[0].shape[1] == 5);
  const int32_t *y = run32(c);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 5; j++) cr_assert_eq(y[i * 5 + j], x[i0[i * 5 + j] * 5 + j]);
  opd_kcall_t *d = ot_new("gather");
  ot_in(d, 0, OPD_DTYPE_INT32, 2, OT_SHAPE(4, 5), x);
  ot_in(d, 1, OPD_DTYPE_INT64, 2, OT_SHAPE(2, 7), i1);
  ot_set_int(d, "dim", -1);
  ot_ready(d);
  y = run32(d);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 7; j++) cr_assert_eq(y[i * 7 + j], x[i * 5 + i1[i * 7 + j]]);
  /* 0-d x and index; every element size over the pool (3-d, middle dim) */
  int64_t z = 0;
  opd_kcall_t *s = ot_new("gather");
  ot_in(s, 0, OPD_DTYPE_INT32, 0, NULL, x + 9);
  ot_in(s, 1, OPD_DTYPE_INT64, 0, NULL, &z);
  ot_set_int(s, "dim", 0);
  ot_ready(s);
  cr_assert_eq(run32(s)[0], 9);
  static uint8_t xb[8 * 64 * 100 * 8];
  static int64_t ib[8 * 50 * 100];
  for (size_t k = 0; k < sizeof xb; k++) xb[k] = (uint8_t)(k * 31 + 7);
  for (int k = 0; k < 8 * 50 * 100; k++) ib[k] = (k * 2654435761u) % 64;
  int32_t dts[] = {OPD_DTYPE_BOOL, OPD_DTYPE_BFLOAT16, OPD_DTYPE_FLOAT32, OPD_DTYPE_FLOAT64};
  for (int t = 0; t < 4; t++) {
    opd_kcall_t *b = ot_new("gather");
    ot_in(b, 0, dts[t], 3, OT_SHAPE(8, 64, 100), xb);
    ot_in(b, 1, OPD_DTYPE_INT64, 3, OT_SHAPE(8, 50, 100), ib);
    ot_set_int(b, "dim", 1);
    ot_ready(b);
    ot_check_fast(b, 0, 0);
    size_t es = opd__dtype_size(dts[t]);
    const uint8_t *o = b->out[0].data;
    int64_t k = (3 * 50 + 17) * 100 + 42;              /* out[3][17][42] */
    cr_assert(memcmp(o + k * es, xb + ((3 * 64 + ib[k]) * 100 + 42) * es, es) == 0);
    ot_free(b);
  }
}

Test(shape, gather_refusals) {
  int32_t x[6] = {0};
  int64_t idx[3] = {0, 3, 1};
  opd_kcall_t *c = ot_new("gather");
  ot_in(c, 0, OPD_DTYPE_INT32, 2, OT_SHAPE(2, 3), x);
  ot_in(c, 1, OPD_DTYPE_INT64, 2, OT_SHAPE(1, 3), idx);
  ot_set_int(c, "dim", 1);
  ot_ready(c);
  for (int fast = 0; fast < 2; fast++) {
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), OPD_EINVAL);
    cr_assert(strstr(c->err, "index[1] (flat) = 3 is out of range [0, 3) of x's dim 1"), "%s",
              c->err);
  }
  opd_kcall_t *s = ot_new("gather");
  ot_in(s, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(2, 3), NULL);
  ot_in(s, 1, OPD_DTYPE_INT64, 1, OT_SHAPE(3), NULL);
  ot_set_int(s, "dim", 0);
  ot_expect_err(s, OPD_ESHAPE, "index has rank 1 but x has rank 2", NULL);
  ot_in(s, 1, OPD_DTYPE_INT64, 2, OT_SHAPE(2, 4), NULL);
  ot_expect_err(s, OPD_ESHAPE, "index [2,4] is larger than x [2,3] on dim 1", NULL);
  ot_set_int(s, "dim", 2);
  ot_expect_err(s, OPD_EATTR, "dim = 2 is out of range for x's rank 2", NULL);
}
