/* The daemon's options: one table, from which come the parsers, the
 * defaults, the range checks, --help and the effective configuration.
 *
 * DESIGN
 * Each option is one row of the table (redis config.c's standardConfig
 * in miniature): its name, short letter, argument, how its value is
 * parsed and where it lands in opd_config_t, its range or default, and its
 * line of help. Numbers go through one checked parser (a value out of its
 * range is an error naming the option and the range); strings are copied
 * into fixed buffers (too long is an error); the few options with words
 * for values (--log-level, --spin) have a parser of their own. The
 * command line (daemon/optparse.c) and the config file
 * (daemon/conffile.c) both set values through the rows, so a key of the
 * file is an option's long name and every check is the same for both.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <sched.h> /* CPU_SETSIZE */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/log.h"
#include "daemon/options.h"
#include "opd/protocol.h" /* OPD_VERSION, OPD_MAX_FRAME_DEFAULT */

/* ---- parsers ----------------------------------------------------------- */

/* Each parser stores val into cfg, or returns -1 with what was wrong in
 * err ("expects ..., got ..."); the caller names where the value came
 * from (--name, or file:line: name). */
static int number(const opd_opt_row_t *o, const char *s, uint64_t *out, char *err,
                  size_t cap) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || end == s || *end != '\0' || s[0] == '-' || v < o->lo ||
      v > o->hi) {
    snprintf(err, cap, "expects a number from %llu to %llu, got \"%s\"",
             (unsigned long long)o->lo, (unsigned long long)o->hi, s);
    return -1;
  }
  *out = v;
  return 0;
}

#define FIELD(cfg, o, type) ((type *)((char *)(cfg) + (o)->off))
#define PARSER(fn) \
  static int fn(const opd_opt_row_t *o, const char *val, opd_config_t *cfg, \
                char *err, size_t cap)

PARSER(p_u32) {
  uint64_t v;
  if (number(o, val, &v, err, cap)) return -1;
  *FIELD(cfg, o, uint32_t) = (uint32_t)v;
  return 0;
}

PARSER(p_u64) {
  uint64_t v;
  if (number(o, val, &v, err, cap)) return -1;
  *FIELD(cfg, o, uint64_t) = v;
  return 0;
}

PARSER(p_int) {
  uint64_t v;
  if (number(o, val, &v, err, cap)) return -1;
  *FIELD(cfg, o, int) = (int)v;
  return 0;
}

/* microseconds on the command line, nanoseconds in the config */
PARSER(p_us) {
  uint64_t v;
  if (number(o, val, &v, err, cap)) return -1;
  *FIELD(cfg, o, uint32_t) = (uint32_t)(v * 1000);
  return 0;
}

PARSER(p_str) {
  if (strlen(val) >= o->hi) {
    snprintf(err, cap, "is too long (at most %llu bytes)",
             (unsigned long long)o->hi - 1);
    return -1;
  }
  strcpy(FIELD(cfg, o, char), val);
  return 0;
}

PARSER(p_log) {
  int level = opd__log_parse(val);
  if (level < 0) {
    snprintf(err, cap, "expects error, warn, info or debug, got \"%s\"", val);
    return -1;
  }
  *FIELD(cfg, o, int) = level;
  return 0;
}

static const char *const spin_words[] = {[OPD_SPIN_AUTO] = "auto",
                                         [OPD_SPIN_ALWAYS] = "always",
                                         [OPD_SPIN_NEVER] = "never"};

PARSER(p_spin) {
  for (int i = 0; i < 3; i++)
    if (strcmp(val, spin_words[i]) == 0) {
      *FIELD(cfg, o, int) = i;
      return 0;
    }
  snprintf(err, cap, "expects auto, always or never, got \"%s\"", val);
  return -1;
}

/* --plugin is repeatable: each value is appended (hi: the most), copied
 * (a config file's values do not outlive their line). */
PARSER(p_plugin) {
  if (cfg->n_plugins >= (int)o->hi) {
    snprintf(err, cap, "is given more than %llu times",
             (unsigned long long)o->hi);
    return -1;
  }
  if (val[0] == '\0') {
    snprintf(err, cap, "expects a path, got \"\"");
    return -1;
  }
  if (strlen(val) >= sizeof cfg->plugins[0]) {
    snprintf(err, cap, "is too long (at most %zu bytes)",
             sizeof cfg->plugins[0] - 1);
    return -1;
  }
  strcpy(cfg->plugins[cfg->n_plugins++], val);
  return 0;
}

