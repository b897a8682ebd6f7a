/* bench_pingpong: raw cross-process ping-pong baselines.
 *
 * DESIGN
 * The floors that opd's transports are compared against: one round trip
 * between two processes with nothing of opd in the way. The parent forks a
 * fresh child per case and times N round trips one at a time with
 * clock_gettime(CLOCK_MONOTONIC), after an untimed warm-up; every sample is
 * kept and summarized by nearest-rank percentiles (p50, p99, p99.9) and the
 * mean, in ns.
 *
 *   raw_spin    a MAP_SHARED|MAP_ANONYMOUS page mapped before fork holds two
 *               64-bit sequence words on separate cache lines (`ping`,
 *               parent -> child; `pong`, child -> parent). The parent stores
 *               seq to ping (release); the child spins (pause) until it
 *               loads it (acquire) and stores it to pong; the parent spins
 *               for the echo. Both sides burn a core.
 *   raw_futex   the same words, but a side whose value is not there yet
 *               sleeps in FUTEX_WAIT on it, and every writer calls
 *               FUTEX_WAKE after its store (non-private futexes: the page
 *               is shared between processes). No spinning: the cost of
 *               sleeping and being woken, each way.
 *   raw_socket  a socketpair(AF_UNIX, SOCK_STREAM); 64-byte messages,
 *               blocking write then read on both sides.
 *
 * Sequence words are 64-bit; futex compares 32 bits, so it waits on the
 * low half of the word (the seq increments by one per round trip, so the
 * low half changes with every store). To end a case the parent stores
 * STOP_SEQ to ping (and wakes): a changed value, so a child about to sleep
 * cannot miss it. The child also dies with its parent (PR_SET_PDEATHSIG).
 *
 * Bounds: a round trip over 1 s aborts its case (spin: the clock is read
 * every SPIN_CHECK pauses; futex: FUTEX_WAIT has a 100 ms timeout; socket:
 * SO_RCVTIMEO 1 s), prints an `error` line instead of a `latency` line,
 * kills that case's child, and the run goes on (exit status 1 at the end).
 * With fewer than 2 allowed CPUs the spin case is not run (error line):
 * two spinners on one CPU make each round trip wait for a time slice
 * (~8 ms on the 2-vCPU VM under `taskset -c 0`), 100000 of them ~15 min.
 *
 * With -s SOCKET each raw case is followed by opd's transport of the same
 * kind (spin ~ raw_spin, adaptive ~ raw_futex, socket ~ raw_socket): a
 * noop with opd_run, then with a prepared run (encoded once), on a fresh
 * connection. The pair runs in -b BLOCKS alternating blocks of N/BLOCKS
 * round trips (default 10, each after max(WARMUP/BLOCKS, 1000) untimed
 * ones), so that a drift of the shared host's speed over the run reaches
 * both sides of the ratio alike. Each raw block maps a fresh page: a
 * cross-core transfer's latency depends on where in the CPU's mesh the
 * line's home is (on the GPU machine's host one fixed pair of lines gave raw spin
 * p50s from 350 to 540 ns from run to run), and opd's rings spread over
 * hundreds of lines. The opd client runs in the parent (the
 * raw parent's CPU); start the daemon with --loop-cpu on the raw child's
 * CPU for the same pair of CPUs.
 *
 * Placement: -p pins the parent and the child to two different CPUs
 * (sched_setaffinity) when at least 2 are allowed; by default they are
 * pinned only when nproc >= 4, because on a 2-vCPU machine pinning a spinner
 * leaves every other task one CPU. The header says what was chosen.
 *
 * Output: '#' header lines (date UTC, uname -n -m, CPU model, nproc,
 * placement), then one line per case:
 *   latency transport=raw_spin p50_ns=… p99_ns=… p999_ns=… mean_ns=… n=…
 *
 * Build: `make build/bench/bench_pingpong` (libopd and libc; the raw
 * baselines are in bench/pingpong_raw.h).
 *
 * Usage: bench_pingpong [-n N] [-w WARMUP] [-c CASES] [-p | -u] [-C A,B]
 *                       [-s SOCKET [-b BLOCKS]]
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BENCH_NAME "bench_pingpong"
#include "bench/harness.h"
#include "opd/opd.h"

/* the raw ping-pongs between two processes (spin, futex, socket): the
 * baselines every opd transport is reported against */
#include "bench/pingpong_raw.h"

/* ---- opd's transports, next to the raw baselines ------------------------- */

