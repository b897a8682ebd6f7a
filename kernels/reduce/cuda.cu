/* The reduce family on the GPU (sum, mean, amax over any set of dims),
 * float32 / float16 / bfloat16, accumulated in float, and float64 in
 * double (red64_kernel: a warp per output) (sum also of int8,
 * uint8, int32, int64 and bool into int64: red_int); one body for every
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
 * At most 256 outputs of 32768 elements or more each take the split path
 * instead: P blocks per output (P up to nred / 8192, P nout <= 2048)
 * write partials into the workspace (opd__<op>_cuda_workspace: nout P
 * floats; cudaMallocAsync on the stream when the workspace is smaller),
 * a second kernel combines them, so a sum of everything fills the GPU.
 * amax gives NaN when any element is NaN (the group counts NaNs apart
 * from its fmaxf, which skips them). No synchronization, no cudaMalloc:
 * it may be captured into a CUDA graph.
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

/* sum of an integer or bool x into int64: a warp per output when the
 * innermost dim is reduced, else a thread per output; wrapping sums (as
 * torch), in unsigned arithmetic. */
template <typename T, int TPR>
__global__ __launch_bounds__(256) void red_int(const T *x, int64_t *y, opd_red_geom_t g) {
  const int per = 256 / TPR;
  int lane = threadIdx.x % TPR;
  for (int64_t o = (int64_t)blockIdx.x * per + threadIdx.x / TPR; o < g.nout;
       o += (int64_t)gridDim.x * per) {
    const T *xo = x + opd__red_koff(&g, o);
    unsigned long long acc = 0;
    for (int64_t r = lane; r < g.nred; r += TPR)
      acc += (unsigned long long)(long long)xo[g.nr == 1 ? r * g.rstride[0] : opd__red_roff(&g, r)];
#pragma unroll
    for (int off = TPR / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off, TPR);
    if (lane == 0) y[o] = (int64_t)acc;
  }
}

template <typename T>
static void red_int_launch(const void *x, void *y, const opd_red_geom_t &g, cudaStream_t st) {
  bool inner_red = g.nr > 0 && g.rstride[g.nr - 1] == 1;
  int tpr = inner_red ? 32 : 1;
  int64_t blocks = (g.nout + 256 / tpr - 1) / (256 / tpr);
  unsigned grid = (unsigned)(blocks > (1 << 20) ? (1 << 20) : blocks < 1 ? 1 : blocks);
  if (tpr == 32)
    red_int<T, 32><<<grid, 256, 0, st>>>((const T *)x, (int64_t *)y, g);
  else
    red_int<T, 1><<<grid, 256, 0, st>>>((const T *)x, (int64_t *)y, g);
}

/* Launches the integer sum for x's dtype; false for a float dtype. */
static bool red_int_run(int32_t dt, const void *x, void *y, const opd_red_geom_t &g,
                        cudaStream_t st) {
  switch (dt) {
    case OPD_DTYPE_INT8: red_int_launch<int8_t>(x, y, g, st); return true;
    case OPD_DTYPE_UINT8:
    case OPD_DTYPE_BOOL: red_int_launch<uint8_t>(x, y, g, st); return true;
    case OPD_DTYPE_INT32: red_int_launch<int32_t>(x, y, g, st); return true;
    case OPD_DTYPE_INT64: red_int_launch<int64_t>(x, y, g, st); return true;
    default: return false;
  }
}

/* Few outputs with long reductions: P blocks per output (grid P x nout),
 * block b reducing elements b*256 + t, stepping P*256, into part[o P + b]
 * (amax: NaN when its slice holds one); then a warp per output combines
 * its P partials. */
template <typename T, int OP>
__global__ __launch_bounds__(256) void red_split(const T *x, float *part, opd_red_geom_t g,
                                                 int P) {
  __shared__ float sh[32];
  int64_t o = blockIdx.y;
  const T *xo = x + opd__red_koff(&g, o);
  float acc = OP == RED_MAX ? -INFINITY : 0.0f, nan = 0.0f;
  for (int64_t r = (int64_t)blockIdx.x * 256 + threadIdx.x; r < g.nred;
       r += (int64_t)P * 256) {
    float v = to_f(xo[g.nr == 1 ? r * g.rstride[0] : opd__red_roff(&g, r)]);
    if (OP == RED_MAX) {
      acc = fmaxf(acc, v);
      nan += v != v;
    } else {
      acc += v;
    }
  }
  acc = red_group<256, OP == RED_MAX>(acc, sh);
  if (OP == RED_MAX && red_group<256, false>(nan, sh) > 0.0f) acc = NAN;
  if (threadIdx.x == 0) part[o * P + blockIdx.x] = acc;
}

template <typename T, int OP>
__global__ __launch_bounds__(256) void red_finish(const float *part, T *y, int64_t nout, int P,
                                                  int64_t nred) {
  int64_t o = (int64_t)blockIdx.x * 8 + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (o >= nout) return; /* o is uniform over the warp */
  float acc = OP == RED_MAX ? -INFINITY : 0.0f, nan = 0.0f;
  for (int i = lane; i < P; i += 32) {
    float v = part[o * P + i];
    if (OP == RED_MAX) {
      acc = fmaxf(acc, v);
      nan += v != v;
    } else {
      acc += v;
    }
  }
  acc = red_group<32, OP == RED_MAX>(acc, NULL);
  if (OP == RED_MAX && red_group<32, false>(nan, NULL) > 0.0f) acc = NAN;
  if (OP == RED_MEAN) acc = acc / (float)nred;
  if (lane == 0) y[o] = from_f<T>(acc);
}

