/* The daemon's options: one table, from which come the command line
 * parser, the defaults, the range checks and --help.
 *
 * DESIGN
 * Each option is one row of OPD_OPTIONS (redis config.c's standardConfig
 * in miniature): its name, short letter, argument, how its value is
 * parsed and where it lands in opd_config_t, its range or default, and its
 * line of help. Numbers go through one checked parser (a value out of its
 * range is an error naming the option and the range); strings are copied
 * into fixed buffers (too long is an error); the few options with words
 * for values (--log-level, --spin) have a parser of their own. The same
 * table is what a config file will be read with (issue 14): a key is an
 * option's long name.
 */
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/paths.h"
#include "daemon/log.h"
#include "daemon/options.h"

typedef struct opt_row opt_row_t;
typedef int parse_fn(const opt_row_t *o, const char *val, opd_config_t *cfg);

struct opt_row {
  const char *name;              /* --name */
  int letter;                    /* -x, or 0 */
  const char *arg;               /* what the value is, for --help */
  parse_fn *parse;
  size_t off;                    /* where the value lands in opd_config_t */
  uint64_t lo, hi;               /* numbers: the range; strings: hi = size */
  uint64_t def;                  /* numbers: the default */
  int limit;                     /* listed under "Limits" in --help */
  const char *help;
};

/* ---- parsers ----------------------------------------------------------- */

static int number(const opt_row_t *o, const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || end == s || *end != '\0' || s[0] == '-' || v < o->lo ||
      v > o->hi) {
    fprintf(stderr, "opd: --%s expects a number from %llu to %llu, got "
            "\"%s\"\n", o->name, (unsigned long long)o->lo,
            (unsigned long long)o->hi, s);
    return -1;
  }
  *out = v;
  return 0;
}

#define FIELD(cfg, o, type) ((type *)((char *)(cfg) + (o)->off))

static int p_u32(const opt_row_t *o, const char *val, opd_config_t *cfg) {
  uint64_t v;
  if (number(o, val, &v)) return -1;
  *FIELD(cfg, o, uint32_t) = (uint32_t)v;
  return 0;
}

static int p_u64(const opt_row_t *o, const char *val, opd_config_t *cfg) {
  uint64_t v;
  if (number(o, val, &v)) return -1;
  *FIELD(cfg, o, uint64_t) = v;
  return 0;
}

static int p_int(const opt_row_t *o, const char *val, opd_config_t *cfg) {
  uint64_t v;
  if (number(o, val, &v)) return -1;
  *FIELD(cfg, o, int) = (int)v;
  return 0;
}

/* microseconds on the command line, nanoseconds in the config */
static int p_us(const opt_row_t *o, const char *val, opd_config_t *cfg) {
  uint64_t v;
  if (number(o, val, &v)) return -1;
  *FIELD(cfg, o, uint32_t) = (uint32_t)(v * 1000);
  return 0;
}

static int p_str(const opt_row_t *o, const char *val, opd_config_t *cfg) {
  if (strlen(val) >= o->hi) {
    fprintf(stderr, "opd: --%s is too long (at most %llu bytes)\n", o->name,
            (unsigned long long)o->hi - 1);
    return -1;
  }
  strcpy(FIELD(cfg, o, char), val);
  return 0;
}

static int p_log(const opt_row_t *o, const char *val, opd_config_t *cfg) {
  int level = opd__log_parse(val);
  if (level < 0) {
    fprintf(stderr, "opd: --%s expects error, warn, info or debug, got "
            "\"%s\"\n", o->name, val);
    return -1;
  }
  *FIELD(cfg, o, int) = level;
  return 0;
}

static int p_spin(const opt_row_t *o, const char *val, opd_config_t *cfg) {
  static const char *const words[] = {[OPD_SPIN_AUTO] = "auto",
                                      [OPD_SPIN_ALWAYS] = "always",
                                      [OPD_SPIN_NEVER] = "never"};
  for (int i = 0; i < 3; i++)
    if (strcmp(val, words[i]) == 0) {
      *FIELD(cfg, o, int) = i;
      return 0;
    }
  fprintf(stderr, "opd: --%s expects auto, always or never, got \"%s\"\n",
          o->name, val);
  return -1;
}

/* --plugin is repeatable: each value is appended (hi: the most). */
static int p_plugin(const opt_row_t *o, const char *val, opd_config_t *cfg) {
  if (cfg->n_plugins >= (int)o->hi) {
    fprintf(stderr, "opd: --%s given more than %llu times\n", o->name,
            (unsigned long long)o->hi);
    return -1;
  }
  if (val[0] == '\0') {
    fprintf(stderr, "opd: --%s expects a path, got \"\"\n", o->name);
    return -1;
  }
  cfg->plugins[cfg->n_plugins++] = val;
  return 0;
}

/* ---- the table --------------------------------------------------------- */

#define OFF(field) offsetof(opd_config_t, field)
#define LIM(field) offsetof(opd_config_t, limits.field)
#define NUM32(name, field, lo, hi, def, help) \
  {name, 0, "N", p_u32, LIM(field), lo, hi, def, 1, help},
#define NUM64(name, field, lo, hi, def, help) \
  {name, 0, "N", p_u64, LIM(field), lo, hi, def, 1, help},

