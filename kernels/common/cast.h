/* Float dtypes on the CPU: float16 / bfloat16 <-> float32 conversions, and
 * the wrapper that runs a float32 or float64 kernel on a call of any float
 * dtype.
 *
 * DESIGN
 * The CPU kernels compute in float32 (their fast variants) or float64
 * (their float64 variants). A call whose float tensors are not all of the
 * compute dtype goes through opd__cast_run: the compute dtype is float64
 * when output 0 is float64, else float32 (float16 and bfloat16 load as
 * float, compute in float and store rounded, as torch's CPU kernels do;
 * softmax's dtype= converts x first, as torch does); every float tensor of
 * another dtype is converted into a contiguous scratch tensor of the
 * compute dtype (inputs before the kernel, outputs after it, rounded to
 * nearest even), integer tensors (indices, conditions) stay as they are.
 * The kernel sees a call whose float tensors all have the compute dtype,
 * so it never converts, and each conversion is one pass over the tensor.
 * The conversions are portable C (no F16C): NaN stays a quiet NaN, values
 * past the half range round to +-inf, subnormals are kept.
 */
#ifndef OPD_KERNELS_COMMON_CAST_H
#define OPD_KERNELS_COMMON_CAST_H

#include <stdint.h>
#include <string.h>

#include "kernels/kernel.h"

/* The float dtypes the CPU kernels of the element-wise, row-wise, reduce
 * and matmul families take (in their io masks and cpu_dtypes). */
#define OPD_DT_FLOATS64                                                   \
  (OPD_DT(FLOAT32) | OPD_DT(FLOAT16) | OPD_DT(BFLOAT16) | OPD_DT(FLOAT64))

static inline float opd__bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Rounded to nearest even; NaN stays a (quiet) NaN. */
static inline uint16_t opd__f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline float opd__f16_to_f32(uint16_t h) {
  uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu,
           m = h & 0x3ffu, u;
  if (e == 0x1f) {
    u = s | 0x7f800000u | (m << 13);
  } else if (e != 0) {
    u = s | ((e + 112u) << 23) | (m << 13);
  } else { /* zero or subnormal: m * 2^-24 */
    float f = (float)m * 0x1p-24f;
    return s ? -f : f;
  }
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Rounded to nearest even (F. Giesen's float_to_half_fast3_rtne): past
 * 65504 (from 65520 on) +-inf, NaN a quiet NaN, subnormals kept. */
static inline uint16_t opd__f32_to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  uint16_t s = (uint16_t)((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return s | 0x7e00u;  /* NaN */
  if (u >= 0x477ff000u) return s | 0x7c00u; /* rounds past 65504: inf */
  if (u < 0x38800000u) {                    /* below 2^-14: subnormal */
    float a, half = 0.5f;                   /* ulp 2^-24 at 0.5: the add
                                               rounds to the half's ulp */
    uint32_t v, hb;
    memcpy(&a, &u, sizeof a);
    a += half;
    memcpy(&v, &a, sizeof v);
    memcpy(&hb, &half, sizeof hb);
    return s | (uint16_t)(v - hb);
  }
  uint32_t odd = (u >> 13) & 1u;
  u += (uint32_t)(15 - 127) * (1u << 23) + 0xfffu + odd; /* rebias, round */
  return s | (uint16_t)(u >> 13);
}

/* 1 when dtype is one of the four float dtypes. */
static inline int opd__is_float_dtype(int32_t dt) {
  return dt == OPD_DTYPE_FLOAT32 || dt == OPD_DTYPE_FLOAT16 ||
         dt == OPD_DTYPE_BFLOAT16 || dt == OPD_DTYPE_FLOAT64;
}

/* 1 when a float tensor of call (input or output) has a dtype other than
 * the call's compute dtype (float64 when output 0 is float64, else
 * float32): the kernel must then run through opd__cast_run. */
int opd__cast_needed(const opd_kcall_t *call);

/* Runs f32 (compute dtype float32) or f64 (float64; NULL: the op has no
 * float64 kernel, OPD_EDTYPE) on a copy of call whose float tensors of
 * another dtype are converted scratch tensors (see DESIGN), then writes
 * the converted outputs back. Returns the kernel's result (its message
 * copied into call->err), or OPD_ENOMEM with nothing written. */
int opd__cast_run(opd_kcall_t *call, opd_cpu_fn f32, opd_cpu_fn f64);

/* Converts n contiguous elements of float dtype `from` at src into dtype
 * `to` at dst (any of the four float dtypes each way). */
void opd__cast_copy(void *dst, int32_t to, const void *src, int32_t from,
                    int64_t n);

/* The entry points' first line: a call with float tensors of another
 * dtype than its compute dtype runs f32 / f64 through opd__cast_run; a
 * float64 call runs f64 directly. */
#define OPD_CAST_DISPATCH(call, f32, f64)                                  \
  do {                                                                     \
    if (opd__cast_needed(call)) return opd__cast_run(call, f32, f64);      \
    if ((call)->out[0].dtype == OPD_DTYPE_FLOAT64) return (f64)(call);     \
  } while (0)

#endif /* OPD_KERNELS_COMMON_CAST_H */
