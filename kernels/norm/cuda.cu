/* The norm family on the GPU (softmax, log_softmax, layernorm, rmsnorm):
 * row-wise normalizations, float32 / float16 / bfloat16 computed in float
 * (rows: ops.c; which elements form a row: dims.h); float64 runs
 * cuda64.cu.
 *
 * DESIGN
 * The ops share the row machinery of rows.cuh (threads per row,
 * packed row reads, group reductions, the float-range rescue of the
 * norms); each op's section below is its kernel over it, its variants and
 * float range. A new op of the family: its row in ops.c, its section here
 * and in cpu.c.
 */
#include <float.h>

#include <type_traits>

#include "kernels/norm/rows.cuh"

extern "C" {
#include "kernels/norm/dims.h"
#include "kernels/norm/norm64.h"
}

/* ---- softmax and log_softmax on the GPU, float32 / float16 / bfloat16,
 * computed in float: y = exp(x - max) / sum(exp(x - max)), log_softmax
 * y = (x - max) - log(sum).
 * Along any other dim than the last, or with dtype= giving float16 /
 * bfloat16, softmax_cols runs: a thread per column (o, i) of x seen as
 * (outer, C, inner), the same online max/sum, same semantics. Along the
 * last dim (dtype=float32 on float16 / bfloat16 x too: the _f32 row
 * kernels, scalar float stores):
 *
 * Variants (threads per row from rows_tpr(C), kernels/norm/rows.cuh):
 *   warp per row   C <= 1024 (8 rows per block of 256)
 *   block per row  C <= 4096: 128 threads; <= 32768: 256; else 1024
 * each with 16-byte packs (VEC) when x, y are aligned and C is a multiple
 * of the pack, else scalar. Two passes over the row: an online max/sum
 * (each thread keeps (m, s), rescaling s when m grows; partials combine as
 * s1 e^(m1-M) + s2 e^(m2-M)), then y = e^(x-M) / S from a second read
 * (L2-resident for rows up to a few hundred KiB).
 * Float range: exact for every finite row, huge or denormal: every
 * exponent (x - m, m - v) is <= 0, a difference past -FLT_MAX rounds to
 * -inf and its exp to 0 (the true value is below 1e-38), s and S stay in
 * [1, C]; no rescaling is needed.
 * Semantics as the CPU reference and torch 1.13: a row holding NaN or +inf
 * gives NaN; -inf entries give 0 (log_softmax: -inf); a row of all -inf
 * gives NaN. In place
 * works (each element is read before the same thread writes it).
 * Test: build/tests/gpu_kernels (op=softmax, "[extreme]" and "[inf/nan]"
 * lines for the float range); bench: --bench (op=softmax).
 */

/* One row of softmax (LOG: log_softmax) for the group of TPR lanes, x in
 * T, y in TO (T, or float for dtype=float32: then scalar stores). */
template <typename T, typename TO, int TPR, int THREADS, bool VEC, bool LOG>
__device__ __forceinline__ void softmax_row(const T *xr, TO *yr, int64_t C, int lane,
                                            float *sh) {
  float m = -INFINITY, s = 0.0f;
  row_visit<T, TPR, VEC>(xr, C, lane, [&](int64_t, float v) {
    if (v > m) {
      s = s * expf(m - v) + 1.0f;
      m = v;
    } else if (v != -INFINITY) {
      s += expf(v - m); /* NaN stays NaN */
    }
  });
  float M = row_max<TPR, THREADS>(m, sh);
  s = s == 0.0f ? 0.0f : s * expf(m - M);
  float S = row_sum<TPR, THREADS>(s, sh);
  float ls = logf(S), inv = 1.0f / S;
  auto f = [&](int64_t, float v) { return LOG ? (v - M) - ls : expf(v - M) * inv; };
  if constexpr (std::is_same<T, TO>::value)
    row_map<T, TPR, VEC>(xr, yr, C, lane, f);
  else
    row_visit<T, TPR, VEC>(xr, C, lane, [&](int64_t i, float v) { yr[i] = from_f<TO>(f(i, v)); });
}

