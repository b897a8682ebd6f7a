/* Integration: strided tensors through libopd, read by the CPU kernels
 * that take strides (OPD_OPF_CPU_STRIDED) or copied by the daemon around
 * those that do not (daemon/run/strided.h): a transposed input, a
 * stride-0 broadcast input, a permuted input and a strided out= inside a
 * bigger tensor, each against a plain C reference; the copies in STATS
 * and in `opctl stats`. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/integration/harness.h"

TestSuite(strided, .init = th_start_default, .fini = th_stop_default,
          .timeout = 60);

enum { R = 7, C = 33, BIG = 50 };

static opd_tensor_t view(uint64_t a, uint64_t off, int rank, const int64_t *shape,
                         const int64_t *strides) {
  opd_tensor_t t;
  opd_tensor_init(&t, a, off, OPD_DTYPE_FLOAT32, rank, shape);
  t.strided = 1;
  memcpy(t.strides, strides, sizeof(int64_t) * (size_t)rank);
  return t;
}

/* STATS' "strided" map: its copies and bytes. */
static void strided_stats(int64_t *copies, int64_t *bytes) {
  opd_client_t *c = th_connect();
  char *json;
  size_t len;
  cr_assert_eq(opd_stats_json(c, &json, &len), 0, "%s", opd_last_error());
  const char *p = strstr(json, "\"strided\":");
  cr_assert_not_null(p, "stats lack strided: %s", json);
  const char *q = strstr(p, "\"copies\":"), *r = strstr(p, "\"bytes\":");
  cr_assert(q != NULL && r != NULL, "%s", p);
  *copies = strtoll(q + 9, NULL, 10);
  *bytes = strtoll(r + 8, NULL, 10);
  opd_free(json);
  opd_close(c);
}

/* softmax over the last dim of rows x cols at x (row stride rs, column
 * stride cs) into y (contiguous). */
static void softmax_ref(const float *x, int rows, int cols, int rs, int cs, float *y) {
  for (int i = 0; i < rows; i++) {
    float m = -INFINITY;
    double sum = 0;
    for (int j = 0; j < cols; j++) m = fmaxf(m, x[i * rs + j * cs]);
    for (int j = 0; j < cols; j++) sum += exp((double)x[i * rs + j * cs] - m);
    for (int j = 0; j < cols; j++)
      y[i * cols + j] = (float)(exp((double)x[i * rs + j * cs] - m) / sum);
  }
}

Test(strided, transposed_input_into_a_strided_out) {
  opd_client_t *c = th_connect();
  void *base;
  uint64_t a = th_arena(c, 1 << 16, &base);
  float *x = base, *big = x + 1024, *want = big + 4096;
  for (int i = 0; i < R * C; i++) x[i] = sinf((float)i) * 3;
  for (int i = 0; i < C * BIG; i++) big[i] = -1;
  /* x is (R, C); its transpose (C, R) is softmaxed into columns
   * [10, 10 + R) of big (C, BIG) */
  opd_tensor_t xt = view(a, 0, 2, (int64_t[]){C, R}, (int64_t[]){1, C});
  opd_tensor_t out = view(a, (1024 + 10) * 4, 2, (int64_t[]){C, R}, (int64_t[]){BIG, 1});
  int64_t n0, b0, n1, b1;
  strided_stats(&n0, &b0);
  cr_assert_eq(opd_run(c, "softmax", &xt, 1, &out, 1, NULL, 0), 0, "%s", opd_last_error());
  strided_stats(&n1, &b1);
  softmax_ref(x, C, R, 1, C, want);
  for (int i = 0; i < C; i++)
    for (int j = 0; j < BIG; j++) {
      float got = big[i * BIG + j];
      if (j >= 10 && j < 10 + R)
        cr_assert_float_eq(got, want[i * R + j - 10], 1e-6, "(%d, %d)", i, j);
      else
        cr_assert_eq(got, -1.0f, "(%d, %d) outside the out= slice was written", i, j);
    }
  /* softmax's CPU kernel reads and writes the strides itself
     (OPD_OPF_CPU_STRIDED): no copy */
  cr_assert_eq(n1 - n0, 0, "softmax made %lld copies", (long long)(n1 - n0));
  cr_assert_eq(b1 - b0, 0);
  /* matmul's does not: xt @ I (R, R) into the same slice is a gather of
     xt and a scatter into out */
  float *eye = want + 1024;
  for (int i = 0; i < R * R; i++) eye[i] = i % (R + 1) == 0 ? 1.0f : 0.0f;
  opd_tensor_t ab[2] = {xt, th_f32(a, (uint64_t)(eye - x) * 4, 2, (int64_t)R, (int64_t)R)};
  cr_assert_eq(opd_run(c, "matmul", ab, 2, &out, 1, NULL, 0), 0, "%s", opd_last_error());
  strided_stats(&n0, &b0);
  for (int i = 0; i < C; i++)
    for (int j = 0; j < BIG; j++) {
      float got = big[i * BIG + j];
      if (j >= 10 && j < 10 + R)
        cr_assert_float_eq(got, x[(j - 10) * C + i], 1e-6, "(%d, %d)", i, j);
      else
        cr_assert_eq(got, -1.0f, "(%d, %d) outside the out= slice was written", i, j);
    }
  cr_assert_eq(n0 - n1, 2, "one gather and one scatter: %lld", (long long)(n0 - n1));
  cr_assert_eq(b0 - b1, 2 * R * C * 4);
  opd_close(c);
}

