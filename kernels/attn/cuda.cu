/* sdpa on the GPU: one fused online-softmax kernel (flash-attention's
 * recurrence), float32 / float16 / bfloat16 in and out, float32 inside
 * (shapes and semantics: ops.c; sizes: attn.h).
 *
 * Variants (opd__sdpa_cuda_variant, attn.h; the row's kernel picks):
 *
 * sdpa_kernel (every dtype, D and Dv up to 128). A block of 4 warps
 * owns BQ = 16 query rows of one attention (4 rows per warp) and walks
 * the keys BK = 32 at a time: the block stages q's rows and the key tile's K and V rows in
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
 * memory); a larger head dim is refused with OPD_ELIMIT.
 *
 * sdpa_wmma (float16 / bfloat16 with D and Dv multiples of 16 up
 * to 64, GPT-2's D = 64 among them, on sm_80 and later): the same
 * recurrence on tensor cores (WMMA 16x16x16, float accumulation). A block
 * of 4 warps owns TQ = 64 query rows (16 per warp), keys TK = 32 at a
 * time; per tile each warp computes its S = q k^T (16 x 32) into shared
 * memory, two lanes per row take its max, exp and sum (the running m and
 * l), write p in the tensor's dtype and alpha = exp(m_old - m_new); the
 * warp's output O (16 x Dv, float, shared) is scaled by alpha, loaded as
 * an accumulator and gets p v added by WMMA. p is rounded to 16 bits
 * before p v, as flash-attention does (l sums the unrounded p). 46 KiB of
 * static shared memory.
 *
 * No scratch, no synchronization, no allocation: either launch can be
 * captured into a CUDA graph.
 * Test: build/tests/gpu_kernels --op sdpa (against cpu_ref, every dtype,
 * both variants, causal, bool and float masks, rank 3 and 4, Tq != Tk).
 */
#include <mma.h>

#include "kernels/cuda/common.cuh"

extern "C" {
#include "kernels/attn/attn.h"
}

#define SDPA_BQ 16      /* query rows per block */
#define SDPA_BK 32      /* keys per tile: one per lane */
#define SDPA_RW 4       /* query rows per warp */
#define SDPA_DMAX 128   /* largest D and Dv */
#define SDPA_THREADS 128

/* Stages rows [first, first + rows) of src (rows of `cols`, `limit` rows
 * in all) into shared dst (row stride ld) as S (float, or src's own type),
 * zeros past `limit`; every thread of the block takes part. */