/* ADDR:PORT, ADDR an IPv4 address, [IPv6] or localhost; "" turns it off */
PARSER(p_addr) {
  char host[64];
  int port;
  if (val[0] != '\0' && opd__addr_split(val, host, sizeof host, &port) != 0) {
    snprintf(err, cap, "expects ADDR:PORT (an IPv4 address, [IPv6] or "
             "localhost, and a port from 1 to 65535), got \"%s\"", val);
    return -1;
  }
  return p_str(o, val, cfg, err, cap);
}

int opd__addr_split(const char *s, char *host, size_t cap, int *port) {
  const char *colon = strrchr(s, ':');
  if (colon == NULL || colon == s) return -1;
  const char *h = s, *he = colon;
  if (*h == '[') {
    if (he[-1] != ']') return -1;
    h++, he--;
  }
  size_t n = (size_t)(he - h);
  if (n == 0 || n >= cap) return -1;
  memcpy(host, h, n);
  host[n] = '\0';
  char *end;
  errno = 0;
  long p = strtol(colon + 1, &end, 10);
  if (errno || end == colon + 1 || *end || p < 1 || p > 65535) return -1;
  struct in6_addr a6;
  struct in_addr a4;
  int v6 = s[0] == '[';
  if (!(v6 ? inet_pton(AF_INET6, host, &a6) == 1
           : strcmp(host, "localhost") == 0 || inet_pton(AF_INET, host, &a4) == 1))
    return -1;
  *port = (int)p;
  return 0;
}

/* ---- the table --------------------------------------------------------- */

#define OFF(field) offsetof(opd_config_t, field)
#define LIM(field) offsetof(opd_config_t, limits.field)
#define NUM32(name, field, lo, hi, def, help) \
  {name, 0, "N", p_u32, LIM(field), lo, hi, def, 1, help},
#define NUM64(name, field, lo, hi, def, help) \
  {name, 0, "N", p_u64, LIM(field), lo, hi, def, 1, help},