/* The row kernels: y in x's dtype (softmax_rows, log_softmax_rows) or in
 * float32 (the _f32 ones, dtype=float32 on float16 / bfloat16 x). */
#define SOFTMAX_ROWS_KERNEL(name, TO, LOG)                                        \
  template <typename T, int TPR, int THREADS, bool VEC>                           \
  __global__ __launch_bounds__(THREADS) void name(const T *x, TO *y, int64_t rows, \
                                                  int64_t C) {                    \
    __shared__ float sh[32];                                                      \
    int lane = threadIdx.x % TPR;                                                 \
    OPD_FOR_ROWS(row, rows, TPR, THREADS) {                                       \
      softmax_row<T, TO, TPR, THREADS, VEC, LOG>(x + row * C, y + row * C, C, lane, sh); \
    }                                                                             \
  }

SOFTMAX_ROWS_KERNEL(softmax_rows, T, false)
SOFTMAX_ROWS_KERNEL(log_softmax_rows, T, true)
SOFTMAX_ROWS_KERNEL(softmax_rows_f32, float, false)
SOFTMAX_ROWS_KERNEL(log_softmax_rows_f32, float, true)

/* Any dim, and dtype= (x in TI, y in TO): a thread per column (o, i) of
 * x seen as (outer, C, inner), neighbouring threads on neighbouring
 * columns (coalesced when inner is large); the same online max/sum, then
 * the output pass. */
template <typename TI, typename TO, bool LOG>
__global__ void softmax_cols(const TI *x, TO *y, int64_t outer, int64_t C, int64_t inner) {
  int64_t n = outer * inner, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += stride) {
    int64_t base = (t / inner) * C * inner + t % inner;
    float m = -INFINITY, s = 0.0f;
    for (int64_t i = 0; i < C; i++) {
      float v = to_f(x[base + i * inner]);
      if (v > m) {
        s = s * expf(m - v) + 1.0f;
        m = v;
      } else if (v != -INFINITY) {
        s += expf(v - m);
      }
    }
    if (m == INFINITY) s = NAN; /* a row holding +inf gives NaN */
    float ls = logf(s), inv = 1.0f / s;
    for (int64_t i = 0; i < C; i++) {
      float v = to_f(x[base + i * inner]);
      y[base + i * inner] = from_f<TO>(LOG ? (v - m) - ls : expf(v - m) * inv);
    }
  }
}

/* softmax / log_softmax on ctx's stream: the row kernels for the last dim
 * without a dtype change, softmax_cols otherwise. */
