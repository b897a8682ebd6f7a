/* What libopd's choices for an enqueued run cost a CUDA client, the
 * variants side by side in one process: each variant is a new
 * connection made with its environment set (libopd reads OPD_STREAM_* when
 * a connection first orders a stream), and the variants take turns, in a
 * rotated order, ROUNDS times; the figure is each one's median. Runs in
 * separate processes a minute apart differ by more than these variants do
 * on the shared GPU machine (docs/async.md), which is why this exists.
 *   build/bench/bench_enqueue SOCKET [N [VARIANT...]]
 * A VARIANT is "default" (the environment as it is) or NAME=VALUE, set for
 * that variant's connections only (at most 8). Without any: default,
 * OPD_STREAM_IDLE=0 (no cuStreamQuery: every call waits on the stream's
 * word), OPD_STREAM_WORDS=0 (the daemon's stream waits on the client's
 * interprocess events), OPD_STREAM_POLL=0 (each call waits for the
 * daemon's answer; its stream waits on the daemon's event).
 * Lines, per variant (us):
 *   busy     host time of a call behind a 40 us-per-call kernel of the
 *            client's (the stream never idle, the GPU behind), at most 200
 *            calls (the daemon's --max-async, 256, would throttle more)
 *   chain    N dependent relu runs from an idle stream, then one
 *            cudaStreamSynchronize: the host time per call, and per run
 *            to the end
 *   mixed    the client's kernel and a run alternating, one sync: per pair
 *   chain8   8 runs from an idle stream, then one sync (bench_chain.py's
 *            shape): the whole, and its tail (the sync after the 8th call
 *            returned); own8: the client's own 8 kernels and the sync;
 *            batch8: the 8 runs inside opd_batch_begin / opd_batch_end
 * The poll path needs MPS (or OPD_STREAM_ORDER=gpu): without it the calls
 * wait for their answers.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/cuda_client.cuh"
#include "opd/opd.h"

#define ROUNDS 7
#define VARIANTS 8

static const char *vname[VARIANTS] = {"default", "OPD_STREAM_IDLE=0",
                                      "OPD_STREAM_WORDS=0", "OPD_STREAM_POLL=0"};
static int n_var = 4;
static char saved[VARIANTS][128]; /* the environment's value of variant i's
                                     name at the start ("": none) */

/* NAME of "NAME=VALUE" into buf (NULL for "default") */
static const char *name_of(const char *kv, char *buf, size_t cap) {
  const char *eq = strchr(kv, '=');
  if (eq == NULL || (size_t)(eq - kv) >= cap) return NULL;
  memcpy(buf, kv, (size_t)(eq - kv));
  buf[eq - kv] = '\0';
  return buf;
}

/* variant v's environment: every variant's name back to what the
 * environment had at the start (saved) or unset, then v's own set */
static void set_variant(int v) {
  char nm[128];
  for (int i = 0; i < n_var; i++) {
    if (name_of(vname[i], nm, sizeof nm) == NULL) continue;
    if (saved[i][0] != '\0') setenv(nm, saved[i], 1);
    else unsetenv(nm);
  }
  if (name_of(vname[v], nm, sizeof nm) != NULL)
    setenv(nm, strchr(vname[v], '=') + 1, 1);
}

enum { E = 4096, SECTIONS = 8, REPS8 = 100 };

static double median(double *v, int n) {
  qsort(v, n, sizeof *v, cmp);
  return v[n / 2];
}

