/* The CPU executor: serial execution and a shared pthread pool.
 *
 * DESIGN
 * A pool keeps a FIFO list of active jobs, one per parallel_for call in
 * progress, guarded by one mutex. A call splits [0, n) into nchunks chunks
 * of at least `grain` (at most 4 per thread, for balance when chunks run
 * unevenly), puts its job on the list, wakes the workers and then claims
 * chunks of its own job like any worker. Workers take chunks from the
 * oldest job that has unclaimed ones, so several threads may call
 * parallel_for on one pool at once: every job makes progress on its own
 * caller even when all workers are busy elsewhere, and idle workers help
 * whichever job is first. A job leaves the list as soon as its last chunk
 * is claimed; every access to a job happens under the mutex, and the caller
 * returns only when all chunks are done, so the job can live on the
 * caller's stack. Chunks are coarse (>= grain), so taking the mutex once
 * per chunk costs nothing measurable.
 *
 * A nested parallel_for (from inside a chunk) is safe: the inner caller
 * runs its own chunks and only waits for chunks that other threads are
 * already running.
 *
 * n <= grain, or a pool of one thread, runs fn(arg, 0, n) inline: no lock,
 * no wakeup.
 *
 * Classes of service (docs/scheduling.md): the pool keeps two lists, the
 * latency class's (calls through the pool itself) and the best-effort
 * class's (calls through a view from opd__exec_pool_view). Workers take
 * the latency list first. A best-effort call is cut into slices (up to
 * BE_SLICES per thread, each >= grain; serially too on a pool of one
 * thread) and, before each slice, its thread yields: it runs one chunk of
 * a listed latency job, or, while latency work is in progress
 * (opd__exec_urgent), waits for it to end, at most YIELD_NS. So a latency
 * run waits for at most one best-effort slice per thread, and best-effort
 * work still moves (one slice per yield) however long latency work lasts.
 */
#include "kernels/runtime/exec.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct job {
  opd_range_fn fn;                 /* the range function */
  void *arg;                       /* its argument */
  int64_t n;                       /* the range is [0, n) */
  int64_t nchunks;                 /* chunk i is [n*i/nchunks, n*(i+1)/nchunks) */
  int64_t next;                    /* next chunk to claim */
  int64_t done;                    /* chunks finished */
  int be;                          /* its list: 0 latency, 1 best-effort */
  struct job *link;                /* next job in the pool's list */
} job_t;

#define BE_SLICES 32               /* best-effort slices per thread, at most */
#define FINISH_SPIN_NS 50000L      /* a caller whose chunks are done looks
                                      for the workers' last ones this long
                                      before it sleeps */
#define YIELD_NS 1000000L          /* longest a best-effort slice waits */

typedef struct pool {
  pthread_mutex_t mu;              /* guards everything below and all jobs */
  pthread_cond_t work;             /* a job was added, or stop */
  pthread_cond_t finished;         /* some chunk finished */
  job_t *head[2], *tail[2];        /* jobs with unclaimed chunks, FIFO:
                                      [0] latency, [1] best-effort */
  int urgent;                      /* latency runs in progress */
  pthread_cond_t calm;             /* urgent fell to 0, or a latency job
                                      was listed (on CLOCK_MONOTONIC) */
  struct view {                    /* the best-effort view's impl */
    struct pool *pool;
    int be;
  } be_view;
  int stop;                        /* workers exit when set */
  int nworkers;                    /* threads started */
  pthread_t *threads;              /* nworkers of them */
} pool_t;

static void serial_for(const opd_exec_t *ex, int64_t n, int64_t grain,
                       opd_range_fn fn, void *arg) {
  (void)ex;
  (void)grain;
  if (n > 0) fn(arg, 0, n);
}

const opd_exec_t opd__exec_serial = {serial_for, 1, NULL};

/* A view's impl: the pool and the class its calls are in. */
typedef struct view view_t;

/* Claims the next chunk of `j` (mutex held); unlinks j from the list when
 * that was its last unclaimed chunk. */
static void claim(pool_t *p, job_t *j, int64_t *b, int64_t *e) {
  int64_t i = j->next++;
  *b = j->n * i / j->nchunks;
  *e = j->n * (i + 1) / j->nchunks;
  if (j->next == j->nchunks) { /* workers take the head, a caller its own
                                  job wherever it is in the list */
    job_t **pp = &p->head[j->be], *prev = NULL;
    while (*pp != j) {
      prev = *pp;
      pp = &(*pp)->link;
    }
    *pp = j->link;
    if (p->tail[j->be] == j) p->tail[j->be] = prev;
    j->link = NULL;
  }
}