const opd_opt_row_t opd__opt_rows[] = {
    {"socket", 's', "PATH", p_str, OFF(socket_given), 0,
     sizeof(((opd_config_t *)0)->socket_given), 0, 0,
     "listen here (default: $OPD_SOCKET, else /run/opd/opd.sock as root, "
     "else $XDG_RUNTIME_DIR/opd.sock)"},
    {"threads", 't', "N", p_int, OFF(threads), 1, 1024, 0, 0,
     "kernel threads (default: all CPUs)"},
    {"devices", 'd', "LIST", p_str, OFF(devices), 0,
     sizeof(((opd_config_t *)0)->devices), 0, 0,
     "CUDA devices to use: all (default), none (cpu backend only), or a "
     "list like 0,1"},
    {"log-level", 'l', "LEVEL", p_log, OFF(log_level), 0, 0, OPD_LOG_INFO, 0,
     "error, warn, info (default) or debug"},
    {"allow-users", 0, "LIST", p_str, OFF(allow_users), 0,
     sizeof(((opd_config_t *)0)->allow_users), 0, 0,
     "only these users (names or uids, commas) may connect (default: anyone "
     "the socket's mode lets in); root and opd's own user always may"},
    {"allow-groups", 0, "LIST", p_str, OFF(allow_groups), 0,
     sizeof(((opd_config_t *)0)->allow_groups), 0, 0,
     "... or members of these groups"},
    {"latency-users", 0, "LIST", p_str, OFF(latency_users), 0,
     sizeof(((opd_config_t *)0)->latency_users), 0, 0,
     "these users (names or uids, commas) may ask for the latency class "
     "(default: none); root and opd's own user always may"},
    {"latency-groups", 0, "LIST", p_str, OFF(latency_groups), 0,
     sizeof(((opd_config_t *)0)->latency_groups), 0, 0,
     "... or members of these groups"},
    {"spin", 0, "WHEN", p_spin, OFF(spin), 0, 0, OPD_SPIN_AUTO, 0,
     "grant spin rings (a busy core on each side): auto (default) while a "
     "quarter of the CPUs stays free for the kernels, else such clients get "
     "adaptive; always; never"},
    {"spin-window-us", 0, "US", p_us, OFF(spin_window_ns), 1, 1000000, 0, 0,
     "while a client spins, how long the loop serves rings between looks at "
     "sockets, timers and signals (default: 20 while a socket-only client is "
     "connected, else 200)"},
    {"linger-us", 0, "US", p_us, OFF(linger_ns), 0, 1000000, 1000000, 0,
     "after an asynchronous GPU run of an adaptive client, how long the loop "
     "keeps serving the rings by spinning, for its next run (default 1000; "
     "0: off; only while a quarter of the CPUs stays free, not with --spin "
     "never)"},
    {"loop-cpu", 0, "N", p_int, OFF(loop_cpu), 0, CPU_SETSIZE - 1, 0, 0,
     "pin the event loop thread to CPU N (kernel and completion threads stay "
     "unpinned)"},
    {"plugin", 0, "PATH", p_plugin, OFF(plugins), 0,
     sizeof(((opd_config_t *)0)->plugins) /
         sizeof(((opd_config_t *)0)->plugins[0]), 0, 0,
     "load the operator plugin at PATH (a .so built against opd/op.h; "
     "repeatable); the daemon does not start if it is refused"},
    {"plugin-dir", 0, "DIR", p_str, OFF(plugin_dir), 0,
     sizeof(((opd_config_t *)0)->plugin_dir), 0, 0,
     "load every *.so in DIR as a plugin, in name order (before the "
     "--plugin files)"},
    NUM32("max-frame", max_frame, 4096, 64u << 20, OPD_MAX_FRAME_DEFAULT,
          "largest request frame, bytes")
    NUM32("max-clients", max_clients, 1, 1u << 20, 1024, "sessions at once")
    NUM32("max-uid-clients", max_uid_clients, 1, 1u << 20, 256,
          "sessions of one uid at once")
    NUM32("reserved-clients", reserved_clients, 0, 1024, 8,
          "sessions past those limits kept for root and opd's own user")
    NUM32("max-arenas", max_arenas, 1, 1u << 16, 64, "arenas per session")
    NUM32("max-uid-arenas", max_uid_arenas, 1, 1u << 20, 4096,
          "arenas of one uid")
    NUM32("max-total-arenas", max_total_arenas, 1, 1u << 20, 16384,
          "arenas of the daemon (each is a mapping: keep it well under "
          "vm.max_map_count)")
    NUM64("max-arena-bytes", max_arena_bytes, 1, UINT64_MAX, 64ull << 30,
          "bytes of one arena")
    NUM64("max-session-bytes", max_session_bytes, 1, UINT64_MAX, 256ull << 30,
          "bytes one session may map")
    NUM64("max-uid-bytes", max_uid_bytes, 1, UINT64_MAX, 1ull << 40,
          "bytes one uid's sessions may map")
    NUM64("max-total-bytes", max_total_bytes, 1, UINT64_MAX, 4ull << 40,
          "bytes the daemon maps for all clients")
    NUM32("max-inflight", max_inflight, 1, 1u << 20, 1024,
          "runs queued or running per session")
    NUM32("max-async", max_async, 1, 1u << 16, 256,
          "runs a session has enqueued on a GPU that have not completed "
          "(answered at enqueue: OPD_RUN_F_ASYNC); past it the next waits")
    NUM32("device-be-inflight", dev_be_inflight, 0, 4096, 4,
          "while a latency-class client is connected, best-effort runs in "
          "flight on each GPU at most (a session: half of them), so that a "
          "latency run never queues behind a flood of them (0: no bound; "
          "docs/scheduling.md)")
    NUM32("word-ahead", word_ahead, 0, 1u << 16, 0,
          "a run that waits on the GPU for its client's stream (WORD) is "
          "submitted only while fewer than this many of the session's "
          "enqueued runs are incomplete (0: off, only max-async applies)")
    NUM32("stream-wait-ms", stream_wait_ms, 1, 86400000, 60000,
          "an enqueued run waits on the GPU at most this long for its "
          "client's stream to reach it (the client's word), then runs and "
          "fails with ETIMEDOUT; a client may ask for less (STREAM)")
    NUM32("max-uid-inflight", max_uid_inflight, 1, 1u << 24, 16384,
          "runs queued or running for one uid")
    NUM32("max-total-inflight", max_total_inflight, 1, 1u << 24, 65536,
          "runs queued or running in the daemon")
    NUM32("max-names", max_names, 1, 1u << 20, 4096,
          "published names in the daemon")
    NUM32("max-session-names", max_session_names, 1, 1u << 20, 256,
          "names one session may publish")
    NUM32("max-uid-names", max_uid_names, 1, 1u << 20, 1024,
          "names one uid may publish")
    NUM32("max-reply-bytes", max_wbuf, 4096, 1u << 30, 4u << 20,
          "unread reply bytes of a session before it stops being read")
    NUM32("handshake-timeout-ms", handshake_ms, 1, 3600000, 10000,
          "a connection that has not said hello by then is closed")
    NUM32("frame-timeout-ms", frame_ms, 1, 3600000, 10000,
          "a frame begun and not finished by then closes its connection")
    NUM32("inline-bytes", inline_bytes, 0, 1u << 30, 16384,
          "runs touching at most this many bytes execute on the event loop")
    NUM32("inline-us", inline_us, 0, 1000000, 20,
          "so do larger runs (up to 16 MiB) of one-pass CPU ops (those that "
          "may write over their input: relu, add, softmax, ...) whose "
          "kernel, measured on earlier runs of the same shapes and "
          "attributes, takes at most this (0: off)")
    NUM32("graph-inline-us", graph_inline_us, 0, 1000000, 100,
          "a CPU graph run whose nodes took at most this (a moving mean "
          "of its earlier runs) executes on the event loop: a model's one "
          "request without a thread hand-off (0: graphs go by "
          "--inline-bytes only)")
    NUM32("idle-inline-us", idle_inline_us, 0, 1000000, 500,
          "while the kernel threads are idle and no latency-class client "
          "is connected, a CPU run or graph whose earlier runs took at "
          "most this (on all kernel threads) executes on the event loop "
          "with the kernel threads helping: no thread hand-off, at the "
          "cost of other clients' requests waiting that long (0: off)")
    {"pid-file", 0, "PATH", p_str, OFF(svc.pid_file), 0,
     sizeof(((opd_config_t *)0)->svc.pid_file), 0, 2,
     "write the daemon's pid here once it serves; removed at exit"},
    {"log-file", 0, "PATH", p_str, OFF(svc.log_file), 0,
     sizeof(((opd_config_t *)0)->svc.log_file), 0, 2,
     "log here (appended; reopened on SIGHUP, for logrotate) instead of "
     "stderr"},
    {"drain-timeout-ms", 0, "MS", p_u32, OFF(svc.drain_ms), 1, 3600000, 10000,
     2, "after SIGTERM, sessions still open by then are dropped and the "
     "process exits, even with runs unfinished"},
    {"metrics-listen", 0, "ADDR:PORT", p_addr, OFF(svc.metrics_listen), 0,
     sizeof(((opd_config_t *)0)->svc.metrics_listen), 0, 2,
     "serve Prometheus metrics over HTTP there, e.g. 127.0.0.1:9464 (default: "
     "off)"},
};
#define N_ROWS ((int)(sizeof opd__opt_rows / sizeof opd__opt_rows[0]))
const int opd__opt_n_rows = N_ROWS;
_Static_assert(N_ROWS <= OPD_OPT_ROWS_MAX, "OPD_OPT_ROWS_MAX too small");

