/* client: one C worker of examples/hft_server. Attaches the published
 * weights, defines the MLP as one graph on them, answers R requests and
 * prints the latency of a request (p50 / p99 / p99.9).
 *
 *   ./client --socket /tmp/opd.sock [--name hft_mlp] [--id 1]
 *            [--requests 20000] [--device cpu|cuda|cuda:N]
 *            [--check-every 64] [--no-prepare]
 *
 * DESIGN
 * Everything that can be done once is done before the loop: the attach,
 * the graph definition (the daemon checks every node and plans the
 * intermediates then), the input x and output y tensors in one arena of
 * this connection, and the run's request bytes (opd_graph_prepare). A
 * request is then: write the market event into x, one opd_run_prepared
 * (one round trip, the whole model in the daemon), read y. The timer
 * covers exactly that. The graph uses `linear` nodes when the daemon has
 * that op, else matmul + add + relu (mlp.h); the line printed says which.
 * Every --check-every-th answer (and the first and last) is checked
 * against mlp_reference on weights rebuilt here from the seed in the
 * publication's meta, so a wrong weight, node or layout fails the run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mlp.h"

typedef struct opts {
  const char *sock, *name, *device;
  long id, requests, check_every;
  int prepare;                     /* 1: opd_graph_prepare + opd_run_prepared */
} opts_t;

static int usage(void) {
  fprintf(stderr, "usage: client [--socket PATH] [--name NAME] [--id N] [--requests R] "
                  "[--device cpu|cuda|cuda:N] [--check-every K] [--no-prepare]\n");
  return 2;
}

static int parse(int argc, char **argv, opts_t *o) {
  *o = (opts_t){NULL, "hft_mlp", "cpu", 1, 20000, 64, 1};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--no-prepare") == 0) { o->prepare = 0; continue; }
    if (i + 1 >= argc) return usage();
    const char *v = argv[++i];
    long *num = strcmp(a, "--id") == 0 ? &o->id
                : strcmp(a, "--requests") == 0 ? &o->requests
                : strcmp(a, "--check-every") == 0 ? &o->check_every : NULL;
    if (num) {
      char *end;
      *num = strtol(v, &end, 10);
      if (*end || *num < 1 || (num == &o->id && *num > 0xFFFF)) {
        fprintf(stderr, "client: %s must be a positive integer%s, not %s\n", a,
                num == &o->id ? " <= 65535" : "", v);
        return 2;
      }
    } else if (strcmp(a, "--socket") == 0) o->sock = v;
    else if (strcmp(a, "--name") == 0) o->name = v;
    else if (strcmp(a, "--device") == 0) o->device = v;
    else return usage();
  }
  return 0;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static double pct_us(const uint64_t *sorted, long n, double q) {
  long k = (long)(q * n + 0.999999);      /* nearest rank */
  return sorted[(k < 1 ? 1 : k) - 1] / 1e3;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int fail(long id, const char *what) {
  fprintf(stderr, "client c%ld: %s: %s\n", id, what, opd_last_error());
  return 1;
}

int main(int argc, char **argv) {
  opts_t o;
  int rc = parse(argc, argv, &o);
  if (rc) return rc;
  opd_client_t *c;
  if (opd_connect(o.sock, &c)) return fail(o.id, "connect");

  /* the weights: attached (the daemon's copy), and rebuilt here from the
   * seed for the reference */
  uint64_t warena, wsize;
  char wdev[32], meta[256];
  if (opd_attach(c, o.name, &warena, &wsize, wdev, sizeof wdev, meta, sizeof meta))
    return fail(o.id, "attach");
  mlp_param_t p[MLP_NPARAMS];
  uint64_t need = mlp_layout(p);
  const char *sp = strstr(meta, "\"seed\":");
  if (wsize < need || !sp || !strstr(meta, "\"dims\":[256,512,512,1]")) {
    fprintf(stderr, "client c%ld: %s is not an hft_mlp publication (%llu bytes, meta %s)\n",
            o.id, o.name, (unsigned long long)wsize, meta);
    return 1;
  }
  uint32_t seed = (uint32_t)strtoul(sp + 7, NULL, 10);
  float *ref_w = malloc(need);
  if (!ref_w) return fail(o.id, "malloc");
  mlp_fill(ref_w, p, seed);

  /* the graph, once */
  int linear = mlp_has_op(c, "linear");
  if (linear < 0) return fail(o.id, "ops");
  uint64_t graph, io_arena;
  opd_tensor_t x, y;
  void *io;
  if (mlp_graph_define(c, o.device, warena, 1, linear, &graph, &x, &y))
    return fail(o.id, "graph define");
  if (opd_arena_create(c, 8192, &io_arena, &io)) return fail(o.id, "arena");
  x.arena = y.arena = io_arena;
  y.offset = 4096;
  float *xs = io, *ys = (float *)((char *)io + 4096);
  opd_prepared_t *prep = NULL;
  if (o.prepare && opd_graph_prepare(c, graph, &x, 1, &y, 1, 0, &prep))
    return fail(o.id, "graph prepare");

  long warm = o.requests / 10 < 200 ? o.requests / 10 : 200;
  uint64_t *lat = malloc(sizeof(uint64_t) * (size_t)o.requests);
  if (!lat) return fail(o.id, "malloc");
  double worst = 0, h[2 * MLP_HID], want;
  long checked = 0;
  for (long r = -warm; r < o.requests; r++) {
    uint64_t ev = (uint64_t)(r + warm);
    uint64_t t0 = now_ns();
    for (int j = 0; j < MLP_IN; j++) xs[j] = mlp_event_value((uint32_t)o.id, ev, j);
    rc = prep ? opd_run_prepared(c, prep) : opd_graph_run(c, graph, &x, 1, &y, 1);
    float answer = ys[0];
    uint64_t t1 = now_ns();
    if (rc) return fail(o.id, "graph run");
    if (r >= 0) lat[r] = t1 - t0;
    if (r == 0 || r == o.requests - 1 || (r > 0 && r % o.check_every == 0)) {
      mlp_reference(ref_w, p, xs, linear, 1, h, &want);
      double e = mlp_error(&answer, &want, 1);
      worst = e > worst ? e : worst;
      checked++;
    }
  }
  qsort(lat, (size_t)o.requests, sizeof *lat, cmp_u64);
  int ok = worst <= 1.0;
  printf("client name=c%ld lang=c path=%s device=%s requests=%ld p50_us=%.1f p99_us=%.1f "
         "p999_us=%.1f max_us=%.1f checked=%ld err_over_tol=%.3g result=%s\n",
         o.id, linear ? "linear" : "matmul+add+relu", o.device, o.requests,
         pct_us(lat, o.requests, 0.50), pct_us(lat, o.requests, 0.99),
         pct_us(lat, o.requests, 0.999), lat[o.requests - 1] / 1e3, checked, worst,
         ok ? "ok" : "MISMATCH");

  opd_prepared_free(prep);
  opd_graph_destroy(c, graph);
  opd_arena_release(c, io_arena);
  opd_arena_release(c, warena);
  opd_close(c);
  free(lat);
  free(ref_w);
  return ok ? 0 : 1;
}
