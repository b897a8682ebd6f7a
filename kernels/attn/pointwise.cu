/* rope and swiglu on the GPU, float32 / float16 / bfloat16 (computed in
 * float; shapes and formulas: ops.c, pointwise.c).
 *
 * Variants (one each), grid-stride loops of one thread per output pair /
 * element:
 *   rope_kernel    thread e handles x's row e / h, column e % h (h = D/2)
 *                  and writes both out[d] and out[d + h]; cos / sin are
 *                  found through their broadcast strides (attn.h), the
 *                  row offset unravelled over x's leading dims
 *   swiglu_kernel  out[e] = silu(a) * b, a and b the two halves' element
 * No scratch, no synchronization: both can be captured into a CUDA graph.
 * Test: build/tests/gpu_kernels --op rope / --op swiglu.
 */
#include "kernels/cuda/common.cuh"

extern "C" {
#include "kernels/attn/attn.h"
}

template <typename T>
__global__ void rope_kernel(const T *__restrict__ x, const T *__restrict__ cs,
                            const T *__restrict__ sn, T *__restrict__ out, rope_dims_t d) {
  const int64_t h = d.D / 2, n = d.rows * h, cl = d.cs[d.rank - 1];
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    int64_t row = e / h, j = e % h, off = opd__rope_row_off(&d, row);
    const T *xr = x + row * d.D;
    float a = to_f(xr[j]), b = to_f(xr[j + h]);
    T *o = out + row * d.D;
    o[j] = from_f<T>(a * to_f(cs[off + j * cl]) - b * to_f(sn[off + j * cl]));
    o[j + h] = from_f<T>(b * to_f(cs[off + (j + h) * cl]) + a * to_f(sn[off + (j + h) * cl]));
  }
}

template <typename T>
__global__ void swiglu_kernel(const T *__restrict__ x, T *__restrict__ out, int64_t rows,
                              int64_t d) {
  const int64_t n = rows * d;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = e / d, j = e % d;
    float a = to_f(x[r * 2 * d + j]), b = to_f(x[r * 2 * d + d + j]);
    out[e] = from_f<T>(a / (1.0f + expf(-a)) * b);
  }
}

extern "C" int opd__rope_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  rope_dims_t d = opd__rope_dims(call);
  int64_t n = d.rows * (d.D / 2);
  if (n == 0) return 0;
  int32_t dt = call->in[0].dtype;
  int rc = 0;
  OPD_FLOAT_DISPATCH(dt, rc = opd__cuda_bad_dtype(call, dt),
    rope_kernel<T><<<grid_for(n, 256), 256, 0, OPD_STREAM(ctx)>>>(
        (const T *)call->in[0].data, (const T *)call->in[1].data,
        (const T *)call->in[2].data, (T *)call->out[0].data, d);
  )
  if (rc) return rc;
  OPD_CUDA_LAUNCHED();
  return 0;
}

extern "C" int opd__swiglu_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  int64_t d = call->out[0].shape[call->out[0].rank - 1];
  int64_t rows = opd__rows(&call->out[0], d);
  if (rows == 0) return 0;
  int32_t dt = call->in[0].dtype;
  int rc = 0;
  OPD_FLOAT_DISPATCH(dt, rc = opd__cuda_bad_dtype(call, dt),
    swiglu_kernel<T><<<grid_for(rows * d, 256), 256, 0, OPD_STREAM(ctx)>>>(
        (const T *)call->in[0].data, (T *)call->out[0].data, rows, d);
  )
  if (rc) return rc;
  OPD_CUDA_LAUNCHED();
  return 0;
}
