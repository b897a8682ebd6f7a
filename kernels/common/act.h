/* Activations for the fast CPU kernels, on one lane and on 8 (GCC vector
 * extensions, kernels/common/rowred.h): gelu (exact and tanh form), silu,
 * sigmoid, tanh. Shared by the unary family (kernels/unary/cpu.c) and the
 * epilogues of linear and gru_cell, so that an activation gives the same
 * bits wherever it runs.
 *
 * DESIGN
 * Float, branch-free in the 8-lane forms, e^t from opd__expf_fast's steps
 * (rowred.h) made +inf past its saturation (t > 88.3), so that a far tail
 * gives the limit torch gives (x / inf = -0, 1 / inf = 0) instead of a
 * small wrong value. Formulas and their accuracy (each within the unary
 * tests' 1e-6 + 1e-5|ref| of a double reference, for every finite x):
 *   gelu       x < 0: 0.5 x erfc(|x|/sqrt2); x >= 0: 0.5 x (2 - erfc(x/sqrt2))
 *              (no cancellation for negative x), erfc(|x|/sqrt2) as
 *              e^(-x^2/2) t Q(t), t = 1/(1 + q|x|), Q a fitted degree-7
 *              polynomial (gelu's relative error < 4.2e-6 for every
 *              float x whose gelu is above 1e-37, the error of x^2's
 *              rounding inside the exponential)
 *   gelu_tanh  x / (1 + e^(-2u)), u = sqrt(2/pi)(x + 0.044715x^3)
 *              (= 0.5x(1+tanh u) without its cancellation)
 *   silu       x / (1 + e^-x); sigmoid 1 / (1 + e^-x)
 *   tanh       Cephes' tanhf: |x| < 0.625 the odd polynomial x + x^3
 *              P(x^2), else sign(x)(1 - 2 / (e^(2|x|) + 1))
 * x = -inf gives NaN in both gelu forms and silu (as torch 1.13), NaN
 * gives NaN. Everything is always inline: each OPD_FAST caller's clone
 * gets its own copy (and its fp-contract setting).
 */
#ifndef OPD_KERNELS_COMMON_ACT_H
#define OPD_KERNELS_COMMON_ACT_H

#include <math.h>

#include "kernels/common/rowred.h"

#define OPD_SQRT1_2 0.70710678118654752440f
#define OPD_SQRT_2_PI 0.79788456080286535588f /* sqrt(2/pi) */

/* e^t that is +inf past opd__expf_fast's saturation (t > 88.3). */
OPD_V8 float opd__exp_inf(float t) { return t > 88.3f ? INFINITY : opd__expf_fast(t); }

/* gelu's erfc(|x|/sqrt2) as e^(-x^2/2) * t Q(t), t = 1 / (1 + q|x|): Q a
 * degree-7 polynomial fitted for relative error (weighted least squares
 * on Chebyshev nodes against mpmath, Lawson's reweighting; fit error
 * 9.1e-8 for |x| in [0, 13.25]; docs/records/2026-12-07-gelu-erfc-fit/
 * fit.py makes them). The exponential and the polynomial depend only on
 * |x|, not on each other, and Q goes by Estrin's scheme: the dependency
 * chain is about half of the Numerical Recipes form it replaced
 * (t e^(P(t) - z^2), P of degree 9 by Horner, inside the exponential):
 * 0.70 against 1.29 ns per element in cache on one core (2026-12-07,
 * docs/records/2026-12-07-gelu-erfc-fit/README.md). */
#define OPD_GELU_Q 0.3046875f
#define OPD_GELU_TQ(t, t2)                                                    \
  ((2.430264416e-01f + 2.447468245e-01f * (t)) +                              \
   (2.062271829e-01f + 2.436019131e-01f * (t)) * (t2) +                       \
   ((-7.914103054e-02f + 3.754627815e-01f * (t)) +                            \
    (-3.074245212e-01f + 7.350049865e-02f * (t)) * (t2)) * ((t2) * (t2)))
