/* opd: the operator daemon's entry point (options, loop, exit status).
 *
 * DESIGN
 * opd runs in the foreground and logs to stderr, which is what systemd
 * (Type=simple/notify) and a SysV script with a pid file both want. It
 * exits 0 after a clean drain on SIGINT/SIGTERM, 1 when it cannot start
 * (bad option, socket in use), so an init system can tell the two apart.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/paths.h"
#include "daemon/log.h"
#include "daemon/server.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: opd [options]\n"
          "\n"
          "The opd operator daemon: clients hand it tensors in shared memory\n"
          "and ask it to run operators (see `opctl ops`).\n"
          "\n"
          "  -s, --socket PATH          listen here (default: $OPD_SOCKET, else\n"
          "                             /run/opd/opd.sock as root, else\n"
          "                             $XDG_RUNTIME_DIR/opd.sock)\n"
          "  -t, --threads N            kernel threads (default: all CPUs)\n"
          "  -d, --devices LIST         CUDA devices to use: all (default), none\n"
          "                             (cpu backend only), or a list like 0,1\n"
          "  -l, --log-level LEVEL      error, warn, info (default) or debug\n"
          "      --max-frame BYTES      largest request frame (default %u)\n"
          "      --max-clients N        sessions at once (default 1024)\n"
          "      --max-arenas N         arenas per session (default 64)\n"
          "      --max-arena-bytes B    bytes of one arena (default 64 GiB)\n"
          "      --max-session-bytes B  bytes one session may map (default 256 GiB)\n"
          "      --max-inflight N       runs queued per session (default 1024)\n"
          "      --inline-bytes B       runs touching at most B bytes execute on\n"
          "                             the event loop (default 16384)\n"
          "      --spin-window-us US    while a client spins, how long the loop\n"
          "                             serves rings between looks at sockets,\n"
          "                             timers and signals (default: 20 while a\n"
          "                             socket-only client is connected, else\n"
          "                             200)\n"
          "      --loop-cpu N           pin the event loop thread to CPU N\n"
          "                             (kernel and completion threads stay\n"
          "                             unpinned)\n"
          "  -V, --version              print the version and exit\n"
          "  -h, --help                 print this help and exit\n",
          OPD_MAX_FRAME_DEFAULT);
}

static int parse_u64(const char *opt, const char *s, uint64_t lo, uint64_t hi,
                     uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || end == s || *end != '\0' || s[0] == '-' || v < lo || v > hi) {
    fprintf(stderr, "opd: %s expects a number from %llu to %llu, got \"%s\"\n",
            opt, (unsigned long long)lo, (unsigned long long)hi, s);
    return -1;
  }
  *out = v;
  return 0;
}

static void noop_work(uv_work_t *w) { (void)w; }
static void noop_after(uv_work_t *w, int status) { (void)w, (void)status; }

/* --loop-cpu: pins this (the loop) thread. Threads inherit their
 * creator's affinity and libuv starts its pool on first use, so the pool
 * is started first, unpinned (the kernel pool and the CUDA threads exist
 * already). */
static int pin_loop(uv_loop_t *loop, int cpu) {
  static uv_work_t w;
  uv_queue_work(loop, &w, noop_work, noop_after);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  if (rc != 0) {
    LOG_ERROR("--loop-cpu %d: %s", cpu, strerror(rc));
    return -1;
  }
  LOG_INFO("event loop pinned to CPU %d", cpu);
  return 0;
}

