/* bench_graph: the hft_server MLP (256 -> 512 -> 512 -> 1, float32) from a
 * C client, per request: the whole model as one opd graph against the
 * same model sent op by op.
 *
 * DESIGN
 * The model is examples/hft_server/mlp.h's, so the benchmark, the example
 * and bench_graph.py's torch baselines run one definition: `linear` nodes
 * when the daemon has the op, else matmul + add + relu (the header line
 * says which). Weights live in an arena of this connection on --device
 * (device memory the daemon owns for cuda); the input x and output y are
 * host tensors in one arena, reused by every request, as a server does.
 * Cases, each one request at a time:
 *   graph_prepared  opd_graph_prepare once, opd_run_prepared per request
 *                   (the hot path: one round trip, no encoding);
 *   graph_run       opd_graph_run per request (encodes the run each time);
 *   graph_rotate    opd_graph_run on the next of N_IO pairs of x and y in
 *                   turn: runs on other tensors of the graph's shapes;
 *   graph_dev, graph_dev_rotate (a device only): the same two on copies of
 *                   x and y in device memory (opd_alloc), where a run on
 *                   other tensors than the last one's recaptures the graph
 *                   (host tensors are staged through the graph's own
 *                   buffers, so rotating them does not);
 *   ops_prepared    each node as its own prepared run (opd_prepare once per
 *                   node), back to back: the per-op service's best case;
 *                   on cuda its intermediates are device memory.
 * They take turns in BLOCKS blocks after a warmup, so a shared machine's
 * drift lands on all of them alike; each answer of the last block is
 * checked against mlp_reference (a mismatch fails the run, exit 1).
 * Torch baselines and the ratios are bench_graph.py's, which runs this
 * program and reads its lines.
 *
 * --procs P: P forked clients at once (each its own connection and graph on
 * weights published once by this process), graph_prepared runs for
 * --seconds (default 10) after one go; prints their total requests/s.
 *
 * Usage: build/bench/bench_graph [--socket PATH] [--device cpu|cuda|cuda:N]
 *          [--batch 1,32] [-n N] [-w WARMUP] [--procs P [--seconds S]]
 * Output (after the harness's # lines), per batch and case:
 *   graph lang=c device=cpu batch=1 case=graph_prepared path=linear n=...
 *     p50_us=... p99_us=... p999_us=... mean_us=... check=ok
 * or with --procs:
 *   procs side=opd lang=c device=cpu procs=16 seconds=... requests=...
 *     req_per_s=... check=ok
 */
#define BENCH_NAME "bench_graph"
#include <sys/wait.h>

#include "bench/harness.h"
#include "examples/hft_server/mlp.h"

enum { BLOCKS = 10, MAX_BATCHES = 8, N_CASES = 6, N_HOST_CASES = 4, N_IO = 4 };
static const char *const CASES[N_CASES] = {"graph_prepared", "graph_run", "graph_rotate",
                                           "ops_prepared", "graph_dev", "graph_dev_rotate"};

typedef struct model {
  opd_client_t *c;
  const char *device;
  int linear;                      /* the form of mlp.h in use */
  int64_t batch;
  uint64_t graph;
  opd_tensor_t x[N_IO], y[N_IO];   /* host tensors of io; [0] the usual */
  float *xs[N_IO], *ys[N_IO];
  int last;                        /* the pair the last run used */
  uint64_t turn;                   /* graph_rotate's next pair */
  opd_prepared_t *gprep;           /* the graph run, prepared */
  opd_prepared_t *node[MLP_MAX_NODES]; /* each node, prepared */
  int n_nodes;
  uint64_t io, scratch;            /* arenas: x and y; intermediates */
  int dev;                         /* a device: the graph_dev cases run */
  uint64_t dio;                    /* device arena of dx and dy */
  opd_tensor_t dx[N_IO], dy[N_IO]; /* device copies of x and y */
} model_t;

static void die(const char *what) {
  fprintf(stderr, "bench_graph: %s: %s\n", what, opd_last_error());
  exit(1);
}

/* Builds everything batch b's requests need: the graph, x and y, the
 * prepared graph run and the prepared node runs. */