template <bool LOG>
static int softmax_run(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  const opd_tview_t *xv = &call->in[0], *yv = &call->out[0];
  if (xv->dtype == OPD_DTYPE_FLOAT64 || yv->dtype == OPD_DTYPE_FLOAT64)
    return opd__softmax64_cuda(call, ctx, LOG); /* cuda64.cu */
  int64_t outer, C, inner;
  opd__sm_geom(xv, call->attr[0].i, &outer, &C, &inner);
  if (xv->numel == 0) return 0;
  cudaStream_t st = OPD_STREAM(ctx);
  int64_t rows = outer;
  if (inner == 1 && yv->dtype == xv->dtype) {
    OPD_FLOAT_DISPATCH(xv->dtype, return opd__cuda_bad_dtype(call, xv->dtype),
      const T *x = (const T *)xv->data;
      T *y = (T *)yv->data;
      bool vec = aligned16(x) && aligned16(y) && C % Pack<T>::N == 0;
      if (LOG && vec) {
        OPD_ROWS_LAUNCH(log_softmax_rows, T, true, C, rows, st, x, y, rows, C)
      } else if (LOG) {
        OPD_ROWS_LAUNCH(log_softmax_rows, T, false, C, rows, st, x, y, rows, C)
      } else if (vec) {
        OPD_ROWS_LAUNCH(softmax_rows, T, true, C, rows, st, x, y, rows, C)
      } else {
        OPD_ROWS_LAUNCH(softmax_rows, T, false, C, rows, st, x, y, rows, C)
      }
    )
  } else if (inner == 1 && yv->dtype == OPD_DTYPE_FLOAT32) { /* half x, float y */
    OPD_FLOAT_DISPATCH(xv->dtype, return opd__cuda_bad_dtype(call, xv->dtype),
      const T *x = (const T *)xv->data;
      float *y = (float *)yv->data;
      bool vec = aligned16(x) && C % Pack<T>::N == 0;
      if (LOG && vec) {
        OPD_ROWS_LAUNCH(log_softmax_rows_f32, T, true, C, rows, st, x, y, rows, C)
      } else if (LOG) {
        OPD_ROWS_LAUNCH(log_softmax_rows_f32, T, false, C, rows, st, x, y, rows, C)
      } else if (vec) {
        OPD_ROWS_LAUNCH(softmax_rows_f32, T, true, C, rows, st, x, y, rows, C)
      } else {
        OPD_ROWS_LAUNCH(softmax_rows_f32, T, false, C, rows, st, x, y, rows, C)
      }
    )
  } else {
    OPD_FLOAT_DISPATCH(xv->dtype, return opd__cuda_bad_dtype(call, xv->dtype),
      typedef T TI;
      OPD_FLOAT_DISPATCH(yv->dtype, return opd__cuda_bad_dtype(call, yv->dtype),
        softmax_cols<TI, T, LOG><<<grid_for(outer * inner, 256), 256, 0, st>>>(
            (const TI *)xv->data, (T *)yv->data, outer, C, inner);
      )
    )
  }
  OPD_CUDA_LAUNCHED();
  return 0;
}

extern "C" int opd__softmax_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  return softmax_run<false>(call, ctx);
}

extern "C" int opd__log_softmax_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  return softmax_run<true>(call, ctx);
}

/* ---- layernorm on the GPU over the last dim, float32 / float16 / bfloat16
 * (x, weight, bias of one dtype), computed in float:
 * y = (x - mean) / sqrt(var + eps) * w + b, var biased.
 *
 * Variants (threads per row from rows_tpr(C), kernels/norm/rows.cuh):
 * warp per row (C <= 1024) or block per row (128 / 256 / 1024 threads),
 * each with 16-byte packs (VEC: x, y, w, b aligned and C a multiple of the
 * pack) or scalar. The common case first: float sums shifted by K =
 * x[row, 0], s1 = sum(x - K), s2 = sum((x - K)^2), as fast as before the
 * exact path existed, kept when m2 = s2/C <= 8 var (K within ~2.6 std of
 * the mean, so the cancellation costs at most 3 bits) and var + eps is
 * well inside float's range; y = ((x - K) - s1/C) rstd w + b. Any other
 * row (an outlier at x[0], a huge or denormal row, inf or NaN) is
 * computed again by the careful path, one statistics pass and one output
 * pass:
 *   statistics  each lane sums its elements in float, shifted by its own
 *               first element (lane_stats); the lanes' (n, mean, m2) merge
 *               pairwise in double without cancellation (stats_merge,
 *               row_stats). The previous kernel shifted the whole row by
 *               K = x[row, 0] and took var = s2/C - (s1/C)^2: every digit
 *               lost when x[row, 0] was an outlier of a long row.
 *   output      y = ((x - hi) - lo) rstd w + b, hi + lo = the double mean
 *               split into two floats, so that neither a row whose spread
 *               is a few ulps of its mean (1e30 and its neighbour) nor one
 *               whose mean is ~1e4 std off x[0] loses digits.
 * Float range: exact to float rounding while the lanes' sums stay finite
 * and var + eps >= 2^-60 (squares lost to underflow, < 2^-126 each, do
 * not count): |x| below ~1e18, down to denormals when eps >= 2^-60. A row
 * outside that (|x| ~1e20 gave 0 before; a row of denormals with eps = 0
 * gave NaN) takes a second pass of the same code, the exact path: one more
 * read for max |x| (row_amax), the statistics of x * 2^-e (pow2_scale:
 * |x 2^-e| < 4), rstd_s = 1 / sqrt(var_s + eps 2^-2e) in double (clamped
 * to FLT_MAX: a constant row with eps > 0 gives 0, not 0 * inf), y =
 * ((x 2^-e - hi_s) - lo_s) rstd_s w + b. A row holding inf or NaN gives
 * NaN throughout, as torch 1.13. The check is per row on row-uniform
 * values (a group never splits). The common case does the per-element work
 * of the kernel before the careful path existed, plus one subtraction in
 * the output pass; the careful path costs a second pass over the row.
 * float16 never leaves float's range (65504^2 C); bfloat16 has float32's.
 * Test: build/tests/gpu_kernels --op layernorm ("gpu op=layernorm" lines,
 * "[extreme]" ones for the float range); bench: --bench.
 */

