/* The reduce family on the GPU (sum, mean, amax over any set of dims),
 * float32 / float16 / bfloat16, accumulated in float; one body for every
 * op of the family (rows: ops.c).
 *
 * DESIGN
 * One kernel over the geometry of geom.h: a group of TPR threads per
 * output, each thread striding over the output's reduced elements, the
 * group combining its partials with shuffles (and shared memory for a
 * whole block). The TPR follows the layout:
 *   innermost dim reduced (stride 1)  a warp per output (32), or the
 *                                     whole block (256) when there are
 *                                     fewer than 1024 outputs: the reads
 *                                     of a group are coalesced
 *   innermost dim kept (stride 1)     a thread per output: neighbouring
 *                                     threads read neighbouring elements;
 *                                     a warp per output when there are
 *                                     fewer than 1024 outputs
 * A single merged reduced dim (the common case) skips the index split.
 * amax gives NaN when any element is NaN (the group counts NaNs apart
 * from its fmaxf, which skips them). No scratch, no synchronization: it
 * may be captured into a CUDA graph. One block reduces a whole output,
 * so a reduction of everything into one value runs on one SM (a two-pass
 * reduction would be the next step for huge all-reductions).
 * Test: build/tests/gpu_kernels (op=sum, op=mean, op=amax).
 */
#include "kernels/cuda/common.cuh"

extern "C" {
#include "kernels/reduce/geom.h"
}

enum { RED_SUM, RED_MEAN, RED_MAX };

/* Combines v over the group of TPR threads (max when MAX, else sum);
 * every thread of the group gets the result. sh: 32 floats. */
template <int TPR, bool MAX>
__device__ __forceinline__ float red_group(float v, float *sh) {
  v = MAX ? group_max<TPR <= 32 ? TPR : 32>(v) : group_sum<TPR <= 32 ? TPR : 32>(v);
  if (TPR <= 32) return v;
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < TPR / 32 ? sh[lane] : (MAX ? -INFINITY : 0.0f);
  v = MAX ? group_max<32>(v) : group_sum<32>(v);
  __syncthreads();
  return v;
}

template <typename T, int OP, int TPR>
__global__ __launch_bounds__(256) void red_kernel(const T *x, T *y, opd_red_geom_t g) {
  __shared__ float sh[32];
  const int per = 256 / TPR;
  int lane = threadIdx.x % TPR;
  for (int64_t o = (int64_t)blockIdx.x * per + threadIdx.x / TPR; o < g.nout;
       o += (int64_t)gridDim.x * per) {
    const T *xo = x + opd__red_koff(&g, o);
    float acc = OP == RED_MAX ? -INFINITY : 0.0f, nan = 0.0f;
    for (int64_t r = lane; r < g.nred; r += TPR) {
      float v = to_f(xo[g.nr == 1 ? r * g.rstride[0] : opd__red_roff(&g, r)]);
      if (OP == RED_MAX) {
        acc = fmaxf(acc, v);
        nan += v != v;
      } else {
        acc += v;
      }
    }
    acc = red_group<TPR, OP == RED_MAX>(acc, sh);
    if (OP == RED_MAX) {
      if (red_group<TPR, false>(nan, sh) > 0.0f) acc = NAN;
    } else if (OP == RED_MEAN) {
      acc = acc / (float)g.nred; /* 0/0: NaN for an empty reduction */
    }
    if (lane == 0) y[o] = from_f<T>(acc);
  }
}

template <typename T, int OP>
static void red_launch(const T *x, T *y, const opd_red_geom_t &g, cudaStream_t st) {
  bool inner_red = g.nr > 0 && g.rstride[g.nr - 1] == 1;
  int tpr = g.nout < 1024 ? (inner_red ? 256 : 32) : (inner_red ? 32 : 1);
  int64_t blocks = (g.nout + 256 / tpr - 1) / (256 / tpr);
  unsigned grid = (unsigned)(blocks > (1 << 20) ? (1 << 20) : blocks < 1 ? 1 : blocks);
  switch (tpr) {
    case 256: red_kernel<T, OP, 256><<<grid, 256, 0, st>>>(x, y, g); break;
    case 32: red_kernel<T, OP, 32><<<grid, 256, 0, st>>>(x, y, g); break;
    default: red_kernel<T, OP, 1><<<grid, 256, 0, st>>>(x, y, g); break;
  }
}

template <int OP>
static int reduce_run(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  opd_red_geom_t g;
  opd__red_call_geom(call, &g);
  if (g.nout == 0) return 0;
  cudaStream_t st = OPD_STREAM(ctx);
  const opd_tview_t *xv = &call->in[0];
  OPD_FLOAT_DISPATCH(xv->dtype, return opd__cuda_bad_dtype(call, xv->dtype),
    red_launch<T, OP>((const T *)xv->data, (T *)call->out[0].data, g, st);
  )
  OPD_CUDA_LAUNCHED();
  return 0;
}

extern "C" int opd__sum_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  return reduce_run<RED_SUM>(call, ctx);
}
extern "C" int opd__mean_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  return reduce_run<RED_MEAN>(call, ctx);
}
extern "C" int opd__amax_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  return reduce_run<RED_MAX>(call, ctx);
}