static void model_init(model_t *m, uint64_t warena) {
  mlp_param_t p[MLP_NPARAMS];
  mlp_node_t n[MLP_MAX_NODES];
  int64_t xshape[2];
  void *io;
  mlp_layout(p);
  if (mlp_graph_define(m->c, m->device, warena, m->batch, m->linear, &m->graph,
                       &m->x[0], &m->y[0]))
    die("graph define");
  /* N_IO pairs of x and y, each x holding the same events */
  uint64_t xbytes = ((uint64_t)m->batch * MLP_IN * 4 + 63) & ~(uint64_t)63;
  uint64_t pair = xbytes + (((uint64_t)m->batch * 4 + 63) & ~(uint64_t)63);
  if (opd_arena_create(m->c, pair * N_IO, &m->io, &io)) die("arena");
  for (int k = 0; k < N_IO; k++) {
    m->x[k] = m->x[0], m->y[k] = m->y[0];
    m->x[k].arena = m->y[k].arena = m->io;
    m->x[k].offset = pair * (uint64_t)k;
    m->y[k].offset = m->x[k].offset + xbytes;
    m->xs[k] = (float *)((char *)io + m->x[k].offset);
    m->ys[k] = (float *)((char *)io + m->y[k].offset);
    for (int64_t b = 0; b < m->batch; b++)
      for (int j = 0; j < MLP_IN; j++)
        m->xs[k][mlp_x_index(m->linear, m->batch, b, j)] = mlp_event_value(1, (uint64_t)b, j);
  }
  if (opd_graph_prepare(m->c, m->graph, &m->x[0], 1, &m->y[0], 1, 0, &m->gprep))
    die("graph prepare");
  m->dev = strcmp(m->device, "cpu") != 0;
  if (m->dev) {  /* the same pairs in device memory, x copied there once */
    if (opd_alloc(m->c, m->device, pair * N_IO, &m->dio)) die("device arena");
    for (int k = 0; k < N_IO; k++) {
      m->dx[k] = m->x[k], m->dy[k] = m->y[k];
      m->dx[k].arena = m->dy[k].arena = m->dio;
      if (opd_run_on(m->c, m->device, "copy", &m->x[k], 1, &m->dx[k], 1, NULL, 0))
        die("copy x to the device");
    }
  }

  /* op by op: value v's tensor (the input, a parameter, an intermediate
   * in scratch, or y for the last node) */
  m->n_nodes = mlp_nodes(m->linear, m->batch, n, xshape);
  opd_tensor_t val[MLP_FIRST_NODE + MLP_MAX_NODES];
  val[MLP_X] = m->x[0];
  for (int k = 0; k < MLP_NPARAMS; k++)
    mlp_param_tensor(warena, p, k, m->linear, &val[1 + k]);
  uint64_t per = (uint64_t)m->batch * MLP_HID * 4, scratch_bytes = per * MLP_MAX_NODES;
  int host = strcmp(m->device, "cpu") == 0;
  void *sb;
  if (host ? opd_arena_create(m->c, scratch_bytes, &m->scratch, &sb)
           : opd_alloc(m->c, m->device, scratch_bytes, &m->scratch))
    die("scratch arena");
  for (int k = 0; k < m->n_nodes; k++) {
    opd_tensor_t *o = &val[MLP_FIRST_NODE + k], in[3];
    if (k == m->n_nodes - 1) *o = m->y[0];
    else opd_tensor_init(o, m->scratch, per * (uint64_t)k, OPD_DTYPE_FLOAT32, 2, n[k].shape);
    for (int i = 0; i < n[k].n_in; i++) in[i] = val[n[k].in[i]];
    opd_attr_t act = {.name = "act", .type = OPD_ATTR_STR, .s = n[k].act};
    if (opd_prepare(m->c, m->device, n[k].op, in, (uint32_t)n[k].n_in, o, 1, &act,
                    n[k].act ? 1 : 0, &m->node[k]))
      die(n[k].op);
  }
}