/* The common case keeps its float sums while m2 <= this * var: the
 * cancellation in var = m2 - dm^2 then costs at most 3 bits. */
#define LN_FAST_SPREAD 8.0f

/* yr = ((x sc - hi) - lo) rstd w + b for this lane's elements. */
template <typename T, int TPR, bool VEC>
__device__ __forceinline__ void ln_out(const T *xr, T *yr, const T *w, const T *b, int64_t C,
                                       int lane, float hi, float lo, float rstd, float sc) {
  auto nz = [=](float v) { return ((v * sc - hi) - lo) * rstd; };
  if (w && b)
    row_map<T, TPR, VEC>(xr, yr, C, lane,
                         [&](int64_t i, float v) { return nz(v) * to_f(w[i]) + to_f(b[i]); });
  else if (w)
    row_map<T, TPR, VEC>(xr, yr, C, lane, [&](int64_t i, float v) { return nz(v) * to_f(w[i]); });
  else
    row_map<T, TPR, VEC>(xr, yr, C, lane, [&](int64_t, float v) { return nz(v); });
}

/* The careful path of one row (see layernorm's section). Measured
 * (2026-12-01, bench/results/2026-12-01-numerics-gpu.txt): inlined, with no
 * occupancy asked of __launch_bounds__, the common case runs as fast as
 * the kernel before this path existed (out of line, or with the previous
 * register bound forced, it ran 8-10% slower at 8192 x 8192). */
template <typename T, int TPR, int THREADS, bool VEC>
__device__ __forceinline__ void ln_exact_row(const T *xr, T *yr, const T *w,
                                                       const T *b, int64_t C, float eps,
                                                       int lane, double *shd, float *sh) {
  /* pass 0: x as it is; pass 1 (the exact path, rare): x * 2^-e */
  float sc = 1.0f;
  RowStats st;
  double ve;
#pragma unroll 1
  for (int pass = 0;; pass++) {
    st = row_stats<TPR, THREADS>(lane_stats<T, TPR, VEC>(xr, C, lane, sc), shd);
    ve = st.m2 / (double)C + (double)eps * sc * sc; /* NaN in the row: NaN */
    if (pass == 1 || (isfinite(st.mean) && ve >= 0x1p-60 && ve <= FLT_MAX)) break;
    float a = row_amax<T, TPR, THREADS, VEC>(xr, C, lane, sh);
    if (!(a <= FLT_MAX)) { /* inf in the row: NaN throughout */
      st.mean = ve = NAN;
      break;
    }
    sc = pow2_scale(a);
  }
  double r = 1.0 / sqrt(ve);
  float rstd = r > FLT_MAX && ve > 0 ? FLT_MAX : (float)r; /* constant row: 0, not 0 * inf */
  float hi = (float)st.mean, lo = (float)(st.mean - hi);
  ln_out<T, TPR, VEC>(xr, yr, w, b, C, lane, hi, lo, rstd, sc);
}

