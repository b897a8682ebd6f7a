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
 *              (no cancellation for negative x), erfc from Numerical
 *              Recipes' Chebyshev fit (relative error < 1.2e-7)
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

/* erfc(z) for z >= 0 (Numerical Recipes erfcc), one lane and 8. */
#define OPD_ERFC_POLY(p, t)                                                   \
  p = p * t - 0.82215223f;                                                    \
  p = p * t + 1.48851587f;                                                    \
  p = p * t - 1.13520398f;                                                    \
  p = p * t + 0.27886807f;                                                    \
  p = p * t - 0.18628806f;                                                    \
  p = p * t + 0.09678418f;                                                    \
  p = p * t + 0.37409196f;                                                    \
  p = p * t + 1.00002368f;                                                    \
  p = p * t - 1.26551223f
OPD_V8 float opd__erfc_pos(float z) {
  float t = 1.0f / (1.0f + 0.5f * z), p = 0.17087277f;
  OPD_ERFC_POLY(p, t);
  return t * opd__expf_fast(p - z * z);
}
OPD_V8 opd_v8f opd__v8_erfc_pos(opd_v8f z) {
  opd_v8f t = 1.0f / (1.0f + 0.5f * z), p = opd__v8_splat(0.17087277f);
  OPD_ERFC_POLY(p, t);
  return t * opd__v8_expf(p - z * z);
}

OPD_V8 float opd__gelu1(float v) {
  float c = opd__erfc_pos(fabsf(v) * OPD_SQRT1_2);
  return 0.5f * v * (v < 0 ? c : 2.0f - c);
}
OPD_V8 opd_v8f opd__v8_gelu(opd_v8f v) {
  const opd_v8u absmask = (opd_v8u){0} + 0x7fffffffu;
  opd_v8f c = opd__v8_erfc_pos((opd_v8f)((opd_v8u)v & absmask) * OPD_SQRT1_2);
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
