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
 */
#include "kernels/runtime/exec.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct job {
  opd_range_fn fn;                 /* the range function */
  void *arg;                       /* its argument */
  int64_t n;                       /* the range is [0, n) */
  int64_t nchunks;                 /* chunk i is [n*i/nchunks, n*(i+1)/nchunks) */
  int64_t next;                    /* next chunk to claim */
  int64_t done;                    /* chunks finished */
  struct job *link;                /* next job in the pool's list */
} job_t;

typedef struct pool {
  pthread_mutex_t mu;              /* guards everything below and all jobs */
  pthread_cond_t work;             /* a job was added, or stop */
  pthread_cond_t finished;         /* some chunk finished */
  job_t *head, *tail;              /* jobs with unclaimed chunks, FIFO */
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

/* Claims the next chunk of `j` (mutex held); unlinks j from the list when
 * that was its last unclaimed chunk. */
static void claim(pool_t *p, job_t *j, int64_t *b, int64_t *e) {
  int64_t i = j->next++;
  *b = j->n * i / j->nchunks;
  *e = j->n * (i + 1) / j->nchunks;
  if (j->next == j->nchunks) { /* workers take the head, a caller its own
                                  job wherever it is in the list */
    job_t **pp = &p->head, *prev = NULL;
    while (*pp != j) {
      prev = *pp;
      pp = &(*pp)->link;
    }
    *pp = j->link;
    if (p->tail == j) p->tail = prev;
    j->link = NULL;
  }
}

static void *worker(void *arg) {
  pool_t *p = arg;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    if (p->stop) break;
    job_t *j = p->head;
    if (!j) {
      pthread_cond_wait(&p->work, &p->mu);
      continue;
    }
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
  job_t j = {fn, arg, n, nchunks, 0, 0, NULL};
  pthread_mutex_lock(&p->mu);
  if (p->tail)
    p->tail->link = &j;
  else
    p->head = &j;
  p->tail = &j;
  if (nchunks - 1 >= p->nworkers)
    pthread_cond_broadcast(&p->work);
  else
    for (int64_t i = 0; i < nchunks - 1; i++) pthread_cond_signal(&p->work);
  while (j.next < j.nchunks) {
    int64_t b, e;
    claim(p, &j, &b, &e);
    pthread_mutex_unlock(&p->mu);
    fn(arg, b, e);
    pthread_mutex_lock(&p->mu);
    j.done++;
  }
  while (j.done < j.nchunks) pthread_cond_wait(&p->finished, &p->mu);
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
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nworkers; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
    pthread_cond_destroy(&p->finished);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->mu);
    free(p);
  }
  memset(ex, 0, sizeof *ex);
}
