/* The daemon's options table (daemon/options.c): its rows, defaults,
 * --help and the effective configuration. The command line is read by
 * daemon/optparse.c, the config file by daemon/conffile.c. */
#ifndef OPD_OPTIONS_H
#define OPD_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "daemon/config.h"

#ifndef OPD_CONFIG_DEFAULT
#define OPD_CONFIG_DEFAULT "/etc/opd/opd.conf" /* read when it exists */
#endif

/* One option: how its value is parsed and where it lands. */
typedef struct opd_opt_row opd_opt_row_t;
/* Stores val into cfg, or returns -1 with what was wrong in err
 * ("expects ..., got ..."); the caller names where the value came from
 * (--name, or file:line: name). */
typedef int opd_opt_parse_fn(const opd_opt_row_t *o, const char *val,
                             opd_config_t *cfg, char *err, size_t cap);
struct opd_opt_row {
  const char *name;              /* --name */
  int letter;                    /* -x, or 0 */
  const char *arg;               /* what the value is, for --help */
  opd_opt_parse_fn *parse;
  size_t off;                    /* where the value lands in opd_config_t */
  uint64_t lo, hi;               /* numbers: the range; strings: hi = size */
  uint64_t def;                  /* numbers: the default */
  int group;                     /* --help: 0 general, 1 limits, 2 service */
  const char *help;
};

#define OPD_OPT_ROWS_MAX 96      /* rows the table may have */
extern const opd_opt_row_t opd__opt_rows[];
extern const int opd__opt_n_rows;
/* The row of the option with this long name, or NULL. */
const opd_opt_row_t *opd__opt_find(const char *name);

/* Fills cfg with every option's default. */
void opd__options_defaults(opd_config_t *cfg);
/* Writes cfg as a config file that gives it (every key, resolved). */
void opd__options_print(FILE *f, const opd_config_t *cfg);
/* Writes --help. */
void opd__options_usage(FILE *f);
/* Splits "ADDR:PORT" ("[v6]:port", "localhost:port"); 0 or -1. */
int opd__addr_split(const char *s, char *host, size_t cap, int *port);

#endif /* OPD_OPTIONS_H */
