/* GPU machine: the daemon's CUDA backend end to end through libopd.
 *
 * Run against a daemon started with CUDA devices:
 *   build/opd --socket /tmp/opd.sock &  build/tests/daemon_gpu /tmp/opd.sock
 * Prints one line per check and "N passed, N failed"; exits 1 on failure.
 * No CUDA library is used here: the client only names devices.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "opd/opd.h"

static int passed, failed;
static const char *sock;

#define CHECK(cond, ...)                                 \
  do {                                                   \
    if (cond) {                                          \
      passed++;                                          \
      printf("PASS ");                                   \
    } else {                                             \
      failed++;                                          \
      printf("FAIL ");                                   \
    }                                                    \
    printf(__VA_ARGS__);                                 \
    printf("\n");                                        \
    fflush(stdout);                                      \
  } while (0)

static opd_tensor_t t2(uint64_t arena, uint64_t off, int64_t r, int64_t c) {
  opd_tensor_t t;
  int64_t sh[2] = {r, c};
  opd_tensor_init(&t, arena, off, OPD_DTYPE_FLOAT32, 2, sh);
  return t;
}

/* The largest |a - b| / (atol + rtol |b|): <= 1 means within tolerance. */
static double max_err(const float *a, const float *b, size_t n, double atol,
                      double rtol) {
  double m = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]) / (atol + rtol * fabs((double)b[i]));
    if (d > m || isnan(d)) m = isnan(d) ? INFINITY : d;
  }
  return m;
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct worker {
  int id, ok;
} worker_t;

static void *worker_main(void *arg) {
  worker_t *w = arg;
  opd_client_t *c;
  w->ok = 0;
  if (opd_connect(sock, &c) != 0) return NULL;
  enum { R = 512, C = 1024 };
  uint64_t h, d;
  void *base;
  if (opd_arena_create(c, 2 * R * C * 4, &h, &base) != 0 ||
      opd_alloc(c, "cuda", 2 * R * C * 4, &d) != 0)
    return NULL;
  float *x = base, *y = x + R * C;
  for (int i = 0; i < R * C; i++) x[i] = (float)((i * 7 + w->id) % 13) * 0.1f;
  opd_tensor_t hx = t2(h, 0, R, C), hy = t2(h, R * C * 4, R, C);
  opd_tensor_t dx = t2(d, 0, R, C), dy = t2(d, R * C * 4, R, C);
  int ok = 1;
  for (int it = 0; it < 20 && ok; it++) {
    ok &= opd_run_on(c, "cuda", "copy", &hx, 1, &dx, 1, NULL, 0) == 0;
    ok &= opd_run(c, "relu", &dx, 1, &dy, 1, NULL, 0) == 0;
    ok &= opd_run_on(c, "cuda", "copy", &dy, 1, &hy, 1, NULL, 0) == 0;
    for (int i = 0; i < R * C && ok; i++) ok &= y[i] == x[i];
  }
  w->ok = ok;
  opd_close(c);
  return NULL;
}

