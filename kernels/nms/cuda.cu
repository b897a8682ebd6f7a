/* nms on the GPU, torchvision.ops.nms's algorithm, float32 boxes and
 * scores; keep (N) int64 padded with -1 and count (1) int64 as on the CPU.
 *
 * DESIGN
 * Four stream-ordered steps, no host round trip:
 *   1. order   keys from the scores (IEEE order as unsigned, -0 as +0, NaN
 *              above +inf: the CPU reference's total order), sorted
 *              descending with cub's radix sort, which is stable: equal
 *              scores stay in index order, as torch's stable sort
 *   2. gather  the boxes in score order, one float4 per box
 *   3. mask    torchvision's IoU bitmask: block (row block, column block)
 *              of 64 threads, row box i against the column block's 64 boxes
 *              in shared memory; bit j of mask[i][cb] set when box j comes
 *              after i and IoU(i, j) > iou_threshold. Only blocks on or
 *              above the diagonal run. IoU is computed with the reference's
 *              float operations in its order, rounded without FMA
 *              contraction (__fmul_rn etc.), so decisions match the CPU bit
 *              for bit, ties at the threshold included
 *   4. scan    one block walks the mask 64 boxes at a time: thread 0
 *              resolves the 64 boxes of a word against the removed bits and
 *              the diagonal word (both in shared memory); then every thread
 *              ORs the kept boxes' mask rows into the removed words it owns
 *              and the kept indices are written in parallel; keep's tail
 *              gets -1 and count the total
 * Scratch (opd__nms_cuda_workspace): sort keys and values, sorted boxes,
 * the N x ceil(N/64) u64 mask (50 MB for 20k boxes), cub's temp storage;
 * from the workspace's scratch share, else cudaMallocAsync on the stream.
 * Limit: N <= 327680 (the removed bits live in 40 KiB of shared memory).
 * Test: build/tests/gpu_kernels (op=nms); bench: --bench (op=nms).
 */
#include <cub/cub.cuh>
#include <math.h>

#include "kernels/cuda/common.cuh"

typedef unsigned long long u64;

#define NMS_MAX_N (40 * 1024 / 8 * 64) /* removed bits: 40 KiB of smem */

static inline size_t up256(size_t b) { return (b + 255) & ~(size_t)255; }

static __global__ void nms_keys(const float *scores, uint32_t *keys, int *vals, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float f = scores[i];
  uint32_t u = __float_as_uint(f);
  if (f == 0.0f) u = 0; /* -0 ties with +0 */
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  if (f != f) u = 0xffffffffu; /* NaN first */
  keys[i] = u;
  vals[i] = i;
}

static __global__ void nms_gather(const float *boxes, const int *order, float4 *sorted, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float *b = boxes + 4 * (int64_t)order[i];
  sorted[i] = make_float4(b[0], b[1], b[2], b[3]);
}

__device__ __forceinline__ float fmax_t(float a, float b) { return a < b ? b : a; }
__device__ __forceinline__ float fmin_t(float a, float b) { return b < a ? b : a; }
__device__ __forceinline__ float area_of(float4 b) {
  return __fmul_rn(__fsub_rn(b.z, b.x), __fsub_rn(b.w, b.y));
}

static __global__ void nms_mask(const float4 *b, int n, int cb, float thr, u64 *mask) {
  int rb = blockIdx.y, cbk = blockIdx.x;
  if (rb > cbk) return;
  int rs = min(n - rb * 64, 64), cs = min(n - cbk * 64, 64);
  __shared__ float4 sb[64];
  __shared__ float sa[64];
  int t = threadIdx.x;
  if (t < cs) {
    sb[t] = b[cbk * 64 + t];
    sa[t] = area_of(sb[t]);
  }
  __syncthreads();
  if (t >= rs) return;
  int i = rb * 64 + t;
  float4 bi = b[i];
  float ai = area_of(bi);
  u64 bits = 0;
  for (int j = rb == cbk ? t + 1 : 0; j < cs; j++) {
    float4 bj = sb[j];
    float xx1 = fmax_t(bi.x, bj.x), yy1 = fmax_t(bi.y, bj.y);
    float xx2 = fmin_t(bi.z, bj.z), yy2 = fmin_t(bi.w, bj.w);
    float w = fmax_t(0.0f, __fsub_rn(xx2, xx1)), h = fmax_t(0.0f, __fsub_rn(yy2, yy1));
    float inter = __fmul_rn(w, h);
    float ovr = __fdiv_rn(inter, __fsub_rn(__fadd_rn(ai, sa[j]), inter));
    if (ovr > thr) bits |= 1ull << j;
  }
  mask[(int64_t)i * cb + cbk] = bits;
}

