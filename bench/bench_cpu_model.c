/* The CPU kernels of a small model at its own shapes, in-process: linear
 * (the trading MLP's layers 256 -> 512 -> 512 -> 1, batch 1 and 64) and
 * gru_cell (batch 1), fast against the reference, and the batch-1 product
 * through OpenBLAS's sgemv next to the shared GEMM's own GEMV
 * (kernels/common/gemm.c).
 *
 * DESIGN
 * Latency, not bandwidth: the weights stay in cache between calls, as they
 * do when a model runs step after step, so each figure is the median over
 * reps of the mean of a batch of calls: impl=fast on the calling thread
 * (serial exec; OpenBLAS may use its own threads), impl=fast_pool with a
 * pool of every core as the daemon's (--threads). The machine is shared:
 * compare lines of one run only.
 *
 * Usage: build/bench/bench_cpu_model
 * Output: one line per case:
 *   bench op=linear shape=1x256@512 act=relu impl=fast us=...
 */
#ifndef OPD_NO_BLAS
#include <cblas.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/kernel.h"
#include "kernels/runtime/exec.h"
#include "kernels/runtime/registry.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void view(opd_tview_t *v, int rank, const int64_t *shape) {
  memset(v, 0, sizeof *v);
  v->dtype = OPD_DTYPE_FLOAT32;
  v->rank = rank;
  v->numel = 1;
  for (int d = rank - 1; d >= 0; d--) {
    v->shape[d] = shape[d];
    v->strides[d] = v->numel;
    v->numel *= shape[d];
  }
  v->data = malloc((size_t)(v->numel > 0 ? v->numel : 1) * sizeof(float));
  for (int64_t i = 0; i < v->numel; i++)
    ((float *)v->data)[i] = (float)((i * 7919) % 1000) * 0.001f - 0.5f;
}

typedef void (*call_fn)(void *arg);

/* Median over 9 reps of the mean time of n calls, in microseconds. */
static double time_us(call_fn f, void *arg, int n) {
  double t[9];
  f(arg); /* warm */
  for (int r = 0; r < 9; r++) {
    double t0 = now_s();
    for (int i = 0; i < n; i++) f(arg);
    t[r] = (now_s() - t0) / n * 1e6;
  }
  qsort(t, 9, sizeof t[0], cmp_double);
  return t[4];
}

static void run_fast(void *arg) {
  opd_kcall_t *c = arg;
  c->op->cpu_fast(c);
}
static void run_ref(void *arg) {
  opd_kcall_t *c = arg;
  c->op->cpu_ref(c);
}

#ifndef OPD_NO_BLAS
static void run_sgemv(void *arg) {
  opd_kcall_t *c = arg; /* a linear call: y = W x */
  cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)c->in[1].shape[0],
              (blasint)c->in[1].shape[1], 1.0f, c->in[1].data, (blasint)c->in[1].shape[1],
              c->in[0].data, 1, 0.0f, c->out[0].data, 1);
}
#endif

static opd_exec_t pool; /* nproc threads */

static void bench(opd_kcall_t *c, const char *label, int n) {
  printf("bench op=%s %s impl=fast us=%.2f\n", c->op->name, label, time_us(run_fast, c, n));
  c->exec = &pool;
  printf("bench op=%s %s impl=fast_pool threads=%d us=%.2f\n", c->op->name, label,
         pool.nthreads, time_us(run_fast, c, n));
  c->exec = &opd__exec_serial;
  printf("bench op=%s %s impl=ref us=%.2f\n", c->op->name, label,
         time_us(run_ref, c, n / 20 + 1));
  fflush(stdout);
}

/* A call of `op` with n_in inputs and one output; shapes[i] is {rank, d0,
 * d1} of input i, shapes[n_in] the output's. */
static void call_new(opd_kcall_t *c, const char *op, int n_in, const int64_t (*shapes)[3]) {
  memset(c, 0, sizeof *c);
  c->op = opd__op_find(op);
  c->exec = &opd__exec_serial;
  c->n_in = n_in;
  c->n_out = 1;
  for (int i = 0; i <= n_in; i++)
    view(i < n_in ? &c->in[i] : &c->out[0], (int)shapes[i][0], shapes[i] + 1);
  for (int a = 0; a < c->op->n_attrs; a++) c->attr[a] = c->op->attrs[a].def;
}

static void call_free(opd_kcall_t *c) {
  for (int i = 0; i < c->n_in; i++) free(c->in[i].data);
  free(c->out[0].data);
}

int main(void) {
  static const int64_t layers[][3] = {{1, 256, 512}, {1, 512, 512}, {1, 512, 1},
                                      {64, 256, 512}, {64, 512, 512}};
  const char *acts[] = {"relu", "gelu", "none", "relu", "gelu"};
  printf("# bench_cpu_model: serial calls, weights in cache, median of 9 reps\n");
  if (opd__exec_pool_create(&pool, (int)sysconf(_SC_NPROCESSORS_ONLN))) return 1;
  for (size_t k = 0; k < sizeof layers / sizeof layers[0]; k++) {
    opd_kcall_t c;
    int64_t M = layers[k][0], K = layers[k][1], N = layers[k][2];
    const int64_t shapes[4][3] = {{2, M, K}, {2, N, K}, {1, N}, {2, M, N}};
    call_new(&c, "linear", 3, shapes);
    snprintf(c.attr[0].s, sizeof c.attr[0].s, "%s", acts[k]);
    char label[96];
    snprintf(label, sizeof label, "shape=%lldx%lld@%lld act=%s", (long long)M, (long long)K,
             (long long)N, acts[k]);
    int n = M == 1 ? 2000 : 20;
    bench(&c, label, n);
#ifndef OPD_NO_BLAS
    if (M == 1)
      printf("bench op=linear %s impl=openblas_sgemv us=%.2f\n", label,
             time_us(run_sgemv, &c, n));
#endif
    call_free(&c);
  }
  static const int64_t grus[][3] = {{1, 256, 256}, {1, 64, 512}};
  for (size_t k = 0; k < sizeof grus / sizeof grus[0]; k++) {
    opd_kcall_t c;
    int64_t nb = grus[k][0], ni = grus[k][1], nh = grus[k][2];
    const int64_t shapes[7][3] = {{2, nb, ni},     {2, nb, nh}, {2, 3 * nh, ni}, {2, 3 * nh, nh},
                                  {1, 3 * nh},     {1, 3 * nh}, {2, nb, nh}};
    call_new(&c, "gru_cell", 6, shapes);
    char label[96];
    snprintf(label, sizeof label, "shape=B%lld,I%lld,H%lld", (long long)nb, (long long)ni,
             (long long)nh);
    bench(&c, label, 1000);
    call_free(&c);
  }
  opd__exec_pool_destroy(&pool);
  return 0;
}