int main(int argc, char **argv) {
  sock = argc > 1 ? argv[1] : NULL;
  opd_client_t *c;
  if (opd_connect(sock, &c) != 0) {
    fprintf(stderr, "%s\n", opd_last_error());
    return 1;
  }
  char *json;
  size_t len;
  opd_server_info(c, &json, &len);
  printf("# server: %s\n", json);
  CHECK(strstr(json, "\"cuda\"") != NULL, "hello lists the cuda backend");
  opd_free(json);

  enum { R = 256, C = 1000 };
  uint64_t h, d;
  void *base;
  int rc = opd_arena_create(c, 8 * R * C * 4, &h, &base);
  CHECK(rc == 0, "host arena: %s", rc ? opd_last_error() : "ok");
  rc = opd_alloc(c, "cuda", 4 * R * C * 4, &d);
  CHECK(rc == 0, "device alloc: %s", rc ? opd_last_error() : "ok");
  float *x = base, *y = x + R * C, *ref = y + R * C, *z = ref + R * C;
  srand(1);
  for (int i = 0; i < R * C; i++) x[i] = (float)rand() / RAND_MAX * 10 - 5;
  opd_tensor_t hx = t2(h, 0, R, C), hy = t2(h, R * C * 4, R, C),
               href = t2(h, 2 * R * C * 4, R, C), hz = t2(h, 3 * R * C * 4, R, C);
  opd_tensor_t dx = t2(d, 0, R, C), dy = t2(d, R * C * 4, R, C);

  /* host -> device, softmax on the device, device -> host */
  rc = opd_run_on(c, "cuda", "copy", &hx, 1, &dx, 1, NULL, 0);
  CHECK(rc == 0, "copy host->device: %s", rc ? opd_last_error() : "ok");
  rc = opd_run(c, "softmax", &dx, 1, &dy, 1, NULL, 0); /* auto: device */
  CHECK(rc == 0, "softmax on device tensors (auto): %s",
        rc ? opd_last_error() : "ok");
  rc = opd_run_on(c, "cuda", "copy", &dy, 1, &hy, 1, NULL, 0);
  CHECK(rc == 0, "copy device->host: %s", rc ? opd_last_error() : "ok");
  rc = opd_run_on(c, "cpu", "softmax", &hx, 1, &href, 1, NULL, 0);
  CHECK(rc == 0, "softmax on the cpu: %s", rc ? opd_last_error() : "ok");
  double e = max_err(y, ref, R * C, 1e-7, 1e-5);
  CHECK(e <= 1, "device softmax matches the cpu: max err %.2f of tolerance "
        "(1e-7 + 1e-5 |ref|)", e);

  /* host tensors on cuda: staged through device memory */
  memset(z, 0, R * C * 4);
  rc = opd_run_on(c, "cuda", "softmax", &hx, 1, &hz, 1, NULL, 0);
  e = max_err(z, ref, R * C, 1e-7, 1e-5);
  CHECK(rc == 0 && e <= 1, "staged softmax on cuda: %s, max err %.2f of "
        "tolerance", rc ? opd_last_error() : "ok", e);

  /* layernorm and matmul staged */
  opd_attr_t eps = {.name = "eps", .type = OPD_ATTR_FLOAT, .f = 1e-5};
  rc = opd_run_on(c, "cuda", "layernorm", &hx, 1, &hz, 1, &eps, 1);
  int rc2 = opd_run_on(c, "cpu", "layernorm", &hx, 1, &href, 1, &eps, 1);
  e = max_err(z, ref, R * C, 1e-5, 1e-4);
  CHECK(rc == 0 && rc2 == 0 && e <= 1, "staged layernorm: %s, max err %.2f of "
        "tolerance (1e-5 + 1e-4 |ref|)", rc ? opd_last_error() : "ok", e);
  {
    opd_tensor_t a = t2(h, 0, 64, 100), b = t2(h, 4 * R * C * 4, 100, 48);
    opd_tensor_t o1 = t2(h, 5 * R * C * 4, 64, 48), o2 = t2(h, 6 * R * C * 4, 64, 48);
    float *bb = (float *)((char *)base + 4 * R * C * 4);
    for (int i = 0; i < 100 * 48; i++) bb[i] = (float)rand() / RAND_MAX - 0.5f;
    opd_tensor_t ab[2] = {a, b};
    rc = opd_run_on(c, "cuda", "matmul", ab, 2, &o1, 1, NULL, 0);
    rc2 = opd_run_on(c, "cpu", "matmul", ab, 2, &o2, 1, NULL, 0);
    float *f1 = (float *)((char *)base + 5 * R * C * 4);
    float *f2 = (float *)((char *)base + 6 * R * C * 4);
    double m = 0;
    for (int i = 0; i < 64 * 48; i++) m = fmax(m, fabs(f1[i] - f2[i]));
    CHECK(rc == 0 && rc2 == 0 && m < 1e-3, "staged matmul fp32: %s, max abs err %.2e",
          rc ? opd_last_error() : "ok", m);
  }

  /* errors: the daemon names them and carries on */
  rc = opd_run_on(c, "cuda:9", "relu", &hx, 1, &hy, 1, NULL, 0);
  CHECK(rc == OPD_EDEVICE, "cuda:9 refused: %s", opd_last_error());
  rc = opd_run_on(c, "cpu", "relu", &dx, 1, &hy, 1, NULL, 0);
  CHECK(rc == OPD_EDEVICE, "a device tensor on the cpu refused: %s",
        opd_last_error());
  uint64_t huge;
  rc = opd_alloc(c, "cuda", (uint64_t)1 << 50, &huge);
  CHECK(rc == OPD_ELIMIT, "an allocation over the arena limit: %s (%s)",
        opd_errname(rc), opd_last_error());
  /* the daemon runs with limits above the card's memory (tests/gpu/run.sh):
   * 512 GiB reaches CUDA and fails there */
  rc = opd_alloc(c, "cuda", (uint64_t)512 << 30, &huge);
  CHECK(rc == OPD_ENOMEM, "device memory exhausted: %s (%s)", opd_errname(rc),
        opd_last_error());
  rc = opd_run(c, "relu", &dx, 1, &dy, 1, NULL, 0);
  CHECK(rc == 0, "device work goes on after the refusal: %s",
        rc ? opd_last_error() : "ok");
  {
    int64_t sh[2] = {R, C};
    opd_tensor_t h16;
    opd_tensor_init(&h16, h, 0, OPD_DTYPE_FLOAT16, 2, sh);
    opd_tensor_t o16 = h16;
    o16.offset = 7 * R * C * 4;
    rc = opd_run_on(c, "cpu", "softmax", &h16, 1, &o16, 1, NULL, 0);
    CHECK(rc == OPD_EDTYPE, "float16 on the cpu refused: %s", opd_last_error());
    rc = opd_run_on(c, "cuda", "softmax", &h16, 1, &o16, 1, NULL, 0);
    CHECK(rc == 0, "float16 softmax on cuda: %s", rc ? opd_last_error() : "ok");
  }

  /* 8 clients at once, each with its own stream */
  pthread_t th[8];
  worker_t w[8];
  for (int i = 0; i < 8; i++) {
    w[i].id = i;
    pthread_create(&th[i], NULL, worker_main, &w[i]);
  }
  int all = 1;
  for (int i = 0; i < 8; i++) pthread_join(th[i], NULL), all &= w[i].ok;
  CHECK(all, "8 clients copy/relu/copy on the GPU at once");

  /* weights in device memory, published once, attached by another client */
  {
    opd_client_t *b;
    rc = opd_connect(sock, &b);
    int64_t n = 1024;
    opd_tensor_t hw, dw;
    float *wv = (float *)((char *)base + 7 * R * C * 4);
    for (int i = 0; i < 1024; i++) wv[i] = (float)i;
    opd_tensor_init(&hw, h, 7 * R * C * 4, OPD_DTYPE_FLOAT32, 1, &n);
    uint64_t wa;
    rc |= opd_alloc(c, "cuda", 4096, &wa);
    opd_tensor_init(&dw, wa, 0, OPD_DTYPE_FLOAT32, 1, &n);
    rc |= opd_run_on(c, "cuda", "copy", &hw, 1, &dw, 1, NULL, 0);
    rc |= opd_publish(c, wa, "weights", NULL);
    uint64_t att, sz, bh, bd;
    char devname[16] = "";
    rc |= opd_attach(b, "weights", &att, &sz, devname, sizeof devname, NULL, 0);
    CHECK(rc == 0 && strcmp(devname, "cuda:0") == 0,
          "device weights published and attached: %s (%s)",
          rc ? opd_last_error() : "ok", devname);
    void *bbase;
    rc = opd_arena_create(b, 8192, &bh, &bbase);
    rc |= opd_alloc(b, "cuda", 8192, &bd);
    float *bx = bbase;
    for (int i = 0; i < 1024; i++) bx[i] = 2.0f;
    opd_tensor_t tbx, tby, tdx, tdy, tatt;
    opd_tensor_init(&tbx, bh, 0, OPD_DTYPE_FLOAT32, 1, &n);
    opd_tensor_init(&tby, bh, 4096, OPD_DTYPE_FLOAT32, 1, &n);
    opd_tensor_init(&tdx, bd, 0, OPD_DTYPE_FLOAT32, 1, &n);
    opd_tensor_init(&tdy, bd, 4096, OPD_DTYPE_FLOAT32, 1, &n);
    opd_tensor_init(&tatt, att, 0, OPD_DTYPE_FLOAT32, 1, &n);
    rc = opd_run_on(b, "cuda", "copy", &tbx, 1, &tdx, 1, NULL, 0);
    opd_tensor_t mi[2] = {tdx, tatt};
    rc |= opd_run(b, "mul", mi, 2, &tdy, 1, NULL, 0);
    rc |= opd_run_on(b, "cuda", "copy", &tdy, 1, &tby, 1, NULL, 0);
    int ok = rc == 0;
    for (int i = 0; i < 1024 && ok; i++) ok = bx[1024 + i] == 2.0f * i;
    CHECK(ok, "another client multiplies by the attached weights on the GPU: %s",
          rc ? opd_last_error() : "ok");
    rc = opd_run(b, "relu", &tdx, 1, &tatt, 1, NULL, 0);
    CHECK(rc == OPD_EREADONLY, "writing the attached weights is refused: %s",
          opd_last_error());
    opd_close(b);
    opd_unpublish(c, "weights");
    opd_arena_release(c, wa);
  }

  /* a tiny op on device tensors: round trip through the socket */
  {
    opd_tensor_t sx = t2(d, 0, 1, 1024), sy = t2(d, 8192, 1, 1024);
    enum { N = 5000 };
    static double t[N];
    for (int i = 0; i < 200; i++) opd_run(c, "softmax", &sx, 1, &sy, 1, NULL, 0);
    for (int i = 0; i < N; i++) {
      double t0 = now_us();
      opd_run(c, "softmax", &sx, 1, &sy, 1, NULL, 0);
      t[i] = now_us() - t0;
    }
    qsort(t, N, sizeof t[0], cmpd);
    const char *tr = getenv("OPD_WAIT") ? getenv("OPD_WAIT") : "adaptive";
    printf("latency op=softmax shape=1x1024 device=cuda transport=%s "
           "p50_us=%.1f p99_us=%.1f p999_us=%.1f\n",
           tr, t[N / 2], t[N * 99 / 100], t[N * 999 / 1000]);
    for (int i = 0; i < N; i++) {
      double t0 = now_us();
      opd_ping(c);
      t[i] = now_us() - t0;
    }
    qsort(t, N, sizeof t[0], cmpd);
    printf("latency op=ping transport=%s p50_us=%.1f p99_us=%.1f\n", tr,
           t[N / 2], t[N * 99 / 100]);
  }

  opd_stats_json(c, &json, &len);
  CHECK(strstr(json, "\"healthy\":true") != NULL, "stats: healthy");
  printf("# stats: %s\n", json);
  opd_free(json);
  rc = opd_arena_release(c, d);
  CHECK(rc == 0, "device arena released: %s", rc ? opd_last_error() : "ok");
  opd_close(c);
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
