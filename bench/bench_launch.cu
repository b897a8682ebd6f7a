/* The floor for a tiny GPU op: opd's own softmax kernel on a 1x1024 float32
 * device tensor, launched in-process and synchronized, no daemon, no
 * socket. The "bare C launch + sync" baseline that a tiny op requested
 * through opd is compared with (the latency target).
 *   build/bench/bench_launch [N]
 * Prints `latency op=softmax shape=1x1024 impl=bare_launch_sync p50_us=...`,
 * then the pieces of the daemon's way of finishing a job, so that its
 * overhead can be told apart from the driver's:
 *   event_query_spin  launch, cudaEventRecord, spin on cudaEventQuery in
 *                     the same thread
 *   event_poller      the same, but a second thread polls the event and
 *                     raises a flag the first one spins on (the daemon's
 *                     completion thread hand-off); needs two CPUs: pinned
 *                     to one it measures time slices (~8 ms)
 *   launch_only       the time cudaLaunchKernel takes to return
 *   event_record      the time cudaEventRecord takes to return
 *   tiny_runtime      a one-thread kernel's launch through the runtime
 *                     (<<<>>>, what the daemon's own kernels use), and
 *   tiny_driver       the same kernel through the driver's cuLaunchKernel
 *                     (as libopd launches its poll kernel), the runtime's
 *                     entry point to it (op=tiny shape=1 on these lines):
 *                     taking turns in blocks of 64 launches, the stream
 *                     synchronized between blocks, not inside them
 */
#include <pthread.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/cuda_client.cuh"
#include "kernels/common/kutil.h"
#include "kernels/cuda/cuda.h"

extern "C" const opd_op_def_t opd__op_softmax;

/* a latency line: what (op and shape), impl, percentiles of t[0..n) */
static void report(const char *what, const char *impl, double *t, int n) {
  qsort(t, n, sizeof *t, cmp);
  printf("latency %s impl=%s p50_us=%.2f p99_us=%.2f p999_us=%.2f n=%d\n", what,
         impl, t[n / 2], t[n * 99 / 100], t[n * 999 / 1000], n);
  fflush(stdout);
}

#define SOFTMAX "op=softmax shape=1x1024"

__global__ void tiny(unsigned *p, unsigned v) {
  if (v == 0xffffffffu) *p = v;
}

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, unsigned, CUstream, void **,
                              void **);

/* tiny's launch through the runtime and through the driver's entry point,
 * in alternating blocks: the p50s of each */