const opd_opt_row_t *opd__opt_find(const char *name) {
  for (int i = 0; i < N_ROWS; i++)
    if (strcmp(opd__opt_rows[i].name, name) == 0) return &opd__opt_rows[i];
  return NULL;
}

/* ---- help ---------------------------------------------------------------- */

/* Writes text folded at 78 columns, every line after the first indented
 * by `indent` (the first starts at column `col`). */
static void fold(FILE *f, const char *text, int col, int indent) {
  while (*text) {
    int room = 78 - col, n = (int)strlen(text);
    if (n > room) {
      n = room;
      while (n > 0 && text[n] != ' ') n--;
      if (n == 0) n = room;
    }
    fprintf(f, "%.*s\n", n, text);
    text += n;
    while (*text == ' ') text++;
    if (*text) fprintf(f, "%*s", indent, "");
    col = indent;
  }
}

static void help_line(FILE *f, const char *head, const char *text) {
  if ((int)strlen(head) >= 30) fprintf(f, "%s\n%*s", head, 30, "");
  else fprintf(f, "%-30s", head);
  fold(f, text, 30, 30);
}

void opd__options_usage(FILE *f) {
  static const char *const titles[] = {
      "", "\nLimits (per session, per uid, for the whole daemon):\n",
      "\nService:\n"};
  fprintf(f,
          "usage: opd [options]\n\n"
          "The opd operator daemon: clients hand it tensors in shared memory\n"
          "and ask it to run operators (see `opctl ops`). Every option can\n"
          "also be set in the config file (key = value, the key being the\n"
          "long option's name; opd.conf(5)); the command line wins.\n\n");
  for (int group = 0; group < 3; group++) {
    fputs(titles[group], f);
    for (int i = 0; i < N_ROWS; i++) {
      const opd_opt_row_t *o = &opd__opt_rows[i];
      if (o->group != group) continue;
      char head[64];
      if (o->letter)
        snprintf(head, sizeof head, "  -%c, --%s %s", o->letter, o->name, o->arg);
      else
        snprintf(head, sizeof head, "      --%s %s", o->name, o->arg);
      char text[400];
      if (o->group && o->parse == p_u32)
        snprintf(text, sizeof text, "%s (default %llu)", o->help,
                 (unsigned long long)o->def);
      else
        snprintf(text, sizeof text, "%s", o->help);
      help_line(f, head, text);
    }
  }
  help_line(f, "  -c, --config PATH",
            "read options from this file (default: " OPD_CONFIG_DEFAULT
            " when it exists); SIGHUP reads it again");
  help_line(f, "      --check-config",
            "check the config file and options, print the effective "
            "configuration (a valid config file) and exit: 0 if valid");
  fprintf(f, "\n");
  help_line(f, "  -V, --version", "print the version and exit");
  help_line(f, "  -h, --help", "print this help and exit");
}

