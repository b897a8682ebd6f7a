/* The executor: serial, pooled, concurrent callers, inline small ranges. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "tests/ops/optest.h"

typedef struct cover {
  int64_t n;                       /* range length */
  atomic_int *hits;                /* per index */
  atomic_int calls;                /* fn calls */
  int64_t grain;                   /* expected minimum chunk */
  atomic_int small;                /* chunks shorter than grain */
  pthread_t caller;                /* the thread that called parallel_for */
  atomic_int foreign;              /* chunks run on other threads */
} cover_t;

static void mark(void *arg, int64_t b, int64_t e) {
  cover_t *c = arg;
  atomic_fetch_add(&c->calls, 1);
  if (e - b < c->grain && e - b < c->n) atomic_fetch_add(&c->small, 1);
  if (!pthread_equal(pthread_self(), c->caller))
    atomic_fetch_add(&c->foreign, 1);
  for (int64_t i = b; i < e; i++) atomic_fetch_add(&c->hits[i], 1);
}

static void check_cover(const opd_exec_t *ex, int64_t n, int64_t grain) {
  cover_t c = {.n = n, .grain = grain, .caller = pthread_self()};
  c.hits = calloc((size_t)n + 1, sizeof *c.hits);
  ex->parallel_for(ex, n, grain, mark, &c);
  for (int64_t i = 0; i < n; i++)
    cr_assert_eq(atomic_load(&c.hits[i]), 1, "n=%lld grain=%lld: index %lld "
                 "ran %d times", (long long)n, (long long)grain, (long long)i,
                 atomic_load(&c.hits[i]));
  cr_assert_eq(atomic_load(&c.small), 0, "a chunk was shorter than grain");
  if (n <= grain && n > 0) {
    cr_assert_eq(atomic_load(&c.calls), 1, "small range was split");
    cr_assert_eq(atomic_load(&c.foreign), 0, "small range left the caller");
  }
  free(c.hits);
}

Test(exec, serial_covers) {
  check_cover(&opd__exec_serial, 0, 1);
  check_cover(&opd__exec_serial, 1000, 7);
}

Test(exec, pool_covers) {
  for (int t = 1; t <= 4; t++) {
    opd_exec_t ex;
    cr_assert_eq(opd__exec_pool_create(&ex, t), 0);
    cr_assert_eq(ex.nthreads, t);
    int64_t ns[] = {0, 1, 5, 16, 17, 1000, 100003};
    int64_t gs[] = {1, 3, 16, 1000, 1 << 20};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
      for (size_t g = 0; g < sizeof gs / sizeof gs[0]; g++)
        check_cover(&ex, ns[i], gs[g]);
    opd__exec_pool_destroy(&ex);
    cr_assert_null(ex.impl);
  }
}

static void slow_mark(void *arg, int64_t b, int64_t e) {
  volatile double x = 0;
  for (int i = 0; i < 200000; i++) x += i; /* ~0.2 ms */
  mark(arg, b, e);
}

Test(exec, pool_uses_workers) {
  const opd_exec_t *ex = ot_pool(4);
  /* chunks that take a while so the workers get some */
  int foreign = 0;
  for (int rep = 0; rep < 20 && !foreign; rep++) {
    cover_t c = {.n = 64, .grain = 1, .caller = pthread_self()};
    c.hits = calloc(65, sizeof *c.hits);
    ex->parallel_for(ex, 64, 1, slow_mark, &c);
    foreign = atomic_load(&c.foreign);
    free(c.hits);
  }
  cr_assert(foreign > 0, "no chunk ran on a worker");
}

typedef struct hammer {
  const opd_exec_t *ex;            /* shared pool */
  int seed;                        /* varies n */
  int ok;                          /* all covers right */
} hammer_t;

static void *hammer(void *arg) {
  hammer_t *h = arg;
  h->ok = 1;
  for (int it = 0; it < 200; it++) {
    int64_t n = 1 + (it * 7919 + h->seed * 104729) % 5000;
    cover_t c = {.n = n, .grain = 16, .caller = pthread_self()};
    c.hits = calloc((size_t)n, sizeof *c.hits);
    h->ex->parallel_for(h->ex, n, 16, mark, &c);
    for (int64_t i = 0; i < n; i++)
      if (atomic_load(&c.hits[i]) != 1) h->ok = 0;
    free(c.hits);
  }
  return NULL;
}

Test(exec, concurrent_callers) {
  const opd_exec_t *ex = ot_pool(3);
  pthread_t th[6];
  hammer_t h[6];
  for (int i = 0; i < 6; i++) {
    h[i] = (hammer_t){ex, i, 0};
    pthread_create(&th[i], NULL, hammer, &h[i]);
  }
  for (int i = 0; i < 6; i++) {
    pthread_join(th[i], NULL);
    cr_assert(h[i].ok, "caller %d saw a wrong cover", i);
  }
}

static void nested(void *arg, int64_t b, int64_t e) {
  cover_t *outer = arg;
  for (int64_t i = b; i < e; i++) {
    cover_t c = {.n = 100, .grain = 10, .caller = pthread_self()};
    c.hits = calloc(100, sizeof *c.hits);
    ot_pool(2)->parallel_for(ot_pool(2), 100, 10, mark, &c);
    int ok = 1;
    for (int k = 0; k < 100; k++) ok &= atomic_load(&c.hits[k]) == 1;
    free(c.hits);
    if (ok) atomic_fetch_add(&outer->hits[i], 1);
  }
}

Test(exec, nested) {
  cover_t c = {.n = 32};
  c.hits = calloc(32, sizeof *c.hits);
  ot_pool(2)->parallel_for(ot_pool(2), 32, 1, nested, &c);
  for (int i = 0; i < 32; i++) cr_assert_eq(atomic_load(&c.hits[i]), 1);
  free(c.hits);
}