static const opt_row_t rows[] = {
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
    {"spin", 0, "WHEN", p_spin, OFF(spin), 0, 0, OPD_SPIN_AUTO, 0,
     "grant spin rings (a busy core on each side): auto (default) while a "
     "quarter of the CPUs stays free for the kernels, else such clients get "
     "adaptive; always; never"},
    {"spin-window-us", 0, "US", p_us, OFF(spin_window_ns), 1, 1000000, 0, 0,
     "while a client spins, how long the loop serves rings between looks at "
     "sockets, timers and signals (default: 20 while a socket-only client is "
     "connected, else 200)"},
    {"loop-cpu", 0, "N", p_int, OFF(loop_cpu), 0, CPU_SETSIZE - 1, 0, 0,
     "pin the event loop thread to CPU N (kernel and completion threads stay "
     "unpinned)"},
    {"plugin", 0, "PATH", p_plugin, OFF(plugins), 0,
     sizeof(((opd_config_t *)0)->plugins) / sizeof(const char *), 0, 0,
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
};
#define N_ROWS ((int)(sizeof rows / sizeof rows[0]))
enum { O_VERSION = 'V', O_HELP = 'h', O_ROW0 = 256 };

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

static void usage(FILE *f) {
  fprintf(f,
          "usage: opd [options]\n\n"
          "The opd operator daemon: clients hand it tensors in shared memory\n"
          "and ask it to run operators (see `opctl ops`).\n\n");
  for (int limits = 0; limits < 2; limits++) {
    if (limits) fprintf(f, "\nLimits (per session, per uid, for the whole daemon):\n");
    for (int i = 0; i < N_ROWS; i++) {
      const opt_row_t *o = &rows[i];
      if (o->limit != limits) continue;
      char head[64];
      if (o->letter)
        snprintf(head, sizeof head, "  -%c, --%s %s", o->letter, o->name, o->arg);
      else
        snprintf(head, sizeof head, "      --%s %s", o->name, o->arg);
      char text[400];
      if (o->limit)
        snprintf(text, sizeof text, "%s (default %llu)", o->help,
                 (unsigned long long)o->def);
      else
        snprintf(text, sizeof text, "%s", o->help);
      int w = (int)strlen(head);
      if (w >= 30) {
        fprintf(f, "%s\n%*s", head, 30, "");
      } else {
        fprintf(f, "%-30s", head);
      }
      fold(f, text, 30, 30);
    }
  }
  fprintf(f, "\n%-30s%s\n%-30s%s\n", "  -V, --version",
          "print the version and exit", "  -h, --help", "print this help and exit");
}

/* ---- parsing --------------------------------------------------------------- */

void opd__options_defaults(opd_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  strcpy(cfg->devices, "all");
  cfg->loop_cpu = -1;
  for (int i = 0; i < N_ROWS; i++) {
    const opt_row_t *o = &rows[i];
    if (o->parse == p_u32 || o->parse == p_us)
      *FIELD(cfg, o, uint32_t) = (uint32_t)o->def;
    else if (o->parse == p_u64)
      *FIELD(cfg, o, uint64_t) = o->def;
    else if ((o->parse == p_int || o->parse == p_log || o->parse == p_spin) &&
             o->def != 0)
      *FIELD(cfg, o, int) = (int)o->def;
  }
}

int opd__options_parse(int argc, char **argv, opd_config_t *cfg) {
  struct option longs[N_ROWS + 3];
  char shorts[3 * N_ROWS + 8];
  size_t ns = 0;
  for (int i = 0; i < N_ROWS; i++) {
    longs[i] = (struct option){rows[i].name, required_argument, 0, O_ROW0 + i};
    if (rows[i].letter) {
      shorts[ns++] = (char)rows[i].letter;
      shorts[ns++] = ':';
    }
  }
  longs[N_ROWS] = (struct option){"version", no_argument, 0, O_VERSION};
  longs[N_ROWS + 1] = (struct option){"help", no_argument, 0, O_HELP};
  longs[N_ROWS + 2] = (struct option){0, 0, 0, 0};
  shorts[ns++] = 'V';
  shorts[ns++] = 'h';
  shorts[ns] = '\0';

  opd__options_defaults(cfg);
  int c;
  while ((c = getopt_long(argc, argv, shorts, longs, NULL)) != -1) {
    int row = -1;
    if (c >= O_ROW0 && c < O_ROW0 + N_ROWS) row = c - O_ROW0;
    for (int i = 0; row < 0 && i < N_ROWS; i++)
      if (rows[i].letter == c) row = i;
    if (row >= 0) {
      if (rows[row].parse(&rows[row], optarg, cfg) != 0) return 1;
      continue;
    }
    if (c == O_VERSION) {
      printf("opd %s (protocol %d)\n", OPD_VERSION, OPD_PROTOCOL_VERSION);
      return 2;
    }
    if (c == O_HELP) {
      usage(stdout);
      return 2;
    }
    usage(stderr);
    return 1;
  }
  if (optind < argc) {
    fprintf(stderr, "opd: unexpected argument \"%s\"\n", argv[optind]);
    usage(stderr);
    return 1;
  }
  if (opd__socket_path(cfg->socket_given[0] ? cfg->socket_given : NULL,
                       cfg->socket_path, sizeof cfg->socket_path)) {
    fprintf(stderr, "opd: socket path is too long\n");
    return 1;
  }
  return 0;
}