template <typename T, int TPR, int THREADS, bool VEC>
__global__ __launch_bounds__(THREADS) void layernorm_rows(
    const T *x, T *y, const T *w, const T *b, int64_t rows, int64_t C, float eps) {
  __shared__ double shd[96];
  __shared__ float sh[32];
  int lane = threadIdx.x % TPR;
  OPD_FOR_ROWS(row, rows, TPR, THREADS) {
    const T *xr = x + row * C;
    T *yr = y + row * C;
    /* the common case: the previous kernel's shifted float sums, K =
     * x[row, 0], kept when they cannot have cancelled: the mean of the
     * squared shifts m2 = var + (mean - K)^2 is at most LN_FAST_SPREAD
     * times var (K within ~2.6 std of the mean: all but ~1% of the rows
     * of ordinary data), and var + eps is well inside float's range */
    {
      float K = to_f(xr[0]), s1 = 0.0f, s2 = 0.0f;
      row_visit<T, TPR, VEC>(xr, C, lane, [&](int64_t, float v) {
        float d = v - K;
        s1 += d;
        s2 += d * d;
      });
      s1 = row_sum<TPR, THREADS>(s1, sh);
      s2 = row_sum<TPR, THREADS>(s2, sh);
      float dm = s1 / (float)C, m2 = s2 / (float)C, var = m2 - dm * dm;
      float ve = var + eps;
      if (m2 <= LN_FAST_SPREAD * var && ve >= 0x1p-60f && ve <= 0x1p100f) {
        /* y = ((x - K) - dm) rstd w + b: x - K is exact for x near K */
        ln_out<T, TPR, VEC>(xr, yr, w, b, C, lane, K, dm, rsqrtf(ve), 1.0f);
        continue;
      }
    }
    ln_exact_row<T, TPR, THREADS, VEC>(xr, yr, w, b, C, eps, lane, shd, sh);
  }
}

extern "C" int opd__layernorm_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  const opd_tview_t *xv = &call->in[0];
  if (xv->dtype == OPD_DTYPE_FLOAT64) return opd__layernorm64_cuda(call, ctx); /* cuda64.cu */
  int64_t C = opd__norm_len(call), rows = opd__rows(xv, C);
  if (rows == 0) return 0;
  cudaStream_t st = OPD_STREAM(ctx);
  float eps = (float)call->attr[0].f;
  OPD_FLOAT_DISPATCH(xv->dtype, return opd__cuda_bad_dtype(call, xv->dtype),
    const T *x = (const T *)xv->data;
    T *y = (T *)call->out[0].data;
    const T *w = call->n_in > 1 ? (const T *)call->in[1].data : NULL;
    const T *b = call->n_in > 2 ? (const T *)call->in[2].data : NULL;
    bool vec = aligned16(x) && aligned16(y) && aligned16(w) && aligned16(b) &&
               C % Pack<T>::N == 0;
    if (vec) {
      OPD_ROWS_LAUNCH(layernorm_rows, T, true, C, rows, st, x, y, w, b, rows, C, eps)
    } else {
      OPD_ROWS_LAUNCH(layernorm_rows, T, false, C, rows, st, x, y, w, b, rows, C, eps)
    }
  )
  OPD_CUDA_LAUNCHED();
  return 0;
}

/* ---- rmsnorm on the GPU over the last dim, float32 / float16 / bfloat16
 * (x and weight of one dtype), computed in float:
 * y = x / sqrt(mean(x^2) + eps) * w.
 *
 * Variants (threads per row from rows_tpr(C), kernels/norm/rows.cuh):
 * warp per row (C <= 1024) or block per row (128 / 256 / 1024 threads),
 * each with 16-byte packs (VEC: x, y, w aligned and C a multiple of the
 * pack) or scalar. One pass for sum(x^2), one output pass.
 * Float range: exact to float rounding while sum(x^2) is finite and
 * mean(x^2) + eps >= 2^-60 (squares lost to underflow, < 2^-126 each, do
 * not count): |x| up to ~1.8e19 / sqrt(C), down to denormals when
 * eps >= 2^-60. A row outside that (0 above ~1.8e19 before; inf for a row
 * of denormals with eps = 0) is redone exactly: one more read for max |x|
 * (row_amax), sum((x 2^-e)^2) (pow2_scale: |x 2^-e| < 4), g = 1 /
 * sqrt(mean((x 2^-e)^2) + eps 2^-2e) in double (g <= 2 sqrt(C) for a
 * nonzero row), y = (x 2^-e) g w. A row holding inf (and no NaN) gives
 * x * 0 * w (NaN where x is inf, 0 elsewhere), a row holding NaN all NaN,
 * an all-zero row with eps = 0 NaN: torch's values. The check is per row
 * on row-uniform values (a group never splits); the common case does the
 * work it did plus one multiply by the scale (1) per output element.
 * float16 never leaves float's range (65504^2 C); bfloat16 has float32's.
 * Test: build/tests/gpu_kernels --op rmsnorm ("gpu op=rmsnorm" lines,
 * "[extreme]" ones for the float range); bench: --bench.
 */

