/* sdpa on the GPU: one fused online-softmax kernel (flash-attention's
 * recurrence), float32 / float16 / bfloat16 in and out, float32 inside
 * (shapes and semantics: ops.c; sizes: attn.h).
 *
 * Variant (one): sdpa_kernel. A block of 4 warps owns BQ = 16 query rows
 * of one attention (4 rows per warp) and walks the keys BK = 32 at a
 * time: the block stages q's rows and the key tile's K and V rows in
 * shared memory as float (K padded to D + 1 floats a row, so that the 32
 * lanes reading 32 keys' element c hit 32 banks); lane j scores key j
 * against each of its warp's rows (q.k * scale, then the mask), the warp
 * reduces the tile's max and sum with shuffles, and each lane keeps the
 * running max m, sum l and its Dv / 32 columns of the unnormalized
 * output, rescaled by exp(m_old - m_new) when the max grows; p_j reaches
 * the other lanes by shuffle for acc += p_j v_j. Causal blocks stop at
 * their last row's key. out = acc / l in the tensor's dtype; a row with
 * no key left (all masked, Tk = 0) gives zeros, as the CPU kernels.
 * Limits: D and Dv <= 128 (the shared tiles: 40 KiB of static shared
 * memory); a larger head dim is refused with OPD_ELIMIT. No scratch, no
 * synchronization, no allocation: the launch can be captured into a CUDA
 * graph.
 * Test: build/tests/gpu_kernels --op sdpa (against cpu_ref, every dtype,
 * causal, bool and float masks, rank 3 and 4, Tq != Tk).
 */
#include "kernels/cuda/common.cuh"

extern "C" {
#include "kernels/attn/attn.h"
}

#define SDPA_BQ 16      /* query rows per block */
#define SDPA_BK 32      /* keys per tile: one per lane */
#define SDPA_RW 4       /* query rows per warp */
#define SDPA_DMAX 128   /* largest D and Dv */
#define SDPA_THREADS 128

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* MK: SDPA_MASK_NONE / BOOL (uint8 bytes) / FLOAT (T, added). */
template <typename T, int MK>
__global__ void __launch_bounds__(SDPA_THREADS)
    sdpa_kernel(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                const void *__restrict__ mask, T *__restrict__ out, sdpa_dims_t d,
                int64_t qtiles) {
  __shared__ float sq[SDPA_BQ][SDPA_DMAX];
  __shared__ float sk[SDPA_BK][SDPA_DMAX + 1];
  __shared__ float sv[SDPA_BK][SDPA_DMAX];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t n = blockIdx.x / qtiles, i0 = (blockIdx.x % qtiles) * SDPA_BQ;
  const int D = (int)d.D, Dv = (int)d.Dv;
  const T *qn = q + n * d.Tq * D, *kn = k + n * d.Tk * D, *vn = v + n * d.Tk * Dv;
  const int64_t mbase = opd__sdpa_mask_base(&d, n);
  for (int e = tid; e < SDPA_BQ * D; e += SDPA_THREADS) {
    int r = e / D, c = e % D;
    sq[r][c] = i0 + r < d.Tq ? to_f(qn[(i0 + r) * D + c]) : 0.0f;
  }
  float m[SDPA_RW], l[SDPA_RW], acc[SDPA_RW][SDPA_DMAX / 32];
#pragma unroll
  for (int rr = 0; rr < SDPA_RW; rr++) {
    m[rr] = -INFINITY;
    l[rr] = 0.0f;
#pragma unroll
    for (int e = 0; e < SDPA_DMAX / 32; e++) acc[rr][e] = 0.0f;
  }
  int64_t last = i0 + SDPA_BQ < d.Tq ? i0 + SDPA_BQ : d.Tq; /* rows [i0, last) */
  int64_t kend = d.causal && last < d.Tk ? last : d.Tk;
  for (int64_t j0 = 0; j0 < kend; j0 += SDPA_BK) {
    __syncthreads(); /* the previous tile is consumed (and q staged) */
    for (int e = tid; e < SDPA_BK * D; e += SDPA_THREADS) {
      int jj = e / D, c = e % D;
      sk[jj][c] = j0 + jj < d.Tk ? to_f(kn[(j0 + jj) * D + c]) : 0.0f;
    }
    for (int e = tid; e < SDPA_BK * Dv; e += SDPA_THREADS) {
      int jj = e / Dv, c = e % Dv;
      sv[jj][c] = j0 + jj < d.Tk ? to_f(vn[(j0 + jj) * Dv + c]) : 0.0f;
    }
    __syncthreads();
    const int64_t j = j0 + lane;
#pragma unroll
    for (int rr = 0; rr < SDPA_RW; rr++) {
      const int r = warp * SDPA_RW + rr;
      const int64_t i = i0 + r;
      if (i >= d.Tq) continue; /* uniform over the warp */
      float s = -INFINITY;
      if (j < d.Tk && !(d.causal && j > i)) {
        float dot = 0.0f;
        for (int c = 0; c < D; c++) dot += sq[r][c] * sk[lane][c];
        s = dot * d.scale;
        if (MK == SDPA_MASK_BOOL) {
          if (!((const uint8_t *)mask)[mbase + i * d.mq + j * d.mk]) s = -INFINITY;
        } else if (MK == SDPA_MASK_FLOAT) {
          s += to_f(((const T *)mask)[mbase + i * d.mq + j * d.mk]);
        }
      }
      float mnew = fmaxf(m[rr], warp_max(s));
      float muse = mnew == -INFINITY ? 0.0f : mnew;
      float p = expf(s - muse), alpha = expf(m[rr] - muse);
      l[rr] = l[rr] * alpha + warp_sum(p);
      m[rr] = mnew;
#pragma unroll
      for (int e = 0; e < SDPA_DMAX / 32; e++) acc[rr][e] *= alpha;
      for (int jj = 0; jj < SDPA_BK; jj++) {
        float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
        for (int e = 0; e < SDPA_DMAX / 32; e++) {
          int c = lane + 32 * e;
          if (c < Dv) acc[rr][e] += pj * sv[jj][c];
        }
      }
    }
  }
#pragma unroll
  for (int rr = 0; rr < SDPA_RW; rr++) {
    const int64_t i = i0 + warp * SDPA_RW + rr;
    if (i >= d.Tq) continue;
    T *o = out + (n * d.Tq + i) * Dv;
    float inv = l[rr] == 0.0f ? 0.0f : 1.0f / l[rr];
#pragma unroll
    for (int e = 0; e < SDPA_DMAX / 32; e++) {
      int c = lane + 32 * e;
      if (c < Dv) o[c] = from_f<T>(l[rr] == 0.0f ? 0.0f : acc[rr][e] * inv);
    }
  }
}