/* Before a best-effort thread takes a best-effort chunk (mutex held): it
 * runs one chunk of the first listed latency job, or while latency runs
 * are in progress waits for them, at most YIELD_NS. Returns 1 when it
 * let go of the mutex (the lists may have changed), 0 when nothing was
 * in the way. */
static int be_yield(pool_t *p) {
  job_t *l = p->head[0];
  if (l != NULL) {
    int64_t b, e;
    claim(p, l, &b, &e);
    pthread_mutex_unlock(&p->mu);
    l->fn(l->arg, b, e);
    pthread_mutex_lock(&p->mu);
    if (++l->done == l->nchunks) pthread_cond_broadcast(&p->finished);
    return 1;
  }
  if (p->urgent == 0) return 0;
  struct timespec dl;
  clock_gettime(CLOCK_MONOTONIC, &dl);
  dl.tv_nsec += YIELD_NS;
  if (dl.tv_nsec >= 1000000000L) {
    dl.tv_sec++;
    dl.tv_nsec -= 1000000000L;
  }
  while (p->urgent > 0 && p->head[0] == NULL && !p->stop)
    if (pthread_cond_timedwait(&p->calm, &p->mu, &dl) == ETIMEDOUT) break;
  return 1;
}

static void *worker(void *arg) {
  pool_t *p = arg;
  int yielded = 0; /* the last turn yielded: this one takes its chunk */
  pthread_mutex_lock(&p->mu);
  for (;;) {
    if (p->stop) break;
    job_t *j = p->head[0] ? p->head[0] : p->head[1];
    if (!j) {
      pthread_cond_wait(&p->work, &p->mu);
      continue;
    }
    if (j->be && !yielded && be_yield(p)) {
      yielded = 1;
      continue;
    }
    yielded = 0;
    int64_t b, e;
    claim(p, j, &b, &e);
    pthread_mutex_unlock(&p->mu);
    j->fn(j->arg, b, e);
    pthread_mutex_lock(&p->mu);
    if (++j->done == j->nchunks) pthread_cond_broadcast(&p->finished);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* Lists job j (mutex held) and wakes the workers it can use. */
static void list_job(pool_t *p, job_t *j) {
  if (p->tail[j->be])
    p->tail[j->be]->link = j;
  else
    p->head[j->be] = j;
  p->tail[j->be] = j;
  if (!j->be) pthread_cond_broadcast(&p->calm); /* yielding threads help */
  if (j->nchunks - 1 >= p->nworkers)
    pthread_cond_broadcast(&p->work);
  else
    for (int64_t i = 0; i < j->nchunks - 1; i++) pthread_cond_signal(&p->work);
}

static long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000L + t.tv_nsec;
}

/* The caller's wait for the chunks workers still run (mutex held): a
 * short spin first, since what is left is at most a chunk a worker, and
 * a sleeping caller's wake-up costs it more than that on a VM (about 45
 * us on the 2-core one, 2026-12-08, where a chunk of a 1 MiB gelu takes
 * 15); then the condition variable. */
static void wait_done(pool_t *p, const job_t *j) {
  if (j->done >= j->nchunks) return;
  long until = now_ns() + FINISH_SPIN_NS;
  while (j->done < j->nchunks) {
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < 64; i++) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    pthread_mutex_lock(&p->mu);
    if (j->done >= j->nchunks || now_ns() >= until) break;
  }
  while (j->done < j->nchunks) pthread_cond_wait(&p->finished, &p->mu);
}

static void pool_for(const opd_exec_t *ex, int64_t n, int64_t grain,
                     opd_range_fn fn, void *arg) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  pool_t *p = ex->impl;
  int64_t nchunks = n / grain;
  int64_t maxchunks = 4 * (int64_t)ex->nthreads;
  if (nchunks > maxchunks) nchunks = maxchunks;
  if (nchunks <= 1 || !p || p->nworkers == 0) {
    fn(arg, 0, n);
    return;
  }
  job_t j = {fn, arg, n, nchunks, 0, 0, 0, NULL};
  pthread_mutex_lock(&p->mu);
  list_job(p, &j);
  while (j.next < j.nchunks) {
    int64_t b, e;
    claim(p, &j, &b, &e);
    pthread_mutex_unlock(&p->mu);
    fn(arg, b, e);
    pthread_mutex_lock(&p->mu);
    j.done++;
  }
  wait_done(p, &j);
  pthread_mutex_unlock(&p->mu);
}

