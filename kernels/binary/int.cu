/* The binary family's integer kernels on the GPU (add, sub, mul of int8,
 * uint8, int32, int64; semantics: kernels/binary/int.h): one thread per
 * output element (a grid-stride loop), its operands found through
 * broadcast strides, the arithmetic in unsigned 64-bit (wraparound).
 *
 * Test: build/tests/gpu_kernels --op add (and sub, mul: the [int] cases)
 */
#include "kernels/binary/int.h"
#include "kernels/cuda/common.cuh"

enum { I_ADD, I_SUB, I_MUL };

struct int_geom {
  int rank;                        /* output rank */
  int64_t shape[OPD_MAX_RANK];     /* output extents */
  int64_t sa[OPD_MAX_RANK];        /* a's broadcast strides (elements) */
  int64_t sb[OPD_MAX_RANK];        /* b's */
};

template <typename T>
__global__ void bin_int(const T *a, const T *b, T *o, int64_t n, int_geom g, int op,
                        uint64_t al) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t rem = i, ia = 0, ib = 0;
    for (int d = g.rank - 1; d >= 0; d--) {
      int64_t k = rem % g.shape[d];
      rem /= g.shape[d];
      ia += k * g.sa[d];
      ib += k * g.sb[d];
    }
    uint64_t u = (uint64_t)(int64_t)a[ia], v = (uint64_t)(int64_t)b[ib];
    o[i] = (T)(op == I_MUL ? u * v : op == I_ADD ? u + al * v : u - al * v);
  }
}

extern "C" int opd__binary_int_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  const opd_tview_t *a = &call->in[0], *b = &call->in[1], *ov = &call->out[0];
  int64_t n = ov->numel;
  if (n == 0) return 0;
  const char *name = call->op->name;
  int op = strcmp(name, "mul") == 0 ? I_MUL : strcmp(name, "sub") == 0 ? I_SUB : I_ADD;
  uint64_t al = op != I_MUL && call->op->n_attrs >= 1 ? (uint64_t)(int64_t)call->attr[0].f : 1;
  int_geom g;
  g.rank = ov->rank;
  for (int d = 0; d < ov->rank; d++) g.shape[d] = ov->shape[d];
  opd__bcast_strides(a->shape, a->rank, ov->rank, g.sa);
  opd__bcast_strides(b->shape, b->rank, ov->rank, g.sb);
  cudaStream_t st = OPD_STREAM(ctx);
  unsigned grid = grid_for(n, 256);
#define INT_LAUNCH(T)                                                                \
  bin_int<T><<<grid, 256, 0, st>>>((const T *)a->data, (const T *)b->data, (T *)ov->data, \
                                   n, g, op, al)
  switch (ov->dtype) {
    case OPD_DTYPE_INT8: INT_LAUNCH(int8_t); break;
    case OPD_DTYPE_UINT8: INT_LAUNCH(uint8_t); break;
    case OPD_DTYPE_INT32: INT_LAUNCH(int32_t); break;
    case OPD_DTYPE_INT64: INT_LAUNCH(int64_t); break;
    default: return opd__cuda_bad_dtype(call, ov->dtype);
  }
#undef INT_LAUNCH
  OPD_CUDA_LAUNCHED();
  return 0;
}
