/* What the CUDA benchmarks (bench_stream.cu, bench_enqueue.cu,
 * bench_launch.cu) share: a monotonic clock in microseconds, a qsort
 * comparator for doubles, and a client's own kernels: spin (one warp busy for `cycles` clocks, to keep
 * a stream busy) and bump (a cheap elementwise kernel on n floats). */
#ifndef OPD_BENCH_CUDA_CLIENT_CUH
#define OPD_BENCH_CUDA_CLIENT_CUH

#include <cuda_runtime.h>
#include <time.h>

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

__global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

__global__ void bump(float *x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += gridDim.x * blockDim.x)
    x[i] = x[i] * 0.999f + 0.5f;
}

#endif