/* opd noop round trips over one transport (libopd flag), printed with the
 * raw baseline it is compared to: spin ~ raw_spin, adaptive ~ raw_futex,
 * socket ~ raw_socket. 0, or -1 on an opd error. */
static void report_opd(const char *name, const char *api, uint64_t raw_p50,
                       uint64_t *lat, size_t n) {
  double sum = 0;
  for (size_t i = 0; i < n; i++) sum += (double)lat[i];
  qsort(lat, n, sizeof *lat, cmp_u64);
  uint64_t p50 = pct(lat, n, 0.50);
  printf("latency transport=%s%s p50_ns=%" PRIu64 " p99_ns=%" PRIu64
         " p999_ns=%" PRIu64 " mean_ns=%.0f raw_p50_ns=%" PRIu64
         " ratio_p50=%.2f ratio_p999_to_raw_p50=%.2f n=%zu\n",
         name, api, p50, pct(lat, n, 0.99), pct(lat, n, 0.999),
         sum / (double)n, raw_p50,
         raw_p50 ? (double)p50 / (double)raw_p50 : 0.0,
         raw_p50 ? (double)pct(lat, n, 0.999) / (double)raw_p50 : 0.0, n);
  fflush(stdout);
}

/* Times n opd noop round trips over one transport (libopd flag) with
 * opd_run into run_lat, then n with a prepared run into prep_lat, each
 * after warm untimed ones, on a fresh connection. 0, or -1 after printing
 * an error line. */
static int opd_block(const char *sock, const char *name, uint32_t flag,
                     uint64_t *run_lat, uint64_t *prep_lat, size_t n,
                     size_t warm) {
  opd_client_t *c;
  opd_prepared_t *p = NULL;
  if (opd_connect_flags(sock, flag, &c) != 0 ||
      opd_prepare(c, NULL, "noop", NULL, 0, NULL, 0, NULL, 0, &p) != 0) {
    printf("error transport=%s reason=\"%s\"\n", name, opd_last_error());
    return -1;
  }
  for (int api = 0; api < 2; api++) {
    uint64_t *lat = api ? prep_lat : run_lat;
    for (size_t i = 0; i < warm + n; i++) {
      uint64_t t0 = now_ns();
      int rc = api ? opd_run_prepared(c, p)
                   : opd_run(c, "noop", NULL, 0, NULL, 0, NULL, 0);
      if (rc != 0) {
        printf("error transport=%s reason=\"%s\"\n", name, opd_last_error());
        opd_prepared_free(p);
        opd_close(c);
        return -1;
      }
      if (i >= warm) lat[i - warm] = now_ns() - t0;
    }
  }
  opd_prepared_free(p);
  opd_close(c);
  return 0;
}

/* How often a spinning thread here loses the CPU for 2 us or more (timer
 * ticks, the hypervisor, other tenants): a round trip of T us is hit with
 * a probability of about rate x T per process it crosses, which bounds
 * the p99.9 any transport can reach on this machine. 200 ms, on the
 * calling thread's CPU. */
static void probe_stalls(void) {
  uint64_t start = now_ns(), prev = start, n = 0, sum = 0, max = 0;
  while (prev - start < 200000000u) {
    uint64_t t = now_ns(), d = t - prev;
    if (d >= 2000) {
      n++;
      sum += d;
      if (d > max) max = d;
    }
    prev = t;
  }
  printf("# stalls: a spinning thread on cpu %d lost >= 2 us %.2f times per "
         "ms (mean %.1f us, max %.1f us) over 200 ms\n", sched_getcpu(),
         (double)n / 200.0,
         n ? (double)sum / (double)n / 1e3 : 0.0, (double)max / 1e3);
}

/* ---- header ------------------------------------------------------------- */


/* A cpu's topology value from sysfs (core_id, physical_package_id), or -1. */
static long topo(int cpu, const char *what) {
  char path[128];
  snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/%s",
           cpu, what);
  FILE *f = fopen(path, "r");
  long v = -1;
  if (f) {
    if (fscanf(f, "%ld", &v) != 1) v = -1;
    fclose(f);
  }
  return v;
}

