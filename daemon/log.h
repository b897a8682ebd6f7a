/* Leveled logging to stderr.
 *
 * DESIGN
 * The level is checked before the arguments are evaluated (as redis'
 * serverLog does), so a debug line on a hot path costs one compare when
 * debug logging is off. Lines carry a UTC timestamp, the level and the
 * source location; stderr is what systemd's journal and SysV's redirect
 * both capture.
 */
#ifndef OPD_LOG_H
#define OPD_LOG_H

enum { OPD_LOG_ERROR = 0, OPD_LOG_WARN = 1, OPD_LOG_INFO = 2, OPD_LOG_DEBUG = 3 };

extern int opd__log_level; /* lines above this level are skipped */

void opd__log_write(int level, const char *file, int line, const char *fmt,
                    ...) __attribute__((format(printf, 4, 5)));

/* Parses "error|warn|info|debug"; returns the level or -1. */
int opd__log_parse(const char *name);

#define opd_log(level, ...)                                        \
  do {                                                             \
    if ((level) <= opd__log_level)                                 \
      opd__log_write((level), __FILE__, __LINE__, __VA_ARGS__);    \
  } while (0)

#define LOG_ERROR(...) opd_log(OPD_LOG_ERROR, __VA_ARGS__)
#define LOG_WARN(...) opd_log(OPD_LOG_WARN, __VA_ARGS__)
#define LOG_INFO(...) opd_log(OPD_LOG_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) opd_log(OPD_LOG_DEBUG, __VA_ARGS__)

#endif /* OPD_LOG_H */