/* Past |x| = 13.2, e^(-x^2/2) is below float's normal range: erfc is 0
 * there (gelu(x) = x, or 0 for negative x, up to < 1e-38). */
#define OPD_GELU_AMAX 13.2f

/* erfc(|v|/sqrt2) for a = |v|, one lane and 8. */
OPD_V8 float opd__gelu_erfc(float a) {
  if (!(a <= OPD_GELU_AMAX)) return a == a ? 0.0f : a;
  float t = 1.0f / (1.0f + OPD_GELU_Q * a);
  return t * OPD_GELU_TQ(t, t * t) * opd__expf_fast(-0.5f * (a * a));
}
OPD_V8 opd_v8f opd__v8_gelu_erfc(opd_v8f a) {
  opd_v8f t = 1.0f / (1.0f + OPD_GELU_Q * a);
  opd_v8f c = t * OPD_GELU_TQ(t, t * t) * opd__v8_exp_core(-0.5f * (a * a));
  return (opd_v8f)((opd_v8i)c & ~(a > OPD_GELU_AMAX)); /* NaN stays NaN */
}

OPD_V8 float opd__gelu1(float v) {
  float c = opd__gelu_erfc(fabsf(v));
  return 0.5f * v * (v < 0 ? c : 2.0f - c);
}
OPD_V8 opd_v8f opd__v8_gelu(opd_v8f v) {
  const opd_v8u absmask = (opd_v8u){0} + 0x7fffffffu;
  opd_v8f c = opd__v8_gelu_erfc((opd_v8f)((opd_v8u)v & absmask));
  return 0.5f * v * opd__v8_sel(v < 0.0f, c, 2.0f - c);
}

OPD_V8 float opd__gelu_tanh1(float v) {
  float u = OPD_SQRT_2_PI * (v + 0.044715f * v * v * v);
  return v / (1.0f + opd__exp_inf(-2.0f * u));
}
OPD_V8 opd_v8f opd__v8_gelu_tanh(opd_v8f v) {
  opd_v8f u = OPD_SQRT_2_PI * (v + 0.044715f * v * v * v);
  return v / (1.0f + opd__v8_expf_inf(-2.0f * u));
}

OPD_V8 float opd__silu1(float v) { return v / (1.0f + opd__exp_inf(-v)); }
OPD_V8 opd_v8f opd__v8_silu(opd_v8f v) { return v / (1.0f + opd__v8_expf_inf(-v)); }

OPD_V8 float opd__sigmoid1(float v) { return 1.0f / (1.0f + opd__exp_inf(-v)); }
OPD_V8 opd_v8f opd__v8_sigmoid(opd_v8f v) { return 1.0f / (1.0f + opd__v8_expf_inf(-v)); }

/* Cephes tanhf's polynomial for |x| < 0.625: x + x^3 P(x^2). */
#define OPD_TANH_POLY(x, s)                                                   \
  (((((-5.70498872745e-3f * (s) + 2.06390887954e-2f) * (s) -                 \
      5.37397155531e-2f) * (s) + 1.33314422036e-1f) * (s) -                  \
    3.33332819422e-1f) * (s) * (x) + (x))
OPD_V8 float opd__tanh1(float v) {
  float a = fabsf(v);
  if (a < 0.625f) return OPD_TANH_POLY(v, v * v);
  return copysignf(1.0f - 2.0f / (opd__exp_inf(2.0f * a) + 1.0f), v);
}
OPD_V8 opd_v8f opd__v8_tanh(opd_v8f v) {
  const opd_v8u absmask = (opd_v8u){0} + 0x7fffffffu;
  opd_v8f a = (opd_v8f)((opd_v8u)v & absmask);
  opd_v8f big = 1.0f - 2.0f / (opd__v8_expf_inf(2.0f * a) + 1.0f);
  big = (opd_v8f)(((opd_v8u)big & absmask) | ((opd_v8u)v & ~absmask));
  return opd__v8_sel(a < 0.625f, OPD_TANH_POLY(v, v * v), big);
}

#endif /* OPD_KERNELS_COMMON_ACT_H */
