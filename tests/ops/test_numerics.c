/* gelu, softmax, layernorm and rmsnorm at the ends of float32's range:
 * values near +-FLT_MAX, rows of denormals (eps = 0 for the norms), rows
 * mixing both, +-inf and NaN.
 *
 * DESIGN
 * Each case runs cpu_ref and cpu_fast (serially and on pools of 2 and 4
 * threads) and compares them with a float64 reference computed here, in
 * the test, from the op's definition (not with the kernel's cpu_ref, which
 * is itself under test): finite inputs must give the float64 answer
 * rounded to float32 within the tolerance named at each case. For inputs
 * holding +-inf or NaN the reference is what torch 1.13 (Debian's
 * python3-torch) returns, written as constants below; F.rms_norm does not
 * exist in torch 1.13, so rmsnorm's constants come from its definition in
 * later torch, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w,
 * evaluated with torch 1.13.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/ops/optest.h"

/* ---- float64 references (the definitions) ------------------------------ */
#define SQRT1_2 0.70710678118654752440
#define SQRT_2_PI 0.79788456080286535588

/* 0.5 x (1 + erf(x/sqrt2)) = 0.5 x erfc(-x/sqrt2), without the
 * cancellation of 1 + erf for negative x. */
static double gelu_erf64(double x) { return 0.5 * x * erfc(-x * SQRT1_2); }

/* 0.5 x (1 + tanh(u)) = x e^u / (e^u + e^-u): x / (1 + e^-2u) for u >= 0,
 * x e^2u / (1 + e^2u) below (no cancellation, no overflow of e^2u). */
static double gelu_tanh64(double x) {
  double u = SQRT_2_PI * (x + 0.044715 * x * x * x);
  if (u >= 0) return x / (1.0 + exp(-2.0 * u));
  double e = exp(2.0 * u);
  return x * e / (1.0 + e);
}

static void softmax64(const float *x, float *y, int64_t C) {
  double m = -INFINITY, s = 0;
  for (int64_t i = 0; i < C; i++) m = x[i] > m ? x[i] : m;
  for (int64_t i = 0; i < C; i++) s += exp((double)x[i] - m);
  for (int64_t i = 0; i < C; i++) y[i] = (float)(exp((double)x[i] - m) / s);
}

/* Two passes in double: every square of a float32 and every sum of a row of
 * them is a normal double, so this is exact to double rounding. */
static void layernorm64(const float *x, float *y, const float *w,
                        const float *b, int64_t C, double eps) {
  double mean = 0, var = 0;
  for (int64_t i = 0; i < C; i++) mean += x[i];
  mean /= (double)C;
  for (int64_t i = 0; i < C; i++) var += (x[i] - mean) * (x[i] - mean);
  var /= (double)C;
  for (int64_t i = 0; i < C; i++) {
    double v = (x[i] - mean) / sqrt(var + eps);
    y[i] = (float)(v * (w ? w[i] : 1.0) + (b ? b[i] : 0.0));
  }
}

static void rmsnorm64(const float *x, float *y, const float *w, int64_t C,
                      double eps) {
  double ss = 0;
  for (int64_t i = 0; i < C; i++) ss += (double)x[i] * x[i];
  double r = 1.0 / sqrt(ss / (double)C + eps);
  for (int64_t i = 0; i < C; i++) y[i] = (float)(x[i] * r * (w ? w[i] : 1.0));
}

/* ---- helpers ------------------------------------------------------------- */
static uint64_t rng = 0x2545F4914F6CDD1Dull;
static double urand(void) { /* [0, 1) */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}
/* Uniform in [lo, hi), computed in double (hi - lo may pass FLT_MAX). */
static float frange(double lo, double hi) { return (float)(lo + (hi - lo) * urand()); }

/* Runs cpu_ref, then cpu_fast serially and on pools of 2 and 4 threads,
 * and asserts each output is within atol + rtol*|want| of want (NaN
 * matches NaN, inf matches the same inf). */
