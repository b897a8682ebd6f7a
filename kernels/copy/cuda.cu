/* copy on the GPU: a strided device view into a contiguous output, any
 * dtype (x.contiguous()), and the strided-to-strided copy behind it
 * (kernels/copy/copy.h: the daemon's gather and scatter of strided
 * tensors). Host <-> device transfers are not this op: the daemon uses
 * cudaMemcpyAsync for those.
 *
 * Variants:
 *   flat     dims merged where both views are contiguous across them (as
 *            the CPU fast kernel); views that merge into one contiguous
 *            run are one cudaMemcpyAsync device-to-device
 *   gather   otherwise, one thread per element in dst's logical order,
 *            both offsets from the merged multi-index (writes coalesced
 *            when dst is contiguous); typed loads of 1, 2, 4 or 8 bytes
 *            by element size
 * Test: build/tests/gpu_kernels (op=copy), tests/gpu (strided runs).
 */
#include "kernels/copy/copy.h"
#include "kernels/cuda/common.cuh"

typedef struct copy_geom {
  int rank;                        /* merged dims */
  int64_t shape[OPD_MAX_RANK];     /* merged extents */
  int64_t ss[OPD_MAX_RANK];        /* src strides, in elements */
  int64_t ds[OPD_MAX_RANK];        /* dst strides, in elements */
} copy_geom_t;

template <typename U>
__global__ void copy_gather(const U *x, U *y, int64_t n, copy_geom_t g) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    int64_t rem = i, so = 0, dof = 0;
    for (int d = g.rank - 1; d >= 0; d--) {
      int64_t k = rem % g.shape[d];
      so += k * g.ss[d];
      dof += k * g.ds[d];
      rem /= g.shape[d];
    }
    y[dof] = x[so];
  }
}

template <typename U>
static void launch(const void *x, void *y, int64_t n, const copy_geom_t &g,
                   cudaStream_t st) {
  copy_gather<U><<<grid_for(n, 256), 256, 0, st>>>((const U *)x, (U *)y, n, g);
}

extern "C" int opd__copy_views_cuda(void *stream, const opd_tview_t *dst,
                                    const opd_tview_t *src) {
  size_t esz = opd__dtype_size(src->dtype);
  if (src->rank != dst->rank || esz != opd__dtype_size(dst->dtype))
    return OPD_EINVAL;
  for (int d = 0; d < src->rank; d++)
    if (src->shape[d] != dst->shape[d]) return OPD_EINVAL;
  if (src->numel == 0) return 0;
  cudaStream_t st = (cudaStream_t)stream;
  copy_geom_t g;
  g.rank = 0;
  for (int d = 0; d < src->rank; d++) {
    if (src->shape[d] == 1) continue;
    int k = g.rank - 1;
    if (k >= 0 && g.ss[k] == src->strides[d] * src->shape[d] &&
        g.ds[k] == dst->strides[d] * src->shape[d]) {
      g.shape[k] *= src->shape[d];
      g.ss[k] = src->strides[d];
      g.ds[k] = dst->strides[d];
    } else {
      g.shape[g.rank] = src->shape[d];
      g.ss[g.rank] = src->strides[d];
      g.ds[g.rank] = dst->strides[d];
      g.rank++;
    }
  }
  if (g.rank == 0 || (g.rank == 1 && g.ss[0] == 1 && g.ds[0] == 1))
    return (int)cudaMemcpyAsync(dst->data, src->data, (size_t)src->numel * esz,
                                cudaMemcpyDeviceToDevice, st);
  int64_t n = src->numel;
  switch (esz) {
    case 1: launch<uint8_t>(src->data, dst->data, n, g, st); break;
    case 2: launch<uint16_t>(src->data, dst->data, n, g, st); break;
    case 4: launch<uint32_t>(src->data, dst->data, n, g, st); break;
    case 8: launch<uint64_t>(src->data, dst->data, n, g, st); break;
    default: return OPD_EINVAL;
  }
  return (int)cudaGetLastError();
}

extern "C" int opd__copy_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  int rc = opd__copy_views_cuda(ctx->stream, &call->out[0], &call->in[0]);
  if (rc == OPD_EINVAL)
    return opd__kerr(call, OPD_EDTYPE, "element size %zu has no CUDA copy",
                     opd__dtype_size(call->in[0].dtype));
  if (rc != 0) return opd__cuda_fail(call, (cudaError_t)rc, __FILE__, __LINE__);
  return 0;
}
