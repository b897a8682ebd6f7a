/* GPU machine: asynchronous, stream-ordered runs from a CUDA client
 * through libopd's C interface: opd_run_stream, opd_tensor_cuda,
 * opd_run_async / opd_submit_async, opd_synchronize.
 *   build/tests/async_gpu SOCKET    (prints checks and "N passed, N failed")
 * Checked: GPU-side order both ways with the client's own stream (a slow
 * kernel of the client writes the input, opd reads it with no host wait,
 * the client's next kernel reads opd's output, and the client overwrites
 * the input at once); the call returns before a long kernel finishes;
 * memory freed right after the call; the default streams; the import
 * cache and its errors; validation errors still at the call; the bound on
 * incomplete runs (stats from a second connection); a client that exits
 * with runs in flight. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "opd/opd.h"
#include "tests/gpu/check.h"


static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* spins about `cycles` clocks, then writes x[i] = base - i */
__global__ void slow_fill(float *x, int n, float base, long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += gridDim.x * blockDim.x)
    x[i] = base - (float)i;
}

__global__ void twice(const float *y, float *z, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += gridDim.x * blockDim.x)
    z[i] = 2.0f * y[i];
}

static int64_t stat_of(opd_client_t *c, const char *key) {
  char *json, pat[64];
  size_t len;
  if (opd_stats_json(c, &json, &len) != 0) return -1;
  snprintf(pat, sizeof pat, "\"%s\":", key);
  char *p = strstr(json, pat);
  int64_t v = p ? strtoll(p + strlen(pat), NULL, 10) : -1;
  opd_free(json);
  return v;
}

static opd_tensor_t vec(int64_t n) {
  opd_tensor_t t;
  opd_tensor_init(&t, 0, 0, OPD_DTYPE_FLOAT32, 1, &n);
  return t;
}

#include "tests/gpu/async_batch.cuh"

