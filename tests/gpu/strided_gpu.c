/* GPU machine: strided tensors on the CUDA backend end to end
 * (daemon/run/strided.h, daemon/backend/cuda/strided.c).
 *
 *   build/opd --socket /tmp/opd.sock &  build/tests/strided_gpu /tmp/opd.sock
 *
 * Each check runs an op with strided views (a transpose, a permute, step
 * slices, a stride-0 broadcast, a strided out= inside a bigger tensor) on
 * cuda, with host tensors (staged) and with device tensors, and compares
 * the result with the same run on the cpu (the reference, itself checked
 * against numpy by tests/python/test_strided.py); a strided out= must
 * leave the elements between its own as they were. Prints one line per
 * check and "N passed, N failed"; exits 1 on failure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "opd/opd.h"

enum { R = 96, C = 130, BIG = 2 * C };

static opd_client_t *c;
static uint64_t h, d;    /* the host arena, the device allocation */
static char *base;       /* the host arena's memory */

/* A float32 view: rank 2 or 3, shape and strides given (strides NULL:
 * contiguous). */
static opd_tensor_t view(uint64_t arena, uint64_t off, int rank, const int64_t *shape,
                         const int64_t *strides) {
  opd_tensor_t t;
  opd_tensor_init(&t, arena, off, OPD_DTYPE_FLOAT32, rank, shape);
  if (strides != NULL) {
    t.strided = 1;
    memcpy(t.strides, strides, sizeof(int64_t) * (size_t)rank);
  }
  return t;
}

static float *at(uint64_t off) { return (float *)(base + off); }

/* The largest |a - b| / (atol + rtol |b|) over n floats. */
static double max_err(const float *a, const float *b, size_t n, double atol, double rtol) {
  double m = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)a[i] - b[i]) / (atol + rtol * fabs((double)b[i]));
    if (e > m || isnan(e)) m = isnan(e) ? INFINITY : e;
  }
  return m;
}

/* Host byte offsets: x (R, C), then scratch regions of R*BIG floats. */
#define X 0
#define REG(k) ((uint64_t)(k + 1) * R * BIG * 4)

/* Runs op on the cpu into out_cpu and on cuda into out_cuda (same kind of
 * view, different offsets), then compares n floats at the two offsets. */
static void both(const char *what, const char *op, opd_tensor_t *in, int n_in,
                 opd_tensor_t out_cuda, opd_tensor_t out_cpu, const opd_attr_t *attrs,
                 int n_attrs, uint64_t cmp_cuda, uint64_t cmp_cpu, size_t n, double tol) {
  int rc1 = opd_run_on(c, "cpu", op, in, n_in, &out_cpu, 1, attrs, n_attrs);
  const char *e1 = rc1 ? opd_last_error() : "ok";
  char m1[256];
  snprintf(m1, sizeof m1, "%s", e1);
  int rc2 = opd_run_on(c, "cuda", op, in, n_in, &out_cuda, 1, attrs, n_attrs);
  const char *e2 = rc2 ? opd_last_error() : "ok";
  double e = rc1 || rc2 ? INFINITY : max_err(at(cmp_cuda), at(cmp_cpu), n, tol, tol);
  CHECK(rc1 == 0 && rc2 == 0 && e <= 1, "%s: cpu %s, cuda %s, max err %.2f of tolerance %g",
        what, m1, e2, e, tol);
}

/* Copies n floats of host region src to device offset dst (contiguous). */
static int to_device(uint64_t src, uint64_t dst, int64_t n) {
  opd_tensor_t a = view(h, src, 1, (int64_t[]){n}, NULL), b = view(d, dst, 1, (int64_t[]){n}, NULL);
  return opd_run_on(c, "cuda", "copy", &a, 1, &b, 1, NULL, 0);
}

static int to_host(uint64_t src, uint64_t dst, int64_t n) {
  opd_tensor_t a = view(d, src, 1, (int64_t[]){n}, NULL), b = view(h, dst, 1, (int64_t[]){n}, NULL);
  return opd_run_on(c, "cuda", "copy", &a, 1, &b, 1, NULL, 0);
}

static long long stat_copies(void) {
  char *json;
  size_t len;
  if (opd_stats_json(c, &json, &len) != 0) return -1;
  const char *p = strstr(json, "\"strided\"");
  const char *q = p ? strstr(p, "\"copies\":") : NULL;
  long long n = q ? atoll(q + 9) : -1;
  opd_free(json);
  return n;
}

