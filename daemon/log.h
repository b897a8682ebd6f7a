/* Leveled logging to stderr, a log file (--log-file) or the journal.
 *
 * DESIGN
 * The level is checked before the arguments are evaluated (as redis'
 * serverLog does), so a debug line on a hot path costs one compare when
 * debug logging is off. Lines carry a UTC timestamp, the level and the
 * source location; stderr is what systemd's journal and SysV's redirect
 * both capture. Under the journal each line carries its syslog priority
 * (<3> to <7>) instead of a timestamp; a call site repeating itself is
 * rate-limited (daemon/log.c).
 */
#ifndef OPD_LOG_H
#define OPD_LOG_H

#include <stddef.h>

enum { OPD_LOG_ERROR = 0, OPD_LOG_WARN = 1, OPD_LOG_INFO = 2, OPD_LOG_DEBUG = 3 };

extern int opd__log_level; /* lines above this level are skipped */

void opd__log_write(int level, const char *file, int line, const char *fmt,
                    ...) __attribute__((format(printf, 4, 5)));

/* Parses "error|warn|info|debug"; returns the level or -1. */
int opd__log_parse(const char *name);
/* The level's name ("error" .. "debug"). */
const char *opd__log_name(int level);
/* Looks whether fd 2 is the journal ($JOURNAL_STREAM): then lines carry
 * syslog priority prefixes. Call once at start. */
void opd__log_init(void);
/* Sends fd 2 (stderr) to `path`, appended, created 0640. Returns 0, or -1
 * with the reason in err and fd 2 left as it was. */
int opd__log_open(const char *path, char *err, size_t cap);

/* Client-supplied text for a log line: writes at most cap-1 bytes of s
 * into buf with bytes < 0x20, 0x7f, '\\', '"' and bytes past ASCII
 * escaped as \xNN, and returns buf. */
const char *opd__log_escape(const char *s, char *buf, size_t cap);

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
