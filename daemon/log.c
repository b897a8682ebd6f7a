/* Leveled logging to stderr, a log file or the journal; see log.h.
 *
 * DESIGN
 * Every line is one write to fd 2 (one fprintf on an unbuffered stderr),
 * so lines from pool threads never interleave mid-line. --log-file is
 * opened and dup2'ed onto fd 2, so everything written to stderr (libuv's
 * and CUDA's own messages included) lands there, and reopening it on
 * SIGHUP (after logrotate's mv) is one dup2 that no thread can see half
 * done. When fd 2 is the journal ($JOURNAL_STREAM names its device and
 * inode) a line starts with its syslog priority, <3> error to <7> debug,
 * which journald strips and records (journalctl -p err works), and the
 * timestamp is left to the journal. A call site that logs more than
 * BURST lines in WINDOW_S seconds is held back until the window ends; the
 * next line from it says how many were suppressed.
 */
#include "daemon/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int opd__log_level = OPD_LOG_INFO;
static int journal;              /* fd 2 is the journal's stream */

static const char *const names[] = {"error", "warn", "info", "debug"};
static const char prio[] = {'3', '4', '6', '7'}; /* syslog's err..debug */

int opd__log_parse(const char *name) {
  for (int i = 0; i < 4; i++)
    if (strcmp(name, names[i]) == 0) return i;
  return -1;
}

const char *opd__log_name(int level) {
  return names[level < 0 ? 0 : level > 3 ? 3 : level];
}

void opd__log_init(void) {
  const char *js = getenv("JOURNAL_STREAM");
  unsigned long long dev, ino;
  struct stat st;
  journal = js != NULL && sscanf(js, "%llu:%llu", &dev, &ino) == 2 &&
            fstat(2, &st) == 0 && (unsigned long long)st.st_dev == dev &&
            (unsigned long long)st.st_ino == ino;
}

int opd__log_open(const char *path, char *err, size_t cap) {
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY,
                0640);
  if (fd < 0) {
    snprintf(err, cap, "cannot open the log file %s: %s", path,
             strerror(errno));
    return -1;
  }
  fflush(stderr);
  int rc = dup2(fd, 2);
  int e = errno;
  close(fd);
  if (rc < 0) {
    snprintf(err, cap, "cannot log to %s: dup2: %s", path, strerror(e));
    return -1;
  }
  journal = 0;
  return 0;
}

/* ---- repeats --------------------------------------------------------------- */

#define BURST 20
#define WINDOW_S 10
#define SITES 256                /* call sites tracked at once */
#define PROBE 4                  /* slots a site may take */

static struct site {
  const char *file;              /* NULL: free */
  int line;
  time_t start;                  /* this window's first second */
  unsigned count;                /* lines in the window */
  unsigned dropped;              /* held back in it */
} sites[SITES];
static pthread_mutex_t sites_lock = PTHREAD_MUTEX_INITIALIZER;

/* Returns 1 to print (with *dropped lines held back before it), 0 not.
 * A site takes one of PROBE slots from its hash: its own, else a free or
 * expired one, else the oldest (whose count then starts again). */
static int admit(const char *file, int line, time_t now, unsigned *dropped) {
  uintptr_t h = ((uintptr_t)file >> 4) * 31u + (unsigned)line;
  struct site *s = NULL, *old = NULL;
  int ok = 1;
  *dropped = 0;
  pthread_mutex_lock(&sites_lock);
  for (int i = 0; i < PROBE && s == NULL; i++) {
    struct site *t = &sites[(h + (uintptr_t)i) % SITES];
    if (t->file == file && t->line == line) s = t;
    else if (old == NULL || t->file == NULL || t->start < old->start) old = t;
  }
  if (s == NULL) {
    s = old;
    *s = (struct site){file, line, now, 0, 0};
  } else if (now - s->start >= WINDOW_S) {
    *dropped = s->dropped;
    *s = (struct site){file, line, now, 0, 0};
  }
  if (++s->count > BURST) {
    s->dropped++;
    ok = 0;
  }
  pthread_mutex_unlock(&sites_lock);
  return ok;
}

void opd__log_write(int level, const char *file, int line, const char *fmt,
                    ...) {
  char msg[1024], ts[32], more[64] = "";
  struct timespec now;
  struct tm tm;
  va_list ap;
  unsigned dropped;

  clock_gettime(CLOCK_REALTIME, &now);
  if (!admit(file, line, now.tv_sec, &dropped)) return;
  if (dropped)
    snprintf(more, sizeof more, " (%u more like this suppressed)", dropped);
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  /* one fprintf: lines from pool threads never interleave mid-line */
  if (journal) {
    fprintf(stderr, "<%c>opd[%s] %s:%d: %s%s\n", prio[level < 0 ? 0 : level > 3 ? 3 : level],
            opd__log_name(level), base, line, msg, more);
    return;
  }
  gmtime_r(&now.tv_sec, &tm);
  strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  fprintf(stderr, "%s.%03ldZ opd[%s] %s:%d: %s%s\n", ts, now.tv_nsec / 1000000,
          opd__log_name(level), base, line, msg, more);
}

const char *opd__log_escape(const char *s, char *buf, size_t cap) {
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  if (cap == 0) return buf;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    int esc = *p < 0x20 || *p == 0x7f || *p == '\\' || *p == '"' ||
              *p >= 0x80; /* bytes past ASCII: no forged UTF-8 either */
    if (o + (esc ? 4 : 1) >= cap) break;
    if (!esc) {
      buf[o++] = (char)*p;
      continue;
    }
    buf[o++] = '\\';
    buf[o++] = 'x';
    buf[o++] = hex[*p >> 4];
    buf[o++] = hex[*p & 15];
  }
  buf[o] = '\0';
  return buf;
}
