/* gelu on the GPU, float32 / float16 / bfloat16, computed in float.
 *
 * Forms (attribute approximate):
 *   none  y = x Phi(x), Phi(x) = 0.5 erfc(-x/sqrt2), through
 *         q = Phi(-|x|) = 0.5 erfc(|x|/sqrt2) in (0, 1/2]:
 *           x < 0:  y = x q          (no cancellation: q keeps its
 *                                     relative accuracy far into the tail)
 *           x >= 0: y = x (1 - q)    (q <= 1/2: 1 - q loses nothing)
 *         with q from one formula, no branch (GeluErf below):
 *           t = 1 / (1 + kappa a),  q = t 2^(P(t) - a^2 log2(e) / 2),
 *         P a minimax polynomial in t over a = |x| in [0, 14] (beyond 14
 *         q < 1e-44 is 0 in float), fitted in the log2 domain so the error
 *         of q is relative; rcp and ex2 are the MUFU approximations
 *         (rcp.approx / ex2.approx.ftz, 1-2 ulp). Two fits:
 *           float32            degree 7, fit error 2.4e-7 relative
 *           float16, bfloat16  degree 5, fit error 6.4e-6 relative (1/40
 *                              of a float16 ulp, 1/300 of a bfloat16 ulp)
 *         End to end (simulated in float32 against mpmath, per |x| bin),
 *         float32 relative error: <= 6e-7 for |x| < 2, 1.3e-6 for
 *         |x| < 4, 3e-6 at x = -6 (where a 1-ulp change of x itself moves y
 *         by a^2 * 6e-8: the rounding of a^2 costs the same), i.e. < 4% of
 *         gpu_kernels' float32 tolerance 1e-6 + 1e-5|ref| everywhere.
 *         About 16 float instructions + 2 MUFU per element, against CUDA's
 *         normcdff (erfcf with its extra-precision steps), which made the
 *         previous kernel compute-bound: 164 us for float32 and 159 us for
 *         bfloat16 on 8192 x 8192 (79% / 43% of copy bandwidth on the
 *         H200; torch 130 us / 90 us).
 *         x = +inf gives +inf, x = -inf gives NaN (= -inf * 0, as the CPU
 *         reference and torch's 0.5x(1+erf) form), NaN gives NaN.
 *   tanh  y = x / (1 + 2^(-2 log2(e) u)), u = sqrt(2/pi)(x + 0.044715x^3),
 *         which equals 0.5x(1+tanh(u)) without its cancellation for
 *         negative x; ex2.approx and rcp.approx (was: expf and an IEEE
 *         division).
 * Float range, both forms: exact (to the errors above) for every finite
 * x. At the ends nothing saturates: for x far below 0 the exponent is
 * +inf (x^3 overflows in tanh's), ex2 gives inf, rcp(inf) 0 and y = x * 0
 * = -0 (the CPU fast kernel's expf saturated there and gave -1.5 at
 * -3.4e38 before it was fixed); erf's t = rcp(1 + kappa |x|) flushes to 0
 * and q = 0. Results below ~1e-38 in magnitude (x in [-10.1, -10] for tanh,
 * near -13 for erf) come out 0 (the .ftz approximations). x = +inf gives
 * +inf, -inf NaN, NaN NaN in both forms: torch 1.13's values. The same in
 * float16 and bfloat16, whose values convert to float exactly.
 * Variants (kernels/cuda/unary.cuh): tiles of 4 x 256 16-byte packs per
 * block when x and y are 16-byte aligned, else a scalar grid-stride
 * kernel.
 * Test: build/tests/gpu_kernels --op gelu (shapes with odd tails, x in
 * [-6, 6], each dtype, both forms: "gpu op=gelu" and "gpu op=gelu[tanh]"
 * lines; "[extreme]" ones for +-FLT_MAX .. denormals, inf, NaN); bench: build/tests/gpu_kernels --bench --op gelu ("bench
 * op=gelu" lines, pct_copy against a D2D copy of the same bytes; float32,
 * float16, bfloat16 8192 x 8192). The new form is not yet measured on the
 * H200.
 */
#include <string.h>

#include "kernels/cuda/unary.cuh"

__device__ __forceinline__ float rcp_approx(float v) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}
__device__ __forceinline__ float ex2_approx(float v) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}

/* gelu(x) = x Phi(x); DEG 7 (float32) or 5 (half types), see the header.
 * kappa and the coefficients of P come from a linear-programming minimax
 * fit of P(t) = log2(q / t) + a^2 log2(e) / 2 on a dense grid of t (mpmath
 * for erfc), kappa chosen to minimize the fit error for the degree. */
template <int DEG>
struct GeluErf {
  __device__ float operator()(float x) const {
    float a = fabsf(x), t, p;
    if (DEG == 7) {
      t = rcp_approx(fmaf(a, 3.344667554e-01f, 1.0f)); /* kappa */
      p = -2.834053338e-01f;
      p = fmaf(p, t, 1.240591884e+00f);
      p = fmaf(p, t, -1.910109282e+00f);
      p = fmaf(p, t, 1.027321935e+00f);
      p = fmaf(p, t, -2.488401979e-01f);
      p = fmaf(p, t, 6.471383572e-01f);
      p = fmaf(p, t, 1.432634234e+00f);
      p = fmaf(p, t, -2.905332088e+00f);
    } else {
      t = rcp_approx(fmaf(a, 3.495646119e-01f, 1.0f));
      p = 3.334463835e-01f;
      p = fmaf(p, t, -1.053597927e+00f);
      p = fmaf(p, t, 7.443009615e-01f);
      p = fmaf(p, t, 3.456268311e-01f);
      p = fmaf(p, t, 1.474286795e+00f);
      p = fmaf(p, t, -2.844053745e+00f);
    }
    /* q = t 2^(P(t) - a^2 log2(e)/2) = Phi(-|x|) */
    float q = t * ex2_approx(fmaf(a * -7.213475108e-01f, a, p));
    return x * (x < 0.0f ? q : 1.0f - q);
  }
};

struct GeluTanh {
  __device__ float operator()(float x) const {
    /* -2 log2(e) sqrt(2/pi) and that times 0.044715 */
    const float k = -2.302208198144325f, k3 = -0.10294324054522f;
    float e = ex2_approx(x * fmaf(k3, x * x, k));
    return x * rcp_approx(1.0f + e);
  }
};

extern "C" int opd__gelu_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  if (call->attr[0].type == OPD_ATTR_STR && strcmp(call->attr[0].s, "tanh") == 0)
    return unary_run(call, ctx, GeluTanh());
  if (call->in[0].dtype == OPD_DTYPE_FLOAT32) return unary_run(call, ctx, GeluErf<7>());
  return unary_run(call, ctx, GeluErf<5>());
}