static void print_header(int argc, char **argv, size_t n, size_t warm,
                         const char *cases, const char *why) {
  printf("# bench_pingpong: raw cross-process ping-pong baselines\n");
  printf("# command:");
  for (int i = 0; i < argc; i++) printf(" %s", argv[i]);
  printf("\n");
  print_machine();
  printf("# round trips: %zu per case (warmup %zu); cases: %s; socket "
         "message: %d bytes\n", n, warm, cases, SOCK_MSG);
  /* what one sample's own clock reads cost: back-to-back, p50 */
  enum { CLK = 10001 };
  static uint64_t d[CLK - 1];
  uint64_t prev = now_ns();
  for (int i = 0; i < CLK - 1; i++) {
    uint64_t t1 = now_ns();
    d[i] = t1 - prev;
    prev = t1;
  }
  qsort(d, CLK - 1, sizeof *d, cmp_u64);
  printf("# clock: CLOCK_MONOTONIC, back-to-back reads p50 %" PRIu64
         " ns (part of every sample)\n", pct(d, CLK - 1, 0.50));
  probe_stalls();
  if (pin_cpu[0] < 0) {
    printf("# placement: not pinned (%s)\n", why);
  } else {
    long c0 = topo(pin_cpu[0], "core_id"), c1 = topo(pin_cpu[1], "core_id");
    long p0 = topo(pin_cpu[0], "physical_package_id"),
         p1 = topo(pin_cpu[1], "physical_package_id");
    const char *rel = (c0 < 0 || p0 < 0) ? "topology unknown"
                      : (p0 != p1)       ? "different packages"
                      : (c0 == c1)       ? "SMT siblings of one core"
                                         : "different cores, same package";
    printf("# placement: pinned, parent cpu %d, child cpu %d (%s; %s)\n",
           pin_cpu[0], pin_cpu[1], rel, why);
  }
  fflush(stdout);
}

/* ---- main --------------------------------------------------------------- */


static void usage(FILE *f) {
  fprintf(f,
          "usage: bench_pingpong [-n N] [-w WARMUP] [-c CASES] [-p | -u] "
          "[-C A,B] [-s SOCKET [-b BLOCKS]]\n"
          "  -n N       timed round trips per case (default 100000)\n"
          "  -w WARMUP  untimed round trips first (default N/10, at most "
          "20000)\n"
          "  -c CASES   comma list of spin,futex,socket (default all)\n"
          "  -p         pin parent and child to two different CPUs\n"
          "             (default: pin when nproc >= 4)\n"
          "  -u         do not pin\n"
          "  -C A,B     pin the parent to CPU A and the child to CPU B\n"
          "  -s SOCKET  also time an opd noop over each transport (spin,\n"
          "             adaptive, socket) against a running daemon, each next\n"
          "             to its raw baseline from this run\n"
          "  -b BLOCKS  with -s: time each raw case and its opd transport in\n"
          "             BLOCKS alternating blocks (default 10)\n");
}

