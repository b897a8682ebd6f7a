/* conv2d's grouped variant on the GPU (launch.h: opd__conv2d_run_grouped):
 * any groups, depthwise included, any R x S, stride, dilation and
 * padding, float32 / float16 / bfloat16 with float accumulation.
 *
 * DESIGN
 * A direct kernel, one thread per output element (n, k, p, q), q fastest
 * so that a warp reads neighbouring input columns and, mostly, one
 * output channel's weights (a broadcast); it sums the C/G input channels
 * of k's group over the R x S taps that fall inside the image. For
 * depthwise convolutions (C/G = 1, the MobileNet case) that is R*S loads
 * per output, cached in L1; the GEMM variants would waste their tiles on
 * a reduction of R*S. No scratch, no synchronization (capturable).
 * Grid-stride over N*K*P*Q in int64.
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
                             const T *__restrict__ bias, T *__restrict__ y, int64_t total,
                             grouped_geom_t g) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
    int64_t oq = e % g.Q, t = e / g.Q;
    int64_t op = t % g.P;
    t /= g.P;
    int64_t k = t % g.K, n = t / g.K;
    const T *xg = x + (n * g.C + k / g.Kg * g.Cg) * g.H * g.W; /* the group's channels */
    const T *wk = w + k * g.Cg * g.R * g.S;
    int64_t ih0 = op * g.sh - g.ph, iw0 = oq * g.sw - g.pw;
    float acc = bias ? to_f(bias[k]) : 0.0f;
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
    y[e] = from_f<T>(acc);
  }
}

template <typename T>
static int run_grouped(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, const conv_plan_t *p) {
  if (p->R * p->S > INT32_MAX || p->C / p->G > INT32_MAX || p->K / p->G > INT32_MAX ||
      p->ph >= INT32_MAX || p->pw >= INT32_MAX)
    return opd__kerr(call, OPD_ELIMIT, "kernel or group too large for the grouped kernel");
  grouped_geom_t g = {p->C, p->H, p->W, p->K, p->P, p->Q,
                      (int)p->R, (int)p->S, (int)(p->C / p->G), (int)(p->K / p->G),
                      (int)p->sh, (int)p->sw, (int)p->ph, (int)p->pw, (int)p->dh, (int)p->dw};
  int64_t total = p->N * p->K * p->P * p->Q;
  conv_grouped<T><<<grid_for(total, 256), 256, 0, OPD_STREAM(ctx)>>>(
      (const T *)call->in[0].data, (const T *)call->in[1].data,
      p->has_bias ? (const T *)call->in[2].data : NULL, (T *)call->out[0].data, total, g);
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