/* Launch bounds with 2048 / THREADS blocks per SM: the previous kernel's
 * 32 registers (full occupancy), which the exact path would otherwise
 * push to 40-48; no spills at this bound (ptxas -v). */
template <typename T, int TPR, int THREADS, bool VEC>
__global__ __launch_bounds__(THREADS, 2048 / (THREADS)) void rmsnorm_rows(
    const T *x, T *y, const T *w, int64_t rows, int64_t C, float eps) {
  __shared__ float sh[32];
  int lane = threadIdx.x % TPR;
  OPD_FOR_ROWS(row, rows, TPR, THREADS) {
    const T *xr = x + row * C;
    T *yr = y + row * C;
    float ss = 0.0f;
    row_visit<T, TPR, VEC>(xr, C, lane, [&](int64_t, float v) { ss += v * v; });
    ss = row_sum<TPR, THREADS>(ss, sh);
    float ms = ss / (float)C + eps, sc = 1.0f, g;
    if (isnan(ms) || (ms >= 0x1p-60f && ms <= FLT_MAX)) { /* the common case; NaN rows */
      g = 1.0f / sqrtf(ms);
    } else { /* the exact path */
      float a = row_amax<T, TPR, THREADS, VEC>(xr, C, lane, sh);
      if (a <= FLT_MAX) {
        sc = pow2_scale(a);
        float s2 = 0.0f;
        row_visit<T, TPR, VEC>(xr, C, lane, [&](int64_t, float v) {
          v *= sc;
          s2 += v * v;
        });
        s2 = row_sum<TPR, THREADS>(s2, sh);
        g = (float)(1.0 / sqrt((double)s2 / (double)C + (double)eps * sc * sc));
      } else {
        g = 0.0f; /* inf in the row: rsqrt(inf) = 0 */
      }
    }
    if (w)
      row_map<T, TPR, VEC>(xr, yr, C, lane,
                           [&](int64_t i, float v) { return v * sc * g * to_f(w[i]); });
    else
      row_map<T, TPR, VEC>(xr, yr, C, lane, [&](int64_t, float v) { return v * sc * g; });
  }
}

extern "C" int opd__rmsnorm_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  const opd_tview_t *xv = &call->in[0];
  if (xv->dtype == OPD_DTYPE_FLOAT64) return opd__rmsnorm64_cuda(call, ctx); /* cuda64.cu */
  int64_t C = opd__norm_len(call), rows = opd__rows(xv, C);
  if (rows == 0) return 0;
  cudaStream_t st = OPD_STREAM(ctx);
  float eps = (float)call->attr[0].f;
  OPD_FLOAT_DISPATCH(xv->dtype, return opd__cuda_bad_dtype(call, xv->dtype),
    const T *x = (const T *)xv->data;
    T *y = (T *)call->out[0].data;
    const T *w = call->n_in > 1 ? (const T *)call->in[1].data : NULL;
    bool vec = aligned16(x) && aligned16(y) && aligned16(w) && C % Pack<T>::N == 0;
    if (vec) {
      OPD_ROWS_LAUNCH(rmsnorm_rows, T, true, C, rows, st, x, y, w, rows, C, eps)
    } else {
      OPD_ROWS_LAUNCH(rmsnorm_rows, T, false, C, rows, st, x, y, w, rows, C, eps)
    }
  )
  OPD_CUDA_LAUNCHED();
  return 0;
}
