/* Where the time of a stream-ordered opd run goes, from a CUDA client, in
 * one run: the client's own tiny kernel as the baseline; opd_run
 * (answered at completion); opd_run_stream (answered at enqueue) per call
 * and to completion; chains alternating a client kernel and an opd run
 * (each waits for the other, across the processes) against the same chain
 * of client kernels; and the client-side cost of the interprocess event
 * calls. Run it with and without MPS to see the context switch.
 *   build/bench/bench_stream SOCKET [N]
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench/cuda_client.cuh"
#include "opd/opd.h"

#define ROUNDS 7
#define MEDIAN(out, ...)                                \
  do {                                                  \
    double v_[ROUNDS];                                  \
    for (int r_ = 0; r_ < ROUNDS; r_++) { __VA_ARGS__; v_[r_] = t_; } \
    qsort(v_, ROUNDS, sizeof v_[0], cmp);               \
    out = v_[ROUNDS / 2];                               \
  } while (0)

int main(int argc, char **argv) {
  const char *sock = argc > 1 ? argv[1] : NULL;
  int n = argc > 2 ? atoi(argv[2]) : 500;
  opd_client_t *c;
  if (opd_connect(sock, &c) != 0) {
    fprintf(stderr, "%s\n", opd_last_error());
    return 1;
  }
  enum { E = 4096 };
  float *x;
  cudaMalloc((void **)&x, 2 * E * sizeof(float));
  cudaMemset(x, 0, 2 * E * sizeof(float));
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  int64_t e = E;
  opd_tensor_t tx, ty;
  opd_tensor_init(&tx, 0, 0, OPD_DTYPE_FLOAT32, 1, &e);
  opd_tensor_init(&ty, 0, 0, OPD_DTYPE_FLOAT32, 1, &e);
  if (opd_tensor_cuda(c, "cuda:0", x, &tx) || opd_tensor_cuda(c, "cuda:0", x + E, &ty) ||
      opd_run_stream(c, "cuda:0", s, "relu", &tx, 1, &ty, 1, NULL, 0)) {
    fprintf(stderr, "%s\n", opd_last_error());
    return 1;
  }
  cudaStreamSynchronize(s);
  double t_, own, sync_run, enq, done, mixed, own2, rec, wait;
  /* the client's own kernel, n of them, one sync */
  MEDIAN(own, { double t0 = now_us(); for (int i = 0; i < n; i++) bump<<<4, 256, 0, s>>>(x, E);
           cudaStreamSynchronize(s); t_ = (now_us() - t0) / n; });
  /* opd_run: answered when done */
  MEDIAN(sync_run, { double t0 = now_us(); for (int i = 0; i < n; i++) opd_run(c, "relu", &tx, 1, &ty, 1, NULL, 0);
           t_ = (now_us() - t0) / n; });
  /* opd_run_stream: per call, then to completion */
  MEDIAN(enq, { double t0 = now_us(); for (int i = 0; i < n; i++)
             opd_run_stream(c, "cuda:0", s, "relu", &tx, 1, &ty, 1, NULL, 0);
           t_ = (now_us() - t0) / n; cudaStreamSynchronize(s); });
  MEDIAN(done, { double t0 = now_us(); for (int i = 0; i < n; i++)
             opd_run_stream(c, "cuda:0", s, "relu", &tx, 1, &ty, 1, NULL, 0);
           cudaStreamSynchronize(s); t_ = (now_us() - t0) / n; });
  /* opd_enqueue_stream: the answer not waited for (a poll kernel) */
  double enq_l, done_l, mixed_l;
  MEDIAN(enq_l, { double t0 = now_us(); for (int i = 0; i < n; i++)
             opd_enqueue_stream(c, "cuda:0", s, "relu", &tx, 1, &ty, 1, NULL, 0);
           t_ = (now_us() - t0) / n; cudaStreamSynchronize(s); });
  MEDIAN(done_l, { double t0 = now_us(); for (int i = 0; i < n; i++)
             opd_enqueue_stream(c, "cuda:0", s, "relu", &tx, 1, &ty, 1, NULL, 0);
           cudaStreamSynchronize(s); t_ = (now_us() - t0) / n; });
  MEDIAN(mixed_l, { double t0 = now_us(); for (int i = 0; i < n; i++) {
             bump<<<4, 256, 0, s>>>(x, E);
             opd_enqueue_stream(c, "cuda:0", s, "relu", &tx, 1, &ty, 1, NULL, 0); }
           cudaStreamSynchronize(s); t_ = (now_us() - t0) / n; });
  if (opd_synchronize(c) != 0) fprintf(stderr, "enqueued: %s\n", opd_last_error());
  /* alternating with the client's kernel, each waiting for the other */
  MEDIAN(mixed, { double t0 = now_us(); for (int i = 0; i < n; i++) {
             bump<<<4, 256, 0, s>>>(x, E);
             opd_run_stream(c, "cuda:0", s, "relu", &tx, 1, &ty, 1, NULL, 0); }
           cudaStreamSynchronize(s); t_ = (now_us() - t0) / n; });
  MEDIAN(own2, { double t0 = now_us(); for (int i = 0; i < n; i++) {
             bump<<<4, 256, 0, s>>>(x, E); bump<<<4, 256, 0, s>>>(x + E, E); }
           cudaStreamSynchronize(s); t_ = (now_us() - t0) / n; });
  /* a call right after a slow kernel of the client (about 2 ms): does the
   * call wait for it (a host-side wait somewhere) or return at enqueue? */
  int rate = 0;
  cudaDeviceGetAttribute(&rate, cudaDevAttrClockRate, 0);
  double after_slow;
  MEDIAN(after_slow, { cudaStreamSynchronize(s); spin<<<1, 32, 0, s>>>((long long)rate * 2);
           double t0 = now_us();
           opd_run_stream(c, "cuda:0", s, "relu", &tx, 1, &ty, 1, NULL, 0);
           t_ = now_us() - t0; cudaStreamSynchronize(s); });
  /* two calls after the slow kernel: the second records our event again
   * while the first record is pending and the daemon's stream waits on it */
  double second_busy;
  MEDIAN(second_busy, { cudaStreamSynchronize(s); spin<<<1, 32, 0, s>>>((long long)rate * 2);
           opd_run_stream(c, "cuda:0", s, "relu", &tx, 1, &ty, 1, NULL, 0);
           double t0 = now_us();
           opd_run_stream(c, "cuda:0", s, "relu", &tx, 1, &ty, 1, NULL, 0);
           t_ = now_us() - t0; cudaStreamSynchronize(s); });
  /* the same calls on their own, in this process, right after the 2 ms
   * kernel: which of them pays when the stream is busy (next session's
   * question: docs/async.md) */
  cudaEvent_t iev, lev;
  cudaEventCreateWithFlags(&iev, cudaEventInterprocess | cudaEventDisableTiming);
  cudaEventCreateWithFlags(&lev, cudaEventDisableTiming);
  double rec_busy, recl_busy, wait_busy;
  MEDIAN(rec_busy, { cudaStreamSynchronize(s); spin<<<1, 32, 0, s>>>((long long)rate * 2);
           double t0 = now_us(); cudaEventRecord(iev, s); t_ = now_us() - t0;
           cudaStreamSynchronize(s); });
  MEDIAN(recl_busy, { cudaStreamSynchronize(s); spin<<<1, 32, 0, s>>>((long long)rate * 2);
           double t0 = now_us(); cudaEventRecord(lev, s); t_ = now_us() - t0;
           cudaStreamSynchronize(s); });
  cudaStream_t s2;
  cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
  MEDIAN(wait_busy, { cudaStreamSynchronize(s); spin<<<1, 32, 0, s>>>((long long)rate * 2);
           cudaEventRecord(iev, s);
           double t0 = now_us(); cudaStreamWaitEvent(s2, iev, 0); t_ = now_us() - t0;
           cudaStreamSynchronize(s2); cudaStreamSynchronize(s); });
  /* an interprocess event recorded again while its last record is still
   * pending (a busy stream): does the driver wait for the first? */
  double rerec_busy, rerec_plain;
  MEDIAN(rerec_busy, { cudaStreamSynchronize(s); spin<<<1, 32, 0, s>>>((long long)rate * 2);
           cudaEventRecord(iev, s);
           double t0 = now_us(); cudaEventRecord(iev, s); t_ = now_us() - t0;
           cudaStreamSynchronize(s); });
  MEDIAN(rerec_plain, { cudaStreamSynchronize(s); spin<<<1, 32, 0, s>>>((long long)rate * 2);
           cudaEventRecord(lev, s);
           double t0 = now_us(); cudaEventRecord(lev, s); t_ = now_us() - t0;
           cudaStreamSynchronize(s); });
  /* the client-side event calls */
  cudaEvent_t ev;
  cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming);
  MEDIAN(rec, { double t0 = now_us(); for (int i = 0; i < n; i++) cudaEventRecord(ev, s);
           t_ = (now_us() - t0) / n; cudaStreamSynchronize(s); });
  MEDIAN(wait, { double t0 = now_us(); for (int i = 0; i < n; i++) cudaStreamWaitEvent(s, ev, 0);
           t_ = (now_us() - t0) / n; cudaStreamSynchronize(s); });
  const char *mps = getenv("CUDA_MPS_PIPE_DIRECTORY");
  printf("# bench_stream: n=%d, %d floats, medians of %d rounds, transport %s, MPS %s\n",
         n, E, ROUNDS, opd_transport(c), mps ? mps : "(not set)");
  printf("own kernel, to completion:        %8.2f us/op\n", own);
  printf("opd_run (answered when done):     %8.2f us/op\n", sync_run);
  printf("opd_run_stream, the call:         %8.2f us/op\n", enq);
  printf("opd_run_stream, to completion:    %8.2f us/op\n", done);
  printf("opd_enqueue_stream, the call:     %8.2f us/op\n", enq_l);
  printf("opd_enqueue_stream, to completion: %7.2f us/op\n", done_l);
  printf("own kernel + opd_enqueue_stream:  %8.2f us/pair (own + own %.2f, ratio %.2f)\n",
         mixed_l, own2, mixed_l / own2);
  printf("own kernel + opd_run_stream:      %8.2f us/pair (own + own %.2f, ratio %.2f)\n",
         mixed, own2, mixed / own2);
  printf("the call after a 2 ms kernel:     %8.2f us (about 2000: it waited)\n",
         after_slow);
  printf("the second call after a 2 ms kernel: %6.2f us (its event's last record "
         "pending)\n", second_busy);
  printf("after a 2 ms kernel, in-process: record interprocess %.2f us, record "
         "plain %.2f us, another stream waits on the interprocess one %.2f us\n",
         rec_busy, recl_busy, wait_busy);
  printf("after a 2 ms kernel, recorded again while pending: interprocess %.2f us, "
         "plain %.2f us\n", rerec_busy, rerec_plain);
  printf("cudaEventRecord (interprocess):   %8.2f us\n", rec);
  printf("cudaStreamWaitEvent:              %8.2f us\n", wait);
  opd_close(c);
  return 0;
}
