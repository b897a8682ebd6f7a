/* Leveled logging to stderr; see log.h. */
#include "daemon/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

int opd__log_level = OPD_LOG_INFO;

static const char *const names[] = {"error", "warn", "info", "debug"};

int opd__log_parse(const char *name) {
  for (int i = 0; i < 4; i++)
    if (strcmp(name, names[i]) == 0) return i;
  return -1;
}

void opd__log_write(int level, const char *file, int line, const char *fmt,
                    ...) {
  char msg[1024], ts[32];
  struct timespec now;
  struct tm tm;
  va_list ap;

  clock_gettime(CLOCK_REALTIME, &now);
  gmtime_r(&now.tv_sec, &tm);
  strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *base = strrchr(file, '/');
  /* one fprintf: lines from pool threads never interleave mid-line */
  fprintf(stderr, "%s.%03ldZ opd[%s] %s:%d: %s\n", ts, now.tv_nsec / 1000000,
          names[level < 0 ? 0 : level > 3 ? 3 : level], base ? base + 1 : file,
          line, msg);
}