int main(int argc, char **argv) {
  size_t n = 100000, warm = (size_t)-1;
  int want[K_COUNT] = {1, 1, 1};
  int pin = -1, opt; /* -1: by nproc */
  int given_a = -1, given_b = -1;
  char cases[64] = "spin,futex,socket";
  const char *sock = NULL;
  size_t blocks = 10;
  while ((opt = getopt(argc, argv, "n:w:c:puC:s:b:h")) != -1) {
    switch (opt) {
      case 'b': blocks = parse_count("bench_pingpong", "-b", optarg, 1); break;
      case 's': sock = optarg; break;
      case 'n': n = parse_count("bench_pingpong", "-n", optarg, 1); break;
      case 'w': warm = parse_count("bench_pingpong", "-w", optarg, 0); break;
      case 'c': {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", optarg);
        memset(want, 0, sizeof want);
        cases[0] = '\0';
        for (char *sv, *tok = strtok_r(buf, ",", &sv); tok;
             tok = strtok_r(NULL, ",", &sv)) {
          int k;
          for (k = 0; k < K_COUNT; k++)
            if (strcmp(tok, kind_name[k]) == 0 ||
                (strncmp(tok, "raw_", 4) == 0 &&
                 strcmp(tok + 4, kind_name[k]) == 0))
              break;
          if (k == K_COUNT) {
            fprintf(stderr, "bench_pingpong: unknown case \"%s\" "
                            "(spin, futex, socket)\n", tok);
            return 2;
          }
          want[k] = 1;
        }
        size_t len = 0;
        for (int k = 0; k < K_COUNT; k++)
          if (want[k])
            len += (size_t)snprintf(cases + len, sizeof cases - len, "%s%s",
                                    len ? "," : "", kind_name[k]);
        if (len == 0) {
          fprintf(stderr, "bench_pingpong: -c names no case\n");
          return 2;
        }
        break;
      }
      case 'p': pin = 1; break;
      case 'u': pin = 0; break;
      case 'C':
        if (sscanf(optarg, "%d,%d", &given_a, &given_b) != 2 || given_a < 0 ||
            given_b < 0 || given_a == given_b || given_a >= CPU_SETSIZE ||
            given_b >= CPU_SETSIZE) {
          fprintf(stderr, "bench_pingpong: -C expects two different CPU "
                          "numbers A,B, got \"%s\"\n", optarg);
          return 2;
        }
        pin = 1;
        break;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  if (optind != argc) {
    usage(stderr);
    return 2;
  }
  if (warm == (size_t)-1) warm = n / 10 < 20000 ? n / 10 : 20000;

  /* placement */
  long nproc = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  SYSCHECK(sched_getaffinity(0, sizeof allowed, &allowed) == 0,
           "sched_getaffinity");
  int nallowed = CPU_COUNT(&allowed);
  char why[128];
  if (pin < 0) {
    pin = nproc >= 4;
    snprintf(why, sizeof why, "default for nproc %ld: pin when nproc >= 4",
             nproc);
  } else {
    snprintf(why, sizeof why, "asked for with %s",
             given_a >= 0 ? "-C" : pin ? "-p" : "-u");
  }
  if (pin && given_a >= 0) {
    if (!CPU_ISSET(given_a, &allowed) || !CPU_ISSET(given_b, &allowed)) {
      fprintf(stderr, "bench_pingpong: -C %d,%d: not both in this process's "
                      "allowed CPUs\n", given_a, given_b);
      return 2;
    }
    pin_cpu[0] = given_a;
    pin_cpu[1] = given_b;
  } else if (pin && nallowed < 2) {
    snprintf(why, sizeof why, "fewer than 2 allowed CPUs, pinning skipped");
  } else if (pin) {
    /* two allowed CPUs, skipping CPU 0 (interrupts, housekeeping) when at
     * least 3 are allowed */
    int got = 0;
    for (int c = 0; c < CPU_SETSIZE && got < 2; c++) {
      if (!CPU_ISSET(c, &allowed)) continue;
      if (c == 0 && nallowed >= 3) continue;
      pin_cpu[got++] = c;
    }
  }
  pin_self(pin_cpu[0]);

  print_header(argc, argv, n, warm, cases, why);

  uint64_t *lat = malloc(n * sizeof *lat);
  SYSCHECK(lat != NULL, "malloc");
  signal(SIGPIPE, SIG_IGN); /* a dead socket child: an error, not a death */

  /* each raw case, and with -s its opd transport, in `blocks` alternating
   * blocks of n / blocks round trips: both see the same machine (a shared
   * host's speed drifts over seconds) */
  static const char *const opd_name[K_COUNT] = {"spin", "adaptive", "socket"};
  static const uint32_t opd_flag[K_COUNT] = {OPD_CONNECT_WAIT_SPIN,
                                             OPD_CONNECT_WAIT_ADAPTIVE,
                                             OPD_CONNECT_WAIT_SOCKET};
  if (sock == NULL) blocks = 1;
  if (blocks > n) blocks = n;
  size_t nb = n / blocks, nt = nb * blocks;
  size_t wb = blocks > 1 ? (warm / blocks > 1000 ? warm / blocks : 1000) : warm;
  uint64_t *run_lat = malloc(nt * sizeof *run_lat);
  uint64_t *prep_lat = malloc(nt * sizeof *prep_lat);
  SYSCHECK(run_lat != NULL && prep_lat != NULL, "malloc");
  int failed = 0;
  for (int k = 0; k < K_COUNT; k++) {
    if (!want[k]) continue;
    int opd_ok = sock != NULL && !(k == K_SPIN && nallowed < 2);
    int raw_ok = 1;
    for (size_t b = 0; b < blocks && (raw_ok || opd_ok); b++) {
      if (raw_ok && raw_block((kind_t)k, lat + b * nb, nb, wb, nallowed) != 0)
        raw_ok = 0, failed = 1;
      if (opd_ok && opd_block(sock, opd_name[k], opd_flag[k], run_lat + b * nb,
                              prep_lat + b * nb, nb, wb) != 0)
        opd_ok = 0, failed = 1;
    }
    uint64_t raw_p50 = raw_ok ? report_raw((kind_t)k, lat, nt) : 0;
    if (opd_ok) {
      report_opd(opd_name[k], "", raw_p50, run_lat, nt);
      report_opd(opd_name[k], " api=prepared", raw_p50, prep_lat, nt);
    }
  }
  free(run_lat);
  free(prep_lat);
  free(lat);
  return failed;
}