/* The best-effort class's parallel_for: in slices, each after a yield
 * (be_yield), on the workers too when the pool has any. */
static void pool_for_be(const opd_exec_t *ex, int64_t n, int64_t grain,
                        opd_range_fn fn, void *arg) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  pool_t *p = ((const view_t *)ex->impl)->pool;
  int64_t nchunks = n / grain;
  int64_t maxchunks = BE_SLICES * (int64_t)ex->nthreads;
  if (nchunks > maxchunks) nchunks = maxchunks;
  if (nchunks <= 1) {
    fn(arg, 0, n);
    return;
  }
  job_t j = {fn, arg, n, nchunks, 0, 0, 1, NULL};
  pthread_mutex_lock(&p->mu);
  if (p->nworkers > 0) list_job(p, &j);
  while (j.next < j.nchunks) {
    if (be_yield(p) && j.next >= j.nchunks) break; /* workers took the rest */
    int64_t b, e;
    if (p->nworkers > 0) {
      claim(p, &j, &b, &e);
    } else { /* not listed: slices in order on this thread */
      int64_t i = j.next++;
      b = n * i / nchunks;
      e = n * (i + 1) / nchunks;
    }
    pthread_mutex_unlock(&p->mu);
    fn(arg, b, e);
    pthread_mutex_lock(&p->mu);
    j.done++;
  }
  wait_done(p, &j);
  pthread_mutex_unlock(&p->mu);
}

/* The pool behind a pool's executor or one of its views. */
static pool_t *pool_of(const opd_exec_t *ex) {
  if (ex->parallel_for == pool_for) return ex->impl;
  if (ex->parallel_for == pool_for_be) return ((const view_t *)ex->impl)->pool;
  return NULL;
}

int opd__exec_pool_view(const opd_exec_t *pool, opd_exec_t *view) {
  pool_t *p = pool_of(pool);
  if (p == NULL) return OPD_EINVAL;
  p->be_view.pool = p;
  p->be_view.be = 1;
  view->parallel_for = pool_for_be;
  view->nthreads = pool->nthreads;
  view->impl = &p->be_view;
  return 0;
}

void opd__exec_urgent(const opd_exec_t *ex, int delta) {
  pool_t *p = pool_of(ex);
  if (p == NULL) return;
  pthread_mutex_lock(&p->mu);
  p->urgent += delta;
  if (p->urgent <= 0) {
    p->urgent = 0;
    pthread_cond_broadcast(&p->calm);
  }
  pthread_mutex_unlock(&p->mu);
}

int opd__exec_pool_create(opd_exec_t *ex, int nthreads) {
  memset(ex, 0, sizeof *ex);
  if (nthreads < 1) nthreads = 1;
  pool_t *p = calloc(1, sizeof *p);
  if (!p) return OPD_ENOMEM;
  int rc = OPD_EINTERNAL;
  if (pthread_mutex_init(&p->mu, NULL)) goto fail_mu;
  if (pthread_cond_init(&p->work, NULL)) goto fail_work;
  if (pthread_cond_init(&p->finished, NULL)) goto fail_fin;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int calm_rc = pthread_cond_init(&p->calm, &ca);
  pthread_condattr_destroy(&ca);
  if (calm_rc) goto fail_calm;
  if (nthreads > 1) {
    p->threads = calloc((size_t)nthreads - 1, sizeof *p->threads);
    if (!p->threads) {
      rc = OPD_ENOMEM;
      goto fail_threads;
    }
  }
  for (int i = 0; i < nthreads - 1; i++) {
    if (pthread_create(&p->threads[i], NULL, worker, p)) {
      ex->impl = p;
      ex->nthreads = p->nworkers + 1;
      opd__exec_pool_destroy(ex);
      return OPD_EINTERNAL;
    }
    p->nworkers++;
  }
  ex->parallel_for = pool_for;
  ex->nthreads = nthreads;
  ex->impl = p;
  return 0;

fail_threads:
  pthread_cond_destroy(&p->calm);
fail_calm:
  pthread_cond_destroy(&p->finished);
fail_fin:
  pthread_cond_destroy(&p->work);
fail_work:
  pthread_mutex_destroy(&p->mu);
fail_mu:
  free(p);
  return rc;
}

void opd__exec_pool_destroy(opd_exec_t *ex) {
  pool_t *p = ex->impl;
  if (p) {
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_cond_broadcast(&p->calm);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nworkers; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
    pthread_cond_destroy(&p->calm);
    pthread_cond_destroy(&p->finished);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->mu);
    free(p);
  }
  memset(ex, 0, sizeof *ex);
}
