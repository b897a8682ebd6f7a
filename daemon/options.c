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
 * table reads the config file (libinih; opd.conf(5)): a key is an
 * option's long name. The configuration is always built the same way,
 * at start and on SIGHUP: defaults, then the file, then the command line
 * (kept from the start), so the command line wins. A value that does not
 * parse is an error naming where it came from (--name, or file:line: key),
 * every bad line of a file is reported, and a configuration with any
 * error is never used.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/paths.h"
#include "daemon/access.h"
#include "daemon/log.h"
#include "daemon/options.h"

typedef struct opt_row opt_row_t;
typedef int parse_fn(const opt_row_t *o, const char *val, opd_config_t *cfg,
                     char *err, size_t cap);

struct opt_row {
  const char *name;              /* --name */
  int letter;                    /* -x, or 0 */
  const char *arg;               /* what the value is, for --help */
  parse_fn *parse;
  size_t off;                    /* where the value lands in opd_config_t */
  uint64_t lo, hi;               /* numbers: the range; strings: hi = size */
  uint64_t def;                  /* numbers: the default */
  int group;                     /* --help: 0 general, 1 limits, 2 service */
  const char *help;
};

/* ---- parsers ----------------------------------------------------------- */

/* Each parser stores val into cfg, or returns -1 with what was wrong in
 * err ("expects ..., got ..."); the caller names where the value came
 * from (--name, or file:line: name). */
