/* neg, abs, exp, log, sqrt, rsqrt, sin, cos: against the formulas in
 * double (within 2 ulp-ish of float), the IEEE edge values torch gives,
 * fast vs ref over pools. */
#include <math.h>

#include "tests/ops/optest.h"

static const char *OPS[8] = {"neg", "abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos"};

static double ref(int k, double v) {
  switch (k) {
    case 0: return -v;
    case 1: return fabs(v);
    case 2: return exp(v);
    case 3: return log(v);
    case 4: return sqrt(v);
    case 5: return 1.0 / sqrt(v);
    case 6: return sin(v);
    default: return cos(v);
  }
}

Test(math, against_double) {
  for (int k = 0; k < 8; k++) {
    int64_t shape[1] = {4097};
    opd_kcall_t *c = ot_new(OPS[k]);
    int pos = k >= 3 && k <= 5; /* log, sqrt, rsqrt: x > 0 */
    float *x = ot_in_rand(c, 0, 1, shape, k, pos ? 0.01 : -8, 8);
    ot_ready(c);
    cr_assert_eq(ot_run(c, 1, &opd__exec_serial), 0);
    float *y = ot_out(c, 0);
    for (int64_t i = 0; i < shape[0]; i++) {
      double w = ref(k, x[i]);
      cr_assert(fabs(y[i] - w) <= 1e-6 + 3e-7 * fabs(w), "%s(%g) = %.9g, want %.9g",
                OPS[k], x[i], y[i], w);
    }
    ot_check_fast(c, 0, 0);
    ot_free(c);
  }
}

Test(math, edges) {
  float x[5] = {0.0f, -0.0f, -1.0f, INFINITY, NAN};
  for (int k = 0; k < 8; k++) {
    opd_kcall_t *c = ot_new(OPS[k]);
    ot_in_vals(c, 0, 1, OT_SHAPE(5), x);
    ot_ready(c);
    cr_assert_eq(ot_run(c, 1, &opd__exec_serial), 0);
    float *y = ot_out(c, 0);
    cr_assert(isnan(y[4]), "%s(NaN) must be NaN", OPS[k]);
    if (k == 3) cr_assert(isinf(y[0]) && y[0] < 0 && isnan(y[2]), "log(0) -inf, log(-1) NaN");
    if (k == 4) cr_assert(isnan(y[2]) && y[3] == INFINITY, "sqrt(-1) NaN");
    if (k == 5) cr_assert(y[0] == INFINITY && y[3] == 0, "rsqrt(0) inf, rsqrt(inf) 0");
    if (k == 2) cr_assert(y[3] == INFINITY && y[0] == 1, "exp");
    ot_free(c);
  }
}