template <typename T>
static void launch(opd_kcall_t *call, const sdpa_dims_t &d, int64_t qtiles, cudaStream_t st) {
  const T *q = (const T *)call->in[0].data, *k = (const T *)call->in[1].data,
          *v = (const T *)call->in[2].data;
  const void *mask = call->n_in > 3 ? call->in[3].data : NULL;
  T *out = (T *)call->out[0].data;
  unsigned grid = (unsigned)(d.N * qtiles);
  if (d.mask == SDPA_MASK_BOOL)
    sdpa_kernel<T, SDPA_MASK_BOOL><<<grid, SDPA_THREADS, 0, st>>>(q, k, v, mask, out, d, qtiles);
  else if (d.mask == SDPA_MASK_FLOAT)
    sdpa_kernel<T, SDPA_MASK_FLOAT><<<grid, SDPA_THREADS, 0, st>>>(q, k, v, mask, out, d, qtiles);
  else
    sdpa_kernel<T, SDPA_MASK_NONE><<<grid, SDPA_THREADS, 0, st>>>(q, k, v, mask, out, d, qtiles);
}

extern "C" int opd__sdpa_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  sdpa_dims_t d = opd__sdpa_dims(call);
  if (d.D > SDPA_DMAX || d.Dv > SDPA_DMAX)
    return opd__kerr(call, OPD_ELIMIT,
                     "head dims D = %lld, Dv = %lld: the CUDA kernel takes up to %d",
                     (long long)d.D, (long long)d.Dv, SDPA_DMAX);
  if (d.N == 0 || d.Tq == 0 || d.Dv == 0) return 0;
  int64_t qtiles = (d.Tq + SDPA_BQ - 1) / SDPA_BQ;
  if (d.N * qtiles > 0x7fffffff)
    return opd__kerr(call, OPD_ELIMIT, "%lld attentions of %lld queries: more than 2^31 blocks",
                     (long long)d.N, (long long)d.Tq);
  int32_t dt = call->in[0].dtype;
  int rc = 0;
  OPD_FLOAT_DISPATCH(dt, rc = opd__cuda_bad_dtype(call, dt),
                     launch<T>(call, d, qtiles, OPD_STREAM(ctx));)
  if (rc) return rc;
  OPD_CUDA_LAUNCHED();
  return 0;
}