/* ---- the effective configuration ------------------------------------------ */

void opd__options_defaults(opd_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  strcpy(cfg->devices, "all");
  cfg->loop_cpu = -1;
  for (int i = 0; i < N_ROWS; i++) {
    const opd_opt_row_t *o = &opd__opt_rows[i];
    if (o->parse == p_u32 || o->parse == p_us)
      *FIELD(cfg, o, uint32_t) = (uint32_t)o->def;
    else if (o->parse == p_u64)
      *FIELD(cfg, o, uint64_t) = o->def;
    else if ((o->parse == p_int || o->parse == p_log || o->parse == p_spin) &&
             o->def != 0)
      *FIELD(cfg, o, int) = (int)o->def;
  }
}

/* One row as a config file line; unset optional values as a comment. */
static void print_row(FILE *f, const opd_opt_row_t *o, const opd_config_t *cfg) {
  if ((o->parse == p_u32 || o->parse == p_us) &&
      *FIELD(cfg, o, const uint32_t) < o->lo)
    fprintf(f, "# %s: not set\n", o->name); /* 0: chosen at run time */
  else if (o->parse == p_u32)
    fprintf(f, "%s = %u\n", o->name, *FIELD(cfg, o, const uint32_t));
  else if (o->parse == p_us)
    fprintf(f, "%s = %u\n", o->name, *FIELD(cfg, o, const uint32_t) / 1000);
  else if (o->parse == p_u64)
    fprintf(f, "%s = %llu\n", o->name,
            (unsigned long long)*FIELD(cfg, o, const uint64_t));
  else if (o->parse == p_log)
    fprintf(f, "%s = %s\n", o->name, opd__log_name(*FIELD(cfg, o, const int)));
  else if (o->parse == p_spin)
    fprintf(f, "%s = %s\n", o->name, spin_words[*FIELD(cfg, o, const int)]);
  else if (o->parse == p_plugin) {
    if (cfg->n_plugins == 0) fprintf(f, "# %s: not set\n", o->name);
    for (int i = 0; i < cfg->n_plugins; i++) /* repeatable: a line each */
      fprintf(f, "%s = %s\n", o->name, cfg->plugins[i]);
  } else if (o->parse == p_int) {
    int v = *FIELD(cfg, o, const int);
    if ((uint64_t)v < o->lo || v < 0) fprintf(f, "# %s: not set\n", o->name);
    else fprintf(f, "%s = %d\n", o->name, v);
  } else {
    const char *v = FIELD(cfg, o, const char);
    if (o->off == OFF(socket_given)) v = cfg->socket_path; /* as resolved */
    if (v[0] == '\0') fprintf(f, "# %s: not set\n", o->name);
    else fprintf(f, "%s = %s\n", o->name, v);
  }
}

void opd__options_print(FILE *f, const opd_config_t *cfg) {
  fprintf(f, "# opd %s: the effective configuration (%s%s)\n", OPD_VERSION,
          cfg->svc.config[0] ? "config file " : "no config file",
          cfg->svc.config);
  for (int i = 0; i < N_ROWS; i++) print_row(f, &opd__opt_rows[i], cfg);
}