static int run_case(model_t *m, int cs) {
  m->last = 0;
  if (cs == 0) return opd_run_prepared(m->c, m->gprep);
  if (cs == 1) return opd_graph_run(m->c, m->graph, &m->x[0], 1, &m->y[0], 1);
  if (cs == 2 || cs == 5) {
    int k = m->last = (int)(m->turn++ % N_IO);
    return cs == 2 ? opd_graph_run(m->c, m->graph, &m->x[k], 1, &m->y[k], 1)
                   : opd_graph_run(m->c, m->graph, &m->dx[k], 1, &m->dy[k], 1);
  }
  if (cs == 4) return opd_graph_run(m->c, m->graph, &m->dx[0], 1, &m->dy[0], 1);
  for (int k = 0; k < m->n_nodes; k++) {
    int rc = opd_run_prepared(m->c, m->node[k]);
    if (rc) return rc;
  }
  return 0;
}

/* max error over y of the batch against the reference (<= 1: a match) */
static double check(model_t *m, const void *w, const mlp_param_t *p) {
  double *want = malloc(sizeof(double) * (size_t)m->batch), h[2 * MLP_HID];
  if (!want) die("malloc");
  mlp_reference(w, p, m->xs[m->last], m->linear, m->batch, h, want);
  double e = mlp_error(m->ys[m->last], want, m->batch);
  free(want);
  return e;
}

/* Case cs run once more on NaN-filled outputs (a stale answer cannot
 * pass; device outputs are filled through a copy and read back after),
 * then checked. */
static double final_check(model_t *m, int cs, const void *w, const mlp_param_t *p) {
  int on_dev = cs >= N_HOST_CASES;
  for (int k = 0; k < N_IO; k++) {
    for (int64_t b = 0; b < m->batch; b++) m->ys[k][b] = NAN;
    if (on_dev && opd_run_on(m->c, m->device, "copy", &m->y[k], 1, &m->dy[k], 1, NULL, 0))
      die("copy to the device");
  }
  if (run_case(m, cs)) die(CASES[cs]);
  if (on_dev && opd_run_on(m->c, m->device, "copy", &m->dy[m->last], 1, &m->y[m->last], 1,
                           NULL, 0))
    die("copy from the device");
  return check(m, w, p);
}

static void model_free(model_t *m) {
  if (m->dev) opd_arena_release(m->c, m->dio);
  for (int k = 0; k < m->n_nodes; k++) opd_prepared_free(m->node[k]);
  opd_prepared_free(m->gprep);
  opd_graph_destroy(m->c, m->graph);
  opd_arena_release(m->c, m->io);
  opd_arena_release(m->c, m->scratch);
}

static int usage(void) {
  fprintf(stderr, "usage: bench_graph [--socket PATH] [--device cpu|cuda|cuda:N] "
                  "[--batch 1,32] [-n N] [-w WARMUP] [--procs P [--seconds S]]\n");
  return 2;
}

typedef struct procs_run {
  const char *sock, *device, *name;  /* the daemon, the graph's device, the weights */
  int ready, go, res;              /* pipe ends: child -> parent, parent -> child, results */
  double seconds;
  const void *w;                   /* the weights, for the check */
  const mlp_param_t *p;
} procs_run_t;

typedef struct procs_result {
  uint64_t requests;
  double err;
} procs_result_t;

/* One of --procs's processes: its own connection, the weights attached,
 * its own graph; ready, then graph_prepared runs for r->seconds after
 * the parent's go, then its count and the check of one more answer. */
static void procs_child(const procs_run_t *r) {
  opd_client_t *c;
  uint64_t warena, wsize;
  if (opd_connect(r->sock, &c)) die("child connect");
  if (opd_attach(c, r->name, &warena, &wsize, NULL, 0, NULL, 0)) die("child attach");
  int linear = mlp_has_op(c, "linear");
  if (linear < 0) die("ops");
  model_t m = {.c = c, .device = r->device, .linear = linear, .batch = 1};
  model_init(&m, warena);
  for (int i = 0; i < 100; i++)
    if (run_case(&m, 0)) die("warmup");
  char b = 'r';
  SYSCHECK(write(r->ready, &b, 1) == 1, "ready");
  SYSCHECK(read(r->go, &b, 1) == 1, "go");
  procs_result_t res = {0, 0};
  uint64_t end = now_ns() + (uint64_t)(r->seconds * 1e9);
  while (now_ns() < end) {
    if (run_case(&m, 0)) die("graph run");
    res.requests++;
  }
  res.err = final_check(&m, 0, r->w, r->p);
  SYSCHECK(write(r->res, &res, sizeof res) == (ssize_t)sizeof res, "result");
  model_free(&m);
  opd_close(c);
  _exit(0);
}

