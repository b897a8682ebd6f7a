/* Row kernels on the GPU (softmax, layernorm, rmsnorm over the last dim):
 * how rows map to threads, how a row is read, how partial sums combine.
 *
 * DESIGN
 * A row of C elements is handled by a group of TPR threads: one warp for
 * short rows (TPR 32, 8 rows per block of 256), the whole block for long
 * ones (TPR = THREADS = 128, 256 or 1024 by C; rows_tpr). Each thread walks
 * the row at stride TPR, 16-byte packs when the row pointers are aligned
 * and C is a multiple of the pack (VEC), else element by element, keeping
 * several loads in flight (unrolled loop). Partial results meet through
 * warp shuffles (TPR 32) or shared memory (row_sum / row_max). The kernels
 * read the row twice (statistics, then the output pass): for rows up to a
 * few hundred KiB per block the second read hits L2, so the traffic is
 * close to one read and one write.
 * Float range: the norms' sums of squares leave float32 for |x| past
 * ~1e19 or a row of denormals with eps = 0. They check the reduced
 * statistics of each row (row-uniform: every thread of the group holds
 * bit-identical values, so the branch never splits a group) and only
 * then read the row once more for its max |x| (row_amax) and redo it on
 * x * 2^-e (pow2_scale: exact, max |x * 2^-e| in [0.5, 4)), which keeps
 * every square and sum in range.
 */
#ifndef OPD_KERNELS_NORM_ROWS_CUH
#define OPD_KERNELS_NORM_ROWS_CUH

#include "kernels/cuda/common.cuh"

/* Threads per row for rows of C elements. */
static inline int rows_tpr(int64_t C) {
  if (C <= 1024) return 32;
  if (C <= 4096) return 128;
  if (C <= 32768) return 256;
  return 1024;
}

static inline unsigned rows_grid(int64_t rows, int rows_per_block) {
  int64_t b = (rows + rows_per_block - 1) / rows_per_block;
  if (b > (1 << 20)) b = 1 << 20; /* kernels loop over the rest */
  return (unsigned)(b < 1 ? 1 : b);
}

template <int TPR, int THREADS>
__device__ __forceinline__ float row_sum(float v, float *sh) {
  if (TPR <= 32) return group_sum<TPR>(v);
  return block_sum<THREADS>(v, sh);
}

template <int TPR, int THREADS>
__device__ __forceinline__ float row_max(float v, float *sh) {
  if (TPR <= 32) return group_max<TPR>(v);
  v = group_max<32>(v);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < THREADS / 32 ? sh[lane] : -INFINITY;
  v = group_max<32>(v);
  __syncthreads();
  return v;
}

/* Number of elements of a row of C that row_visit gives this lane. */
template <typename T, int TPR, bool VEC>
__device__ __forceinline__ int64_t lane_count(int64_t C, int lane) {
  constexpr int N = VEC ? Pack<T>::N : 1;
  int64_t m = C / N;
  return lane < m ? ((m - 1 - lane) / TPR + 1) * N : 0;
}

/* Calls f(i, v) for this lane's elements of row xr (C elements). */
template <typename T, int TPR, bool VEC, typename Fn>
__device__ __forceinline__ void row_visit(const T *xr, int64_t C, int lane, Fn f) {
  if (VEC) {
    constexpr int N = Pack<T>::N;
    int64_t np = C / N;
#pragma unroll 4
    for (int64_t i = lane; i < np; i += TPR) {
      Pack<T> p = load_pack(xr + i * N);
#pragma unroll
      for (int k = 0; k < N; k++) f(i * N + k, to_f(p.v[k]));
    }
  } else {
#pragma unroll 4
    for (int64_t i = lane; i < C; i += TPR) f(i, to_f(xr[i]));
  }
}

/* yr[i] = from_f(f(i, x[i])) for this lane's elements. */
template <typename T, int TPR, bool VEC, typename Fn>
__device__ __forceinline__ void row_map(const T *xr, T *yr, int64_t C, int lane, Fn f) {
  if (VEC) {
    constexpr int N = Pack<T>::N;
    int64_t np = C / N;
#pragma unroll 4
    for (int64_t i = lane; i < np; i += TPR) {
      Pack<T> p = load_pack_cs(xr + i * N);
#pragma unroll
      for (int k = 0; k < N; k++) p.v[k] = from_f<T>(f(i * N + k, to_f(p.v[k])));
      store_pack(yr + i * N, p);
    }
  } else {
#pragma unroll 4
    for (int64_t i = lane; i < C; i += TPR) yr[i] = from_f<T>(f(i, to_f(xr[i])));
  }
}

/* max |x| over the row (NaN skipped: fmaxf; 0 for a row of NaN); every
 * thread of the group gets it. */
template <typename T, int TPR, int THREADS, bool VEC>
__device__ __forceinline__ float row_amax(const T *xr, int64_t C, int lane, float *sh) {
  float a = 0.0f;
  row_visit<T, TPR, VEC>(xr, C, lane, [&](int64_t, float v) { a = fmaxf(a, fabsf(v)); });
  return row_max<TPR, THREADS>(a, sh);
}

/* 2^-e for a finite a >= 0 = f 2^e (f in [0.5, 1)), e clamped to
 * [-127, 126] so that the scale is a normal float: a * 2^-e is in
 * [0.5, 4) (a denormal a: (2^-22, 1)); 1 for a = 0. Multiplying by it is
 * exact but for elements far below a, which only lose bits that do not
 * count against a^2. */