template <typename S, typename T>
__device__ __forceinline__ void stage_rows(S *dst, int ld, const T *src, int64_t first,
                                           int64_t limit, int rows, int cols) {
  for (int e = threadIdx.x; e < rows * cols; e += SDPA_THREADS) {
    int r = e / cols, c = e % cols;
    dst[r * ld + c] = from_f<S>(first + r < limit ? to_f(src[(first + r) * cols + c]) : 0.0f);
  }
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
  stage_rows(&sq[0][0], SDPA_DMAX, qn, i0, d.Tq, SDPA_BQ, D);
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
    stage_rows(&sk[0][0], SDPA_DMAX + 1, kn, j0, d.Tk, SDPA_BK, D);
    stage_rows(&sv[0][0], SDPA_DMAX, vn, j0, d.Tk, SDPA_BK, Dv);
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
      float mnew = fmaxf(m[rr], group_max<32>(s));
      float muse = mnew == -INFINITY ? 0.0f : mnew;
      float p = expf(s - muse), alpha = expf(m[rr] - muse);
      l[rr] = l[rr] * alpha + group_sum<32>(p);
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

/* ---- sdpa_wmma ----------------------------------------------------------- */

#define TC_TQ 64        /* query rows per block: 16 per warp */
#define TC_TK 32        /* keys per tile */
#define TC_DMAX 64      /* largest D and Dv */
#define TC_SLD (TC_TK + 4)  /* S's row stride (floats) */
#define TC_PLD (TC_TK + 8)  /* P's row stride (elements) */

/* Whether sdpa_wmma takes a call of dtype dt and head dims D, Dv. */
static bool tc_fits(int32_t dt, int64_t D, int64_t Dv) {
  return (dt == OPD_DTYPE_FLOAT16 || dt == OPD_DTYPE_BFLOAT16) && D > 0 && Dv > 0 &&
         D % 16 == 0 && Dv % 16 == 0 && D <= TC_DMAX && Dv <= TC_DMAX;
}

template <typename T, int MK>
__global__ void __launch_bounds__(SDPA_THREADS)
    sdpa_wmma(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
              const void *__restrict__ mask, T *__restrict__ out, sdpa_dims_t d,
              int64_t qtiles) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  using namespace nvcuda;
  __shared__ __align__(32) T sq[TC_TQ * TC_DMAX];
  __shared__ __align__(32) T sk[TC_TK * TC_DMAX];
  __shared__ __align__(32) T sv[TC_TK * TC_DMAX];
  __shared__ __align__(32) float ss[4][16 * TC_SLD];
  __shared__ __align__(32) T sp[4][16 * TC_PLD];
  __shared__ __align__(32) float so[4][16 * TC_DMAX];
  __shared__ float salpha[4][16];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t n = blockIdx.x / qtiles, i0 = (blockIdx.x % qtiles) * TC_TQ;
  const int D = (int)d.D, Dv = (int)d.Dv;
  const T *qn = q + n * d.Tq * D, *kn = k + n * d.Tk * D, *vn = v + n * d.Tk * Dv;
  const int64_t mbase = opd__sdpa_mask_base(&d, n);
  stage_rows(sq, D, qn, i0, d.Tq, TC_TQ, D);
  for (int e = lane; e < 16 * Dv; e += 32) so[warp][e] = 0.0f;
  /* lane 2r + h: row r of the warp's 16, keys h*16 .. h*16 + 15 of a tile */
  const int r = lane >> 1, h = lane & 1;
  const int64_t i = i0 + warp * 16 + r;
  float m = -INFINITY, l = 0.0f;
  int64_t last = i0 + TC_TQ < d.Tq ? i0 + TC_TQ : d.Tq;
  int64_t kend = d.causal && last < d.Tk ? last : d.Tk;
  for (int64_t j0 = 0; j0 < kend; j0 += TC_TK) {
    __syncthreads(); /* the previous tile is consumed (and q staged) */
    stage_rows(sk, D, kn, j0, d.Tk, TC_TK, D);
    stage_rows(sv, Dv, vn, j0, d.Tk, TC_TK, Dv);
    __syncthreads();
    /* S (16 x TK) = q rows (16 x D) . k tile^T (D x TK) */
#pragma unroll
    for (int nb = 0; nb < TC_TK / 16; nb++) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int kk = 0; kk < D; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
        wmma::load_matrix_sync(fa, sq + warp * 16 * D + kk, D);
        wmma::load_matrix_sync(fb, sk + nb * 16 * D + kk, D);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(ss[warp] + nb * 16, acc, TC_SLD, wmma::mem_row_major);
    }
    __syncwarp();
    /* the online softmax of row r over this lane's 16 keys */
    float sv16[16], bm = -INFINITY;
#pragma unroll
    for (int t = 0; t < 16; t++) {
      int64_t j = j0 + h * 16 + t;
      float x = -INFINITY;
      if (i < d.Tq && j < d.Tk && !(d.causal && j > i)) {
        x = ss[warp][r * TC_SLD + h * 16 + t] * d.scale;
        if (MK == SDPA_MASK_BOOL) {
          if (!((const uint8_t *)mask)[mbase + i * d.mq + j * d.mk]) x = -INFINITY;
        } else if (MK == SDPA_MASK_FLOAT) {
          x += to_f(((const T *)mask)[mbase + i * d.mq + j * d.mk]);
        }
      }
      sv16[t] = x;
      bm = fmaxf(bm, x);
    }
    float mnew = fmaxf(m, group_max<2>(bm)); /* the row's two lanes */
    float muse = mnew == -INFINITY ? 0.0f : mnew, sum = 0.0f;
#pragma unroll
    for (int t = 0; t < 16; t++) {
      float p = expf(sv16[t] - muse);
      sum += p;
      sp[warp][r * TC_PLD + h * 16 + t] = from_f<T>(p);
    }
    sum = group_sum<2>(sum);
    float alpha = expf(m - muse);
    l = l * alpha + sum;
    m = mnew;
    if (h == 0) salpha[warp][r] = alpha;
    __syncwarp();
    for (int e = lane; e < 16 * Dv; e += 32) so[warp][e] *= salpha[warp][e / Dv];
    __syncwarp();
    /* O (16 x Dv) += P (16 x TK) . v tile (TK x Dv) */
    for (int cb = 0; cb < Dv; cb += 16) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, so[warp] + cb, Dv, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < TC_TK; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, sp[warp] + kk, TC_PLD);
        wmma::load_matrix_sync(fb, sv + kk * Dv + cb, Dv);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(so[warp] + cb, acc, Dv, wmma::mem_row_major);
    }
    __syncwarp();
  }
  /* out = O / l: lane pair (r, h) writes half of row r */
  if (i < d.Tq) {
    T *o = out + (n * d.Tq + i) * Dv;
    float inv = l == 0.0f ? 0.0f : 1.0f / l;
    for (int c = h; c < Dv; c += 2)
      o[c] = from_f<T>(l == 0.0f ? 0.0f : so[warp][r * Dv + c] * inv);
  }
