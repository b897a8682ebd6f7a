/* Cheap timestamps for durations, and the histograms of the shutdown
 * reports (daemon/ticks.c). */
#ifndef OPD_TICKS_H
#define OPD_TICKS_H

#include <stdint.h>

/* Ticks: opd__ticks_ns(t1 - t0) is the time between two opd__ticks()
 * reads; opd__ticks_init calibrates them once at start. */
void opd__ticks_init(void);
uint64_t opd__ticks(void);
uint64_t opd__ticks_ns(uint64_t ticks);

/* Histograms of `buckets` buckets `width` wide, the last one taking the
 * rest (the shutdown reports): add a value; the q-quantile of n values,
 * as its bucket's middle. */
static inline void opd__hist_add(uint32_t *h, int buckets, uint64_t v,
                                 uint64_t width) {
  uint64_t b = v / width;
  h[b < (uint64_t)buckets ? b : (uint64_t)buckets - 1]++;
}
double opd__hist_pct(const uint32_t *h, int buckets, uint64_t n, double q,
                     double width);

#endif /* OPD_TICKS_H */