int main(int argc, char **argv) {
  enum { O_FRAME = 256, O_CLIENTS, O_ARENAS, O_ARENA_BYTES, O_SESSION_BYTES,
         O_INFLIGHT, O_INLINE, O_WINDOW, O_LOOP_CPU };
  static const struct option opts[] = {
      {"socket", required_argument, 0, 's'},
      {"threads", required_argument, 0, 't'},
      {"devices", required_argument, 0, 'd'},
      {"log-level", required_argument, 0, 'l'},
      {"max-frame", required_argument, 0, O_FRAME},
      {"max-clients", required_argument, 0, O_CLIENTS},
      {"max-arenas", required_argument, 0, O_ARENAS},
      {"max-arena-bytes", required_argument, 0, O_ARENA_BYTES},
      {"max-session-bytes", required_argument, 0, O_SESSION_BYTES},
      {"max-inflight", required_argument, 0, O_INFLIGHT},
      {"inline-bytes", required_argument, 0, O_INLINE},
      {"spin-window-us", required_argument, 0, O_WINDOW},
      {"loop-cpu", required_argument, 0, O_LOOP_CPU},
      {"version", no_argument, 0, 'V'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  opd_config_t cfg = {
      .devices = "all",
      .threads = 0,
      .log_level = OPD_LOG_INFO,
      .loop_cpu = -1,
      .spin_window_ns = 0, /* auto: 20 us with socket clients, else 200 */
      .limits = {.max_frame = OPD_MAX_FRAME_DEFAULT,
                 .max_arenas = 64,
                 .max_arena_bytes = 64ull << 30,
                 .max_session_bytes = 256ull << 30,
                 .max_inflight = 1024,
                 .max_clients = 1024,
                 .max_wbuf = 4u << 20,
                 .inline_bytes = 16384}};
  const char *socket_opt = NULL;
  uint64_t v;
  int c;

  while ((c = getopt_long(argc, argv, "s:t:d:l:Vh", opts, NULL)) != -1) {
    switch (c) {
      case 'd':
        if (strlen(optarg) >= sizeof cfg.devices) {
          fprintf(stderr, "opd: --devices is too long\n");
          return 1;
        }
        strcpy(cfg.devices, optarg);
        break;
      case 's': socket_opt = optarg; break;
      case 't':
        if (parse_u64("--threads", optarg, 1, 1024, &v)) return 1;
        cfg.threads = (int)v;
        break;
      case 'l':
        if ((cfg.log_level = opd__log_parse(optarg)) < 0) {
          fprintf(stderr, "opd: --log-level expects error, warn, info or "
                          "debug, got \"%s\"\n", optarg);
          return 1;
        }
        break;
      case O_FRAME:
        if (parse_u64("--max-frame", optarg, 4096, 64u << 20, &v)) return 1;
        cfg.limits.max_frame = (uint32_t)v;
        break;
      case O_CLIENTS:
        if (parse_u64("--max-clients", optarg, 1, 1u << 20, &v)) return 1;
        cfg.limits.max_clients = (uint32_t)v;
        break;
      case O_ARENAS:
        if (parse_u64("--max-arenas", optarg, 1, 1u << 16, &v)) return 1;
        cfg.limits.max_arenas = (uint32_t)v;
        break;
      case O_ARENA_BYTES:
        if (parse_u64("--max-arena-bytes", optarg, 1, UINT64_MAX, &v)) return 1;
        cfg.limits.max_arena_bytes = v;
        break;
      case O_SESSION_BYTES:
        if (parse_u64("--max-session-bytes", optarg, 1, UINT64_MAX, &v))
          return 1;
        cfg.limits.max_session_bytes = v;
        break;
      case O_INFLIGHT:
        if (parse_u64("--max-inflight", optarg, 1, 1u << 20, &v)) return 1;
        cfg.limits.max_inflight = (uint32_t)v;
        break;
      case O_INLINE:
        if (parse_u64("--inline-bytes", optarg, 0, 1u << 30, &v)) return 1;
        cfg.limits.inline_bytes = (uint32_t)v;
        break;
      case O_WINDOW:
        if (parse_u64("--spin-window-us", optarg, 1, 1000000, &v)) return 1;
        cfg.spin_window_ns = (uint32_t)v * 1000;
        break;
      case O_LOOP_CPU:
        if (parse_u64("--loop-cpu", optarg, 0, CPU_SETSIZE - 1, &v)) return 1;
        cfg.loop_cpu = (int)v;
        break;
      case 'V': printf("opd %s (protocol %d)\n", OPD_VERSION,
                       OPD_PROTOCOL_VERSION);
        return 0;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 1;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "opd: unexpected argument \"%s\"\n", argv[optind]);
    usage(stderr);
    return 1;
  }
  if (opd__socket_path(socket_opt, cfg.socket_path, sizeof cfg.socket_path)) {
    fprintf(stderr, "opd: socket path is too long\n");
    return 1;
  }
  opd__log_level = cfg.log_level;
  signal(SIGPIPE, SIG_IGN);
  /* libuv's pool runs the sessions' ops: at least as many as kernel
   * threads, so that concurrent clients' ops really run concurrently */
  if (getenv("UV_THREADPOOL_SIZE") == NULL) {
    char n[24];
    long cpus = cfg.threads ? cfg.threads : sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(n, sizeof n, "%ld", cpus > 4 ? cpus : 4);
    setenv("UV_THREADPOOL_SIZE", n, 1);
  }

  uv_loop_t *loop = uv_default_loop();
  static opd_server_t srv;
  if (opd__server_init(&srv, loop, &cfg) != 0) {
    LOG_ERROR("could not start; exiting");
    opd__server_free(&srv);
    return 1;
  }
  if (cfg.loop_cpu >= 0 && pin_loop(loop, cfg.loop_cpu) != 0) {
    opd__server_free(&srv);
    return 1;
  }
  uv_run(loop, UV_RUN_DEFAULT);
  opd__server_free(&srv);
  /* EBUSY: the signal handles stay open until exit (see server.c) */
  (void)uv_loop_close(loop);
  LOG_INFO("stopped (exit status %d)", srv.exit_code);
  return srv.exit_code;
}