#else
  __trap(); /* never launched: the host checks for sm_80 */
#endif
}

template <typename T>
static void launch_tc(opd_kcall_t *call, const sdpa_dims_t &d, cudaStream_t st) {
  const T *q = (const T *)call->in[0].data, *k = (const T *)call->in[1].data,
          *v = (const T *)call->in[2].data;
  const void *mask = call->n_in > 3 ? call->in[3].data : NULL;
  T *out = (T *)call->out[0].data;
  int64_t qtiles = (d.Tq + TC_TQ - 1) / TC_TQ;
  unsigned grid = (unsigned)(d.N * qtiles);
  if (d.mask == SDPA_MASK_BOOL)
    sdpa_wmma<T, SDPA_MASK_BOOL><<<grid, SDPA_THREADS, 0, st>>>(q, k, v, mask, out, d, qtiles);
  else if (d.mask == SDPA_MASK_FLOAT)
    sdpa_wmma<T, SDPA_MASK_FLOAT><<<grid, SDPA_THREADS, 0, st>>>(q, k, v, mask, out, d, qtiles);
  else
    sdpa_wmma<T, SDPA_MASK_NONE><<<grid, SDPA_THREADS, 0, st>>>(q, k, v, mask, out, d, qtiles);
}

/* ---- the entry point ------------------------------------------------------ */

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

/* Whether the current device has tensor cores WMMA can use here (sm_80+). */
static bool tc_device(int device) {
  int major = 0;
  return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) ==
             cudaSuccess &&
         major >= 8;
}

extern "C" int opd__sdpa_cuda_variant(opd_kcall_t *call, const opd_cuda_ctx_t *ctx,
                                      int variant) {
  sdpa_dims_t d = opd__sdpa_dims(call);
  int32_t dt = call->in[0].dtype;
  if (d.D > SDPA_DMAX || d.Dv > SDPA_DMAX)
    return opd__kerr(call, OPD_ELIMIT,
                     "head dims D = %lld, Dv = %lld: the CUDA kernel takes up to %d",
                     (long long)d.D, (long long)d.Dv, SDPA_DMAX);
  bool tc = variant != OPD_SDPA_CORES && tc_fits(dt, d.D, d.Dv) && tc_device(ctx->device);
  if (variant == OPD_SDPA_WMMA && !tc)
    return opd__kerr(call, OPD_ELIMIT,
                     "the wmma variant takes float16 / bfloat16 with D and Dv multiples of "
                     "16 up to %d on sm_80+ (D = %lld, Dv = %lld)",
                     TC_DMAX, (long long)d.D, (long long)d.Dv);
  if (d.N == 0 || d.Tq == 0 || d.Dv == 0) return 0;
  int64_t qtiles = (d.Tq + SDPA_BQ - 1) / SDPA_BQ; /* the larger grid of the two */
  if (d.N * qtiles > 0x7fffffff)
    return opd__kerr(call, OPD_ELIMIT, "%lld attentions of %lld queries: more than 2^31 blocks",
                     (long long)d.N, (long long)d.Tq);
  cudaStream_t st = OPD_STREAM(ctx);
  int rc = 0;
  if (tc && dt == OPD_DTYPE_FLOAT16) {
    launch_tc<__half>(call, d, st);
  } else if (tc) {
    launch_tc<__nv_bfloat16>(call, d, st);
  } else {
    OPD_FLOAT_DISPATCH(dt, rc = opd__cuda_bad_dtype(call, dt), launch<T>(call, d, qtiles, st);)
  }
  if (rc) return rc;
  OPD_CUDA_LAUNCHED();
  return 0;
}

extern "C" int opd__sdpa_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  return opd__sdpa_cuda_variant(call, ctx, OPD_SDPA_AUTO);
}
