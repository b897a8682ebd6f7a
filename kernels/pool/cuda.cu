/* The pool family on the GPU (max_pool2d, adaptive_avg_pool2d), float32 /
 * float16 / bfloat16 computed in float (rows: ops.c).
 *
 * DESIGN
 * A thread per output element (grid-stride), neighbouring threads on
 * neighbouring outputs of a plane, each reducing its window as the CPU
 * reference does (geom.h: the window; max: padding never wins, a NaN tap
 * does; average: the sum over the adaptive window divided by its size).
 * No scratch, no synchronization: it may be captured into a CUDA graph.
 * Test: build/tests/gpu_kernels (op=max_pool2d, op=adaptive_avg_pool2d).
 */
#include "kernels/cuda/common.cuh"
#include "kernels/pool/geom.h"

template <typename T, bool AVG>
__global__ void pool_kernel(const T *x, T *y, opd_pool_geom_t g) {
  int64_t n = g.planes * g.OH * g.OW, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += stride) {
    int64_t ow = t % g.OW, oh = (t / g.OW) % g.OH, p = t / (g.OW * g.OH);
    const T *xp = x + p * g.H * g.W;
    float r;
    if (AVG) {
      int64_t h0 = oh * g.H / g.OH, h1 = ((oh + 1) * g.H + g.OH - 1) / g.OH;
      int64_t w0 = ow * g.W / g.OW, w1 = ((ow + 1) * g.W + g.OW - 1) / g.OW;
      float s = 0.0f;
      for (int64_t h = h0; h < h1; h++)
        for (int64_t w = w0; w < w1; w++) s += to_f(xp[h * g.W + w]);
      r = s / (float)((h1 - h0) * (w1 - w0));
    } else {
      r = -INFINITY;
      for (int64_t i = 0; i < g.kh; i++) {
        int64_t h = oh * g.sh - g.ph + i * g.dh;
        if (h < 0 || h >= g.H) continue;
        for (int64_t k = 0; k < g.kw; k++) {
          int64_t w = ow * g.sw - g.pw + k * g.dw;
          if (w < 0 || w >= g.W) continue;
          float v = to_f(xp[h * g.W + w]);
          if ((v > r || v != v) && r == r) r = v;
        }
      }
    }
    y[t] = from_f<T>(r);
  }
}

template <bool AVG>
static int pool_run(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  opd_pool_geom_t g;
  int rc = opd__pool_geom(call, AVG, &g);
  if (rc) return rc;
  int64_t n = g.planes * g.OH * g.OW;
  if (n == 0) return 0;
  cudaStream_t st = OPD_STREAM(ctx);
  const opd_tview_t *xv = &call->in[0];
  OPD_FLOAT_DISPATCH(xv->dtype, return opd__cuda_bad_dtype(call, xv->dtype),
    pool_kernel<T, AVG><<<grid_for(n, 256), 256, 0, st>>>(
        (const T *)xv->data, (T *)call->out[0].data, g);
  )
  OPD_CUDA_LAUNCHED();
  return 0;
}

extern "C" int opd__max_pool2d_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  return pool_run<false>(call, ctx);
}
extern "C" int opd__adaptive_avg_pool2d_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  return pool_run<true>(call, ctx);
}
