/* Cheap timestamps for durations, and the histograms of the shutdown
 * reports. */
#include <stdint.h>

#include "common/clock.h"
#include "daemon/ticks.h"

/* Ticks: the kernel time of a run (two reads per run, on the loop thread
 * for tiny ones) from the TSC when the CPU says it is invariant (constant
 * rate, running in every state: CPUID 0x80000007 EDX bit 8), scaled by a
 * 2 ms calibration against CLOCK_MONOTONIC at start; a TSC read costs a
 * few ns where a clock_gettime costs 20-50. Without one, ticks are ns. */
static double ns_per_tick; /* 0: ticks are CLOCK_MONOTONIC ns */

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

void opd__ticks_init(void) {
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u) return;
  __get_cpuid(0x80000007u, &a, &b, &c, &d);
  if (!(d & (1u << 8))) return;
  uint64_t n0 = opd__now_ns(), t0 = __rdtsc(), n1;
  while ((n1 = opd__now_ns()) - n0 < 2000000) {
  }
  uint64_t t1 = __rdtsc();
  if (t1 > t0) ns_per_tick = (double)(n1 - n0) / (double)(t1 - t0);
#endif
}

uint64_t opd__ticks(void) {
#if defined(__x86_64__)
  if (ns_per_tick > 0) return __rdtsc();
#endif
  return opd__now_ns();
}

uint64_t opd__ticks_ns(uint64_t ticks) {
  return ns_per_tick > 0 ? (uint64_t)((double)ticks * ns_per_tick) : ticks;
}

double opd__hist_pct(const uint32_t *h, int buckets, uint64_t n, double q,
                     double width) {
  uint64_t seen = 0;
  for (int i = 0; i < buckets; i++)
    if ((double)(seen += h[i]) >= q * (double)n) return (i + 0.5) * width;
  return buckets * width;
}

