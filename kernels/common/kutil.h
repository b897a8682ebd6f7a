/* Helpers shared by the CPU kernels and shape rules: shape formatting,
 * broadcasting, row iteration, a vectorizable expf, and the attributes
 * that mark a function as a "fast" variant.
 *
 * DESIGN
 * Everything here is either a small inline function that the compiler can
 * vectorize inside the caller's loop (opd__expf_fast) or plain index math
 * used by shape rules and kernels alike, so that a rule and its kernel can
 * never disagree on what a shape means.
 */
#ifndef OPD_KERNELS_KUTIL_H
#define OPD_KERNELS_KUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/dtype.h" /* opd__dtype_size */

#include "kernels/kernel.h"

/* Marks a fast kernel's inner function: -O3 (full vectorizer) and, on
 * x86-64, one clone for x86-64-v3 (AVX2+FMA) next to the portable default,
 * picked at load time. The binary stays portable: no -march=native. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(OPD_NO_CLONES)
#define OPD_FAST \
  __attribute__((optimize("O3", "no-trapping-math"), target_clones("arch=x86-64-v3", "default")))
#else
#define OPD_FAST __attribute__((optimize("O3", "no-trapping-math")))
#endif

/* Elements per parallel chunk worth a thread wakeup (~64 KiB of floats). */
#define OPD_GRAIN_ELEMS 16384

/* Formats shape as "[8,10]" ("[]" for rank 0) into buf (always
 * NUL-terminated, truncated if too small); returns buf. */
const char *opd__shape_str(char *buf, size_t n, const int64_t *shape,
                           int rank);

/* Broadcasts shapes a (rank ra) and b (rank rb) with numpy rules (right
 * aligned; a dim of 1 stretches). Returns 0 with out[0..*rank) filled, or
 * -1 - d where d is the first dim of the result on which they conflict
 * (out is then partly written). */
int opd__bcast_shape(const int64_t *a, int ra, const int64_t *b, int rb,
                     int64_t *out, int *rank);

/* Strides (in elements) of a C-contiguous tensor of `shape` seen as rank
 * `rank_out` (right aligned): dims of extent 1 and missing leading dims get
 * stride 0, so indexing with the broadcast shape reads the right element. */
void opd__bcast_strides(const int64_t *shape, int rank, int rank_out,
                        int64_t *strides);

/* The float dtypes of ops with CUDA kernels: their io masks list all
 * three, their `cpu_dtypes` only float32 (the CPU kernels are float32). */
#define OPD_DT_FLOATS \
  (OPD_DT(FLOAT32) | OPD_DT(FLOAT16) | OPD_DT(BFLOAT16))

/* "float32" for OPD_DTYPE_FLOAT32, "?" for an unknown dtype. */
static inline const char *opd__kdtype_name(int32_t dtype) {
  switch (dtype) {
#define X(name, val, size, str) \
  case OPD_DTYPE_##name:        \
    return str;
    OPD_DTYPE_MAP(X)
#undef X
    default:
      return "?";
  }
}

/* Shape rule of ops whose only output has x's (input 0) shape and dtype. */
int opd__same_shape(opd_kcall_t *call, opd_tshape_t *out);

/* Checks that every input has input 0's dtype. Returns 0, or OPD_EDTYPE
 * with call->err "a is float16 but b is float32" (the inputs' schema
 * names): ops compute in one dtype and never convert implicitly. */
int opd__same_dtype(opd_kcall_t *call);

/* Rows of a (..., C) tensor: numel / C, or 0 when C == 0. */
static inline int64_t opd__rows(const opd_tview_t *t, int64_t C) {
  return C > 0 ? t->numel / C : 0;
}

/* Rows per parallel chunk for rows of C elements, so that each chunk
 * touches at least OPD_GRAIN_ELEMS elements. */
static inline int64_t opd__row_grain(int64_t C) {
  if (C <= 0) return INT64_MAX;
  int64_t g = OPD_GRAIN_ELEMS / C;
  return g < 1 ? 1 : g;
}

/* expf for the fast kernels, vectorizable (no branches, no calls).
 * Range reduction e^x = 2^n e^r, |r| <= ln2/2, Cephes degree-6
 * polynomial: within 2 ulp of expf for -87.3 <= x <= 88.3; below -87.3
 * returns 0 (expf gives a denormal < 1.2e-38), above 88.3 saturates at
 * ~2.4e38 instead of inf (callers pass x <= 0); NaN gives NaN. */
static inline float opd__expf_fast(float x) {
  const float lo = -87.33654475f, hi = 88.3f;
  float xc = x > hi ? hi : x; /* NaN stays NaN: comparisons are false */
  xc = xc < lo ? lo : xc;
  float t = xc * 1.44269504088896341f + 12582912.0f; /* 1.5*2^23: rounds */
  float n = t - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  uint32_t ti, si; /* unsigned: NaN's bits must not overflow */
  memcpy(&ti, &t, sizeof ti);
  si = (ti - 0x4B400000u + 127u) << 23; /* 2^n as float bits */
  float s;
  memcpy(&s, &si, sizeof s);
  float y = p * s;
  return x < lo ? 0.0f : y;
}

#endif /* OPD_KERNELS_KUTIL_H */
