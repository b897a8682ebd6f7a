/* Unit: the kernel pool's classes of service (kernels/runtime/exec.c) — a
 * best-effort call through the pool's view covers its range exactly once
 * in slices (on a pool of one thread and of several), a latency call
 * queued while best-effort work runs is served first on a one-worker
 * pool, and best-effort work still finishes while latency work is in
 * progress (the yield is bounded). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/runtime/exec.h"

typedef struct {
  _Atomic int *hits;              /* one per index */
  _Atomic int slices;             /* calls of the range function */
} cover_t;

static void cover(void *arg, int64_t b, int64_t e) {
  cover_t *c = arg;
  c->slices++;
  for (int64_t i = b; i < e; i++) c->hits[i]++;
}

static void check_cover(int nthreads) {
  opd_exec_t ex, be;
  cr_assert_eq(opd__exec_pool_create(&ex, nthreads), 0);
  cr_assert_eq(opd__exec_pool_view(&ex, &be), 0);
  enum { N = 100003 };
  cover_t c = {calloc(N, sizeof(_Atomic int)), 0};
  be.parallel_for(&be, N, 16, cover, &c);
  for (int i = 0; i < N; i++) cr_assert_eq(c.hits[i], 1, "index %d", i);
  cr_assert_gt(c.slices, 4 * nthreads, "best-effort work is sliced finer "
               "than the latency class's 4 chunks per thread (%d)", c.slices);
  memset(c.hits, 0, N * sizeof(_Atomic int));
  c.slices = 0;
  ex.parallel_for(&ex, N, 16, cover, &c); /* the latency class as before */
  for (int i = 0; i < N; i++) cr_assert_eq(c.hits[i], 1, "index %d", i);
  free((void *)c.hits);
  opd__exec_pool_destroy(&ex);
}

Test(exec_classes, best_effort_covers_the_range_once_in_slices) {
  check_cover(1);
  check_cover(3);
}

Test(exec_classes, the_serial_executor_has_no_view) {
  opd_exec_t v;
  cr_assert_eq(opd__exec_pool_view(&opd__exec_serial, &v), OPD_EINVAL);
  opd__exec_urgent(&opd__exec_serial, 1); /* a no-op */
}

/* ---- ordering on a pool of one worker --------------------------------- */

typedef struct {
  opd_exec_t *ex;
  _Atomic int order;              /* completions so far */
  _Atomic int be_started;         /* a best-effort slice ran */
  int lat_at, be_at;              /* when each finished (order) */
} race_t;

static void slow_slice(void *arg, int64_t b, int64_t e) {
  race_t *r = arg;
  r->be_started = 1;
  (void)b, (void)e;
  usleep(2000); /* a 2 ms slice */
}

static void quick(void *arg, int64_t b, int64_t e) { (void)arg, (void)b, (void)e; }

static void *be_caller(void *arg) {
  race_t *r = arg;
  opd_exec_t be;
  opd__exec_pool_view(r->ex, &be);
  be.parallel_for(&be, 64, 1, slow_slice, r); /* 64 slices, ~130 ms */
  r->be_at = ++r->order;
  return NULL;
}

Test(exec_classes, latency_work_is_served_between_best_effort_slices) {
  opd_exec_t ex;
  cr_assert_eq(opd__exec_pool_create(&ex, 2), 0); /* the caller + 1 worker */
  race_t r = {&ex, 0, 0, 0, 0};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, be_caller, &r), 0);
  while (!r.be_started) usleep(100);
  /* a latency call of 8 chunks behind the best-effort one's 60-odd */
  opd__exec_urgent(&ex, 1);
  ex.parallel_for(&ex, 8, 1, quick, &r);
  opd__exec_urgent(&ex, -1);
  r.lat_at = ++r.order;
  pthread_join(t, NULL);
  cr_assert_eq(r.lat_at, 1, "the latency call finished before the "
               "best-effort one queued ahead of it");
  cr_assert_eq(r.be_at, 2);
  opd__exec_pool_destroy(&ex);
}

Test(exec_classes, best_effort_progresses_under_endless_latency_work) {
  opd_exec_t ex, be;
  cr_assert_eq(opd__exec_pool_create(&ex, 2), 0);
  cr_assert_eq(opd__exec_pool_view(&ex, &be), 0);
  opd__exec_urgent(&ex, 1); /* never ends during the call */
  enum { N = 4096 };
  cover_t c = {calloc(N, sizeof(_Atomic int)), 0};
  be.parallel_for(&be, N, 1, cover, &c); /* each slice waits <= 1 ms */
  for (int i = 0; i < N; i++) cr_assert_eq(c.hits[i], 1, "index %d", i);
  opd__exec_urgent(&ex, -1);
  free((void *)c.hits);
  opd__exec_pool_destroy(&ex);
}
