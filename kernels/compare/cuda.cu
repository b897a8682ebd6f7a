/* The compare family on the GPU (eq, ne, lt, le, gt, ge; rows: ops.c):
 * one thread per output element (a grid-stride loop), its operands found
 * through broadcast strides, compared in their own type (float16 /
 * bfloat16 as float, through to_f), written as bool.
 *
 * Test: build/tests/gpu_kernels --op eq (and the others: "[compare]")
 */
#include "kernels/compare/compare.h"
#include "kernels/cuda/common.cuh"

template <typename T>
__device__ __forceinline__ bool cmp_apply(int op, T x, T y) {
  switch (op) {
    case CMP_EQ: return x == y;
    case CMP_NE: return x != y;
    case CMP_LT: return x < y;
    case CMP_LE: return x <= y;
    case CMP_GT: return x > y;
    default: return x >= y;
  }
}

template <typename S>
__device__ __forceinline__ auto cmp_load(S v) { return v; }
template <>
__device__ __forceinline__ auto cmp_load(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ auto cmp_load(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename S>
__global__ void cmp_kernel(const S *a, const S *b, uint8_t *o, int64_t n, cmp_geom_t g, int op) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t rem = i, ia = 0, ib = 0;
    for (int d = g.rank - 1; d >= 0; d--) {
      int64_t k = rem % g.shape[d];
      rem /= g.shape[d];
      ia += k * g.sa[d];
      ib += k * g.sb[d];
    }
    o[i] = cmp_apply(op, cmp_load(a[ia]), cmp_load(b[ib])) ? 1 : 0;
  }
}

static int compare_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, int op) {
  const opd_tview_t *a = &call->in[0], *b = &call->in[1], *ov = &call->out[0];
  int64_t n = ov->numel;
  if (n == 0) return 0;
  cmp_geom_t g;
  g.rank = ov->rank;
  for (int d = 0; d < ov->rank; d++) g.shape[d] = ov->shape[d];
  opd__bcast_strides(a->shape, a->rank, ov->rank, g.sa);
  opd__bcast_strides(b->shape, b->rank, ov->rank, g.sb);
  cudaStream_t st = OPD_STREAM(ctx);
  unsigned grid = grid_for(n, 256);
  uint8_t *o = (uint8_t *)ov->data;
#define CMP_LAUNCH(S) \
  cmp_kernel<S><<<grid, 256, 0, st>>>((const S *)a->data, (const S *)b->data, o, n, g, op)
  switch (a->dtype) {
    case OPD_DTYPE_FLOAT32: CMP_LAUNCH(float); break;
    case OPD_DTYPE_FLOAT64: CMP_LAUNCH(double); break;
    case OPD_DTYPE_FLOAT16: CMP_LAUNCH(__half); break;
    case OPD_DTYPE_BFLOAT16: CMP_LAUNCH(__nv_bfloat16); break;
    case OPD_DTYPE_INT8: CMP_LAUNCH(int8_t); break;
    case OPD_DTYPE_INT32: CMP_LAUNCH(int32_t); break;
    case OPD_DTYPE_INT64: CMP_LAUNCH(int64_t); break;
    case OPD_DTYPE_UINT8:
    case OPD_DTYPE_BOOL: CMP_LAUNCH(uint8_t); break;
    default: return opd__cuda_bad_dtype(call, a->dtype);
  }
#undef CMP_LAUNCH
  OPD_CUDA_LAUNCHED();
  return 0;
}

#define COMPARE_CUDA(name, op)                                                       \
  extern "C" int opd__##name##_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {  \
    return compare_cuda(call, ctx, op);                                              \
  }

COMPARE_CUDA(eq, CMP_EQ)
COMPARE_CUDA(ne, CMP_NE)
COMPARE_CUDA(lt, CMP_LT)
COMPARE_CUDA(le, CMP_LE)
COMPARE_CUDA(gt, CMP_GT)
COMPARE_CUDA(ge, CMP_GE)