int main(int argc, char **argv) {
  if (argc < 2 || opd_connect(argv[1], &c) != 0) {
    fprintf(stderr, "usage: strided_gpu SOCKET (%s)\n", opd_last_error());
    return 2;
  }
  int rc = opd_arena_create(c, 12 * (uint64_t)R * BIG * 4, &h, (void **)&base);
  rc |= opd_alloc(c, "cuda", 8 * (uint64_t)R * BIG * 4, &d);
  CHECK(rc == 0, "arenas: %s", rc ? opd_last_error() : "ok");
  if (rc != 0) return 1;
  srand(7);
  for (int i = 0; i < R * C; i++) at(X)[i] = (float)rand() / RAND_MAX * 6 - 3;
  long long copies0 = stat_copies();
  const int64_t xt_shape[2] = {C, R}, xt_str[2] = {1, C};

  /* 1. staged: softmax of the transpose */
  opd_tensor_t xt = view(h, X, 2, xt_shape, xt_str);
  both("staged softmax(x.T)", "softmax", &xt, 1, view(h, REG(0), 2, xt_shape, NULL),
       view(h, REG(1), 2, xt_shape, NULL), NULL, 0, REG(0), REG(1), (size_t)R * C, 1e-5);

  /* 2. staged: a strided out= (columns [C/2, C/2 + C) of (R, BIG)); the
   * rest of both big tensors holds the same pattern, which must stay */
  for (int i = 0; i < R * BIG; i++) at(REG(2))[i] = at(REG(3))[i] = (float)(i % 17);
  const int64_t rc_shape[2] = {R, C}, big_str[2] = {BIG, 1};
  opd_tensor_t x = view(h, X, 2, rc_shape, NULL);
  both("staged softmax into a strided out= slice (gaps kept)", "softmax", &x, 1,
       view(h, REG(2) + C / 2 * 4, 2, rc_shape, big_str),
       view(h, REG(3) + C / 2 * 4, 2, rc_shape, big_str), NULL, 0, REG(2), REG(3),
       (size_t)R * BIG, 1e-5);

  /* 3. staged: layernorm of x.view(2, R/2, C).permute(1, 0, 2), with a
   * weight and a bias */
  {
    for (int i = 0; i < C; i++) at(REG(4))[i] = 1 + 0.01f * i, at(REG(4))[C + i] = 0.1f;
    const int64_t sh[3] = {R / 2, 2, C}, st[3] = {C, (int64_t)R / 2 * C, 1};
    opd_tensor_t in[3] = {view(h, X, 3, sh, st), view(h, REG(4), 1, (int64_t[]){C}, NULL),
                          view(h, REG(4) + C * 4, 1, (int64_t[]){C}, NULL)};
    opd_attr_t eps = {.name = "eps", .type = OPD_ATTR_FLOAT, .f = 1e-5};
    both("staged layernorm of a permuted input", "layernorm", in, 3,
         view(h, REG(5), 3, sh, NULL), view(h, REG(6), 3, sh, NULL), &eps, 1, REG(5),
         REG(6), (size_t)R * C, 1e-4);
  }

  /* device tensors: x on the device at 0, a (R, BIG) pattern at REG(0) */
  rc = to_device(X, 0, (int64_t)R * C);
  for (int i = 0; i < R * BIG; i++) at(REG(7))[i] = (float)(i % 13);
  rc |= to_device(REG(7), REG(0), (int64_t)R * BIG);
  CHECK(rc == 0, "device copies: %s", rc ? opd_last_error() : "ok");
  opd_tensor_t dxt = view(d, 0, 2, xt_shape, xt_str);

  /* 4. device: softmax of the transpose, into a device out */
  rc = opd_run_on(c, "cuda", "softmax", &dxt, 1,
                  (opd_tensor_t[]){view(d, REG(1), 2, xt_shape, NULL)}, 1, NULL, 0);
  rc |= to_host(REG(1), REG(8), (int64_t)R * C);
  rc |= opd_run_on(c, "cpu", "softmax", &xt, 1,
                   (opd_tensor_t[]){view(h, REG(9), 2, xt_shape, NULL)}, 1, NULL, 0);
  double e = rc ? INFINITY : max_err(at(REG(8)), at(REG(9)), (size_t)R * C, 1e-5, 1e-5);
  CHECK(rc == 0 && e <= 1, "device softmax(x.T): %s, max err %.2f", rc ? opd_last_error() : "ok", e);

  /* 5. device: softmax into a strided device out= slice, the pattern kept */
  rc = opd_run_on(c, "cuda", "softmax", (opd_tensor_t[]){view(d, 0, 2, rc_shape, NULL)}, 1,
                  (opd_tensor_t[]){view(d, REG(0) + 3 * 4, 2, rc_shape, big_str)}, 1, NULL, 0);
  rc |= to_host(REG(0), REG(8), (int64_t)R * BIG);
  memcpy(at(REG(9)), at(REG(7)), (size_t)R * BIG * 4);
  rc |= opd_run_on(c, "cpu", "softmax", &x, 1,
                   (opd_tensor_t[]){view(h, REG(9) + 3 * 4, 2, rc_shape, big_str)}, 1, NULL, 0);
  e = rc ? INFINITY : max_err(at(REG(8)), at(REG(9)), (size_t)R * BIG, 1e-5, 1e-5);
  CHECK(rc == 0 && e <= 1, "device softmax into a strided out= slice: %s, max err %.2f",
        rc ? opd_last_error() : "ok", e);

  /* 6. device: matmul of two transposes, (C, R) @ (R, C) */
  {
    opd_tensor_t ab[2] = {dxt, view(d, 0, 2, rc_shape, NULL)}; /* x.T, x */
    const int64_t o_shape[2] = {C, C};
    rc = opd_run_on(c, "cuda", "matmul", ab, 2,
                    (opd_tensor_t[]){view(d, REG(2), 2, o_shape, NULL)}, 1, NULL, 0);
    rc |= to_host(REG(2), REG(8), (int64_t)C * C);
    opd_tensor_t hab[2] = {xt, x};
    rc |= opd_run_on(c, "cpu", "matmul", hab, 2,
                     (opd_tensor_t[]){view(h, REG(9), 2, o_shape, NULL)}, 1, NULL, 0);
    e = rc ? INFINITY : max_err(at(REG(8)), at(REG(9)), (size_t)C * C, 1e-3, 1e-3);
    CHECK(rc == 0 && e <= 1, "device matmul(x.T, x): %s, max err %.2f", rc ? opd_last_error() : "ok", e);
  }

  /* 7. device: mul by a stride-0 broadcast row, of a step slice */
  {
    const int64_t sh[2] = {R / 2, C / 2}, st_a[2] = {2 * C, 2}, st_b[2] = {0, 2};
    opd_tensor_t in[2] = {view(d, 0, 2, sh, st_a), view(d, 4, 2, sh, st_b)};
    rc = opd_run_on(c, "cuda", "mul", in, 2,
                    (opd_tensor_t[]){view(d, REG(3), 2, sh, NULL)}, 1, NULL, 0);
    rc |= to_host(REG(3), REG(8), (int64_t)(R / 2) * (C / 2));
    opd_tensor_t hin[2] = {view(h, X, 2, sh, st_a), view(h, X + 4, 2, sh, st_b)};
    rc |= opd_run_on(c, "cpu", "mul", hin, 2,
                     (opd_tensor_t[]){view(h, REG(9), 2, sh, NULL)}, 1, NULL, 0);
    e = rc ? INFINITY : max_err(at(REG(8)), at(REG(9)), (size_t)(R / 2) * (C / 2), 1e-6, 1e-6);
    CHECK(rc == 0 && e <= 1, "device mul(x[::2, ::2], broadcast row): %s, max err %.2f",
          rc ? opd_last_error() : "ok", e);
  }

  /* 8. device: an in-place relu on a step slice (out = the same view) */
  {
    const int64_t sh[2] = {R / 2, C}, st[2] = {2 * C, 1};
    opd_tensor_t v = view(d, 0, 2, sh, st);
    memcpy(at(REG(9)), at(X), (size_t)R * C * 4);
    opd_tensor_t hv2 = view(h, REG(9), 2, sh, st);
    rc = opd_run_on(c, "cuda", "relu", &v, 1, &v, 1, NULL, 0);
    rc |= to_host(0, REG(8), (int64_t)R * C);
    rc |= opd_run_on(c, "cpu", "relu", &hv2, 1, &hv2, 1, NULL, 0);
    e = rc ? INFINITY : max_err(at(REG(8)), at(REG(9)), (size_t)R * C, 1e-7, 1e-7);
    CHECK(rc == 0 && e <= 1, "device relu in place on x[::2]: %s, max err %.2f",
          rc ? opd_last_error() : "ok", e);
  }

  long long copies1 = stat_copies();
  CHECK(copies0 >= 0 && copies1 - copies0 >= 14, "stats count the copies: %lld -> %lld",
        copies0, copies1);
  opd_close(c);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
