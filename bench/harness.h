/* The benchmarks' shared harness: clock, nearest-rank percentiles, the
 * machine line, exact socket I/O and count options (style item 14: one
 * harness, many benchmarks). Header-only: each benchmark is one .c file.
 */
#ifndef OPD_BENCH_HARNESS_H
#define OPD_BENCH_HARNESS_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

/* Exits with errno's words when a system call fails; each benchmark
 * defines BENCH_NAME before including this header. */
#define SYSCHECK(cond, what)                                               \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "%s: %s:%d: %s: %s\n", BENCH_NAME, __FILE__, __LINE__, \
              what, strerror(errno));                                      \
      exit(1);                                                             \
    }                                                                      \
  } while (0)

static inline uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted v[0..n): the smallest sample with at
 * least q of the samples at or below it. */
static inline uint64_t pct(const uint64_t *v, size_t n, double q) {
  size_t k = (size_t)(q * (double)n + 0.999999);
  if (k < 1) k = 1;
  if (k > n) k = n;
  return v[k - 1];
}

/* The "model name" of the first CPU in /proc/cpuinfo, or "unknown". */
static inline void cpu_model(char *buf, size_t cap) {
  snprintf(buf, cap, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f == NULL) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) != 0) continue;
    char *p = strchr(line, ':');
    if (p == NULL) continue;
    p++;
    while (*p == ' ' || *p == '\t') p++;
    p[strcspn(p, "\n")] = '\0';
    snprintf(buf, cap, "%s", p);
    break;
  }
  fclose(f);
}

/* The header lines every benchmark prints about where it ran:
 *   # date: <UTC>
 *   # machine: <host> <arch>; cpu: <model>; nproc: N; kernel: <release> */
static inline void print_machine(void) {
  char date[64], cpu[256];
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
  struct utsname u;
  SYSCHECK(uname(&u) == 0, "uname");
  cpu_model(cpu, sizeof cpu);
  printf("# date: %s\n", date);
  printf("# machine: %s %s; cpu: %s; nproc: %ld; kernel: %s\n", u.nodename,
         u.machine, cpu, sysconf(_SC_NPROCESSORS_ONLN), u.release);
}

/* Reads or writes exactly n bytes; 0, or -1 on EOF or error. */
static inline int xfer(int fd, unsigned char *buf, size_t n, int writing) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = writing ? write(fd, buf + done, n - done)
                        : read(fd, buf + done, n - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    done += (size_t)r;
  }
  return 0;
}

/* Parses a count option lo..1e8 or exits 2 naming the program and option. */
static inline size_t parse_count(const char *prog, const char *opt,
                                 const char *s, size_t lo) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || s[0] == '-' || v < lo || v > 100000000ull) {
    fprintf(stderr, "%s: %s expects a count from %zu to 1e8, got \"%s\"\n",
            prog, opt, lo, s);
    exit(2);
  }
  return (size_t)v;
}

#endif /* OPD_BENCH_HARNESS_H */
