/* softmax on the GPU along the last dim, float32 / float16 / bfloat16,
 * computed in float: y = exp(x - max) / sum(exp(x - max)).
 *
 * Variants (threads per row from rows_tpr(C), kernels/cuda/rows.cuh):
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
 * gives NaN; -inf entries give 0; a row of all -inf gives NaN. In place
 * works (each element is read before the same thread writes it).
 * Test: build/tests/gpu_kernels (op=softmax, "[extreme]" and "[inf/nan]"
 * lines for the float range); bench: --bench (op=softmax).
 */
#include "kernels/cuda/rows.cuh"

template <typename T, int TPR, int THREADS, bool VEC>
__global__ __launch_bounds__(THREADS) void softmax_rows(const T *x, T *y, int64_t rows,
                                                        int64_t C) {
  __shared__ float sh[32];
  int lane = threadIdx.x % TPR;
  OPD_FOR_ROWS(row, rows, TPR, THREADS) {
    const T *xr = x + row * C;
    T *yr = y + row * C;
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
    float inv = 1.0f / S;
    row_map<T, TPR, VEC>(xr, yr, C, lane, [&](int64_t, float v) { return expf(v - M) * inv; });
  }
}

extern "C" int opd__softmax_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  const opd_tview_t *xv = &call->in[0];
  int64_t C = xv->rank > 0 ? xv->shape[xv->rank - 1] : 1;
  int64_t rows = opd__rows(xv, C);
  if (rows == 0) return 0;
  cudaStream_t st = OPD_STREAM(ctx);
  OPD_FLOAT_DISPATCH(xv->dtype, return opd__cuda_bad_dtype(call, xv->dtype),
    const T *x = (const T *)xv->data;
    T *y = (T *)call->out[0].data;
    bool vec = aligned16(x) && aligned16(y) && C % Pack<T>::N == 0;
    if (vec) {
      OPD_ROWS_LAUNCH(softmax_rows, T, true, C, rows, st, x, y, rows, C)
    } else {
      OPD_ROWS_LAUNCH(softmax_rows, T, false, C, rows, st, x, y, rows, C)
    }
  )
  OPD_CUDA_LAUNCHED();
  return 0;
}
