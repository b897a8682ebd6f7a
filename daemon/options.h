/* The daemon's options table (daemon/options.c): command line, defaults,
 * range checks, --help. */
#ifndef OPD_OPTIONS_H
#define OPD_OPTIONS_H

#include "daemon/server.h"

/* Fills cfg with every option's default. */
void opd__options_defaults(opd_config_t *cfg);
/* Parses argv into cfg (defaults first) and resolves the socket path.
 * Returns 0 to run, 1 after an error it printed (exit status 1), 2 after
 * --help or --version (exit status 0). */
int opd__options_parse(int argc, char **argv, opd_config_t *cfg);

#endif /* OPD_OPTIONS_H */
