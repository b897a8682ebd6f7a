/* The CPU executor: a small pthread pool behind opd_exec_t.parallel_for.
 *
 * DESIGN
 * See exec.c. `opd__exec_serial` runs every range on
 * the calling thread; a pool from opd__exec_pool_create spreads ranges over
 * its workers and the calling thread, and may be shared by any number of
 * threads calling parallel_for at the same time.
 */
#ifndef OPD_KERNELS_EXEC_H
#define OPD_KERNELS_EXEC_H

#include "opd/op.h"

/* Runs everything on the calling thread (tests, small tensors). */
extern const opd_exec_t opd__exec_serial;

/* Starts a pool that runs parallel_for on up to `nthreads` threads: the
 * caller plus nthreads-1 workers (nthreads <= 1: no workers, everything
 * runs inline). Returns 0 and fills *ex, or OPD_ENOMEM / OPD_EINTERNAL with
 * *ex left zeroed and nothing started. */
int opd__exec_pool_create(opd_exec_t *ex, int nthreads);

/* A view of a pool whose parallel_for runs in the best-effort class: in
 * slices that yield to the latency class's work (exec.c, DESIGN). It
 * lives as long as the pool and needs no destroy. Returns 0, or
 * OPD_EINVAL when `pool` is not a pool (the serial executor). */
int opd__exec_pool_view(const opd_exec_t *pool, opd_exec_t *view);

/* Latency-class work begins (delta 1) or ends (-1) on any thread: while
 * some is in progress, best-effort slices of the pool wait (at most a
 * bound each) before they start. No-op on the serial executor. */
void opd__exec_urgent(const opd_exec_t *ex, int delta);

/* Stops and joins the workers and frees the pool; *ex is zeroed. No
 * parallel_for may be running on it. Safe on a zeroed *ex. */
void opd__exec_pool_destroy(opd_exec_t *ex);

#endif /* OPD_KERNELS_EXEC_H */
