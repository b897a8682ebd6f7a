/* The norm family on the GPU in float64 (softmax, log_softmax, layernorm,
 * rmsnorm; contract: norm64.h), computed in double as the CPU's float64
 * kernels (cpu64.c).
 *
 * DESIGN
 * float64 is the precision path, not the bandwidth-tuned one, so the
 * kernels are the plain forms of the float ones:
 *   softmax    a thread per column (o, i) of x seen as (outer, C, inner)
 *              (dims.h): max, sum of exp(x - max), then y; x and y each
 *              in any float dtype with one of them float64 (dtype=
 *              converts: x float32 with dtype="float64", x float64 with
 *              dtype="float32", x rounded to y's dtype first as torch
 *              does), computed in double
 *   norms      a warp per row (8 rows per block of 256): the mean, then
 *              the deviations' sums (layernorm: two-pass correction, as
 *              cpu64.c) or the sum of squares, by warp shuffles in double
 * Semantics as cpu64.c: a softmax column holding NaN gives NaN, +inf or
 * all -inf NaN; a norm row holding inf or NaN gives NaN. In place works
 * (each element is read before the thread that owns it writes it).
 * Test: build/tests/gpu_kernels --op f64 (against the CPU's float64).
 */
#include "kernels/cuda/common.cuh"

extern "C" {
#include "kernels/norm/dims.h"
#include "kernels/norm/norm64.h"
}

/* A double stored as TO (rounded through float for the 2-byte dtypes). */
template <typename TO> __device__ __forceinline__ TO store64(double v) {
  return from_f<TO>((float)v);
}
template <> __device__ __forceinline__ double store64<double>(double v) { return v; }

/* x[i] as the computation reads it: in TO's precision first when y is
 * not float64 (torch's dtype= converts x to y's dtype), then double. */
template <typename TI, typename TO> __device__ __forceinline__ double load64(TI v) {
  return (double)to_f(store64<TO>((double)to_f(v)));
}

template <typename TI, typename TO, bool LOG>
__global__ void softmax64_cols(const TI *x, TO *y, int64_t outer, int64_t C,
                               int64_t inner) {
  int64_t n = outer * inner, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < n; c += stride) {
    int64_t o = c / inner, k = c % inner;
    const TI *xc = x + o * C * inner + k;
    TO *yc = y + o * C * inner + k;
    double m = -INFINITY, s = 0;
    bool nan = false;
    for (int64_t i = 0; i < C; i++) {
      double v = load64<TI, TO>(xc[i * inner]);
      if (isnan(v)) nan = true;
      if (v > m) m = v;
    }
    for (int64_t i = 0; i < C; i++) s += exp(load64<TI, TO>(xc[i * inner]) - m);
    double ls = log(s);
    for (int64_t i = 0; i < C; i++) {
      double d = load64<TI, TO>(xc[i * inner]) - m;
      yc[i * inner] = store64<TO>(nan ? (double)NAN : LOG ? d - ls : exp(d) / s);
    }
  }
}

extern "C" int opd__softmax64_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, int lg) {
  const opd_tview_t *xv = &call->in[0], *yv = &call->out[0];
  int64_t outer, C, inner;
  opd__sm_geom(xv, call->attr[0].i, &outer, &C, &inner);
  if (xv->numel == 0) return 0;
  cudaStream_t st = OPD_STREAM(ctx);
  unsigned grid = grid_for(outer * inner, 256);
  OPD_FLOAT_DISPATCH64(xv->dtype, return opd__cuda_bad_dtype(call, xv->dtype),
    typedef T TI;
    OPD_FLOAT_DISPATCH64(yv->dtype, return opd__cuda_bad_dtype(call, yv->dtype),
      if (lg)
        softmax64_cols<TI, T, true><<<grid, 256, 0, st>>>(
            (const TI *)xv->data, (T *)yv->data, outer, C, inner);
      else
        softmax64_cols<TI, T, false><<<grid, 256, 0, st>>>(
            (const TI *)xv->data, (T *)yv->data, outer, C, inner);
    )
  )
  OPD_CUDA_LAUNCHED();
  return 0;
}

__device__ __forceinline__ double warp_sum64(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* Rows of C (a warp each): layernorm (RMS false: w, b may be NULL) or
 * rmsnorm (RMS true: b unused). */
template <bool RMS>
__global__ void norm64_rows(const double *x, double *y, const double *w, const double *b,
                            int64_t rows, int64_t C, double eps) {
  int lane = threadIdx.x & 31;
  int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
  for (int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; r < rows;
       r += warps) {
    const double *xr = x + r * C;
    double *yr = y + r * C;
    double mean = 0, s1 = 0, s2 = 0;
    if (!RMS) {
      for (int64_t i = lane; i < C; i += 32) mean += xr[i];
      mean = warp_sum64(mean) / (double)C;
    }
    for (int64_t i = lane; i < C; i += 32) {
      double d = xr[i] - mean;
      s1 += d;
      s2 += d * d;
    }
    s1 = warp_sum64(s1);
    s2 = warp_sum64(s2);
    double scale;
    if (RMS) {
      scale = 1.0 / sqrt(s2 / (double)C + eps);
    } else {
      double lo = s1 / (double)C, var = (s2 - s1 * lo) / (double)C;
      mean += lo;
      scale = 1.0 / sqrt((var < 0 ? 0 : var) + eps);
    }
    for (int64_t i = lane; i < C; i += 32) {
      double v = (xr[i] - mean) * scale;
      if (w) v *= w[i];
      if (b) v += b[i];
      yr[i] = v;
    }
  }
}

static int norm64_run(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, bool rms) {
  const opd_tview_t *xv = &call->in[0];
  int64_t C = opd__norm_len(call), rows = opd__rows(xv, C);
  if (rows == 0) return 0;
  const double *w = call->n_in > 1 ? (const double *)call->in[1].data : NULL;
  const double *b = !rms && call->n_in > 2 ? (const double *)call->in[2].data : NULL;
  unsigned grid = grid_for((rows + 7) / 8, 1);
  cudaStream_t st = OPD_STREAM(ctx);
  if (rms)
    norm64_rows<true><<<grid, 256, 0, st>>>((const double *)xv->data,
                                            (double *)call->out[0].data, w, NULL, rows, C,
                                            call->attr[0].f);
  else
    norm64_rows<false><<<grid, 256, 0, st>>>((const double *)xv->data,
                                             (double *)call->out[0].data, w, b, rows, C,
                                             call->attr[0].f);
  OPD_CUDA_LAUNCHED();
  return 0;
}

extern "C" int opd__layernorm64_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  return norm64_run(call, ctx, false);
}
extern "C" int opd__rmsnorm64_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  return norm64_run(call, ctx, true);
}
