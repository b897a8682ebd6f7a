/* Jobs and the session's run queue: a validated run's life from its queue
 * to its reply.
 *
 * DESIGN
 * Runs of one session execute in order, one at a time (like a CUDA
 * stream); different sessions' runs execute concurrently. The session's
 * queue (opd_runq_t) is this file's alone: a run is pushed on it
 * (opd__runq_push, from validate.c or the run cache) and the session asks
 * it to move on (opd__runq_start, after each request and each pump).
 * Where a run executes is its backend's business (daemon/backend/):
 * opd__runq_start hands it over; a run that finished at once (a tiny CPU
 * run) is answered there, and one the backend launched comes back
 * through the completion callback on the job (job_done), which answers
 * it and moves the session on through its ready callback (s->cb->ready:
 * the session's pump; never a call into session.c). The reply goes on
 * the transport its request came by (job->via), and the job back to a
 * bounded pool. A job holds a reference on every arena it uses until it
 * is recycled.
 *
 * An asynchronous run (OPD_RUN_F_ASYNC, a device run on device memory
 * only) is answered when its backend has enqueued it (job_enqueued): the
 * next run starts at once, and the device orders it after this one on the
 * session's stream (up to --max-async incomplete). The job, and so the
 * arenas it references, live until its completion (async_done); an error
 * then is kept as the session's async error, which the next SYNC, or the
 * next run answered at completion, reports (as CUDA reports a kernel's
 * fault at the next synchronizing call). SYNC waits for all of them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h" /* opd__now_ns */
#include "common/wire.h"
#include "daemon/backend/backend.h"
#include "daemon/devq.h"
#include "daemon/graph/table.h"
#include "daemon/limits.h"
#include "daemon/mem/arena.h"
#include "daemon/metrics.h"
#include "daemon/outbox.h"
#include "daemon/ringsvc.h"
#include "daemon/run/jobs.h"
#include "daemon/run/strided.h"
#include "daemon/sched.h"
#include "kernels/runtime/exec.h"
#include "kernels/runtime/registry.h"

/* ---- the pool --------------------------------------------------------- */

opd_job_t *opd__job_alloc(opd_server_t *srv) {
  opd_job_t *j = srv->job_free;
  if (j != NULL) {
    srv->job_free = j->next;
    srv->n_job_free--;
  } else if ((j = malloc(sizeof *j)) == NULL) {
    return NULL;
  }
  j->next = NULL;
  j->n_arenas = 0;
  j->rc = 0;
  j->ns = 0;
  j->device = -1;
  j->devq_slot = 0;
  j->flags = 0;
  j->flag_after = 0;
  j->now = 0;
  j->graph = NULL;
  j->strided = 0;
  return j;
}

/* Finished jobs are kept for reuse up to JOB_POOL_MAX (a job is ~9 KB:
 * its descriptors and attributes); past that they are freed, so that a
 * burst of queued runs does not stay in the daemon after it. */
#define JOB_POOL_MAX 256

void opd__job_recycle(opd_server_t *srv, opd_job_t *j) {
  for (int i = 0; i < j->n_arenas; i++) opd__arena_unref(j->arenas[i]);
  j->n_arenas = 0;
  if (j->graph != NULL) opd__graph_unref(srv, j->graph);
  j->graph = NULL;
  if (srv->n_job_free >= JOB_POOL_MAX) {
    free(j);
    srv->trim_pending += sizeof *j;
    return;
  }
  j->next = srv->job_free;
  srv->job_free = j;
  srv->n_job_free++;
}

void opd__job_copy_plan(opd_job_t *dst, const opd_job_t *src) {
  const opd_kcall_t *c = &src->call;
  dst->op_index = src->op_index;
  dst->graph = src->graph;
  dst->via = src->via;
  dst->bytes = src->bytes;
  dst->strided = src->strided;
  dst->device = src->device;
  dst->flags = src->flags;
  dst->n_arenas = src->n_arenas;
  if (src->n_arenas > 0)
    memcpy(dst->arenas, src->arenas, sizeof *src->arenas * (size_t)src->n_arenas);
  dst->call.op = c->op;
  dst->call.n_in = c->n_in;
  dst->call.n_out = c->n_out;
  dst->call.err[0] = '\0';
  if (c->n_in > 0) memcpy(dst->call.in, c->in, sizeof *c->in * (size_t)c->n_in);
  if (c->n_out > 0)
    memcpy(dst->call.out, c->out, sizeof *c->out * (size_t)c->n_out);
  if (c->op->n_attrs > 0)
    memcpy(dst->call.attr, c->attr, sizeof *c->attr * (size_t)c->op->n_attrs);
  if (src->device >= 0) /* the device backend's plan (staging) */
    memcpy(dst->backend_job, src->backend_job, sizeof dst->backend_job);
}

/* ---- replies ---------------------------------------------------------- */