static __global__ void nms_scan(const u64 *mask, const int *order, int n, int cb, int64_t *keep,
                                int64_t *count) {
  extern __shared__ u64 removed[];
  __shared__ u64 diag[64];
  __shared__ int ord[64];
  __shared__ u64 keptbits;
  __shared__ int nk_sh;
  int t = threadIdx.x, bd = blockDim.x;
  for (int w = t; w < cb; w += bd) removed[w] = 0;
  if (t == 0) nk_sh = 0;
  __syncthreads();
  for (int b = 0; b < cb; b++) {
    int bs = min(64, n - b * 64);
    if (t < bs) {
      diag[t] = mask[(int64_t)(b * 64 + t) * cb + b];
      ord[t] = order[b * 64 + t];
    }
    __syncthreads();
    if (t == 0) {
      u64 word = removed[b], kept = 0;
      for (int j = 0; j < bs; j++)
        if (!((word >> j) & 1)) {
          kept |= 1ull << j;
          word |= diag[j];
        }
      keptbits = kept;
    }
    __syncthreads();
    u64 kb = keptbits;
    int base = nk_sh;
    if (t < bs && ((kb >> t) & 1))
      keep[base + __popcll(kb & ((1ull << t) - 1))] = ord[t];
    for (int w = b + 1 + t; w < cb; w += bd) {
      u64 acc = 0, m = kb;
      while (m) {
        int j = __ffsll((long long)m) - 1;
        m &= m - 1;
        acc |= mask[(int64_t)(b * 64 + j) * cb + w];
      }
      removed[w] |= acc;
    }
    __syncthreads();
    if (t == 0) nk_sh = base + __popcll(kb);
    __syncthreads();
  }
  int nk = nk_sh;
  for (int i = nk + t; i < n; i += bd) keep[i] = -1;
  if (t == 0) count[0] = nk;
}

typedef struct nms_bufs {
  size_t keys_in, keys_out, vals_in, vals_out, boxes, mask, temp, total; /* offsets */
  size_t temp_bytes;
} nms_bufs_t;

static nms_bufs_t nms_layout(int n) {
  nms_bufs_t L;
  int cb = (n + 63) / 64;
  L.temp_bytes = 0;
  cub::DeviceRadixSort::SortPairsDescending(NULL, L.temp_bytes, (const uint32_t *)NULL,
                                            (uint32_t *)NULL, (const int *)NULL, (int *)NULL, n);
  size_t o = 0;
  L.keys_in = o; o += up256((size_t)n * 4);
  L.keys_out = o; o += up256((size_t)n * 4);
  L.vals_in = o; o += up256((size_t)n * 4);
  L.vals_out = o; o += up256((size_t)n * 4);
  L.boxes = o; o += up256((size_t)n * 16);
  L.mask = o; o += up256((size_t)n * cb * 8);
  L.temp = o; o += up256(L.temp_bytes);
  L.total = o;
  return L;
}

extern "C" size_t opd__nms_cuda_workspace(const opd_kcall_t *call) {
  int64_t n = call->in[0].shape[0];
  if (n <= 0 || n > NMS_MAX_N) return 0;
  return nms_layout((int)n).total;
}

/* The largest float <= t: for float v, v > t exactly when v > that. */
static float thr_float(double t) {
  float f = (float)t;
  if ((double)f > t) f = nextafterf(f, -INFINITY);
  return f;
}

extern "C" int opd__nms_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  int64_t n64 = call->in[0].shape[0];
  cudaStream_t st = OPD_STREAM(ctx);
  int64_t *keep = (int64_t *)call->out[0].data, *count = (int64_t *)call->out[1].data;
  if (n64 == 0) {
    OPD_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof(int64_t), st));
    return 0;
  }
  if (n64 > NMS_MAX_N)
    return opd__kerr(call, OPD_ELIMIT, "%lld boxes; the CUDA kernel takes at most %d",
                     (long long)n64, NMS_MAX_N);
  int n = (int)n64, cb = (n + 63) / 64;
  nms_bufs_t L = nms_layout(n);
  size_t lt = ctx->workspace_bytes < OPD_CUDA_LT_WORKSPACE ? ctx->workspace_bytes
                                                           : OPD_CUDA_LT_WORKSPACE;
  size_t scratch = ctx->workspace ? ctx->workspace_bytes - lt : 0;
  char *base = ctx->workspace ? (char *)ctx->workspace + lt : NULL, *own = NULL;
  if (scratch < L.total) {
    OPD_CUDA_CHECK(cudaMallocAsync((void **)&own, L.total, st));
    base = own;
  }
  int rc = 0;
  uint32_t *kin = (uint32_t *)(base + L.keys_in), *kout = (uint32_t *)(base + L.keys_out);
  int *vin = (int *)(base + L.vals_in), *vout = (int *)(base + L.vals_out);
  float4 *boxes = (float4 *)(base + L.boxes);
  u64 *mask = (u64 *)(base + L.mask);
  size_t tb = L.temp_bytes;
  cudaError_t e;
  nms_keys<<<(n + 255) / 256, 256, 0, st>>>((const float *)call->in[1].data, kin, vin, n);
  if ((e = cudaGetLastError()) != cudaSuccess) goto fail;
  e = cub::DeviceRadixSort::SortPairsDescending(base + L.temp, tb, kin, kout, vin, vout, n, 0,
                                                32, st);
  if (e != cudaSuccess) goto fail;
  nms_gather<<<(n + 255) / 256, 256, 0, st>>>((const float *)call->in[0].data, vout, boxes, n);
  if ((e = cudaGetLastError()) != cudaSuccess) goto fail;
  nms_mask<<<dim3(cb, cb), 64, 0, st>>>(boxes, n, cb, thr_float(call->attr[0].f), mask);
  if ((e = cudaGetLastError()) != cudaSuccess) goto fail;
  nms_scan<<<1, 512, (size_t)cb * 8, st>>>(mask, vout, n, cb, keep, count);
  if ((e = cudaGetLastError()) != cudaSuccess) goto fail;
  goto done;
fail:
  rc = opd__cuda_fail(call, e, __FILE__, __LINE__);
done:
  if (own) {
    e = cudaFreeAsync(own, st);
    if (e != cudaSuccess && rc == 0) rc = opd__cuda_fail(call, e, __FILE__, __LINE__);
  }
  return rc;
}
