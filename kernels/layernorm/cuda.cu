/* layernorm on the GPU over the last dim, float32 / float16 / bfloat16
 * (x, weight, bias of one dtype), computed in float:
 * y = (x - mean) / sqrt(var + eps) * w + b, var biased.
 *
 * Variants (threads per row from rows_tpr(C), kernels/cuda/rows.cuh):
 * warp per row (C <= 1024) or block per row (128 / 256 / 1024 threads),
 * each with 16-byte packs (VEC: x, y, w, b aligned and C a multiple of the
 * pack) or scalar. One statistics pass with shifted sums, K = x[row, 0]:
 * s1 = sum(x - K), s2 = sum((x - K)^2), mean = K + s1/C,
 * var = s2/C - (s1/C)^2 (the shift keeps the cancellation small: K is a
 * sample of the row, within a few std of its mean), then one output pass.
 * Test: build/tests/gpu_kernels (op=layernorm); bench: --bench.
 */
#include "kernels/cuda/rows.cuh"

template <typename T, int TPR, int THREADS, bool VEC>
__global__ __launch_bounds__(THREADS) void layernorm_rows(const T *x, T *y, const T *w,
                                                          const T *b, int64_t rows,
                                                          int64_t C, float eps) {
  __shared__ float sh[32];
  int lane = threadIdx.x % TPR;
  OPD_FOR_ROWS(row, rows, TPR, THREADS) {
    const T *xr = x + row * C;
    T *yr = y + row * C;
    float K = to_f(xr[0]), s1 = 0.0f, s2 = 0.0f;
    row_visit<T, TPR, VEC>(xr, C, lane, [&](int64_t, float v) {
      float d = v - K;
      s1 += d;
      s2 += d * d;
    });
    s1 = row_sum<TPR, THREADS>(s1, sh);
    s2 = row_sum<TPR, THREADS>(s2, sh);
    float dm = s1 / (float)C;
    float var = fmaxf(s2 / (float)C - dm * dm, 0.0f);
    float mean = K + dm, rstd = 1.0f / sqrtf(var + eps);
    if (w && b)
      row_map<T, TPR, VEC>(xr, yr, C, lane, [&](int64_t i, float v) {
        return (v - mean) * rstd * to_f(w[i]) + to_f(b[i]);
      });
    else if (w)
      row_map<T, TPR, VEC>(xr, yr, C, lane,
                           [&](int64_t i, float v) { return (v - mean) * rstd * to_f(w[i]); });
    else
      row_map<T, TPR, VEC>(xr, yr, C, lane,
                           [&](int64_t, float v) { return (v - mean) * rstd; });
  }
}

extern "C" int opd__layernorm_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  const opd_tview_t *xv = &call->in[0];
  int64_t C = xv->shape[xv->rank - 1], rows = opd__rows(xv, C);
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
