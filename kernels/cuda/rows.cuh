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
 */
#ifndef OPD_KERNELS_CUDA_ROWS_CUH
#define OPD_KERNELS_CUDA_ROWS_CUH

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

#endif /* OPD_KERNELS_CUDA_ROWS_CUH */
