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

#endif
