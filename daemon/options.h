/* The daemon's options table (daemon/options.c): command line, config
 * file, defaults, range checks, --help, --check-config. */
#ifndef OPD_OPTIONS_H
#define OPD_OPTIONS_H

#include <stdio.h>

#include "daemon/config.h"

#ifndef OPD_CONFIG_DEFAULT
#define OPD_CONFIG_DEFAULT "/etc/opd/opd.conf" /* read when it exists */
#endif

/* Fills cfg with every option's default. */
void opd__options_defaults(opd_config_t *cfg);
/* Parses argv, then builds cfg: defaults, the config file (--config, else
 * OPD_CONFIG_DEFAULT when it exists), then argv's values; resolves the
 * socket path. Returns 0 to run, 1 after an error it printed to stderr
 * (exit status 1), 2 after --help, --version or a --check-config that
 * printed the configuration (exit status 0). */
int opd__options_parse(int argc, char **argv, opd_config_t *cfg);
/* Builds cfg anew as opd__options_parse did (the same file, re-read, and
 * the same command line). Returns 0, or -1 after logging every error
 * (LOG_ERROR); cfg is then partly filled and must not be used. */
int opd__options_reload(opd_config_t *cfg);
/* Writes cfg as a config file that gives it (every key, resolved). */
void opd__options_print(FILE *f, const opd_config_t *cfg);
/* Splits "ADDR:PORT" ("[v6]:port", "localhost:port"); 0 or -1. */
int opd__addr_split(const char *s, char *host, size_t cap, int *port);

#endif /* OPD_OPTIONS_H */
