/* bench_roundtrip: the latency of one request to opd, against the bare cost
 * of a Unix-socket round trip between two processes.
 *
 * DESIGN
 * Four latency cases, each timed one round trip at a time with
 * clock_gettime(CLOCK_MONOTONIC) and summarized by nearest-rank
 * percentiles. Each case is warmed up first; then the cases take turns in
 * 10 blocks of N/10 round trips (raw, ping, noop, noop_1tensor, raw, ...)
 * so that a noisy, shared machine's drift lands on all of them alike and
 * the ratio to raw stays meaningful:
 *
 *   raw           a 40-byte ping-pong over a socketpair to a forked child
 *                 (blocking write + read on both sides): the floor that any
 *                 socket transport pays (two context switches, two copies)
 *   ping          opd_ping: framing + msgpack, answered on the daemon's loop
 *   noop          opd_run("noop") with no tensors: + op lookup and dispatch
 *   noop_1tensor  opd_run("noop") with one float32 (16) tensor in an arena:
 *                 + descriptor packing, arena lookup and bounds checks
 *
 * then one throughput case, noop_pipelined<K>: K opd_submit, then K
 * opd_wait, repeated; ops/s over the whole loop.
 *
 * Every case prints one line of key=value pairs so runs can be diffed and
 * grepped (bench/results/README.md explains them); header lines start with
 * '#'. Each line carries raw's p50 and its own p50's ratio to it.
 *
 * Usage: bench_roundtrip [-n N] [-w WARMUP] [-k K] [SOCKET]
 *   SOCKET defaults to $OPD_SOCKET (then opd's usual default). Exits 1 with
 *   opd_last_error() on any failed call.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "opd/opd.h"

#define BENCH_NAME "bench_roundtrip"
#include "bench/harness.h"

#define RAW_MSG 40 /* bytes each way: about one opd RUN frame */
#define BLOCKS 10  /* turns each latency case takes */
#define REWARM 200 /* untimed round trips at the start of each turn */

