/* The shape family on the GPU: permute, slice and expand gather their
 * view of x with the copy op's kernel; reshape is one device-to-device
 * cudaMemcpyAsync; cat moves each input's runs into the output's rows.
 * Any dtype (only its size matters); nothing synchronizes or allocates,
 * so every kernel can be captured into a CUDA graph.
 *
 * Variants:
 *   view      permute/slice/expand: opd__copy_views_cuda over the view
 *             (kernels/copy/copy.h: merged dims; one cudaMemcpyAsync when
 *             the view is one contiguous run, else the copy's gather)
 *   memcpy    reshape (nothing in place)
 *   cat       one thread per unit of y (the widest of 16..1 bytes that
 *             divides every run and address: kernels/shape/move.cuh), its
 *             input found among the row's runs
 * Test: build/tests/gpu_kernels --op permute (slice, expand, reshape, cat).
 */
#include "kernels/cuda/common.cuh"
#include "kernels/shape/move.cuh"

extern "C" {
#include "kernels/copy/copy.h"
#include "kernels/shape/view.h"
}

/* Queues the copy of view v into call's output 0 (C-contiguous, v's
 * shape). */
static int gather(opd_kcall_t *call, const opd_tview_t *v, const opd_cuda_ctx_t *ctx) {
  opd_tview_t d = opd__dense_view(v, call->out[0].data);
  int rc = opd__copy_views_cuda(ctx->stream, &d, v);
  if (rc > 0) return opd__cuda_fail(call, (cudaError_t)rc, __FILE__, __LINE__);
  return rc ? opd__kerr(call, rc, "the view's copy failed (%d)", rc) : 0;
}

#define VIEW_CUDA(op)                                                                  \
  extern "C" int opd__##op##_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {      \
    opd_tview_t v;                                                                     \
    int rc = opd__##op##_view(call, &v);                                               \
    return rc ? rc : gather(call, &v, ctx);                                            \
  }

VIEW_CUDA(permute)
VIEW_CUDA(slice)
VIEW_CUDA(expand)

extern "C" int opd__reshape_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  const opd_tview_t *x = &call->in[0];
  if (x->numel == 0 || x->data == call->out[0].data) return 0; /* in place */
  OPD_CUDA_CHECK(cudaMemcpyAsync(call->out[0].data, x->data,
                                 (size_t)x->numel * opd__dtype_size(x->dtype),
                                 cudaMemcpyDeviceToDevice, OPD_STREAM(ctx)));
  return 0;
}

/* cat in units: y is rows of `row` units; input k fills [pre[k],
 * pre[k] + run[k]) of each row from its own rows of run[k] units. */
typedef struct cat_geom {
  int n;                                /* inputs */
  int64_t row;                          /* units per row of y */
  int64_t run[OPD_MAX_TENSORS];         /* units of input k per row */
  int64_t pre[OPD_MAX_TENSORS];         /* where they start in y's row */
  const void *src[OPD_MAX_TENSORS];     /* input k's first element */
} cat_geom_t;

template <typename U>
__global__ void cat_kernel(U *y, int64_t total, cat_geom_t g) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    int64_t o = i / g.row, c = i - o * g.row;
    int k = 0;
    while (k < g.n - 1 && c >= g.pre[k] + g.run[k]) k++;
    y[i] = ((const U *)g.src[k])[o * g.run[k] + c - g.pre[k]];
  }
}

extern "C" int opd__cat_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  const opd_tview_t *y = &call->out[0];
  if (y->numel == 0) return 0;
  int64_t dim = call->attr[0].i;
  if (dim < 0) dim += y->rank;
  int64_t inner = 1, esz = (int64_t)opd__dtype_size(y->dtype);
  for (int d = (int)dim + 1; d < y->rank; d++) inner *= y->shape[d];
  uint64_t bits = (uint64_t)(uintptr_t)y->data | (uint64_t)(y->shape[dim] * inner * esz);
  for (int k = 0; k < call->n_in; k++)
    bits |= (uint64_t)(uintptr_t)call->in[k].data |
            (uint64_t)(call->in[k].shape[dim] * inner * esz);
  int unit = opd__move_unit(bits);
  cat_geom_t g;
  g.n = call->n_in;
  g.row = y->shape[dim] * inner * esz / unit;
  int64_t at = 0;
  for (int k = 0; k < call->n_in; k++) {
    g.run[k] = call->in[k].shape[dim] * inner * esz / unit;
    g.pre[k] = at;
    g.src[k] = call->in[k].data;
    at += g.run[k];
  }
  int64_t total = y->numel * esz / unit;
  cudaStream_t st = OPD_STREAM(ctx);
  OPD_MOVE_DISPATCH(unit, return opd__cuda_bad_dtype(call, y->dtype),
                    cat_kernel<U><<<grid_for(total, 256), 256, 0, st>>>((U *)y->data, total, g););
  OPD_CUDA_LAUNCHED();
  return 0;
}