static void check_all(opd_kcall_t *c, const float *want, double atol,
                      double rtol, const char *what) {
  const opd_exec_t *ex[4] = {&opd__exec_serial, &opd__exec_serial, ot_pool(2),
                             ot_pool(4)};
  const char *names[4] = {"ref", "fast serial", "fast pool2", "fast pool4"};
  int64_t n = c->out[0].numel;
  for (int k = 0; k < 4; k++) {
    memset(c->out[0].data, 0xff, (size_t)n * sizeof(float));
    cr_assert_eq(ot_run(c, k > 0, ex[k]), 0, "%s: %s", what, c->err);
    char label[160];
    snprintf(label, sizeof label, "%s (%s)", what, names[k]);
    ot_assert_close(ot_out(c, 0), want, n, atol, rtol, label);
  }
}

/* ---- gelu ---------------------------------------------------------------- */
static const float gelu_x[] = {
    FLT_MAX, -FLT_MAX, 3.4e38f, -3.4e38f, 1e38f, -1e38f, 1e20f, -1e20f,
    1.8e19f, -1.8e19f, 1e13f, -1e13f, 1e10f, -1e10f, 1e5f, -1e5f,
    300.0f, -300.0f, 20.0f, -20.0f, 12.0f, -12.0f, 10.5f, -10.5f,
    9.0f, -9.0f, 5.5f, -5.5f, 1.0f, -1.0f, FLT_MIN, -FLT_MIN,
    1e-40f, -1e-40f, 1.4e-45f, -1.4e-45f, 0.0f, -0.0f};
#define GELU_N ((int64_t)(sizeof gelu_x / sizeof gelu_x[0]))

static void gelu_case(int tanh_form) {
  float want[GELU_N];
  for (int64_t i = 0; i < GELU_N; i++)
    want[i] = (float)(tanh_form ? gelu_tanh64(gelu_x[i]) : gelu_erf64(gelu_x[i]));
  opd_kcall_t *c = ot_new("gelu");
  if (tanh_form) ot_set_str(c, "approximate", "tanh");
  ot_in_vals(c, 0, 1, OT_SHAPE(GELU_N), gelu_x);
  ot_ready(c);
  /* the fast kernels' exp flushes results below e^-87.3 (~1e-38) to 0:
   * atol 1e-36 allows that, nothing more */
  check_all(c, want, 1e-36, 1e-5, tanh_form ? "gelu tanh extremes" : "gelu extremes");
  ot_free(c);
}

Test(numerics, gelu_extremes) {
  /* tanh form: -1.5 at -3.4e38 before (exp saturated at 2.4e38) */
  gelu_case(0);
  gelu_case(1);
}

Test(numerics, gelu_tanh_fast_at_minus_max) {
  /* the reported case: cpu_fast gave -1.5 at -3.4e38 (x / (1 + the
   * saturated exp, 2.4e38)); gelu there is -0 */
  const float x[4] = {-3.4e38f, -FLT_MAX, -1e20f, -1e13f};
  opd_kcall_t *c = ot_new("gelu");
  ot_set_str(c, "approximate", "tanh");
  ot_in_vals(c, 0, 1, OT_SHAPE(4), x);
  ot_ready(c);
  cr_assert_eq(ot_run(c, 1, &opd__exec_serial), 0);
  for (int i = 0; i < 4; i++)
    cr_assert(ot_out(c, 0)[i] == 0, "gelu tanh(%g) is %g, expected 0", x[i], ot_out(c, 0)[i]);
}

Test(numerics, gelu_inf_nan_as_torch) {
  /* torch 1.13: F.gelu(torch.tensor([inf, -inf, nan]), approximate=a)
   * is [inf, nan, nan] for a = "none" and a = "tanh" */
  const float x[3] = {INFINITY, -INFINITY, NAN};
  const float torch113[3] = {INFINITY, NAN, NAN};
  for (int f = 0; f < 2; f++) {
    opd_kcall_t *c = ot_new("gelu");
    if (f) ot_set_str(c, "approximate", "tanh");
    ot_in_vals(c, 0, 1, OT_SHAPE(3), x);
    ot_ready(c);
    check_all(c, torch113, 0, 0, f ? "gelu tanh inf/nan" : "gelu inf/nan");
    ot_free(c);
  }
}