/* one round of variant v: its figures into f[section] */
static int round_of(const char *sock, int v, int n, float *x, cudaStream_t s,
                    long long per_call_cycles, double *f) {
  set_variant(v);
  opd_client_t *c;
  if (opd_connect(sock, &c) != 0) {
    fprintf(stderr, "opd_connect: %s\n", opd_last_error());
    return 1;
  }
  int64_t e = E;
  opd_tensor_t tx;
  opd_tensor_init(&tx, 0, 0, OPD_DTYPE_FLOAT32, 1, &e);
  int rc = opd_tensor_cuda(c, "cuda:0", x, &tx);
  for (int i = 0; i < 50 && rc == 0; i++) /* warm: the STREAM exchange, the module */
    rc = opd_enqueue_stream(c, "cuda:0", s, "relu", &tx, 1, &tx, 1, NULL, 0);
  cudaStreamSynchronize(s);
  /* busy */
  int nb = n < 200 ? n : 200;
  spin<<<1, 32, 0, s>>>(per_call_cycles * nb);
  double t0 = now_us();
  for (int i = 0; i < nb && rc == 0; i++)
    rc = opd_enqueue_stream(c, "cuda:0", s, "relu", &tx, 1, &tx, 1, NULL, 0);
  f[0] = (now_us() - t0) / nb;
  cudaStreamSynchronize(s);
  /* chain */
  t0 = now_us();
  for (int i = 0; i < n && rc == 0; i++)
    rc = opd_enqueue_stream(c, "cuda:0", s, "relu", &tx, 1, &tx, 1, NULL, 0);
  f[1] = (now_us() - t0) / n;
  cudaStreamSynchronize(s);
  f[2] = (now_us() - t0) / n;
  /* mixed */
  t0 = now_us();
  for (int i = 0; i < n && rc == 0; i++) {
    bump<<<4, 256, 0, s>>>(x, E);
    rc = opd_enqueue_stream(c, "cuda:0", s, "relu", &tx, 1, &tx, 1, NULL, 0);
  }
  cudaStreamSynchronize(s);
  f[3] = (now_us() - t0) / n;
  /* chain8: 8 runs from an idle stream, then the sync (bench_chain.py's
   * shape); its tail: the sync after the 8th call returned. own8: the
   * client's own 8 kernels, then the sync. */
  double tot[REPS8], tail[REPS8], own[REPS8], bat[REPS8];
  for (int r = 0; r < REPS8 && rc == 0; r++) {
    t0 = now_us();
    for (int i = 0; i < 8 && rc == 0; i++)
      rc = opd_enqueue_stream(c, "cuda:0", s, "relu", &tx, 1, &tx, 1, NULL, 0);
    double t1 = now_us();
    cudaStreamSynchronize(s);
    double t2 = now_us();
    tot[r] = t2 - t0;
    tail[r] = t2 - t1;
    for (int i = 0; i < 8; i++) bump<<<4, 256, 0, s>>>(x, E);
    cudaStreamSynchronize(s);
    double t3 = now_us();
    own[r] = t3 - t2;
    rc = opd_batch_begin(c, s);
    for (int i = 0; i < 8 && rc == 0; i++)
      rc = opd_enqueue_stream(c, "cuda:0", s, "relu", &tx, 1, &tx, 1, NULL, 0);
    if (rc == 0) rc = opd_batch_end(c);
    cudaStreamSynchronize(s);
    bat[r] = now_us() - t3;
  }
  if (rc == 0) {
    f[4] = median(tot, REPS8);
    f[5] = median(tail, REPS8);
    f[6] = median(own, REPS8);
    f[7] = median(bat, REPS8);
  }
  if (rc == 0) rc = opd_synchronize(c);
  if (rc != 0) fprintf(stderr, "%s: %s\n", vname[v], opd_last_error());
  opd_close(c);
  return rc != 0;
}

int main(int argc, char **argv) {
  const char *sock = argc > 1 ? argv[1] : NULL;
  int n = argc > 2 ? atoi(argv[2]) : 400;
  if (n < 1) n = 400;
  if (argc > 3) {
    n_var = 0;
    if (argc - 3 > VARIANTS) {
      fprintf(stderr, "bench_enqueue: at most %d variants\n", VARIANTS);
      return 2;
    }
    for (int i = 3; i < argc; i++) {
      if (strcmp(argv[i], "default") != 0 && strchr(argv[i], '=') == NULL) {
        fprintf(stderr, "bench_enqueue: variant %s: expected default or NAME=VALUE\n",
                argv[i]);
        return 2;
      }
      vname[n_var++] = argv[i];
    }
  }
  /* a name set for one variant and also in the environment: the other
   * variants keep the environment's value */
  for (int i = 0; i < n_var; i++) {
    char nm[128];
    const char *env = name_of(vname[i], nm, sizeof nm) ? getenv(nm) : NULL;
    if (env != NULL) snprintf(saved[i], sizeof saved[i], "%s", env);
  }
  float *x;
  cudaMalloc((void **)&x, E * sizeof(float));
  cudaMemset(x, 0, E * sizeof(float));
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  long long per_call = (long long)khz * 40 / 1000; /* 40 us of cycles */
  static double fig[VARIANTS][SECTIONS][ROUNDS];
  for (int r = 0; r < ROUNDS; r++)
    for (int j = 0; j < n_var; j++) {
      int v = (j + r) % n_var;
      double f[SECTIONS];
      if (round_of(sock, v, n, x, s, per_call, f) != 0) return 1;
      for (int k = 0; k < SECTIONS; k++) fig[v][k][r] = f[k];
    }
  static const char *const sec[SECTIONS] = {"busy_call", "chain_call", "chain_run",
                                            "mixed_pair", "chain8", "chain8_tail",
                                            "own8", "batch8"};
  for (int v = 0; v < n_var; v++) {
    printf("enqueue variant=%-21s", vname[v]);
    for (int k = 0; k < SECTIONS; k++)
      printf(" %s_us=%.2f", sec[k], median(fig[v][k], ROUNDS));
    printf(" n=%d rounds=%d\n", n, ROUNDS);
  }
  return 0;
}