Test(strided, broadcast_and_permuted_inputs) {
  opd_client_t *c = th_connect();
  void *base;
  uint64_t a = th_arena(c, 1 << 16, &base);
  float *x = base, *row = x + 1024, *y = row + 64, *w = y + 2048;
  for (int i = 0; i < 2 * R * C; i++) x[i] = cosf((float)i);
  for (int j = 0; j < C; j++) row[j] = (float)j / 8;
  /* mul(x (R, C), row expanded to (R, C) with stride 0) */
  opd_tensor_t ab[2] = {th_f32(a, 0, 2, (int64_t)R, (int64_t)C),
                        view(a, 1024 * 4, 2, (int64_t[]){R, C}, (int64_t[]){0, 1})};
  opd_tensor_t o = th_f32(a, (1024 + 64) * 4, 2, (int64_t)R, (int64_t)C);
  cr_assert_eq(opd_run(c, "mul", ab, 2, &o, 1, NULL, 0), 0, "%s", opd_last_error());
  for (int i = 0; i < R * C; i++)
    cr_assert_float_eq(y[i], x[i] * row[i % C], 1e-6, "%d", i);
  /* layernorm of x viewed (2, R, C) -> permuted (R, 2, C), weight ones */
  for (int j = 0; j < C; j++) w[j] = 1;
  opd_tensor_t ln[2] = {view(a, 0, 3, (int64_t[]){R, 2, C}, (int64_t[]){C, R * C, 1}),
                        th_f32(a, (1024 + 64 + 2048) * 4, 1, (int64_t)C)};
  opd_tensor_t lo = th_f32(a, (1024 + 64) * 4, 3, (int64_t)R, (int64_t)2, (int64_t)C);
  opd_attr_t eps = {.name = "eps", .type = OPD_ATTR_FLOAT, .f = 1e-5};
  cr_assert_eq(opd_run(c, "layernorm", ln, 2, &lo, 1, &eps, 1), 0, "%s", opd_last_error());
  for (int i = 0; i < R; i++)
    for (int k = 0; k < 2; k++) {
      const float *src = x + k * R * C + i * C;
      double m = 0, v = 0;
      for (int j = 0; j < C; j++) m += src[j];
      m /= C;
      for (int j = 0; j < C; j++) v += (src[j] - m) * (src[j] - m);
      v /= C;
      for (int j = 0; j < C; j++)
        cr_assert_float_eq(y[(i * 2 + k) * C + j], (float)((src[j] - m) / sqrt(v + 1e-5)),
                           1e-4, "(%d, %d, %d)", i, k, j);
    }
  opd_close(c);
}

Test(strided, opctl_stats_shows_the_copies) {
  opd_client_t *c = th_connect();
  void *base;
  uint64_t a = th_arena(c, 1 << 16, &base);
  opd_tensor_t xt = view(a, 0, 2, (int64_t[]){4, 4}, (int64_t[]){1, 4});
  opd_tensor_t y = th_f32(a, 4096, 2, (int64_t)4, (int64_t)4);
  cr_assert_eq(opd_run(c, "relu", &xt, 1, &y, 1, NULL, 0), 0, "%s", opd_last_error());
  opd_close(c);
  char path[512], out[65536];
  th_tool("opctl", path, sizeof path);
  const char *argv[] = {"opctl", "--socket", th_d.sock, "stats", NULL};
  cr_assert_eq(th_run(path, argv, out, sizeof out), 0, "%s", out);
  cr_assert(strstr(out, "strided copies") != NULL && strstr(out, "strided bytes") != NULL,
            "%s", out);
}