/* Counts the run: its op's calls, time and errors, and the metrics. */
static void job_count(opd_job_t *job) {
  opd_op_stats_t *st = &job->s->srv->op_stats[job->op_index];
  if (opd__metrics_on)
    opd__metrics_run(job->op_index, job->via == OPD_VIA_RING, job->rc,
                     opd__now_ns() - job->t_recv);
  opd__sched_count(job->s->srv, job);
  opd__devq_release(job->s->srv, job);
  st->calls++;
  st->ns += job->ns;
  if (job->rc != 0) st->errors++;
  else if (job->strided) opd__strided_count(job->s->srv, &job->call, job->strided);
  if (job->device < 0)
    st->inlined += job->call.exec == &opd__exec_serial ||
                   job->call.exec == &job->s->srv->exec_loop;
}

/* The session's async error, reported (as request id's error) and
 * cleared: 1 if there was one. */
static int async_error_report(opd_session_t *s, int via, uint64_t id) {
  opd_runq_t *q = &s->runq;
  if (q->async_rc == 0) return 0;
  if (s->fd >= 0)
    opd__out_error(s, via, id, q->async_rc, "an earlier asynchronous run "
                   "failed: %s", q->async_err);
  q->async_rc = 0;
  q->async_err[0] = '\0';
  return 1;
}

/* A finished run counted and answered (its error, or {"ns"}). */
static void job_reply(opd_job_t *job) {
  opd_session_t *s = job->s;
  job_count(job);
  if (job->rc != 0) {
    opd__out_error(s, job->via, job->req_id, job->rc, "%s: %s",
                   job->call.op->name,
                   job->call.err[0] ? job->call.err : opd__errdefault(job->rc));
  } else if (!async_error_report(s, job->via, job->req_id) && s->fd >= 0) {
    /* {"ns": uint}, written in place (common/wire.h) */
    unsigned char body[4 + OPD_MP_PUT_MAX] = {0x81, 0xa2, 'n', 's'};
    unsigned char *end = opd__mp_put_uint(body + 4, job->ns);
    opd__out_reply(s, job->via, job->req_id, (const char *)body,
                   (size_t)(end - body));
  }
}

/* A run's end: answered, the job back to the pool; the session's queue
 * moves on. */
/* Whether the loop should stay awake for the session's next request after
 * this run: any run that ran on the loop thread (a model's graph, or one
 * op of a program that sends its ops one by one: its next request comes as
 * soon as it has the answer, and the loop's wake-up would cost it ~45 us
 * on a VM), and a graph on a GPU. Not one that ran on the kernel threads:
 * a linger there takes a core from the next run's kernels (on the 2-vCPU
 * VM the MLP at batch 32 went from 1.21x to 1.63x torch's time with it,
 * batch 1 from 1.84x to 0.54x; bench/results/2026-12-07-vm-graph-linger.txt).
 * The MLP sent op by op went from 5.2-6.4x torch's time to 0.59-0.66x at
 * batch 1 once single runs on the loop lingered too
 * (bench/results/2026-12-08-vm-linger-ops.txt). */
static int lingers(const opd_job_t *job) {
  if (job->device >= 0) return job->graph != NULL;
  return job->call.exec == &opd__exec_serial ||
         job->call.exec == &job->s->srv->exec_loop;
}

static void job_finish(opd_job_t *job) {
  opd_session_t *s = job->s;
  int model = lingers(job);
  s->runq.running = NULL;
  opd__acct_inflight(s, -1);
  job_reply(job);
  opd__job_recycle(s->srv, job);
  if (model) opd__ring_linger(s); /* its next request comes at once */
}

/* An asynchronous run was enqueued: answered now ({"queued": true}); the
 * job lives on until its completion (async_done). */
static void job_enqueued(opd_job_t *job) {
  opd_session_t *s = job->s;
  opd_runq_t *q = &s->runq;
  q->running = NULL;
  q->n_async++;
  s->srv->async_now++;
  if (q->n_async > s->srv->async_peak) s->srv->async_peak = q->n_async;
  if (s->fd >= 0) {
    /* {"queued": true} */
    static const unsigned char body[] = {0x81, 0xa6, 'q', 'u', 'e', 'u',
                                         'e', 'd', 0xc3};
    opd__out_reply(s, job->via, job->req_id, (const char *)body, sizeof body);
  }
}

/* The completion callback of a launched run: called by its backend on the
 * loop (never from inside this session's own calls). */
static void job_done(opd_job_t *job) {
  opd_session_t *s = job->s;
  job_finish(job);
  s->cb->ready(s);
}

/* ... and of an asynchronous run, answered when it was enqueued: counted,
 * its error kept for the session's next SYNC, the job back to the pool. */
static void async_done(opd_job_t *job) {
  opd_session_t *s = job->s;
  opd_runq_t *q = &s->runq;
  q->n_async--;
  s->srv->async_now--;
  opd__acct_inflight(s, -1);
  job_count(job);
  if (job->rc != 0 && q->async_rc == 0) {
    q->async_rc = job->rc;
    snprintf(q->async_err, sizeof q->async_err, "%s (request %llu): %s",
             job->call.op->name, (unsigned long long)job->req_id,
             job->call.err[0] ? job->call.err : opd__errdefault(job->rc));
  }
  opd__job_recycle(s->srv, job);
  s->cb->ready(s);
}