__device__ __forceinline__ float pow2_scale(float a) {
  if (a == 0.0f) return 1.0f;
  int e;
  frexpf(a, &e);
  e = e < -127 ? -127 : e > 126 ? 126 : e;
  return __int_as_float((127 - e) << 23);
}

/* Statistics of a set of row elements: n of them, their mean, and m2, the
 * sum of their squared deviations from the mean. mean and m2 are double
 * once a lane's float sums are in (a few operations per lane and row):
 * the merged mean then splits exactly into float hi + lo, which the
 * output pass subtracts in turn, so that neither a row whose spread is a
 * few ulps of its mean (1e30 and its neighbour) nor a long row whose
 * x[0] is an outlier (what a float mean or a shift by x[0] lose) costs
 * digits. */
struct RowStats {
  float n;                         /* elements */
  double mean;                     /* their mean */
  double m2;                       /* sum (x - mean)^2 */
};

/* The statistics of the union of a and b (Chan, Golub and LeVeque's
 * pairwise update: no cancellation). Not symmetric in rounding: callers
 * pass the lower lane's as a, so that both lanes of a pair get identical
 * bits. */
__device__ __forceinline__ RowStats stats_merge(RowStats a, RowStats b) {
  RowStats r;
  r.n = a.n + b.n;
  if (r.n == 0.0f) return a;
  double fb = (double)(b.n / r.n), d = b.mean - a.mean;
  r.mean = a.mean + d * fb;
  r.m2 = a.m2 + b.m2 + d * d * ((double)a.n * fb);
  return r;
}

template <int width>
__device__ __forceinline__ RowStats group_stats(RowStats s) {
#pragma unroll
  for (int off = width / 2; off > 0; off >>= 1) {
    RowStats t;
    t.n = __shfl_xor_sync(0xffffffffu, s.n, off, width);
    t.mean = __shfl_xor_sync(0xffffffffu, s.mean, off, width);
    t.m2 = __shfl_xor_sync(0xffffffffu, s.m2, off, width);
    s = (threadIdx.x & off) ? stats_merge(t, s) : stats_merge(s, t);
  }
  return s;
}

/* Merges the lanes' statistics over the row's group; every thread gets
 * the same bits. `sh` holds 96 doubles; syncs before returning (blocks). */
template <int TPR, int THREADS>
__device__ __forceinline__ RowStats row_stats(RowStats s, double *sh) {
  s = group_stats<TPR <= 32 ? TPR : 32>(s);
  if (TPR <= 32) return s;
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sh[warp] = s.n;
    sh[32 + warp] = s.mean;
    sh[64 + warp] = s.m2;
  }
  __syncthreads();
  RowStats t = {0.0f, 0.0, 0.0};
  if (lane < THREADS / 32) t = RowStats{(float)sh[lane], sh[32 + lane], sh[64 + lane]};
  s = group_stats<32>(t);
  __syncthreads();
  return s;
}

/* This lane's statistics of row xr, values v * sc (sc = 1: v): the lane
 * shifts its float sums by its own first element Kt, s1 = sum(v - Kt),
 * s2 = sum((v - Kt)^2), mean = Kt + s1/n, m2 = s2 - s1^2/n, so the
 * cancellation is bounded by the lane's own count (C / TPR <= 256 up to
 * C = 262144) whatever the row holds; the previous kernel shifted the
 * whole row by x[0] and lost every digit when x[0] was an outlier of a
 * long row. */
template <typename T, int TPR, bool VEC>
__device__ __forceinline__ RowStats lane_stats(const T *xr, int64_t C, int lane, float sc) {
  RowStats r = {0.0f, 0.0, 0.0};
  int64_t cnt = lane_count<T, TPR, VEC>(C, lane);
  if (cnt == 0) return r;
  float Kt = to_f(xr[VEC ? (int64_t)lane * Pack<T>::N : lane]) * sc;
  float s1 = 0.0f, s2 = 0.0f;
  row_visit<T, TPR, VEC>(xr, C, lane, [&](int64_t, float v) {
    float d = v * sc - Kt;
    s1 += d;
    s2 += d * d;
  });
  r.n = (float)cnt;
  float m = s1 / r.n, m2 = s2 - s1 * m;
  r.mean = (double)Kt + (double)m;
  r.m2 = m2 < 0.0f ? 0.0 : (double)m2; /* NaN stays NaN */
  return r;
}

/* Launches KERNEL<T, TPR, THREADS, VEC> over `rows` rows with the TPR of
 * rows_tpr(C); the kernel's arguments follow. */
#define OPD_ROWS_LAUNCH(KERNEL, T, VEC, C, rows, st, ...)                        \
  switch (rows_tpr(C)) {                                                       \
    case 32: KERNEL<T, 32, 256, VEC><<<rows_grid(rows, 8), 256, 0, st>>>(__VA_ARGS__); break; \
    case 128: KERNEL<T, 128, 128, VEC><<<rows_grid(rows, 1), 128, 0, st>>>(__VA_ARGS__); break; \
    case 256: KERNEL<T, 256, 256, VEC><<<rows_grid(rows, 1), 256, 0, st>>>(__VA_ARGS__); break; \
    default: KERNEL<T, 1024, 1024, VEC><<<rows_grid(rows, 1), 1024, 0, st>>>(__VA_ARGS__); break; \
  }

/* Row loop header: `row` walks this group's rows. */
#define OPD_FOR_ROWS(row, rows, TPR, THREADS)                                   \
  for (int64_t row = (int64_t)blockIdx.x * (THREADS / TPR) + threadIdx.x / TPR; \
       row < (rows); row += (int64_t)gridDim.x * (THREADS / TPR))

#endif /* OPD_KERNELS_NORM_ROWS_CUH */
