/* conv2d's grouped variant on the GPU (launch.h: opd__conv2d_run_grouped):
 * any groups, depthwise included, any R x S, stride, dilation and
 * padding, float32 / float16 / bfloat16 with float accumulation.
 *
 * DESIGN
 * A direct kernel, one thread per output element: blockIdx.x walks the
 * output planes (n, k), blockIdx.y and the threads the plane's pixels
 * (p, q), q fastest, so that a block reads neighbouring input columns and
 * one output channel's weights (a broadcast), with one 32-bit division
 * per pixel for its (p, q). Each thread sums the C/G input channels of
 * k's group over the R x S taps that fall inside the image. For depthwise
 * convolutions (C/G = 1, the MobileNet case) that is R*S loads per output,
 * cached in L1; the GEMM variants would waste their tiles on a reduction
 * of R*S. No scratch, no synchronization (capturable).
 * Test: build/tests/gpu_kernels --op conv2d ("gpu op=conv2d[grouped]"
 * lines, and "" (AUTO) on the grouped / depthwise / unbatched cases).
 */
#include "kernels/cuda/common.cuh"

extern "C" {
#include "kernels/conv2d/plan.h"
}
#include "kernels/conv2d/launch.h"

typedef struct grouped_geom {
  int64_t C, H, W, K, P, Q;        /* as conv_plan_t */
  int R, S, Cg, Kg;                /* kernel; channels per group in, out */
  int sh, sw, ph, pw, dh, dw;
} grouped_geom_t;

template <typename T>
__global__ void conv_grouped(const T *__restrict__ x, const T *__restrict__ w,
                             const T *__restrict__ bias, T *__restrict__ y, int64_t planes,
                             grouped_geom_t g) {
  int pq = (int)(g.P * g.Q); /* the launcher checked it fits */
  for (int64_t pl = blockIdx.x; pl < planes; pl += gridDim.x) {
    int64_t k = pl % g.K, n = pl / g.K;
    const T *xg = x + (n * g.C + k / g.Kg * g.Cg) * g.H * g.W; /* the group's channels */
    const T *wk = w + k * g.Cg * g.R * g.S;
    float b0 = bias ? to_f(bias[k]) : 0.0f;
    T *yp = y + pl * pq;
    for (int e = blockIdx.y * blockDim.x + threadIdx.x; e < pq; e += gridDim.y * blockDim.x) {
      int op = e / (int)g.Q, oq = e - op * (int)g.Q;
      int64_t ih0 = (int64_t)op * g.sh - g.ph, iw0 = (int64_t)oq * g.sw - g.pw;
      float acc = b0;
      for (int c = 0; c < g.Cg; c++) {
        const T *xc = xg + (int64_t)c * g.H * g.W;
        const T *wc = wk + (int64_t)c * g.R * g.S;
        for (int r = 0; r < g.R; r++) {
          int64_t ih = ih0 + (int64_t)r * g.dh;
          if (ih < 0 || ih >= g.H) continue;
          const T *row = xc + ih * g.W;
          for (int s = 0; s < g.S; s++) {
            int64_t iw = iw0 + (int64_t)s * g.dw;
            if (iw >= 0 && iw < g.W) acc += to_f(row[iw]) * to_f(wc[r * g.S + s]);
          }
        }
      }
      yp[e] = from_f<T>(acc);
    }
  }
}

template <typename T>
static int run_grouped(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, const conv_plan_t *p) {
  if (p->R * p->S > INT32_MAX || p->C / p->G > INT32_MAX || p->K / p->G > INT32_MAX ||
      p->P * p->Q > INT32_MAX / 2) /* e + the grid stride stays in int */
    return opd__kerr(call, OPD_ELIMIT, "kernel, group or output plane too large for the "
                                       "grouped kernel");
  grouped_geom_t g = {p->C, p->H, p->W, p->K, p->P, p->Q,
                      (int)p->R, (int)p->S, (int)(p->C / p->G), (int)(p->K / p->G),
                      (int)p->sh, (int)p->sw, (int)p->ph, (int)p->pw, (int)p->dh, (int)p->dw};
  int64_t planes = p->N * p->K, by = (p->P * p->Q + 255) / 256;
  dim3 grid((unsigned)(planes < INT32_MAX ? planes : INT32_MAX),
            (unsigned)(by < 65535 ? by : 65535));
  conv_grouped<T><<<grid, 256, 0, OPD_STREAM(ctx)>>>(
      (const T *)call->in[0].data, (const T *)call->in[1].data,
      p->has_bias ? (const T *)call->in[2].data : NULL, (T *)call->out[0].data, planes, g);
  OPD_CUDA_LAUNCHED();
  return 0;
}

int opd__conv2d_run_grouped(opd_kcall_t *call, const opd_cuda_ctx_t *ctx,
                            const conv_plan_t *p) {
  int32_t dt = call->out[0].dtype;
  OPD_FLOAT_DISPATCH(dt, return opd__cuda_bad_dtype(call, dt),
    return run_grouped<T>(call, ctx, p);
  )
  return 0;
}
