/* The config file reader (daemon/conffile.c). */
#ifndef OPD_CONFFILE_H
#define OPD_CONFFILE_H

#include "daemon/config.h"

/* Where a reader's errors go (one line each, printf-style). */
typedef void opd_report_fn(const char *fmt, ...);

/* Reads `file` into cfg, each key set through its option's row. Returns
 * 0, or -1 after reporting every error through report (cfg then partly
 * filled). */
int opd__conffile_load(const char *file, opd_config_t *cfg,
                       opd_report_fn *report);

#endif /* OPD_CONFFILE_H */
