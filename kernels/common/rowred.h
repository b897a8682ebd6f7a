/* Explicit 8-wide float vectors (GCC vector extensions) and the row
 * reductions and expf built on them, for the row-wise fast kernels
 * (softmax, layernorm, rmsnorm, gelu).
 *
 * DESIGN
 * Without -ffast-math the compiler may not reorder a float sum or a max,
 * so it will not vectorize them by itself; these keep 16 independent
 * partial results (two 8-wide vectors) and combine them at the end, whose
 * rounding differs from a sequential sum far below the tests' tolerance.
 * The vector types lower to AVX2 in the x86-64-v3 clone of an OPD_FAST
 * function and to pairs of SSE ops in the default one. Everything is
 * inline so each clone gets its own copy. Loads and stores go through
 * memcpy: rows need not be aligned.
 */
#ifndef OPD_KERNELS_ROWRED_H
#define OPD_KERNELS_ROWRED_H

#include <stdint.h>
#include <string.h>

#include "kernels/common/kutil.h"

/* The helpers below pass 32-byte vectors by value; they are always inlined,
 * so the ABI note GCC gives for the non-AVX default clone does not apply. */
#pragma GCC diagnostic ignored "-Wpsabi"
#define OPD_V8 static inline __attribute__((always_inline))

typedef float opd_v8f __attribute__((vector_size(32)));
typedef int32_t opd_v8i __attribute__((vector_size(32)));
typedef uint32_t opd_v8u __attribute__((vector_size(32)));

OPD_V8 opd_v8f opd__v8_load(const float *p) {
  opd_v8f v;
  memcpy(&v, p, sizeof v);
  return v;
}

OPD_V8 void opd__v8_store(float *p, opd_v8f v) {
  memcpy(p, &v, sizeof v);
}

OPD_V8 opd_v8f opd__v8_splat(float s) {
  return (opd_v8f){s, s, s, s, s, s, s, s};
}

/* m ? a : b, lane by lane (m all-ones or zero per lane). */
OPD_V8 opd_v8f opd__v8_sel(opd_v8i m, opd_v8f a, opd_v8f b) {
  return (opd_v8f)((m & (opd_v8i)a) | (~m & (opd_v8i)b));
}

/* a > b ? a : b per lane (b when either is NaN). */
OPD_V8 opd_v8f opd__v8_max(opd_v8f a, opd_v8f b) {
  return opd__v8_sel(a > b, a, b);
}