/* ---- softmax ------------------------------------------------------------- */
Test(numerics, softmax_extremes) {
  enum { R = 5, C = 37 }; /* 37: two 16-lane blocks and a tail */
  float x[R * C], want[R * C];
  for (int i = 0; i < C; i++) {
    x[0 * C + i] = frange(-FLT_MAX, FLT_MAX);             /* whole range */
    x[1 * C + i] = frange(-1e-38, 1e-38);                 /* denormals */
    x[2 * C + i] = frange(3.3e38, FLT_MAX);               /* near max */
    x[3 * C + i] = i % 3 ? frange(-1e-40, 1e-40) : frange(-3e38, 3e38); /* mixed */
    x[4 * C + i] = frange(-FLT_MAX, -3e38);               /* near -max */
  }
  x[3 * C + 5] = FLT_MAX;
  x[3 * C + 6] = -FLT_MAX;
  for (int r = 0; r < R; r++) softmax64(x + r * C, want + r * C, C);
  opd_kcall_t *c = ot_new("softmax");
  ot_in_vals(c, 0, 2, OT_SHAPE(R, C), x);
  ot_ready(c);
  check_all(c, want, 1e-7, 1e-5, "softmax extremes");
}

Test(numerics, softmax_inf_nan_as_torch) {
  /* torch 1.13: torch.softmax(x, -1) of these rows */
  const float x[6 * 3] = {INFINITY,  0,         1,         /* */
                          -INFINITY, -INFINITY, -INFINITY, /* */
                          -INFINITY, 1,         2,         /* */
                          NAN,       1,         2,         /* */
                          INFINITY,  INFINITY,  1,         /* */
                          -INFINITY, INFINITY,  0};
  const float torch113[6 * 3] = {NAN, NAN, NAN, NAN, NAN, NAN,
                                 0.0f, 0.2689414322376251f, 0.7310585975646973f,
                                 NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
  opd_kcall_t *c = ot_new("softmax");
  ot_in_vals(c, 0, 2, OT_SHAPE(6, 3), x);
  ot_ready(c);
  check_all(c, torch113, 1e-7, 1e-6, "softmax inf/nan");
}

/* ---- layernorm / rmsnorm ------------------------------------------------- */
enum { NR = 10 }; /* rows of norm_rows */

/* The NR extreme-value rows for the norms, C elements each, into x. */
static void norm_rows(float *row, int64_t C) {
  for (int64_t i = 0; i < C; i++) {
    row[0 * C + i] = frange(-FLT_MAX, FLT_MAX);        /* whole range */
    row[1 * C + i] = frange(-3e20, 3e20);              /* ~1e20: 0 before */
    row[2 * C + i] = frange(3.3e38, FLT_MAX);          /* near max, one sign */
    row[3 * C + i] = frange(-1e-38, 1e-38);            /* denormals */
    row[4 * C + i] = frange(0, 1e-44);                 /* the smallest */
    row[5 * C + i] = i % 2 ? 1e30f : nextafterf(1e30f, INFINITY); /* ulp apart */
    row[6 * C + i] = i % 4 == 0   ? frange(-3e38, 3e38) /* mixed */
                     : i % 4 == 1 ? frange(-1e-40, 1e-40)
                                  : frange(-2, 2);
    row[7 * C + i] = frange(2e19, 4e19);               /* squares past max */
    row[8 * C + i] = frange(-3, 5);                    /* ordinary */
    row[9 * C + i] = i == 0 ? 1e4f : frange(-1, 1);    /* x[0] an outlier */
  }
}

static void norm_case(const char *op, int64_t C, int nparams, double eps) {
  int is_ln = strcmp(op, "layernorm") == 0;
  int64_t n = NR * C;
  float *x = malloc((size_t)n * sizeof(float)), *want = malloc((size_t)n * sizeof(float));
  float *w = malloc((size_t)C * sizeof(float)), *b = malloc((size_t)C * sizeof(float));
  cr_assert(x && want && w && b);
  norm_rows(x, C);
  for (int64_t i = 0; i < C; i++) w[i] = frange(0.5, 2), b[i] = frange(-1, 1);
  for (int r = 0; r < NR; r++) {
    const float *wp = nparams > 0 ? w : NULL, *bp = nparams > 1 ? b : NULL;
    if (is_ln)
      layernorm64(x + r * C, want + r * C, wp, bp, C, eps);
    else
      rmsnorm64(x + r * C, want + r * C, wp, C, eps);
  }
  opd_kcall_t *c = ot_new(op);
  ot_set_float(c, "eps", eps);
  ot_in_vals(c, 0, 2, OT_SHAPE(NR, C), x);
  if (nparams > 0) ot_in_vals(c, 1, 1, OT_SHAPE(C), w);
  if (nparams > 1) ot_in_vals(c, 2, 1, OT_SHAPE(C), b);
  ot_ready(c);
  char what[96];
  snprintf(what, sizeof what, "%s C=%lld params=%d eps=%g", op, (long long)C, nparams, eps);
  check_all(c, want, 1e-5, 1e-4, what);
  ot_free(c);
  free(x), free(want), free(w), free(b);
}

Test(numerics, layernorm_extremes) {
  int64_t Cs[] = {1, 2, 37, 1000, 65537};
  for (int k = 0; k < 5; k++)
    for (int p = 0; p <= 2; p++) {
      norm_case("layernorm", Cs[k], p, 1e-5);
      norm_case("layernorm", Cs[k], p, 0); /* denormal rows: var ~1e-80 */
    }
}

Test(numerics, rmsnorm_extremes) {
  int64_t Cs[] = {1, 2, 37, 1000, 65537};
  for (int k = 0; k < 5; k++)
    for (int p = 0; p <= 1; p++) {
      norm_case("rmsnorm", Cs[k], p, 1.1920928955078125e-07);
      norm_case("rmsnorm", Cs[k], p, 0); /* denormal rows: inf before */
    }
}

Test(numerics, norms_inf_nan_as_torch) {
  const float x[4 * 3] = {INFINITY, 0, 1, -INFINITY, 2, 3,
                          NAN,      1, 2, INFINITY,  -INFINITY, 1};
  const float w[3] = {2, 3, 4}, b[3] = {1, 1, 1};
  /* torch 1.13: F.layer_norm(x, (3,), w, b) is NaN in every row above */
  float ln113[4 * 3];
  for (int i = 0; i < 12; i++) ln113[i] = NAN;
  /* torch 1.13: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) +
   * 1.1920928955078125e-07) * w (F.rms_norm's definition) */
  const float rms113[4 * 3] = {NAN, 0, 0, NAN, 0, 0, NAN, NAN, NAN, NAN, NAN, 0};
  opd_kcall_t *c = ot_new("layernorm");
  ot_in_vals(c, 0, 2, OT_SHAPE(4, 3), x);
  ot_in_vals(c, 1, 1, OT_SHAPE(3), w);
  ot_in_vals(c, 2, 1, OT_SHAPE(3), b);
  ot_ready(c);
  check_all(c, ln113, 0, 0, "layernorm inf/nan");
  ot_free(c);
  c = ot_new("rmsnorm");
  ot_in_vals(c, 0, 2, OT_SHAPE(4, 3), x);
  ot_in_vals(c, 1, 1, OT_SHAPE(3), w);
  ot_ready(c);
  check_all(c, rms113, 0, 0, "rmsnorm inf/nan");
  ot_free(c);
  /* an all-zero row with eps = 0: 0 * rsqrt(0) = NaN in torch 1.13 */
  const float z[4] = {0, 0, 0, 0};
  const float z113[4] = {NAN, NAN, NAN, NAN};
  c = ot_new("rmsnorm");
  ot_set_float(c, "eps", 0);
  ot_in_vals(c, 0, 1, OT_SHAPE(4), z);
  ot_ready(c);
  check_all(c, z113, 0, 0, "rmsnorm zeros eps=0");
  ot_free(c);
}