/* ---- the queue -------------------------------------------------------- */

void opd__runq_push(opd_session_t *s, opd_job_t *job) {
  opd_runq_t *q = &s->runq;
  job->next = NULL;
  if (q->tail) q->tail->next = job;
  else q->head = job;
  q->tail = job;
  opd__acct_inflight(s, 1);
}

/* SYNCs waiting are answered once nothing of the session is queued,
 * running or enqueued on a device: the first with the async error, if
 * any. */
static void answer_syncs(opd_session_t *s) {
  opd_runq_t *q = &s->runq;
  if (q->n_sync == 0 || q->head != NULL || q->running != NULL || q->n_async > 0)
    return;
  for (int i = 0; i < q->n_sync; i++) {
    if (!async_error_report(s, q->sync[i].via, q->sync[i].id) && s->fd >= 0)
      opd__out_reply(s, q->sync[i].via, q->sync[i].id, NULL, 0);
  }
  q->n_sync = 0;
}

/* Starts a run through its backend: one that finished at once (a tiny
 * CPU run, or one that failed to start: job->rc) is answered here and the
 * next starts; one it launched ends in job_done; an asynchronous one
 * enqueued on a device is answered now, and the next starts (the device
 * orders them), up to max_async of them not yet complete. */
void opd__runq_start(opd_session_t *s) {
  opd_runq_t *q = &s->runq;
  uint32_t max_async = s->srv->cfg.limits.max_async;
  uint32_t word_ahead = s->srv->cfg.limits.word_ahead;
  while (q->running == NULL && q->head != NULL && s->fd >= 0) {
    opd_job_t *j = q->head;
    if (j->device >= 0 && (j->flags & OPD_RUN_F_ASYNC) &&
        (q->n_async >= max_async ||
         /* --word-ahead: a wait kernel with the op queued behind it slows
          * the client's launches under MPS while it sits on the GPU
          * (docs/async.md), so such a run goes on the stream only once
          * the runs before it (nearly) completed */
         (word_ahead > 0 && (j->flags & OPD_RUN_F_WORD) && q->n_async >= word_ahead)))
      break; /* its async_done starts it */
    /* a best-effort device run while a latency client is there: only
     * with a slot of its device (daemon/devq.c), which wakes us */
    if (j->device >= 0 && !opd__devq_admit(s, j)) break;
    q->head = j->next;
    if (q->head == NULL) q->tail = NULL;
    q->running = j;
    j->done = job_done;
    int rc = opd__backend_for(j->device)->launch(j);
    if (rc == OPD_LAUNCH_QUEUED) return; /* job_done comes later */
    if (rc == OPD_LAUNCH_ENQUEUED) {
      j->done = async_done;
      job_enqueued(j);
      opd__ring_linger(s);
      continue;
    }
    if (rc != OPD_LAUNCH_DONE) j->rc = rc;
    job_finish(j);
  }
  answer_syncs(s);
}

int opd__runq_now(opd_session_t *s, opd_job_t *job) {
  opd_runq_t *q = &s->runq;
  if (q->head != NULL || q->running != NULL || job->device >= 0) return 0;
  job->now = 1;
  int rc = opd__backend_for(job->device)->launch(job);
  job->now = 0;
  if (rc == OPD_LAUNCH_LATER) return 0;
  if (rc != OPD_LAUNCH_DONE) job->rc = rc;
  job_reply(job);
  if (lingers(job)) opd__ring_linger(s); /* as job_finish */
  return 1;
}

void opd__runq_drop(opd_session_t *s, int code, const char *msg) {
  opd_runq_t *q = &s->runq;
  while (q->head) {
    opd_job_t *j = q->head;
    q->head = j->next;
    opd__acct_inflight(s, -1);
    if (code != 0 && s->fd >= 0)
      opd__out_error(s, j->via, j->req_id, code, "%s: %s",
                     j->call.op->name, msg);
    opd__job_recycle(s->srv, j);
  }
  q->tail = NULL;
}

int opd__runq_sync(const opd_req_t *r) {
  opd_runq_t *q = &r->s->runq;
  if (q->n_sync >= OPD_MAX_SYNCS) return OPD_ELIMIT;
  q->sync[q->n_sync].via = r->via;
  q->sync[q->n_sync].id = r->id;
  q->n_sync++;
  return 0;
}

int opd__runq_flag_after(opd_session_t *s, int dev, uint64_t id) {
  opd_job_t *last = NULL;
  for (opd_job_t *j = s->runq.head; j != NULL; j = j->next)
    if ((j->flags & OPD_RUN_F_FLAG) && j->device == dev) last = j;
  if (last == NULL) return 0;
  last->flag_after = id;
  return 1;
}