OPD_V8 float opd__v8_hsum(opd_v8f v) {
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

/* The steps of opd__expf_fast on 8 lanes, without its clamps: e^x for x
 * in [-87.3, 88.3]; outside, garbage (never a trap: OPD_FAST is
 * no-trapping-math) that the callers replace. */
OPD_V8 opd_v8f opd__v8_exp_core(opd_v8f x) {
  const opd_v8f magic = opd__v8_splat(12582912.0f);
  opd_v8f t = x * 1.44269504088896341f + magic;
  opd_v8f n = t - magic;
  opd_v8f r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  opd_v8f p = opd__v8_splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  opd_v8u si = ((opd_v8u)t - 0x4B400000u + 127u) << 23;
  return p * (opd_v8f)si;
}

#define OPD_V8_EXP_LO (-87.33654475f)
#define OPD_V8_EXP_HI 88.3f

/* opd__expf_fast on 8 lanes: same steps, same results (saturates at
 * ~2.4e38 above 88.3, 0 below -87.3). */
OPD_V8 opd_v8f opd__v8_expf(opd_v8f x) {
  const opd_v8f lo = opd__v8_splat(OPD_V8_EXP_LO);
  const opd_v8f hi = opd__v8_splat(OPD_V8_EXP_HI);
  opd_v8f xc = opd__v8_sel(x > hi, hi, x);
  xc = opd__v8_sel(xc < lo, lo, xc);
  return opd__v8_sel(x < lo, opd__v8_splat(0.0f), opd__v8_exp_core(xc));
}

/* opd__v8_expf for x <= 0 (softmax's x - max) or NaN: the same results
 * with one clamp and one select fewer (no upper clamp; the lower one's
 * mask also zeroes the result): 0.39 against 0.46 ns per element in
 * cache on one core of the 2-vCPU VM (2026-12-07). */
OPD_V8 opd_v8f opd__v8_expf_neg(opd_v8f x) {
  opd_v8i lo = x < opd__v8_splat(OPD_V8_EXP_LO);
  opd_v8f y = opd__v8_exp_core(opd__v8_sel(lo, opd__v8_splat(OPD_V8_EXP_LO), x));
  return (opd_v8f)(~lo & (opd_v8i)y);
}

/* e^x on 8 lanes for any x, as opd__v8_expf but +inf above 88.3 where that
 * one saturates (gelu's tanh form takes e^(-2u) of any sign): no clamps,
 * the two selects replace what lies outside, one select less than
 * opd__v8_expf. NaN gives NaN. */
OPD_V8 opd_v8f opd__v8_expf_inf(opd_v8f x) {
  opd_v8f y = opd__v8_exp_core(x);
  y = opd__v8_sel(x < opd__v8_splat(OPD_V8_EXP_LO), opd__v8_splat(0.0f), y);
  return opd__v8_sel(x > opd__v8_splat(OPD_V8_EXP_HI),
                     opd__v8_splat(__builtin_inff()), y);
}

/* Maximum of x[0..n), n >= 1; NaN elements are skipped unless all are
 * NaN (callers propagate NaN through later passes). */
OPD_V8 float opd__row_max(const float *x, int64_t n) {
  opd_v8f m0 = opd__v8_splat(x[0]), m1 = m0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = opd__v8_max(opd__v8_load(x + i), m0);
    m1 = opd__v8_max(opd__v8_load(x + i + 8), m1);
  }
  m0 = opd__v8_max(m0, m1);
  float r = m0[0];
  for (int k = 1; k < 8; k++) r = m0[k] > r ? m0[k] : r;
  for (; i < n; i++) r = x[i] > r ? x[i] : r;
  return r;
}

/* Sum of (x[i] - c) over [0, n): the row sum shifted by c (c = x[0] keeps
 * the terms small for a row whose spread is far below its mean). */
OPD_V8 float opd__row_sum_dev(const float *x, int64_t n, float c) {
  opd_v8f s0 = opd__v8_splat(0.0f), s1 = s0, cv = opd__v8_splat(c);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 += opd__v8_load(x + i) - cv;
    s1 += opd__v8_load(x + i + 8) - cv;
  }
  float r = opd__v8_hsum(s0 + s1);
  for (; i < n; i++) r += x[i] - c;
  return r;
}

/* Sum of (x[i] - c)^2 over [0, n). */
OPD_V8 float opd__row_sqdev(const float *x, int64_t n, float c) {
  opd_v8f s0 = opd__v8_splat(0.0f), s1 = s0, cv = opd__v8_splat(c);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    opd_v8f d0 = opd__v8_load(x + i) - cv, d1 = opd__v8_load(x + i + 8) - cv;
    s0 += d0 * d0;
    s1 += d1 * d1;
  }
  float r = opd__v8_hsum(s0 + s1);
  for (; i < n; i++) r += (x[i] - c) * (x[i] - c);
  return r;
}

/* Both sums of d = x[i] - c over [0, n) in one pass: returns sum(d^2) and
 * leaves sum(d) in *sd (the correction of a two-pass variance). */
OPD_V8 float opd__row_dev2(const float *x, int64_t n, float c, float *sd) {
  opd_v8f q0 = opd__v8_splat(0.0f), q1 = q0, a0 = q0, a1 = q0;
  opd_v8f cv = opd__v8_splat(c);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    opd_v8f d0 = opd__v8_load(x + i) - cv, d1 = opd__v8_load(x + i + 8) - cv;
    a0 += d0;
    a1 += d1;
    q0 += d0 * d0;
    q1 += d1 * d1;
  }
  float a = opd__v8_hsum(a0 + a1), q = opd__v8_hsum(q0 + q1);
  for (; i < n; i++) {
    float d = x[i] - c;
    a += d;
    q += d * d;
  }
  *sd = a;
  return q;
}

#endif /* OPD_KERNELS_ROWRED_H */
