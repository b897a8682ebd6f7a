/* rmsnorm on the GPU over the last dim, float32 / float16 / bfloat16
 * (x and weight of one dtype), computed in float:
 * y = x / sqrt(mean(x^2) + eps) * w.
 *
 * Variants (threads per row from rows_tpr(C), kernels/cuda/rows.cuh):
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
#include <float.h>

#include "kernels/cuda/rows.cuh"

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
  int64_t C = xv->shape[xv->rank - 1], rows = opd__rows(xv, C);
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