/* float64: a warp per output (8 per block of 256), each lane striding
 * over the reduced elements, partials combined by shuffles in double;
 * amax NaN when any element is NaN. */
template <int OP>
__global__ __launch_bounds__(256) void red64_kernel(const double *x, double *y,
                                                    opd_red_geom_t g) {
  int lane = threadIdx.x & 31;
  for (int64_t o = (int64_t)blockIdx.x * 8 + threadIdx.x / 32; o < g.nout;
       o += (int64_t)gridDim.x * 8) {
    const double *xo = x + opd__red_koff(&g, o);
    double acc = OP == RED_MAX ? -INFINITY : 0.0;
    int nan = 0;
    for (int64_t r = lane; r < g.nred; r += 32) {
      double v = xo[opd__red_roff(&g, r)];
      if (OP == RED_MAX) {
        nan |= isnan(v);
        acc = fmax(acc, v);
      } else {
        acc += v;
      }
    }
    for (int k = 16; k > 0; k >>= 1) {
      double u = __shfl_xor_sync(0xffffffffu, acc, k);
      acc = OP == RED_MAX ? fmax(acc, u) : acc + u;
    }
    nan = __any_sync(0xffffffffu, nan);
    if (lane == 0)
      y[o] = OP == RED_MAX ? (nan ? (double)NAN : acc)
           : OP == RED_MEAN ? acc / (double)g.nred : acc;
  }
}

/* Blocks per output of the split path for g, or 0 when one group per
 * output is enough (many outputs, or short reductions). */
static int red_split_blocks(const opd_red_geom_t &g) {
  if (g.nout > 256 || g.nred < 32768) return 0;
  int64_t p = (g.nred + 8191) / 8192, cap = 2048 / g.nout;
  if (p > cap) p = cap;
  return p < 2 ? 0 : (int)p;
}

template <int OP>
static int reduce_run(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  opd_red_geom_t g;
  opd__red_call_geom(call, &g);
  if (g.nout == 0) return 0;
  cudaStream_t st = OPD_STREAM(ctx);
  const opd_tview_t *xv = &call->in[0];
  if (OP == RED_SUM && red_int_run(xv->dtype, xv->data, call->out[0].data, g, st)) {
    OPD_CUDA_LAUNCHED();
    return 0;
  }
  if (xv->dtype == OPD_DTYPE_FLOAT64) {
    red64_kernel<OP><<<grid_for((g.nout + 7) / 8, 1), 256, 0, st>>>(
        (const double *)xv->data, (double *)call->out[0].data, g);
    OPD_CUDA_LAUNCHED();
    return 0;
  }
  if (!(OPD_DT_FLOATS & (1u << xv->dtype))) return opd__cuda_bad_dtype(call, xv->dtype);
  int P = red_split_blocks(g);
  float *part = NULL, *own = NULL;
  if (P > 0) {
    size_t need = (size_t)g.nout * P * sizeof(float);
    if (ctx->workspace && ctx->workspace_bytes >= need) {
      part = (float *)ctx->workspace;
    } else {
      OPD_CUDA_CHECK(cudaMallocAsync((void **)&own, need, st));
      part = own;
    }
  }
  OPD_FLOAT_DISPATCH(xv->dtype, return opd__cuda_bad_dtype(call, xv->dtype),
    const T *x = (const T *)xv->data;
    T *y = (T *)call->out[0].data;
    if (P > 0) {
      red_split<T, OP><<<dim3((unsigned)P, (unsigned)g.nout), 256, 0, st>>>(x, part, g, P);
      red_finish<T, OP><<<(unsigned)((g.nout + 7) / 8), 256, 0, st>>>(part, y, g.nout, P,
                                                                     g.nred);
    } else {
      red_launch<T, OP>(x, y, g, st);
    }
  )
  cudaError_t e = cudaGetLastError();
  if (own) {
    cudaError_t f = cudaFreeAsync(own, st);
    if (e == cudaSuccess) e = f;
  }
  if (e != cudaSuccess) return opd__cuda_fail(call, e, __FILE__, __LINE__);
  return 0;
}

/* Scratch of the split path: nout P floats (0 when it does not run). */
static size_t reduce_workspace(const opd_kcall_t *call) {
  opd_red_geom_t g;
  opd__red_call_geom(call, &g);
  return (size_t)g.nout * red_split_blocks(g) * sizeof(float);
}

extern "C" size_t opd__sum_cuda_workspace(const opd_kcall_t *call) {
  return reduce_workspace(call);
}
extern "C" size_t opd__mean_cuda_workspace(const opd_kcall_t *call) {
  return reduce_workspace(call);
}
extern "C" size_t opd__amax_cuda_workspace(const opd_kcall_t *call) {
  return reduce_workspace(call);
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
