/* rmsnorm on the GPU over the last dim, float32 / float16 / bfloat16
 * (x and weight of one dtype), computed in float:
 * y = x / sqrt(mean(x^2) + eps) * w.
 *
 * Variants (threads per row from rows_tpr(C), kernels/cuda/rows.cuh):
 * warp per row (C <= 1024) or block per row (128 / 256 / 1024 threads),
 * each with 16-byte packs (VEC: x, y, w aligned and C a multiple of the
 * pack) or scalar. One pass for sum(x^2), one output pass.
 * Test: build/tests/gpu_kernels (op=rmsnorm); bench: --bench.
 */
#include "kernels/cuda/rows.cuh"

template <typename T, int TPR, int THREADS, bool VEC>
__global__ __launch_bounds__(THREADS) void rmsnorm_rows(const T *x, T *y, const T *w,
                                                        int64_t rows, int64_t C, float eps) {
  __shared__ float sh[32];
  int lane = threadIdx.x % TPR;
  OPD_FOR_ROWS(row, rows, TPR, THREADS) {
    const T *xr = x + row * C;
    T *yr = y + row * C;
    float ss = 0.0f;
    row_visit<T, TPR, VEC>(xr, C, lane, [&](int64_t, float v) { ss += v * v; });
    ss = row_sum<TPR, THREADS>(ss, sh);
    float r = 1.0f / sqrtf(ss / (float)C + eps);
    if (w)
      row_map<T, TPR, VEC>(xr, yr, C, lane,
                           [&](int64_t i, float v) { return v * r * to_f(w[i]); });
    else
      row_map<T, TPR, VEC>(xr, yr, C, lane, [&](int64_t, float v) { return v * r; });
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