/* Exits with opd's own words when an opd call fails. */
#define CHECK(call)                                                         \
  do {                                                                      \
    int rc_ = (call);                                                       \
    if (rc_ != 0) {                                                         \
      fprintf(stderr, "bench_roundtrip: %s:%d: %s: %s (%s)\n", __FILE__,     \
              __LINE__, #call, opd_last_error(), opd_errname(rc_));         \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

typedef struct stats {
  uint64_t p50, p99, p999; /* ns, nearest rank */
  double mean;             /* ns */
} stats_t;



/* Sorts v in place and summarizes it. */
static stats_t summarize(uint64_t *v, size_t n) {
  stats_t s;
  double sum = 0;
  for (size_t i = 0; i < n; i++) sum += (double)v[i];
  qsort(v, n, sizeof *v, cmp_u64);
  s.p50 = pct(v, n, 0.50);
  s.p99 = pct(v, n, 0.99);
  s.p999 = pct(v, n, 0.999);
  s.mean = sum / (double)n;
  return s;
}

/* the connection's transport (opd_transport: spin, adaptive or socket);
 * the raw case is a socketpair whatever it is */
static const char *transport = "socket";

static void print_latency(const char *name, const stats_t *s, uint64_t raw_p50) {
  printf("latency transport=%s case=%s p50_ns=%" PRIu64 " p99_ns=%" PRIu64
         " p999_ns=%" PRIu64 " mean_ns=%.0f raw_p50_ns=%" PRIu64
         " ratio_p50=%.2f\n",
         strcmp(name, "raw") == 0 ? "socket" : transport, name, s->p50,
         s->p99, s->p999, s->mean, raw_p50,
         raw_p50 ? (double)s->p50 / (double)raw_p50 : 0.0);
  fflush(stdout);
}

/* ---- header ------------------------------------------------------------- */

static void print_header(opd_client_t *c, const char *sock, size_t n,
                         size_t warm, int k) {
  printf("# bench_roundtrip (libopd %s)\n", opd_version());
  print_machine();
  printf("# socket: %s; iterations: %zu (warmup %zu); pipeline depth: %d\n",
         sock, n, warm, k);
  const char *why = opd_transport_why(c);
  printf("# transport: %s%s%s\n", transport, why[0] ? ": " : "", why);
  char *info;
  size_t len;
  CHECK(opd_server_info(c, &info, &len));
  printf("# server: %.*s\n", (int)len, info);
  opd_free(info);
  fflush(stdout);
}

/* ---- raw baseline ------------------------------------------------------- */

/* The echo child of the raw case: a socketpair end and the child's pid. */
typedef struct raw_peer {
  int fd;    /* the parent's end */
  pid_t pid; /* the echo child */
} raw_peer_t;

/* Forks a child that echoes RAW_MSG-byte messages until EOF. */
static void raw_start(raw_peer_t *p) {
  int sv[2];
  SYSCHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
  fflush(stdout);
  pid_t pid = fork();
  SYSCHECK(pid >= 0, "fork");
  if (pid == 0) { /* echo until the parent closes its end */
    unsigned char m[RAW_MSG];
    close(sv[0]);
    while (xfer(sv[1], m, sizeof m, 0) == 0)
      if (xfer(sv[1], m, sizeof m, 1) != 0) break;
    _exit(0);
  }
  close(sv[1]);
  p->fd = sv[0];
  p->pid = pid;
}

/* Closes the parent's end (the child sees EOF) and reaps the child. */
static void raw_stop(raw_peer_t *p) {
  int st;
  close(p->fd);
  SYSCHECK(waitpid(p->pid, &st, 0) == p->pid, "waitpid");
}

/* ---- opd cases ---------------------------------------------------------- */

typedef enum { C_RAW, C_PING, C_NOOP, C_NOOP_1TENSOR, C_COUNT } case_t;
static const char *const case_name[C_COUNT] = {"raw", "ping", "noop",
                                               "noop_1tensor"};

/* What the cases act on. */
typedef struct target {
  raw_peer_t raw;    /* the echo child of C_RAW */
  opd_client_t *c;   /* the daemon connection of the other cases */
  opd_tensor_t x;    /* the input of C_NOOP_1TENSOR */
} target_t;

/* Runs `count` round trips of case `which`; stores each one's ns in lat
 * (NULL: untimed warmup). */
static void run_case(target_t *t, case_t which, uint64_t *lat, size_t count) {
  unsigned char m[RAW_MSG];
  memset(m, 0xa5, sizeof m);
  for (size_t i = 0; i < count; i++) {
    uint64_t t0 = now_ns();
    switch (which) {
      case C_RAW:
        SYSCHECK(xfer(t->raw.fd, m, sizeof m, 1) == 0, "raw write");
        SYSCHECK(xfer(t->raw.fd, m, sizeof m, 0) == 0, "raw read");
        break;
      case C_PING: CHECK(opd_ping(t->c)); break;
      case C_NOOP:
        CHECK(opd_run(t->c, "noop", NULL, 0, NULL, 0, NULL, 0));
        break;
      case C_NOOP_1TENSOR:
        CHECK(opd_run(t->c, "noop", &t->x, 1, NULL, 0, NULL, 0));
        break;
      default: break;
    }
    if (lat) lat[i] = now_ns() - t0;
  }
}

/* K submits then K waits, `rounds` times (after warmup rounds); ops/s. */
static double bench_pipelined(opd_client_t *c, int k, size_t rounds,
                              size_t warm_rounds) {
  uint64_t *req = malloc((size_t)k * sizeof *req);
  SYSCHECK(req != NULL, "malloc");
  uint64_t t0 = 0;
  for (size_t r = 0; r < warm_rounds + rounds; r++) {
    if (r == warm_rounds) t0 = now_ns();
    for (int i = 0; i < k; i++)
      CHECK(opd_submit(c, "noop", NULL, 0, NULL, 0, NULL, 0, &req[i]));
    for (int i = 0; i < k; i++) CHECK(opd_wait(c, req[i], -1));
  }
  double secs = (double)(now_ns() - t0) / 1e9;
  free(req);
  return (double)rounds * (double)k / secs;
}

/* ---- main --------------------------------------------------------------- */


static void usage(FILE *f) {
  fprintf(f,
          "usage: bench_roundtrip [-n N] [-w WARMUP] [-k K] [SOCKET]\n"
          "  -n N       timed round trips per case (default 200000)\n"
          "  -w WARMUP  untimed round trips before each case (default N/10,\n"
          "             at most 20000)\n"
          "  -k K       pipeline depth of the throughput case (default 64)\n"
          "  SOCKET     the daemon's socket (default: $OPD_SOCKET)\n");
}

int main(int argc, char **argv) {
  size_t n = 200000, warm = (size_t)-1;
  int k = 64, opt;
  while ((opt = getopt(argc, argv, "n:w:k:h")) != -1) {
    switch (opt) {
      case 'n': n = parse_count("bench_roundtrip", "-n", optarg, 1); break;
      case 'w': warm = parse_count("bench_roundtrip", "-w", optarg, 0); break;
      case 'k': k = (int)parse_count("bench_roundtrip", "-k", optarg, 1); break;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  if (argc - optind > 1) {
    usage(stderr);
    return 2;
  }
  if (warm == (size_t)-1) warm = n / 10 < 20000 ? n / 10 : 20000;
  const char *given = optind < argc ? argv[optind] : NULL;
  char sock[4096];
  CHECK(opd_socket_path(given, sock, sizeof sock));

  /* a dead child of the raw case must not kill us through SIGPIPE */
  signal(SIGPIPE, SIG_IGN);

  opd_client_t *c;
  CHECK(opd_connect(sock, &c));
  transport = opd_transport(c);
  print_header(c, sock, n, warm, k);

  target_t t = {.c = c};
  raw_start(&t.raw);
  /* x is float32 (16) at offset 0 of a one-page arena */
  uint64_t arena;
  void *base;
  CHECK(opd_arena_create(c, 4096, &arena, &base));
  float *xf = base;
  for (int i = 0; i < 16; i++) xf[i] = (float)i;
  int64_t shape[1] = {16};
  CHECK(opd_tensor_init(&t.x, arena, 0, OPD_DTYPE_FLOAT32, 1, shape));

  /* The machine drifts (other tenants, frequency): the cases take turns in
   * BLOCKS blocks so that drift lands on all of them alike, and each block
   * starts with a few untimed round trips to re-warm its path. */
  uint64_t *lat[C_COUNT];
  for (int ci = 0; ci < C_COUNT; ci++) {
    lat[ci] = malloc(n * sizeof *lat[ci]);
    SYSCHECK(lat[ci] != NULL, "malloc");
    run_case(&t, (case_t)ci, NULL, warm);
  }
  size_t blocks = n < BLOCKS ? 1 : BLOCKS, done = 0;
  for (size_t b = 0; b < blocks; b++) {
    size_t cnt = (n - done) / (blocks - b);
    for (int ci = 0; ci < C_COUNT; ci++) {
      run_case(&t, (case_t)ci, NULL, warm < REWARM ? warm : REWARM);
      run_case(&t, (case_t)ci, lat[ci] + done, cnt);
    }
    done += cnt;
  }
  raw_stop(&t.raw);
  CHECK(opd_arena_release(c, arena));

  stats_t st[C_COUNT];
  for (int ci = 0; ci < C_COUNT; ci++) {
    st[ci] = summarize(lat[ci], n);
    free(lat[ci]);
  }
  for (int ci = 0; ci < C_COUNT; ci++)
    print_latency(case_name[ci], &st[ci], st[C_RAW].p50);

  size_t rounds = n / (size_t)k ? n / (size_t)k : 1;
  size_t warm_rounds = warm / (size_t)k;
  double ops = bench_pipelined(c, k, rounds, warm_rounds);
  printf("throughput transport=%s case=noop_pipelined%d ops_per_s=%.0f\n",
         transport, k, ops);

  opd_close(c);
  return 0;
}
