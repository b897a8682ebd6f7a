/* float64 on the CPU: every op of the element-wise, row-wise, reduce and
 * matmul families on float64 tensors, both variants (serial and on a pool
 * of 2), against a long double reference computed here; softmax's
 * dtype="float64" on a float32 x converts x first. */
#include <math.h>
#include <stdlib.h>

#include "tests/ops/optest.h"

/* The test's buffers, freed after it (each test is its own process). */
static void *g_own[16];
static int g_nown;
static void *own(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  cr_assert(p && g_nown < 16);
  return g_own[g_nown++] = p;
}
static void free_own(void) {
  while (g_nown > 0) free(g_own[--g_nown]);
}
TestSuite(dtypes64, .fini = free_own);

/* n doubles uniform in [lo, hi) from seed (a fixed LCG). */
static double *rand64(int64_t n, uint64_t seed, double lo, double hi) {
  double *p = own((size_t)n * sizeof *p);
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = lo + (hi - lo) * (double)(seed >> 11) * 0x1p-53;
  }
  return p;
}

/* Runs both variants of c (serial, then fast on a pool of 2) and asserts
 * every element of output 0 (float64) is within atol + rtol|want|. */
static void check64(opd_kcall_t *c, const long double *want, double atol,
                    double rtol) {
  const opd_exec_t *ex[2] = {&opd__exec_serial, ot_pool(2)};
  cr_assert_eq(c->out[0].dtype, OPD_DTYPE_FLOAT64, "%s", c->op->name);
  for (int fast = 0; fast < 2; fast++) {
    memset(c->out[0].data, 0xff, (size_t)c->out[0].numel * sizeof(double));
    cr_assert_eq(ot_run(c, fast, ex[fast]), 0, "%s: %s", c->op->name, c->err);
    const double *y = c->out[0].data;
    for (int64_t i = 0; i < c->out[0].numel; i++) {
      long double w = want[i];
      if (isnan(w) && isnan(y[i])) continue;
      cr_assert(fabsl(y[i] - w) <= atol + rtol * fabsl(w),
                "%s (%s): element %lld is %.17g, expected %.17Lg", c->op->name,
                fast ? "fast" : "ref", (long long)i, y[i], w);
    }
  }
}

Test(dtypes64, unary) {
  const char *ops[] = {"relu", "gelu", "gelu", "silu", "sigmoid", "tanh"};
  int64_t n = 1000;
  double *x = rand64(n, 1, -8, 8);
  x[0] = 0;
  x[1] = -30;
  long double *w = own((size_t)n * sizeof *w);
  for (int o = 0; o < 6; o++) {
    opd_kcall_t *c = ot_new(ops[o]);
    ot_in(c, 0, OPD_DTYPE_FLOAT64, 2, OT_SHAPE(10, 100), x);
    if (o == 2) ot_set_str(c, "approximate", "tanh");
    ot_ready(c);
    for (int64_t i = 0; i < n; i++) {
      long double v = x[i];
      switch (o) {
        case 0: w[i] = v < 0 ? 0 : v; break;
        case 1: w[i] = 0.5L * v * erfcl(-v / sqrtl(2.0L)); break;
        case 2:
          w[i] = 0.5L * v * (1 + tanhl(sqrtl(2 / acosl(-1.0L)) * (v + 0.044715L * v * v * v)));
          break;
        case 3: w[i] = v / (1 + expl(-v)); break;
        case 4: w[i] = 1 / (1 + expl(-v)); break;
        default: w[i] = tanhl(v); break;
      }
    }
    /* gelu tanh's 1 + tanh cancels in the long double formula below -5 */
    check64(c, w, o == 2 ? 1e-15 : 1e-300, 1e-13);
    ot_free(c);
  }
}