/* --procs: publishes the weights, forks `procs` clients, starts them
 * together and prints their total requests per second. Returns 0, or 1
 * when a child failed or an answer did not match. */
static int procs_mode(opd_client_t *c, procs_run_t *r, uint64_t warena, int procs) {
  char name[64];
  snprintf(name, sizeof name, "bench_graph_c_%ld", (long)getpid());
  r->name = name;
  if (opd_publish(c, warena, name, NULL)) die("publish");
  int ready[2], go[2], res[2];
  SYSCHECK(pipe(ready) == 0 && pipe(go) == 0 && pipe(res) == 0, "pipe");
  r->ready = ready[1], r->go = go[0], r->res = res[1];
  fflush(stdout);
  for (int i = 0; i < procs; i++) {
    pid_t pid = fork();
    SYSCHECK(pid >= 0, "fork");
    if (pid == 0) {
      close(ready[0]), close(go[1]), close(res[0]);
      procs_child(r);
    }
  }
  close(ready[1]), close(go[0]), close(res[1]);  /* a dead child: EOF, not a hang */
  char b;
  for (int i = 0; i < procs; i++)
    if (read(ready[0], &b, 1) != 1) die("a child failed before it was ready");
  uint64_t t0 = now_ns();
  for (int i = 0; i < procs; i++) SYSCHECK(write(go[1], "g", 1) == 1, "go");
  uint64_t total = 0;
  double worst = 0;
  int got = 0;
  procs_result_t one;
  while (got < procs && read(res[0], &one, sizeof one) == (ssize_t)sizeof one) {
    total += one.requests;
    worst = one.err > worst ? one.err : worst;
    got++;
  }
  double wall = (double)(now_ns() - t0) / 1e9;
  int bad = got < procs || worst > 1.0;
  for (int i = 0; i < procs; i++) {
    int st;
    if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) bad = 1;
  }
  opd_unpublish(c, name);
  printf("procs side=opd lang=c device=%s procs=%d seconds=%.2f requests=%llu req_per_s=%.0f "
         "check=%s\n", r->device, procs, wall, (unsigned long long)total, total / wall,
         bad ? "MISMATCH" : "ok");
  return bad;
}