int main(int argc, char **argv) {
  const char *sock = argc > 1 ? argv[1] : NULL;
  opd_client_t *c, *watch;
  if (opd_connect(sock, &c) != 0 || opd_connect(sock, &watch) != 0) {
    fprintf(stderr, "%s\n", opd_last_error());
    return 1;
  }
  enum { N = 1 << 20 };
  float *x, *y, *z;
  cudaMalloc((void **)&x, N * sizeof(float));
  cudaMalloc((void **)&y, N * sizeof(float));
  cudaMalloc((void **)&z, N * sizeof(float));
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  int rate = 0;
  cudaDeviceGetAttribute(&rate, cudaDevAttrClockRate, 0); /* kHz */
  long long ms20 = (long long)rate * 20;                  /* ~20 ms */

  /* ---- order both ways, no host wait ---- */
  opd_tensor_t tx = vec(N), ty = vec(N);
  int rc = opd_tensor_cuda(c, "cuda:0", x, &tx);
  rc |= opd_tensor_cuda(c, "cuda:0", y, &ty);
  CHECK(rc == 0, "opd_tensor_cuda on cudaMalloc memory: %s",
        rc ? opd_last_error() : "ok");
  opd_tensor_t tx2 = vec(N);
  opd_tensor_cuda(c, "cuda:0", x, &tx2);
  CHECK(tx2.arena == tx.arena && tx2.offset == 0,
        "the same allocation again: the cached import");
  /* one run first: the first of a connection also sets up its events */
  rc = opd_run_stream(c, "cuda:0", s, "relu", &tx, 1, &ty, 1, NULL, 0);
  cudaStreamSynchronize(s);
  slow_fill<<<64, 256, 0, s>>>(x, N, 1000.0f, ms20); /* the client's work */
  double t0 = now_ms();
  rc = opd_run_stream(c, "cuda:0", s, "relu", &tx, 1, &ty, 1, NULL, 0);
  double t_call = now_ms() - t0;
  CHECK(rc == 0, "opd_run_stream after a slow kernel of the client: %s",
        rc ? opd_last_error() : "ok");
  /* the client overwrites x at once and reads y: both after opd's run */
  slow_fill<<<64, 256, 0, s>>>(x, N, -5.0f, 0);
  twice<<<64, 256, 0, s>>>(y, z, N);
  cudaStreamSynchronize(s);
  double t_all = now_ms() - t0;
  float *h = (float *)malloc(N * sizeof(float));
  cudaMemcpy(h, z, N * sizeof(float), cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int i = 0; i < N; i++) {
    float v = 1000.0f - (float)i;
    bad += h[i] != 2.0f * (v > 0 ? v : 0.0f);
  }
  CHECK(bad == 0, "opd read the slow kernel's x and the next kernel read "
        "opd's y: %d wrong of %d", bad, N);
  /* the order is kept on the GPU under MPS or with OPD_STREAM_ORDER=gpu;
   * else the call synchronizes the stream (libopd's gpu_order) */
  const char *order = getenv("OPD_STREAM_ORDER");
  if (order != NULL && strcmp(order, "gpu") == 0)
    CHECK(t_call < t_all / 4, "the call returned at enqueue: %.2f ms, the "
          "stream done after %.2f ms", t_call, t_all);
  else if (order != NULL && strcmp(order, "host") == 0)
    CHECK(t_call >= t_all / 2, "host order: the call returned after the "
          "client's slow kernel: %.2f ms of %.2f ms", t_call, t_all);
  else
    printf("note: the call took %.2f ms, the stream %.2f ms (the order mode "
           "is libopd's choice: set OPD_STREAM_ORDER to check one)\n",
           t_call, t_all);

  /* ---- reuse at once, in a loop, and the legacy default stream ---- */
  bad = 0;
  for (int k = 0; k < 50; k++) {
    cudaStream_t st = (k & 1) ? s : cudaStreamLegacy;
    slow_fill<<<64, 256, 0, st>>>(x, N, (float)(k * 10), k == 0 ? ms20 / 10 : 0);
    rc |= opd_run_stream(c, "cuda", st, "relu", &tx, 1, &ty, 1, NULL, 0);
    twice<<<64, 256, 0, st>>>(y, z, N);
    slow_fill<<<64, 256, 0, st>>>(x, N, -1e6f, 0); /* reused at once */
    cudaMemcpyAsync(h, z, 64 * sizeof(float), cudaMemcpyDeviceToHost, st);
    cudaStreamSynchronize(st);
    for (int i = 0; i < 64; i++) {
      float v = (float)(k * 10) - (float)i;
      bad += h[i] != 2.0f * (v > 0 ? v : 0.0f);
    }
  }
  CHECK(rc == 0 && bad == 0, "50 rounds over two streams, the input "
        "overwritten right after each call: %d wrong (%s)", bad,
        rc ? opd_last_error() : "ok");

  /* ---- freed right after the call ---- */
  float *tmp;
  cudaMalloc((void **)&tmp, 64 << 20);
  opd_tensor_t tt = vec(16 << 20), tt2 = vec(16 << 20);
  rc = opd_tensor_cuda(c, "cuda:0", tmp, &tt);
  tt2 = tt;
  rc |= opd_run_stream(c, "cuda:0", s, "relu", &tt, 1, &tt2, 1, NULL, 0);
  cudaFree(tmp); /* waits for the device: the stream waited for the run */
  float *tmp2;
  cudaMalloc((void **)&tmp2, 64 << 20); /* likely the same addresses */
  cudaMemset(tmp2, 0, 64 << 20);
  opd_tensor_t tn = vec(16 << 20);
  rc |= opd_tensor_cuda(c, "cuda:0", tmp2, &tn);
  CHECK(rc == 0 && tn.arena != tt.arena, "memory freed after the call and "
        "made again: a new import (arena %llu, was %llu): %s",
        (unsigned long long)tn.arena, (unsigned long long)tt.arena,
        rc ? opd_last_error() : "ok");
  opd_tensor_t tn2 = tn;
  tn2.offset = 32 << 20;
  tn2.shape[0] = 1 << 20;
  opd_tensor_t tn1 = tn;
  tn1.shape[0] = 1 << 20;
  rc = opd_run_stream(c, "cuda:0", s, "relu", &tn1, 1, &tn2, 1, NULL, 0);
  cudaStreamSynchronize(s);
  CHECK(rc == 0 && opd_synchronize(c) == 0 && opd_ping(c) == 0,
        "runs on the new allocation, the daemon healthy: %s",
        rc ? opd_last_error() : "ok");
  cudaFree(tmp2);

  /* ---- errors at the call ---- */
  opd_tensor_t small = vec(10);
  small.arena = ty.arena;
  rc = opd_run_stream(c, "cuda:0", s, "relu", &tx, 1, &small, 1, NULL, 0);
  CHECK(rc == OPD_ESHAPE, "a shape error is the call's: %s (%s)",
        opd_errname(rc), opd_last_error());
  opd_tensor_t big = vec(N + 1);
  rc = opd_tensor_cuda(c, "cuda:0", x, &big);
  CHECK(rc == OPD_EBOUNDS, "past the allocation: %s (%s)", opd_errname(rc),
        opd_last_error());
  opd_tensor_t hostp = vec(4);
  rc = opd_tensor_cuda(c, "cuda:0", h, &hostp);
  CHECK(rc == OPD_EINVAL, "a host pointer: %s (%s)", opd_errname(rc),
        opd_last_error());
  /* ---- this process's device by UUID ---- */
  char uuid[48] = "";
  rc = opd_cuda_device_name(0, uuid, sizeof uuid);
  char *info = NULL;
  size_t ilen = 0;
  opd_server_info(c, &info, &ilen);
  CHECK(rc == 0 && strncmp(uuid, "GPU-", 4) == 0 && info != NULL &&
            strstr(info, uuid) != NULL,
        "cuda:0 goes to the daemon as its UUID %s, one of the hello's", uuid);
  opd_free(info);
  rc = opd_run_stream(c, uuid, s, "relu", &tx, 1, &ty, 1, NULL, 0);
  CHECK(rc == 0 && cudaStreamSynchronize(s) == cudaSuccess,
        "a run naming the device by UUID: %s", rc ? opd_last_error() : "ok");
  rc = opd_run_stream(c, "cuda", s, "relu", &tx, 1, &ty, 1, NULL, 0);
  CHECK(rc == 0 && cudaStreamSynchronize(s) == cudaSuccess,
        "\"cuda\": the stream's device: %s", rc ? opd_last_error() : "ok");
  int ndev = 0;
  cudaGetDeviceCount(&ndev);
  if (ndev == 1) {
    rc = opd_run_stream(c, "cuda:1", s, "relu", &tx, 1, &ty, 1, NULL, 0);
    CHECK(rc == OPD_EINVAL && strstr(opd_last_error(), "the stream is on cuda:0"),
          "a run naming another device than its stream's: %s (%s)",
          opd_errname(rc), opd_last_error());
  }
  opd_tensor_t tu = vec(N);
  rc = opd_tensor_cuda(c, "GPU-00000000-0000-0000-0000-000000000000", x, &tu);
  CHECK(rc == OPD_EDEVICE && strstr(opd_last_error(), "no CUDA device of this "
                                    "process has UUID"),
        "a UUID no device of this process has: %s (%s)", opd_errname(rc),
        opd_last_error());
  /* (a pointer that is not a stream is not checked: the driver, like
   * cudaStreamWaitEvent, takes the caller's word; it may crash) */

  /* ---- the bound on incomplete runs, daemon memory ---- */
  enum { M = 2048, RUNS = 600 };
  uint64_t da;
  rc = opd_alloc(c, "cuda:0", 3ull * M * M * 4, &da);
  int64_t mm[2] = {M, M};
  opd_tensor_t A, B, C;
  opd_tensor_init(&A, da, 0, OPD_DTYPE_FLOAT32, 2, mm);
  opd_tensor_init(&B, da, (uint64_t)M * M * 4, OPD_DTYPE_FLOAT32, 2, mm);
  opd_tensor_init(&C, da, 2ull * M * M * 4, OPD_DTYPE_FLOAT32, 2, mm);
  opd_tensor_t AB[2] = {A, B};
  uint64_t *req = (uint64_t *)calloc(RUNS, sizeof *req);
  int64_t seen = 0;
  t0 = now_ms();
  for (int k = 0; k < RUNS && rc == 0; k++) {
    rc = opd_submit_async(c, "cuda:0", "matmul", AB, 2, &C, 1, NULL, 0, &req[k]);
    if (k % 50 == 49) {
      int64_t a = stat_of(watch, "async");
      if (a > seen) seen = a;
    }
  }
  int64_t peak = stat_of(watch, "async_peak");
  for (int k = 0; k < RUNS && rc == 0; k++) rc = opd_wait(c, req[k], 60000);
  double t_enq = now_ms() - t0;
  rc |= opd_synchronize(c);
  double t_done = now_ms() - t0;
  CHECK(rc == 0, "%d matmuls %dx%d submitted asynchronously, all enqueued "
        "in %.0f ms, complete in %.0f ms: %s", RUNS, M, M, t_enq, t_done,
        rc ? opd_last_error() : "ok");
  CHECK(seen > 0 && peak <= 256, "the bound held: at most %lld incomplete "
        "seen, peak %lld, max_async 256", (long long)seen, (long long)peak);
  CHECK(stat_of(watch, "async") == 0, "none incomplete after synchronize");

  /* ---- enqueued runs: the answer not waited for (opd_enqueue_stream*;
   * gpu order: a poll kernel on s waits for the daemon's flag word; host
   * order: the same as opd_run_stream) ---- */
  /* the poll path: gpu order (OPD_STREAM_ORDER=gpu, or MPS when unset) */
  int mps0 = 0;
  cudaDeviceGetAttribute(&mps0, (cudaDeviceAttr)133 /* MPS_ENABLED */, 0);
  int gpu = order != NULL ? strcmp(order, "gpu") == 0 : mps0;
  bad = 0;
  for (int k = 0; k < 50; k++) {
    slow_fill<<<64, 256, 0, s>>>(x, N, (float)(k * 10 + 7), k == 0 ? ms20 / 10 : 0);
    rc |= opd_enqueue_stream(c, "cuda:0", s, "relu", &tx, 1, &ty, 1, NULL, 0);
    twice<<<64, 256, 0, s>>>(y, z, N);
    slow_fill<<<64, 256, 0, s>>>(x, N, -1e6f, 0); /* reused at once */
    cudaMemcpyAsync(h, z, 64 * sizeof(float), cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    for (int i = 0; i < 64; i++) {
      float v = (float)(k * 10 + 7) - (float)i;
      bad += h[i] != 2.0f * (v > 0 ? v : 0.0f);
    }
  }
  rc |= opd_synchronize(c);
  CHECK(rc == 0 && bad == 0, "enqueued: 50 rounds, the input overwritten "
        "right after each call, the output read by the next kernel: %d "
        "wrong (%s)", bad, rc ? opd_last_error() : "ok");
  /* the same on the legacy default stream (torch's default stream), as
   * cudaStreamLegacy and as the handle 0: libopd's part of the call goes on
   * a stream of its own there (OPD_STREAM_LEGACY), ordered both ways by
   * events; every other round a batch of two runs, relu then twice-as-mul */
  {
    bad = 0;
    float *hw2 = (float *)malloc(64 * sizeof(float));
    opd_tensor_t tz = vec(N), yw[2] = {ty, ty};
    rc |= opd_tensor_cuda(c, "cuda:0", z, &tz);
    for (int k = 0; k < 60; k++) {
      cudaStream_t st = (k % 3 == 0) ? cudaStreamLegacy : (cudaStream_t)0;
      int batched = k % 2;
      float base = (float)(k * 10 + 3);
      /* a slow writer first, now and then: the run must wait for it */
      slow_fill<<<64, 256, 0, st>>>(x, N, base, k % 10 == 0 ? ms20 / 10 : 0);
      if (batched) rc |= opd_batch_begin(c, st);
      rc |= opd_enqueue_stream(c, "cuda:0", st, "relu", &tx, 1, &ty, 1, NULL, 0);
      if (batched) {
        rc |= opd_enqueue_stream(c, "cuda:0", st, "mul", yw, 2, &tz, 1, NULL, 0);
        rc |= opd_batch_end(c);
      } else {
        twice<<<64, 256, 0, st>>>(y, z, N);   /* z = 2y on the client */
      }
      slow_fill<<<64, 256, 0, st>>>(x, N, -1e6f, 0); /* reused at once */
      slow_fill<<<64, 256, 0, st>>>(y, N, -7.0f, 0);
      cudaMemcpyAsync(hw2, z, 64 * sizeof(float), cudaMemcpyDeviceToHost, st);
      cudaStreamSynchronize(st);
      for (int i = 0; i < 64; i++) {
        float v = base - (float)i, r = v > 0 ? v : 0.0f;
        bad += hw2[i] != (batched ? r * r : 2.0f * r);
      }
    }
    rc |= opd_synchronize(c);
    CHECK(rc == 0 && bad == 0, "enqueued on the legacy default stream: 60 "
          "rounds (every other a batch), the input overwritten and the "
          "output read right after: %d wrong (%s)", bad,
          rc ? opd_last_error() : "ok");
    free(hw2);
  }
  /* many in flight: y = relu(y) then y = y * w (w = 1.0001) alternating */
  {
    /* without MPS each GPU wait across the processes is a time slice */
    int mps = 0;
    cudaDeviceGetAttribute(&mps, (cudaDeviceAttr)133 /* MPS_ENABLED */, 0);
    enum { E = 4096 };
    const int CH = mps ? 3000 : 200;
    opd_tensor_t a = vec(E), w = vec(E);
    float *hw = (float *)malloc(E * sizeof(float));
    for (int i = 0; i < E; i++) hw[i] = 1.0001f;
    cudaMemcpy(z, hw, E * sizeof(float), cudaMemcpyHostToDevice);
    slow_fill<<<16, 256, 0, s>>>(y, E, 5000.0f, 0);
    rc = opd_tensor_cuda(c, "cuda:0", y, &a);
    rc |= opd_tensor_cuda(c, "cuda:0", z, &w);
    opd_tensor_t aw[2] = {a, w};
    t0 = now_ms();
    for (int i = 0; i < CH && rc == 0; i++)
      rc = i % 2 ? opd_enqueue_stream(c, "cuda:0", s, "mul", aw, 2, &a, 1, NULL, 0)
                 : opd_enqueue_stream(c, "cuda:0", s, "relu", &a, 1, &a, 1, NULL, 0);
    double t_enq = now_ms() - t0;
    cudaMemcpyAsync(hw, y, E * sizeof(float), cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    double t_all = now_ms() - t0;
    int wrong = 0;
    for (int i = 0; i < E; i++) {
      float want = 5000.0f - (float)i; /* float products, as the kernel's */
      for (int r = 0; r < CH / 2; r++) want *= 1.0001f;
      wrong += hw[i] != want;
    }
    rc |= opd_synchronize(c);
    CHECK(rc == 0 && wrong == 0, "enqueued: %d dependent runs (relu, mul "
          "by 1.0001), the result read on the stream: %d wrong (%s)", CH, wrong,
          rc ? opd_last_error() : "ok");
    printf("note: %d enqueued runs: %.2f us per call, %.2f us per run to "
           "the end\n", CH, t_enq * 1e3 / CH, t_all * 1e3 / CH);
    free(hw);
  }
  check_batch(sock, c, s, y, z, ms20);
  /* a refusal: told by the next synchronization, the stream not stalled */
  rc = opd_enqueue_stream(c, "cuda:0", s, "no_such_op", &tx, 1, &ty, 1, NULL, 0);
  if (gpu) {
    CHECK(rc == 0, "enqueued: an unknown op is not the call's error: %s",
          rc ? opd_last_error() : "ok");
    t0 = now_ms();
    cudaError_t ce = cudaStreamSynchronize(s);
    double dt = now_ms() - t0;
    CHECK(ce == cudaSuccess && dt < 2000, "the stream went on: the daemon "
          "wrote the flag word for the refused run (%.1f ms)", dt);
    rc = opd_synchronize(c);
    CHECK(rc == OPD_ENOOP && strstr(opd_last_error(), "an enqueued run (request") &&
              strstr(opd_last_error(), "no_such_op"),
          "opd_synchronize tells it: %s (%s)", opd_errname(rc), opd_last_error());
    /* behind a queued run: the daemon writes it after that run's word */
    slow_fill<<<64, 256, 0, s>>>(x, N, 3.0f, ms20 / 4);
    rc = opd_enqueue_stream(c, "cuda:0", s, "relu", &tx, 1, &ty, 1, NULL, 0);
    rc |= opd_enqueue_stream(c, "cuda:0", s, "relu", &tx, 1, &small, 1, NULL, 0);
    twice<<<64, 256, 0, s>>>(y, z, N);
    cudaMemcpyAsync(h, z, 64 * sizeof(float), cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    bad = 0;
    for (int i = 0; i < 64; i++) bad += h[i] != 2.0f * (3.0f - i > 0 ? 3.0f - i : 0.0f);
    int r2 = opd_enqueue_stream(c, "cuda:0", s, "relu", &tx, 1, &ty, 1, NULL, 0);
    int r3 = opd_synchronize(c);
    CHECK(rc == 0 && bad == 0 && (r2 == OPD_ESHAPE || r3 == OPD_ESHAPE),
          "a bad shape after a good run: the good one's result right (%d "
          "wrong), the refusal told later: %s / %s", bad, opd_errname(r2),
          opd_errname(r3));
    rc = opd_enqueue_stream(c, "cuda:0", s, "relu", &tx, 1, &ty, 1, NULL, 0);
    rc |= opd_synchronize(c);
    CHECK(rc == 0, "the connection goes on after: %s", rc ? opd_last_error() : "ok");
    /* the poll kernel gives up when the daemon takes longer than its
     * timeout (1 ms here, behind 20 matmuls of its session) */
    setenv("OPD_STREAM_POLL_TIMEOUT_MS", "1", 1);
    opd_client_t *c2;
    uint64_t d2;
    rc = opd_connect(sock, &c2);
    if (rc == 0) rc = opd_alloc(c2, "cuda:0", 3ull * M * M * 4, &d2);
    opd_tensor_t a2 = A, b2 = B, o2 = C, x2 = vec(N), y2 = vec(N);
    a2.arena = b2.arena = o2.arena = d2;
    opd_tensor_t ab2[2] = {a2, b2};
    if (rc == 0) rc = opd_tensor_cuda(c2, "cuda:0", x, &x2); /* reads it */
    unsetenv("OPD_STREAM_POLL_TIMEOUT_MS");
    if (rc == 0) rc = opd_tensor_cuda(c2, "cuda:0", y, &y2);
    if (rc == 0) /* the first: events and flag word set up, answered */
      rc = opd_run_stream(c2, "cuda:0", s, "relu", &x2, 1, &y2, 1, NULL, 0);
    cudaStreamSynchronize(s);
    for (int i = 0; i < 20 && rc == 0; i++)
      rc = opd_run_async(c2, "cuda:0", "matmul", ab2, 2, &o2, 1, NULL, 0);
    if (rc == 0) rc = opd_enqueue_stream(c2, "cuda:0", s, "relu", &x2, 1, &y2, 1, NULL, 0);
    cudaStreamSynchronize(s);
    int r4 = opd_synchronize(c2);
    CHECK(rc == 0 && r4 == OPD_ETIMEDOUT && strstr(opd_last_error(), "gave up after 1 ms"),
          "a poll past its timeout: the next synchronization says so: %s (%s)",
          rc ? opd_last_error() : opd_errname(r4), r4 ? opd_last_error() : "");
    CHECK(opd_synchronize(c2) == 0, "told once");
    opd_close(c2);

    /* the daemon's GPU wait for the client's stream (its word, where the
     * daemon offers them) gives up after STREAM's wait_ms (200 ms here,
     * behind a 1 s kernel of the client): the run goes ahead, and the next
     * synchronization says why */
    setenv("OPD_STREAM_WAIT_MS", "200", 1);
    opd_client_t *c3;
    opd_tensor_t x3 = vec(N), y3 = vec(N);
    rc = opd_connect(sock, &c3);
    if (rc == 0) rc = opd_tensor_cuda(c3, "cuda:0", x, &x3); /* reads it */
    unsetenv("OPD_STREAM_WAIT_MS");
    if (rc == 0) rc = opd_tensor_cuda(c3, "cuda:0", y, &y3);
    if (rc == 0) rc = opd_run_stream(c3, "cuda:0", s, "relu", &x3, 1, &y3, 1, NULL, 0);
    cudaStreamSynchronize(s);
    double t0 = now_ms();
    slow_fill<<<64, 256, 0, s>>>(x, N, 4.0f, ms20 * 50);
    if (rc == 0) rc = opd_enqueue_stream(c3, "cuda:0", s, "relu", &x3, 1, &y3, 1, NULL, 0);
    int r5 = rc == 0 ? opd_synchronize(c3) : rc; /* the daemon's side only */
    double t_sync = now_ms() - t0;
    const char *why5 = opd_last_error();
    int words = r5 == OPD_ETIMEDOUT && strstr(why5, "gave up after 200 ms") != NULL;
    CHECK(rc == 0 && (words || r5 == 0),
          "a run whose client's stream is slower than STREAM's wait_ms: %s "
          "after %.0f ms (%s)", words ? "ETIMEDOUT" : opd_errname(r5), t_sync,
          r5 ? why5 : "no words here: waited through the event");
    if (words)
      printf("note: the daemon waits on the clients' words here (its wait "
             "gave up after 200 ms, opd_synchronize returned after %.0f ms)\n",
             t_sync);
    cudaStreamSynchronize(s);
    opd_close(c3);

    /* more streams than a connection has words (63): the later ones order
     * through the pool's events; every stream's result right */
    enum { NS = 70, SN = 4096 };
    cudaStream_t ss[NS];
    float *buf;
    cudaMalloc((void **)&buf, sizeof(float) * 3 * NS * SN);
    int bad_s = 0, rc_s = 0;
    for (int i = 0; i < NS; i++) cudaStreamCreateWithFlags(&ss[i], cudaStreamNonBlocking);
    for (int round = 0; round < 2 && rc_s == 0; round++) {
      for (int i = 0; i < NS && rc_s == 0; i++) {
        float *xi = buf + (size_t)i * 3 * SN, *yi = xi + SN, *zi = yi + SN;
        opd_tensor_t txi = vec(SN), tyi = vec(SN);
        rc_s = opd_tensor_cuda(c, "cuda:0", xi, &txi);
        if (rc_s == 0) rc_s = opd_tensor_cuda(c, "cuda:0", yi, &tyi);
        slow_fill<<<16, 256, 0, ss[i]>>>(xi, SN, (float)(i + round), i % 7 == 0 ? ms20 / 20 : 0);
        if (rc_s == 0)
          rc_s = opd_enqueue_stream(c, "cuda:0", ss[i], "relu", &txi, 1, &tyi, 1, NULL, 0);
        twice<<<16, 256, 0, ss[i]>>>(yi, zi, SN);
      }
      cudaDeviceSynchronize();
      for (int i = 0; i < NS; i++) {
        float hz[8];
        cudaMemcpy(hz, buf + (size_t)i * 3 * SN + 2 * SN, sizeof hz, cudaMemcpyDeviceToHost);
        for (int j = 0; j < 8; j++) {
          float v = (float)(i + round) - (float)j;
          bad_s += hz[j] != 2.0f * (v > 0 ? v : 0.0f);
        }
      }
    }
    if (rc_s == 0) rc_s = opd_synchronize(c);
    CHECK(rc_s == 0 && bad_s == 0, "%d streams of one connection, twice (63 "
          "with words, the rest through events): %d values wrong, %s", NS,
          bad_s, rc_s ? opd_last_error() : "ok");
    for (int i = 0; i < NS; i++) cudaStreamDestroy(ss[i]);
    cudaFree(buf);
  } else {
    CHECK(rc == OPD_ENOOP, "host order: enqueue is opd_run_stream, the unknown "
          "op the call's error: %s", opd_errname(rc));
  }

  /* ---- a client that exits with runs in flight ---- */
  int64_t arenas0 = stat_of(watch, "arenas"), sessions0 = stat_of(watch, "sessions");
  pid_t pid = fork();
  if (pid == 0) {
    opd_client_t *k;
    if (opd_connect(sock, &k) != 0) _exit(2);
    uint64_t kd;
    if (opd_alloc(k, "cuda:0", 3ull * M * M * 4, &kd) != 0) _exit(3);
    opd_tensor_t a = A, b = B, o = C;
    a.arena = b.arena = o.arena = kd;
    opd_tensor_t ab[2] = {a, b};
    for (int i = 0; i < 200; i++)
      if (opd_run_async(k, "cuda:0", "matmul", ab, 2, &o, 1, NULL, 0) != 0)
        _exit(4);
    _exit(0); /* runs in flight, nothing closed */
  }
  int st = 0;
  waitpid(pid, &st, 0);
  int64_t ar = -1, se = -1;
  for (int i = 0; i < 200; i++) {
    ar = stat_of(watch, "arenas");
    se = stat_of(watch, "sessions");
    if (ar == arenas0 && se == sessions0) break;
    usleep(50000);
  }
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0 && ar == arenas0 &&
        se == sessions0 && stat_of(watch, "async") == 0,
        "a client that exited with 200 runs in flight: its session and "
        "arenas gone (arenas %lld -> %lld, sessions %lld -> %lld), exit %d",
        (long long)arenas0, (long long)ar, (long long)sessions0,
        (long long)se, WEXITSTATUS(st));
  CHECK(opd_ping(c) == 0, "the daemon serves on");

  opd_close(c);
  opd_close(watch);
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