Test(dtypes64, binary_broadcast_and_alpha) {
  const char *ops[] = {"add", "sub", "mul", "div", "add"};
  double *a = rand64(4 * 3 * 5, 2, -4, 4), *b = rand64(3 * 1, 3, 0.5, 2);
  long double w[60];
  for (int o = 0; o < 5; o++) {
    opd_kcall_t *c = ot_new(ops[o]);
    ot_in(c, 0, OPD_DTYPE_FLOAT64, 3, OT_SHAPE(4, 3, 5), a);
    ot_in(c, 1, OPD_DTYPE_FLOAT64, 2, OT_SHAPE(3, 1), b);
    double al = o == 1 || o == 4 ? -2.5 : 1.0;
    if (o == 1 || o == 4) ot_set_float(c, "alpha", al);
    ot_ready(c);
    for (int i = 0; i < 60; i++) {
      long double x = a[i], y = b[(i / 5) % 3];
      w[i] = o == 0 ? x + y : o == 1 ? x - al * y : o == 2 ? x * y
           : o == 3 ? x / y : x + al * y;
    }
    check64(c, w, 1e-15, 1e-15);
    ot_free(c);
  }
}

/* softmax / log_softmax of x (outer, C, inner) along the middle dim. */
static void softmax_ref(const double *x, long double *w, int64_t outer,
                        int64_t C, int64_t in, int lg) {
  for (int64_t o = 0; o < outer; o++)
    for (int64_t k = 0; k < in; k++) {
      long double m = -INFINITY, s = 0;
      for (int64_t i = 0; i < C; i++) m = fmaxl(m, x[(o * C + i) * in + k]);
      for (int64_t i = 0; i < C; i++) s += expl(x[(o * C + i) * in + k] - m);
      for (int64_t i = 0; i < C; i++) {
        long double d = x[(o * C + i) * in + k] - m;
        w[(o * C + i) * in + k] = lg ? d - logl(s) : expl(d) / s;
      }
    }
}

Test(dtypes64, softmax_any_dim) {
  double *x = rand64(6 * 7 * 5, 4, -20, 20);
  long double w[210];
  for (int lg = 0; lg < 2; lg++)
    for (int dim = 0; dim < 3; dim++) {
      opd_kcall_t *c = ot_new(lg ? "log_softmax" : "softmax");
      ot_in(c, 0, OPD_DTYPE_FLOAT64, 3, OT_SHAPE(6, 7, 5), x);
      ot_set_int(c, "dim", dim);
      ot_ready(c);
      int64_t sh[3] = {6, 7, 5}, outer = 1, in = 1;
      for (int d = 0; d < dim; d++) outer *= sh[d];
      for (int d = dim + 1; d < 3; d++) in *= sh[d];
      softmax_ref(x, w, outer, sh[dim], in, lg);
      check64(c, w, 1e-15, 1e-13);
      ot_free(c);
    }
}

Test(dtypes64, softmax_dtype_float64_converts_float32_x) {
  opd_kcall_t *c = ot_new("softmax");
  float *xf = ot_in_rand(c, 0, 2, OT_SHAPE(3, 9), 5, -5, 5);
  ot_set_str(c, "dtype", "float64");
  ot_ready(c);
  double x[27];
  long double w[27];
  for (int i = 0; i < 27; i++) x[i] = xf[i];
  softmax_ref(x, w, 3, 9, 1, 0);
  check64(c, w, 1e-16, 1e-14);
}

Test(dtypes64, layernorm_and_rmsnorm) {
  int64_t R = 5, C = 33;
  double *x = rand64(R * C, 6, 1e3, 1e3 + 1), *g = rand64(C, 7, -2, 2),
         *bb = rand64(C, 8, -1, 1);
  long double *w = own((size_t)(R * C) * sizeof *w);
  for (int rms = 0; rms < 2; rms++) {
    opd_kcall_t *c = ot_new(rms ? "rmsnorm" : "layernorm");
    ot_in(c, 0, OPD_DTYPE_FLOAT64, 2, OT_SHAPE(R, C), x);
    ot_in(c, 1, OPD_DTYPE_FLOAT64, 1, OT_SHAPE(C), g);
    if (!rms) ot_in(c, 2, OPD_DTYPE_FLOAT64, 1, OT_SHAPE(C), bb);
    ot_set_float(c, "eps", 1e-6);
    ot_ready(c);
    for (int64_t r = 0; r < R; r++) {
      const double *xr = x + r * C;
      long double mean = 0, var = 0, ss = 0;
      for (int64_t i = 0; i < C; i++) mean += xr[i], ss += (long double)xr[i] * xr[i];
      mean /= C;
      for (int64_t i = 0; i < C; i++) var += (xr[i] - mean) * (xr[i] - mean);
      var /= C;
      for (int64_t i = 0; i < C; i++)
        w[r * C + i] = rms ? xr[i] / sqrtl(ss / C + 1e-6L) * g[i]
                           : (xr[i] - mean) / sqrtl(var + 1e-6L) * g[i] + bb[i];
    }
    /* layernorm's rows sit at 1e3 with a spread of 1: 1e-13 relative */
    check64(c, w, 1e-11, 1e-12);
    ot_free(c);
  }
}