static int number(const opt_row_t *o, const char *s, uint64_t *out, char *err,
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
  static int fn(const opt_row_t *o, const char *val, opd_config_t *cfg, \
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
#define N_ROWS ((int)(sizeof rows / sizeof rows[0]))
enum { O_VERSION = 'V', O_HELP = 'h', O_CONFIG = 'c', O_CHECK = 1000,
       O_ROW0 = 256 };

static __attribute__((unused)) const opt_row_t *find_row(const char *name) {
  for (int i = 0; i < N_ROWS; i++)
    if (strcmp(rows[i].name, name) == 0) return &rows[i];
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

static void usage(FILE *f) {
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
      const opt_row_t *o = &rows[i];
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

/* One row as a config file line; unset optional values as a comment. */
static void print_row(FILE *f, const opt_row_t *o, const opd_config_t *cfg) {
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
  for (int i = 0; i < N_ROWS; i++) print_row(f, &rows[i], cfg);
}

/* ---- errors: stderr before the loop runs, the log after (SIGHUP) --------- */

static int report_to_log;

static void __attribute__((format(printf, 1, 2))) report(const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (report_to_log) LOG_ERROR("%s", msg);
  else fprintf(stderr, "opd: %s\n", msg);
}

/* ---- the config file (libinih) -------------------------------------------- */

/* The command line's values, kept for every later build of the
 * configuration (SIGHUP) since they win over the file. */
typedef struct { const opt_row_t *row; const char *val; } given_t;
static given_t *given;
static int n_given;

#ifdef OPD_HAVE_INIH
#include <ini.h>

typedef struct {
  opd_config_t *cfg;
  const char *file;
  FILE *f;
  int line;                      /* the line inih handles now */
  int errors;
  int last_err_line;             /* the last line we reported */
} ini_ctx_t;

/* inih's reader: fgets counting lines (its handler gets no line number),
 * and a line too long for inih's buffer reported rather than cut */
static char *ini_read(char *str, int num, void *stream) {
  ini_ctx_t *x = stream;
  if (fgets(str, num, x->f) == NULL) return NULL;
  x->line++;
  size_t n = strlen(str);
  if (n == (size_t)num - 1 && str[n - 1] != '\n' && !feof(x->f)) {
    int c;
    while ((c = fgetc(x->f)) != EOF && c != '\n') {
    }
    report("%s:%d: line longer than %d bytes", x->file, x->line, num - 2);
    x->errors++;
    x->last_err_line = x->line;
    strcpy(str, "\n");
    return str;
  }
  /* what inih would call a syntax error, reported here with its line so
   * that every one is (inih returns only the first error's line) */
  const char *p = str + strspn(str, " \t\r\n");
  if (*p && *p != '#' && *p != ';' && *p != '[' && strpbrk(p, "=:") == NULL) {
    report("%s:%d: not \"key = value\", a [section], a comment (# or ;) "
           "or blank: %.*s", x->file, x->line, (int)strcspn(p, "\r\n"), p);
    x->errors++;
    x->last_err_line = x->line;
    strcpy(str, "\n");
  }
  return str;
}

static int ini_entry(void *user, const char *section, const char *name,
                     const char *value) {
  ini_ctx_t *x = user;
  char err[512], val[512];
  const opt_row_t *o = find_row(name);
  if (section[0] != '\0') {
    report("%s:%d: %s: keys go before any [section] (opd.conf has none; "
           "this one is in [%s])", x->file, x->line, name, section);
    goto bad;
  }
  if (o == NULL) {
    if (strcmp(name, "config") == 0 || strcmp(name, "check-config") == 0)
      report("%s:%d: %s: only on the command line", x->file, x->line, name);
    else
      report("%s:%d: unknown key \"%s\" (the keys are opd's long options: "
             "see opd --help)", x->file, x->line, name);
    goto bad;
  }
  /* "value" in double quotes: the quotes go */
  size_t n = strlen(value);
  if (n >= 2 && value[0] == '"' && value[n - 1] == '"') {
    snprintf(val, sizeof val, "%.*s", (int)(n - 2), value + 1);
    value = val;
  }
  if (o->parse(o, value, x->cfg, err, sizeof err) != 0) {
    report("%s:%d: %s %s", x->file, x->line, name, err);
    goto bad;
  }
  return 1;
bad:
  x->errors++;
  x->last_err_line = x->line;
  return 0;
}

/* Reads `file` into cfg. Returns 0, or -1 after reporting every error. */
static int load_file(const char *file, opd_config_t *cfg) {
  ini_ctx_t x = {.cfg = cfg, .file = file};
  x.f = fopen(file, "re");
  if (x.f == NULL) {
    report("cannot read the config file %s: %s", file, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fileno(x.f), &st) != 0 || !S_ISREG(st.st_mode)) {
    report("the config file %s is %s, not a file", file,
           S_ISDIR(st.st_mode) ? "a directory" : "something else");
    fclose(x.f);
    return -1;
  }
  int rc = ini_parse_stream(ini_read, &x, ini_entry, &x);
  fclose(x.f);
  if (rc > 0 && rc != x.last_err_line && x.errors == 0) {
    report("%s:%d: not \"key = value\", a comment (# or ;) or blank", file, rc);
    x.errors++;
  } else if (rc > 0 && x.errors == 0) {
    x.errors++;
  }
  return x.errors ? -1 : 0;
}
#else
static int load_file(const char *file, opd_config_t *cfg) {
  (void)cfg;
  report("cannot read the config file %s: opd was built without libinih "
         "(install libinih-dev and rebuild)", file);
  return -1;
}
#endif

/* defaults, then the file, then the command line; the socket resolved */
static int build(const char *file, opd_config_t *cfg) {
  opd__options_defaults(cfg);
  if (file[0] != '\0') {
    snprintf(cfg->svc.config, sizeof cfg->svc.config, "%s", file);
    if (load_file(file, cfg) != 0) return -1;
  }
  char err[512];
  for (int i = 0; i < n_given; i++)
    if (given[i].row->parse(given[i].row, given[i].val, cfg, err, sizeof err)) {
      report("--%s %s", given[i].row->name, err); /* checked at start */
      return -1;
    }
  if (opd__socket_path(cfg->socket_given[0] ? cfg->socket_given : NULL,
                       cfg->socket_path, sizeof cfg->socket_path)) {
    report("socket path is too long");
    return -1;
  }
  return 0;
}

/* The allow-lists name users and groups that exist (--check-config; the
 * daemon resolves them itself at start and on SIGHUP). */
static int check_lists(const opd_config_t *cfg) {
  int bad = 0;
  for (int groups = 0; groups < 2; groups++) {
    char copy[512];
    snprintf(copy, sizeof copy, "%s", groups ? cfg->allow_groups : cfg->allow_users);
    for (char *save = NULL, *t = strtok_r(copy, ", \t", &save); t;
         t = strtok_r(NULL, ", \t", &save)) {
      uid_t u;
      gid_t g;
      if ((groups ? opd__gid_parse(t, &g) : opd__uid_parse(t, &u)) != 0) {
        report("allow-%s: no %s is named \"%s\"", groups ? "groups" : "users",
               groups ? "group" : "user", t);
        bad = 1;
      }
    }
  }
  return bad ? -1 : 0;
}

static char config_file[256]; /* what every build reads ("" : none) */

int opd__options_parse(int argc, char **argv, opd_config_t *cfg) {
  struct option longs[N_ROWS + 5];
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
  longs[N_ROWS + 2] = (struct option){"config", required_argument, 0, O_CONFIG};
  longs[N_ROWS + 3] = (struct option){"check-config", no_argument, 0, O_CHECK};
  longs[N_ROWS + 4] = (struct option){0, 0, 0, 0};
  memcpy(shorts + ns, "Vhc:", 5);

  free(given);
  given = calloc((size_t)argc + 1, sizeof *given);
  n_given = 0;
  if (given == NULL) {
    report("out of memory");
    return 1;
  }
  const char *file = NULL;
  int check = 0;
  char err[512];
  opd__options_defaults(cfg); /* scratch: each value is checked as given */
  int c;
  opterr = 0; /* our own message, then a pointer to --help */
  while ((c = getopt_long(argc, argv, shorts, longs, NULL)) != -1) {
    const opt_row_t *o = NULL;
    if (c >= O_ROW0 && c < O_ROW0 + N_ROWS) o = &rows[c - O_ROW0];
    for (int i = 0; o == NULL && i < N_ROWS; i++)
      if (rows[i].letter == c) o = &rows[i];
    if (o != NULL) {
      if (o->parse(o, optarg, cfg, err, sizeof err) != 0) {
        report("--%s %s", o->name, err);
        return 1;
      }
      given[n_given++] = (given_t){o, optarg};
    } else if (c == O_CONFIG) {
      file = optarg;
    } else if (c == O_CHECK) {
      check = 1;
    } else if (c == O_VERSION) {
      printf("opd %s (protocol %d)\n", OPD_VERSION, OPD_PROTOCOL_VERSION);
      return 2;
    } else if (c == O_HELP) {
      usage(stdout);
      return 2;
    } else {
      const char *arg = argv[optind - 1];
      if (optopt && optopt < 256)
        report("-%c %s (see opd --help)", optopt,
               strchr(shorts, optopt) ? "needs a value" : "is not an option");
      else if (optopt >= O_ROW0 || optopt == O_CONFIG)
        report("%s needs a value (see opd --help)", arg);
      else
        report("%s is not an option (see opd --help)", arg);
      return 1;
    }
  }
  if (optind < argc) {
    report("unexpected argument \"%s\" (see opd --help)", argv[optind]);
    return 1;
  }
  if (file == NULL) file = access(OPD_CONFIG_DEFAULT, F_OK) == 0
                               ? OPD_CONFIG_DEFAULT : "";
  if (strlen(file) >= sizeof config_file) {
    report("--config: the path is too long");
    return 1;
  }
  /* absolute: SIGHUP reads the same file whatever the cwd is then */
  char *abs = file[0] ? realpath(file, NULL) : NULL;
  snprintf(config_file, sizeof config_file, "%s",
           abs && strlen(abs) < sizeof config_file ? abs : file);
  free(abs);
  if (build(config_file, cfg) != 0) return 1;
  if (check) {
    if (check_lists(cfg) != 0) return 1;
    opd__options_print(stdout, cfg);
    return 2;
  }
  return 0;
}

int opd__options_reload(opd_config_t *cfg) {
  report_to_log = 1;
  int rc = build(config_file, cfg);
  report_to_log = 0;
  return rc;
}