int main(int argc, char **argv) {
  const char *sock = getenv("OPD_SOCKET"), *device = "cpu", *batches = "1,32";
  size_t n = 5000, warm = 0, procs = 0;
  double seconds = 10;
  for (int i = 1; i < argc; i++) {
    if (i + 1 >= argc) return usage();
    const char *a = argv[i], *v = argv[++i];
    if (strcmp(a, "--socket") == 0) sock = v;
    else if (strcmp(a, "--device") == 0) device = v;
    else if (strcmp(a, "--batch") == 0) batches = v;
    else if (strcmp(a, "-n") == 0) n = parse_count(BENCH_NAME, "-n", v, BLOCKS);
    else if (strcmp(a, "-w") == 0) warm = parse_count(BENCH_NAME, "-w", v, 0);
    else if (strcmp(a, "--procs") == 0) procs = parse_count(BENCH_NAME, "--procs", v, 1);
    else if (strcmp(a, "--seconds") == 0) {
      char *end;
      seconds = strtod(v, &end);
      if (*end || !(seconds > 0 && seconds <= 3600)) {
        fprintf(stderr, "bench_graph: --seconds expects 0 < S <= 3600, got \"%s\"\n", v);
        return 2;
      }
    } else return usage();
  }
  if (procs > 256) {
    fprintf(stderr, "bench_graph: --procs expects 1..256, got %zu\n", procs);
    return 2;
  }
  if (!warm) warm = n / 10 < 2000 ? n / 10 : 2000;
  int64_t bl[MAX_BATCHES];
  int nb = 0;
  for (const char *s = batches; *s && nb < MAX_BATCHES; nb++) {
    char *end;
    long b = strtol(s, &end, 10);
    if (end == s || b < 1 || b > 4096 || (*end && *end != ',')) {
      fprintf(stderr, "bench_graph: --batch expects sizes 1..4096 separated by commas, "
                      "got \"%s\"\n", batches);
      return 2;
    }
    bl[nb] = b;
    s = *end ? end + 1 : end;
  }

  opd_client_t *c;
  if (opd_connect(sock, &c)) die("connect");
  int linear = mlp_has_op(c, "linear");
  if (linear < 0) die("ops");
  mlp_param_t p[MLP_NPARAMS];
  float *w = malloc(mlp_layout(p));
  if (!w) die("malloc");
  mlp_fill(w, p, 42);
  uint64_t warena;
  void *wbase;
  if (mlp_weights_create(c, device, 42, &warena, &wbase)) die("weights");

  print_machine();
  printf("# bench_graph: device=%s path=%s n=%zu warmup=%zu transport=%s\n", device,
         linear ? "linear" : "matmul+add+relu", n, warm, opd_transport(c));
  if (procs) {
    procs_run_t r = {.sock = sock, .device = device, .seconds = seconds, .w = w, .p = p};
    int rc = procs_mode(c, &r, warena, (int)procs);
    opd_arena_release(c, warena);
    opd_close(c);
    free(w);
    return rc;
  }
  int bad = 0;
  size_t per_block = n / BLOCKS;
  uint64_t *lat[N_CASES];
  for (int cs = 0; cs < N_CASES; cs++)
    if (!(lat[cs] = malloc(sizeof(uint64_t) * per_block * BLOCKS))) die("malloc");
  for (int bi = 0; bi < nb; bi++) {
    model_t m = {.c = c, .device = device, .linear = linear, .batch = bl[bi]};
    model_init(&m, warena);
    int n_cases = m.dev ? N_CASES : N_HOST_CASES;  /* device tensors: cuda only */
    for (int cs = 0; cs < n_cases; cs++)
      for (size_t i = 0; i < warm; i++)
        if (run_case(&m, cs)) die(CASES[cs]);
    double err[N_CASES];
    for (int blk = 0; blk < BLOCKS; blk++)
      for (int cs = 0; cs < n_cases; cs++) {
        for (size_t i = 0; i < per_block; i++) {
          uint64_t t0 = now_ns();
          if (run_case(&m, cs)) die(CASES[cs]);
          lat[cs][blk * per_block + i] = now_ns() - t0;
        }
        if (blk == BLOCKS - 1) err[cs] = final_check(&m, cs, w, p);
      }
    for (int cs = 0; cs < n_cases; cs++) {
      size_t k = per_block * BLOCKS;
      double sum = 0;
      for (size_t i = 0; i < k; i++) sum += (double)lat[cs][i];
      qsort(lat[cs], k, sizeof(uint64_t), cmp_u64);
      int ok = err[cs] <= 1.0;
      bad |= !ok;
      printf("graph lang=c device=%s batch=%lld case=%s path=%s n=%zu p50_us=%.2f "
             "p99_us=%.2f p999_us=%.2f mean_us=%.2f check=%s\n",
             device, (long long)m.batch, CASES[cs], linear ? "linear" : "matmul+add+relu",
             k, pct(lat[cs], k, 0.5) / 1e3, pct(lat[cs], k, 0.99) / 1e3,
             pct(lat[cs], k, 0.999) / 1e3, sum / (double)k / 1e3, ok ? "ok" : "MISMATCH");
      fflush(stdout);
    }
    model_free(&m);
  }
  for (int cs = 0; cs < N_CASES; cs++) free(lat[cs]);
  opd_arena_release(c, warena);
  opd_close(c);
  free(w);
  return bad;
}