Test(dtypes64, reduce_sum_mean_amax) {
  double *x = rand64(4 * 6 * 5, 9, -3, 3);
  const char *ops[] = {"sum", "mean", "amax"};
  int64_t dims[2][2] = {{1, -1}, {0, 1}}; /* reduce (6, 5) / keep the last */
  long double w[30];
  for (int o = 0; o < 3; o++)
    for (int d = 0; d < 2; d++) {
      opd_kcall_t *c = ot_new(ops[o]);
      ot_in(c, 0, OPD_DTYPE_FLOAT64, 3, OT_SHAPE(4, 6, 5), x);
      ot_set_ints(c, "dims", 2, dims[d]);
      ot_ready(c);
      int64_t nout = d == 0 ? 4 : 5, nred = d == 0 ? 30 : 24;
      for (int64_t q = 0; q < nout; q++) {
        long double s = 0, m = -INFINITY;
        for (int64_t r = 0; r < nred; r++) {
          double v = d == 0 ? x[q * 30 + r] : x[r * 5 + q];
          s += v;
          m = fmaxl(m, v);
        }
        w[q] = o == 0 ? s : o == 1 ? s / nred : m;
      }
      check64(c, w, 1e-14, 1e-14);
      ot_free(c);
    }
}

Test(dtypes64, matmul_batched) {
  int64_t B = 3, M = 5, K = 17, N = 4;
  double *a = rand64(B * M * K, 10, -1, 1), *b = rand64(K * N, 11, -1, 1);
  long double *w = own((size_t)(B * M * N) * sizeof *w);
  opd_kcall_t *c = ot_new("matmul");
  ot_in(c, 0, OPD_DTYPE_FLOAT64, 3, OT_SHAPE(B, M, K), a);
  ot_in(c, 1, OPD_DTYPE_FLOAT64, 2, OT_SHAPE(K, N), b);
  ot_ready(c);
  for (int64_t t = 0; t < B * M; t++)
    for (int64_t j = 0; j < N; j++) {
      long double s = 0;
      for (int64_t k = 0; k < K; k++) s += (long double)a[t * K + k] * b[k * N + j];
      w[t * N + j] = s;
    }
  check64(c, w, 1e-14, 1e-14);
}

Test(dtypes64, linear_bias_and_act) {
  int64_t M = 7, K = 19, N = 6;
  double *x = rand64(M * K, 12, -1, 1), *wt = rand64(N * K, 13, -1, 1),
         *b = rand64(N, 14, -1, 1);
  long double *w = own((size_t)(M * N) * sizeof *w);
  const char *acts[] = {"none", "relu", "silu"};
  for (int a = 0; a < 3; a++) {
    opd_kcall_t *c = ot_new("linear");
    ot_in(c, 0, OPD_DTYPE_FLOAT64, 2, OT_SHAPE(M, K), x);
    ot_in(c, 1, OPD_DTYPE_FLOAT64, 2, OT_SHAPE(N, K), wt);
    ot_in(c, 2, OPD_DTYPE_FLOAT64, 1, OT_SHAPE(N), b);
    ot_set_str(c, "act", acts[a]);
    ot_ready(c);
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) {
        long double s = b[n];
        for (int64_t k = 0; k < K; k++) s += (long double)x[m * K + k] * wt[n * K + k];
        w[m * N + n] = a == 0 ? s : a == 1 ? (s < 0 ? 0 : s) : s / (1 + expl(-s));
      }
    check64(c, w, 1e-14, 1e-14);
    ot_free(c);
  }
}

Test(dtypes64, mixed_float64_and_float32_refused) {
  double a[3] = {1, 2, 3};
  float b[3] = {1, 2, 3};
  opd_kcall_t *c = ot_new("add");
  ot_in(c, 0, OPD_DTYPE_FLOAT64, 1, OT_SHAPE(3), a);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(3), b);
  ot_expect_err(c, OPD_EDTYPE, "a is float64 but b is float32", NULL);
}
