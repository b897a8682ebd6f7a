/* The command line and the configuration's builds (daemon/optparse.c). */
#ifndef OPD_OPTPARSE_H
#define OPD_OPTPARSE_H

#include "daemon/config.h"

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

#endif /* OPD_OPTPARSE_H */
