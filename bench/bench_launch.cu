/* The floor for a tiny GPU op: opd's own softmax kernel on a 1x1024 float32
 * device tensor, launched in-process and synchronized, no daemon, no
 * socket. The "bare C launch + sync" baseline that a tiny op requested
 * through opd is compared with (issue 4's latency target).
 *   build/bench/bench_launch [N]
 * Prints `latency op=softmax shape=1x1024 impl=bare_launch_sync p50_us=...`.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/common/kutil.h"
#include "kernels/cuda/cuda.h"

extern "C" const opd_op_def_t opd__op_softmax;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 20000;
  float *d;
  cudaStream_t st;
  cudaMalloc((void **)&d, 2 * 1024 * sizeof(float));
  cudaMemset(d, 0, 2 * 1024 * sizeof(float));
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  opd_kcall_t call;
  memset(&call, 0, sizeof call);
  call.op = &opd__op_softmax;
  call.n_in = call.n_out = 1;
  for (int i = 0; i < 2; i++) {
    opd_tview_t *v = i ? &call.out[0] : &call.in[0];
    v->data = d + i * 1024;
    v->dtype = OPD_DTYPE_FLOAT32;
    v->rank = 2;
    v->shape[0] = 1, v->shape[1] = 1024;
    v->strides[0] = 1024, v->strides[1] = 1;
    v->numel = 1024;
  }
  call.attr[0].type = OPD_ATTR_INT;
  call.attr[0].i = -1;
  opd_cuda_ctx_t ctx = {st, NULL, NULL, 0, 0};
  double *t = (double *)malloc(sizeof(double) * n);
  for (int i = 0; i < 1000; i++) {
    opd__softmax_cuda(&call, &ctx);
    cudaStreamSynchronize(st);
  }
  for (int i = 0; i < n; i++) {
    double t0 = now_us();
    int rc = opd__softmax_cuda(&call, &ctx);
    cudaStreamSynchronize(st);
    t[i] = now_us() - t0;
    if (rc != 0) {
      fprintf(stderr, "softmax: %s\n", call.err);
      return 1;
    }
  }
  qsort(t, n, sizeof *t, cmpd);
  printf("latency op=softmax shape=1x1024 impl=bare_launch_sync p50_us=%.2f "
         "p99_us=%.2f p999_us=%.2f n=%d\n",
         t[n / 2], t[n * 99 / 100], t[n * 999 / 1000], n);
  return 0;
}