static int tiny_launches(cudaStream_t st, unsigned *d, int n) {
#if CUDART_VERSION < 12050 /* no cudaGetDriverEntryPointByVersion */
  (void)st, (void)d, (void)n;
  printf("# tiny_runtime / tiny_driver: skipped (CUDA runtime before 12.5)\n");
  return 0;
#else
  void *fn = NULL;
  cudaDriverEntryPointQueryResult q;
  cudaFunction_t f = NULL;
  if (cudaGetDriverEntryPointByVersion("cuLaunchKernel", &fn, 12000, cudaEnableDefault,
                                       &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || cudaGetFuncBySymbol(&f, (const void *)tiny) !=
                                              cudaSuccess) {
    fprintf(stderr, "tiny_driver: no cuLaunchKernel entry point (%s)\n",
            cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  launch_fn launch = (launch_fn)fn;
  enum { BLOCK = 64 };
  int blocks = n / BLOCK / 2;
  if (blocks < 1) blocks = 1;
  double *rt = (double *)malloc(sizeof(double) * blocks * BLOCK);
  double *dr = (double *)malloc(sizeof(double) * blocks * BLOCK);
  unsigned v = 0;
  void *args[2] = {&d, &v};
  for (int b = 0; b < blocks; b++) {
    for (int i = 0; i < BLOCK; i++) {
      double t0 = now_us();
      tiny<<<1, 1, 0, st>>>(d, v);
      rt[b * BLOCK + i] = now_us() - t0;
    }
    cudaStreamSynchronize(st);
    for (int i = 0; i < BLOCK; i++) {
      double t0 = now_us();
      CUresult r = launch((CUfunction)f, 1, 1, 1, 1, 1, 1, 0, (CUstream)st, args, NULL);
      dr[b * BLOCK + i] = now_us() - t0;
      if (r != CUDA_SUCCESS) {
        fprintf(stderr, "tiny_driver: cuLaunchKernel: %d\n", (int)r);
        free(rt);
        free(dr);
        return 1;
      }
    }
    cudaStreamSynchronize(st);
  }
  report("op=tiny shape=1", "tiny_runtime", rt, blocks * BLOCK);
  report("op=tiny shape=1", "tiny_driver", dr, blocks * BLOCK);
  free(rt);
  free(dr);
  return 0;
#endif
}

typedef struct poller {
  cudaEvent_t ev;
  int go, done, stop;
} poller_t;

/* The completion thread of the event_poller case: waits for a launch,
 * polls its event, raises done. */
static void *poller(void *arg) {
  poller_t *p = (poller_t *)arg;
  while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
    if (!__atomic_load_n(&p->go, __ATOMIC_ACQUIRE)) continue;
    __atomic_store_n(&p->go, 0, __ATOMIC_RELAXED);
    while (cudaEventQuery(p->ev) == cudaErrorNotReady) {
    }
    __atomic_store_n(&p->done, 1, __ATOMIC_RELEASE);
  }
  return NULL;
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
    opd__op_softmax.cuda(&call, &ctx);
    cudaStreamSynchronize(st);
  }
  for (int i = 0; i < n; i++) {
    double t0 = now_us();
    int rc = opd__op_softmax.cuda(&call, &ctx);
    cudaStreamSynchronize(st);
    t[i] = now_us() - t0;
    if (rc != 0) {
      fprintf(stderr, "softmax: %s\n", call.err);
      return 1;
    }
  }
  report(SOFTMAX, "bare_launch_sync", t, n);

  cudaEvent_t ev;
  cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  for (int i = 0; i < n; i++) {
    double t0 = now_us();
    opd__op_softmax.cuda(&call, &ctx);
    cudaEventRecord(ev, st);
    while (cudaEventQuery(ev) == cudaErrorNotReady) {
    }
    t[i] = now_us() - t0;
  }
  report(SOFTMAX, "event_query_spin", t, n);

  poller_t pl;
  pl.ev = ev;
  pl.go = pl.done = pl.stop = 0;
  pthread_t th;
  pthread_create(&th, NULL, poller, &pl);
  for (int i = 0; i < n; i++) {
    double t0 = now_us();
    opd__op_softmax.cuda(&call, &ctx);
    cudaEventRecord(ev, st);
    __atomic_store_n(&pl.go, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&pl.done, __ATOMIC_ACQUIRE)) {
    }
    __atomic_store_n(&pl.done, 0, __ATOMIC_RELAXED);
    t[i] = now_us() - t0;
  }
  __atomic_store_n(&pl.stop, 1, __ATOMIC_RELEASE);
  pthread_join(th, NULL);
  report(SOFTMAX, "event_poller", t, n);

  for (int i = 0; i < n; i++) {
    double t0 = now_us();
    opd__op_softmax.cuda(&call, &ctx);
    t[i] = now_us() - t0;
    cudaStreamSynchronize(st);
  }
  report(SOFTMAX, "launch_only", t, n);
  for (int i = 0; i < n; i++) {
    opd__op_softmax.cuda(&call, &ctx);
    double t0 = now_us();
    cudaEventRecord(ev, st);
    t[i] = now_us() - t0;
    cudaStreamSynchronize(st);
  }
  report(SOFTMAX, "event_record", t, n);
  return tiny_launches(st, (unsigned *)d, n);
}
