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

/* The numeric limits: one row each, yielding the option, its range, its
 * default and its line of --help (docs/operations.md, "Limits", lists the
 * same). X(option, field, type, lo, hi, default, help) */
#define U32 uint32_t
#define U64 uint64_t
#define OPD_LIMIT_OPTIONS(X)                                                  \
  X("max-frame", max_frame, U32, 4096, 64u << 20, OPD_MAX_FRAME_DEFAULT,     \
    "largest request frame, bytes")                                         \
  X("max-clients", max_clients, U32, 1, 1u << 20, 1024,                     \
    "sessions at once")                                                     \
  X("max-uid-clients", max_uid_clients, U32, 1, 1u << 20, 256,              \
    "sessions of one uid at once")                                          \
  X("reserved-clients", reserved_clients, U32, 0, 1024, 8,                  \
    "sessions past those limits kept for root and opd's own user")          \
  X("max-arenas", max_arenas, U32, 1, 1u << 16, 64, "arenas per session")   \
  X("max-uid-arenas", max_uid_arenas, U32, 1, 1u << 20, 4096,               \
    "arenas of one uid")                                                    \
  X("max-total-arenas", max_total_arenas, U32, 1, 1u << 20, 16384,          \
    "arenas of the daemon (each is a mapping: keep it well under "          \
    "vm.max_map_count)")                                                    \
  X("max-arena-bytes", max_arena_bytes, U64, 1, UINT64_MAX, 64ull << 30,    \
    "bytes of one arena")                                                   \
  X("max-session-bytes", max_session_bytes, U64, 1, UINT64_MAX,             \
    256ull << 30, "bytes one session may map")                              \
  X("max-uid-bytes", max_uid_bytes, U64, 1, UINT64_MAX, 1ull << 40,         \
    "bytes one uid's sessions may map")                                     \
  X("max-total-bytes", max_total_bytes, U64, 1, UINT64_MAX, 4ull << 40,     \
    "bytes the daemon maps for all clients")                                \
  X("max-inflight", max_inflight, U32, 1, 1u << 20, 1024,                   \
    "runs queued or running per session")                                   \
  X("max-uid-inflight", max_uid_inflight, U32, 1, 1u << 24, 16384,          \
    "runs queued or running for one uid")                                   \
  X("max-total-inflight", max_total_inflight, U32, 1, 1u << 24, 65536,      \
    "runs queued or running in the daemon")                                 \
  X("max-names", max_names, U32, 1, 1u << 20, 4096,                         \
    "published names in the daemon")                                        \
  X("max-session-names", max_session_names, U32, 1, 1u << 20, 256,          \
    "names one session may publish")                                        \
  X("max-uid-names", max_uid_names, U32, 1, 1u << 20, 1024,                 \
    "names one uid may publish")                                            \
  X("max-reply-bytes", max_wbuf, U32, 4096, 1u << 30, 4u << 20,             \
    "unread reply bytes of a session before it stops being read")           \
  X("handshake-timeout-ms", handshake_ms, U32, 1, 3600000, 10000,           \
    "a connection that has not said hello by then is closed")               \
  X("frame-timeout-ms", frame_ms, U32, 1, 3600000, 10000,                   \
    "a frame begun and not finished by then closes its connection")         \
  X("inline-bytes", inline_bytes, U32, 0, 1u << 30, 16384,                  \
    "runs touching at most this many bytes execute on the event loop")

