/* The one clock of daemon and client: CLOCK_MONOTONIC in ns and ms.
 *
 * DESIGN
 * Deadlines, spin windows and timings on both sides of the socket read
 * CLOCK_MONOTONIC (never the wall clock, which can jump). Inline: these
 * sit in spin loops (common/ring.c, the client's ring reader, the loop's
 * spin window), where a call per look would show; clock_gettime itself is
 * a vDSO call, no system call.
 */
#ifndef OPD_COMMON_CLOCK_H
#define OPD_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds of CLOCK_MONOTONIC. */
static inline uint64_t opd__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Milliseconds of CLOCK_MONOTONIC. */
static inline int64_t opd__now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Where the time of four steps in a row goes, summed over n runs of them:
 * per step the ns, the longest, how many took over 20 us (libopd's
 * OPD_STREAM_TRACE, the daemon's ordered-run lines at shutdown). */
typedef struct {
  uint64_t n, sum[4], max[4], slow[4];
} opd_steps_t;

/* Adds one run: t[0] its start, t[i + 1] the end of step i. */
static inline void opd__steps_add(opd_steps_t *s, const uint64_t t[5]) {
  s->n++;
  for (int i = 0; i < 4; i++) {
    uint64_t ns = t[i + 1] - t[i];
    s->sum[i] += ns;
    if (ns > s->max[i]) s->max[i] = ns;
    if (ns > 20000) s->slow[i]++;
  }
}

#endif
