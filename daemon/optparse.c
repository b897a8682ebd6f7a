/* The command line and the configuration's builds: at start, and again
 * on SIGHUP.
 *
 * DESIGN
 * The configuration is always built the same way: defaults, then the
 * config file (daemon/conffile.c), then the command line's values, kept
 * from the start, so the command line wins. A value that does not parse
 * is an error naming where it came from (--name, or file:line: key), and
 * a configuration with any error is never used. Errors go to stderr
 * before the loop runs, to the log after (a SIGHUP's reload).
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/paths.h"
#include "daemon/access.h"
#include "daemon/conffile.h"
#include "daemon/log.h"
#include "daemon/options.h"
#include "daemon/optparse.h"
#include "opd/protocol.h" /* OPD_VERSION, OPD_PROTOCOL_VERSION */

enum { O_VERSION = 'V', O_HELP = 'h', O_CONFIG = 'c', O_CHECK = 1000,
       O_ROW0 = 256 };

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

/* The command line's values, kept for every later build of the
 * configuration (SIGHUP) since they win over the file. */
typedef struct { const opd_opt_row_t *row; const char *val; } given_t;
static given_t *given;
static int n_given;

/* defaults, then the file, then the command line; the socket resolved */
static int build(const char *file, opd_config_t *cfg) {
  opd__options_defaults(cfg);
  if (file[0] != '\0') {
    snprintf(cfg->svc.config, sizeof cfg->svc.config, "%s", file);
    if (opd__conffile_load(file, cfg, report) != 0) return -1;
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
  struct option longs[OPD_OPT_ROWS_MAX + 5];
  char shorts[3 * OPD_OPT_ROWS_MAX + 8];
  size_t ns = 0;
  for (int i = 0; i < opd__opt_n_rows; i++) {
    longs[i] = (struct option){opd__opt_rows[i].name, required_argument, 0, O_ROW0 + i};
    if (opd__opt_rows[i].letter) {
      shorts[ns++] = (char)opd__opt_rows[i].letter;
      shorts[ns++] = ':';
    }
  }
  longs[opd__opt_n_rows] = (struct option){"version", no_argument, 0, O_VERSION};
  longs[opd__opt_n_rows + 1] = (struct option){"help", no_argument, 0, O_HELP};
  longs[opd__opt_n_rows + 2] = (struct option){"config", required_argument, 0, O_CONFIG};
  longs[opd__opt_n_rows + 3] = (struct option){"check-config", no_argument, 0, O_CHECK};
  longs[opd__opt_n_rows + 4] = (struct option){0, 0, 0, 0};
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
    const opd_opt_row_t *o = NULL;
    if (c >= O_ROW0 && c < O_ROW0 + opd__opt_n_rows) o = &opd__opt_rows[c - O_ROW0];
    for (int i = 0; o == NULL && i < opd__opt_n_rows; i++)
      if (opd__opt_rows[i].letter == c) o = &opd__opt_rows[i];
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
      opd__options_usage(stdout);
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