enum {
  O_FIRST_ = 256,
#define X(opt, field, type, lo, hi, def, help) O_##field,
  OPD_LIMIT_OPTIONS(X)
#undef X
  O_WINDOW,
  O_LOOP_CPU,
  O_ALLOW_USERS,
  O_ALLOW_GROUPS,
  O_SPIN,
};

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
          "      --allow-users LIST     only these users (names or uids, commas)\n"
          "                             may connect (default: anyone the socket's\n"
          "                             mode lets in); root and opd's own user\n"
          "                             always may\n"
          "      --allow-groups LIST    ... or members of these groups\n"
          "      --spin-window-us US    while a client spins, how long the loop\n"
          "                             serves rings between looks at sockets,\n"
          "                             timers and signals (default: 20 while a\n"
          "                             socket-only client is connected, else\n"
          "                             200)\n"
          "      --spin auto|always|never  grant spin rings (a busy core on\n"
          "                             each side): auto (default) while a\n"
          "                             quarter of the CPUs stays free for the\n"
          "                             kernels, else such clients get adaptive\n"
          "      --loop-cpu N           pin the event loop thread to CPU N\n"
          "                             (kernel and completion threads stay\n"
          "                             unpinned)\n"
          "  -V, --version              print the version and exit\n"
          "  -h, --help                 print this help and exit\n"
          "\n"
          "Limits (per session, per uid, for the whole daemon):\n");
#define X(opt, field, type, lo, hi, def, help)                         \
  fprintf(f, "      --%-26s %s (default %llu)\n", opt " N", help,      \
          (unsigned long long)(def));
  OPD_LIMIT_OPTIONS(X)
#undef X
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

static int copy_opt(const char *opt, const char *val, char *dst, size_t cap) {
  if (strlen(val) >= cap) {
    fprintf(stderr, "opd: %s is too long (at most %zu bytes)\n", opt, cap - 1);
    return -1;
  }
  strcpy(dst, val);
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
  static const struct option opts[] = {
      {"socket", required_argument, 0, 's'},
      {"threads", required_argument, 0, 't'},
      {"devices", required_argument, 0, 'd'},
      {"log-level", required_argument, 0, 'l'},
#define X(opt, field, type, lo, hi, def, help) \
  {opt, required_argument, 0, O_##field},
      OPD_LIMIT_OPTIONS(X)
#undef X
      {"spin-window-us", required_argument, 0, O_WINDOW},
      {"loop-cpu", required_argument, 0, O_LOOP_CPU},
      {"allow-users", required_argument, 0, O_ALLOW_USERS},
      {"allow-groups", required_argument, 0, O_ALLOW_GROUPS},
      {"spin", required_argument, 0, O_SPIN},
      {"version", no_argument, 0, 'V'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  opd_config_t cfg = {
      .devices = "all",
      .threads = 0,
      .log_level = OPD_LOG_INFO,
      .loop_cpu = -1,
      .spin_window_ns = 0, /* auto: 20 us with socket clients, else 200 */
      .limits = {
#define X(opt, field, type, lo, hi, def, help) .field = (type)(def),
          OPD_LIMIT_OPTIONS(X)
#undef X
      }};
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
#define X(opt, field, type, lo, hi, def, help)                       \
  case O_##field:                                                    \
    if (parse_u64("--" opt, optarg, lo, hi, &v)) return 1;           \
    cfg.limits.field = (type)v;                                      \
    break;
      OPD_LIMIT_OPTIONS(X)
#undef X
      case O_ALLOW_USERS:
        if (copy_opt("--allow-users", optarg, cfg.allow_users,
                     sizeof cfg.allow_users))
          return 1;
        break;
      case O_SPIN:
        if (strcmp(optarg, "auto") == 0) cfg.spin = OPD_SPIN_AUTO;
        else if (strcmp(optarg, "always") == 0) cfg.spin = OPD_SPIN_ALWAYS;
        else if (strcmp(optarg, "never") == 0) cfg.spin = OPD_SPIN_NEVER;
        else {
          fprintf(stderr, "opd: --spin expects auto, always or never, got "
                          "\"%s\"\n", optarg);
          return 1;
        }
        break;
      case O_ALLOW_GROUPS:
        if (copy_opt("--allow-groups", optarg, cfg.allow_groups,
                     sizeof cfg.allow_groups))
          return 1;
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
