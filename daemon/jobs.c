/* Jobs: a validated run's life from its queue to its reply, and the run
 * cache.
 *
 * DESIGN
 * Runs of one session execute in order, one at a time (like a CUDA
 * stream; the session starts them, daemon/session.c); different sessions'
 * runs execute concurrently. Where a run executes is its backend's
 * business (daemon/backend/): opd__job_start hands it over, and a run the
 * backend launched comes back through the completion callback on the job
 * (job->done), which ends in opd__job_finish: the reply, on the transport
 * its request came by (job->via), and the job back to a bounded pool. A
 * job holds a reference on every arena it uses until it is recycled.
 *
 * An asynchronous run (OPD_RUN_F_ASYNC, a device run on device memory
 * only) is answered when its backend has enqueued it (opd__job_enqueued):
 * the session moves on to its next run, which the device orders after it
 * on the session's stream. The job, and so the arenas it references, live
 * until its completion (opd__job_async_done); an error then is kept as
 * the session's async error, which the next SYNC, or the next run
 * answered at completion, reports (as CUDA reports a kernel's fault at
 * the next synchronizing call).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/server.h"

/* ---- jobs ------------------------------------------------------------- */


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
  j->flags = 0;
  j->flag_after = 0;
  return j;
}

/* Finished jobs are kept for reuse up to JOB_POOL_MAX (a job is ~9 KB:
 * its descriptors and attributes); past that they are freed, so that a
 * burst of queued runs does not stay in the daemon after it. */
#define JOB_POOL_MAX 256

void opd__job_recycle(opd_server_t *srv, opd_job_t *j) {
  for (int i = 0; i < j->n_arenas; i++) opd__arena_unref(j->arenas[i]);
  j->n_arenas = 0;
  if (srv->n_job_free >= JOB_POOL_MAX) {
    free(j);
    srv->trim_pending += sizeof *j;
    return;
  }
  j->next = srv->job_free;
  srv->job_free = j;
  srv->n_job_free++;
}

void opd__job_drop(opd_job_t *job, int code, const char *msg) {
  opd_session_t *s = job->s;
  if (code != 0 && s->fd >= 0)
    opd__out_error(s, job->via, job->req_id, code, "%s: %s",
                   opd__ops[job->op_index]->name, msg);
  opd__job_recycle(s->srv, job);
}

/* Counts the run: its op's calls, time and errors, and the metrics. */
static void job_count(const opd_job_t *job) {
  opd_op_stats_t *st = &job->s->srv->op_stats[job->op_index];
  if (opd__metrics_on)
    opd__metrics_run(job->op_index, job->via == OPD_VIA_RING, job->rc,
                     opd__now_ns() - job->t_recv);
  st->calls++;
  st->ns += job->ns;
  if (job->rc != 0) st->errors++;
  if (job->device < 0) {
    st->inlined += job->call.exec == &opd__exec_serial;
    opd__cpu_learn(job->s->srv, job);
  }
}

/* The session's async error, reported (as request id's error) and
 * cleared: 1 if there was one. */
int opd__async_error_report(opd_session_t *s, int via, uint64_t id) {
  if (s->async_rc == 0) return 0;
  if (s->fd >= 0)
    opd__out_error(s, via, id, s->async_rc, "an earlier asynchronous run "
                   "failed: %s", s->async_err);
  s->async_rc = 0;
  s->async_err[0] = '\0';
  return 1;
}

/* Counts the run and replies: its error, or {"ns"}. */
static void job_reply(opd_job_t *job) {
  opd_session_t *s = job->s;
  job_count(job);
  if (job->rc == 0 && opd__async_error_report(s, job->via, job->req_id))
    return;
  if (job->rc != 0) {
    opd__out_error(s, job->via, job->req_id, job->rc, "%s: %s",
                   job->call.op->name,
                   job->call.err[0] ? job->call.err : opd__errdefault(job->rc));
  } else if (s->fd >= 0) {
    /* {"ns": uint}, written in place (common/wire.h) */
    unsigned char body[4 + OPD_MP_PUT_MAX] = {0x81, 0xa2, 'n', 's'};
    unsigned char *end = opd__mp_put_uint(body + 4, job->ns);
    opd__out_reply(s, job->via, job->req_id, (const char *)body,
                   (size_t)(end - body));
  }
}

/* Replies and frees the job; the session's queue moves on. */
void opd__job_finish(opd_job_t *job) {
  opd_session_t *s = job->s;
  s->running = NULL;
  opd__acct_inflight(s, -1);
  job_reply(job);
  opd__job_recycle(s->srv, job);
}

int opd__job_start(opd_job_t *job) {
  int rc = opd__backend_for(job->device)->launch(job);
  /* job->done comes later */
  if (rc == OPD_LAUNCH_QUEUED || rc == OPD_LAUNCH_ENQUEUED) return rc;
  if (rc != OPD_LAUNCH_DONE) job->rc = rc;
  return OPD_LAUNCH_DONE;
}

void opd__job_enqueued(opd_job_t *job) {
  opd_session_t *s = job->s;
  s->running = NULL;
  s->n_async++;
  s->srv->async_now++;
  if (s->n_async > s->srv->async_peak) s->srv->async_peak = s->n_async;
  if (s->fd >= 0) {
    /* {"queued": true} */
    static const unsigned char body[] = {0x81, 0xa6, 'q', 'u', 'e', 'u',
                                         'e', 'd', 0xc3};
    opd__out_reply(s, job->via, job->req_id, (const char *)body, sizeof body);
  }
}

void opd__job_async_done(opd_job_t *job) {
  opd_session_t *s = job->s;
  s->n_async--;
  s->srv->async_now--;
  opd__acct_inflight(s, -1);
  job_count(job);
  if (job->rc != 0 && s->async_rc == 0) {
    s->async_rc = job->rc;
    snprintf(s->async_err, sizeof s->async_err, "%s (request %llu): %s",
             job->call.op->name, (unsigned long long)job->req_id,
             job->call.err[0] ? job->call.err : opd__errdefault(job->rc));
  }
  opd__job_recycle(s->srv, job);
}

/* ---- the run cache ---------------------------------------------------- *
 * A client that loops one run (the same op on the same tensors: what
 * opd_prepare produces, and what most model servers do) sends the same
 * request bytes but for the id. Each session keeps its last validated run
 * request: its body bytes and the job prepare() made of them. A request
 * whose body is byte-identical, while no arena anywhere has been released
 * since (srv->arena_epoch), is the same validated job: it is copied
 * instead of decoded and checked again. What prepare() checks depends only
 * on the body and on the session's arenas, which stay as they were until
 * one is released (arena ids are never reused; an arena's base, size,
 * device and read-only flag do not change). The body is compared in the
 * private copy of the request (never in the ring), so a client cannot
 * change it after the comparison. */

#define RUN_CACHE_MAX 1024 /* bodies above this are not cached */

typedef struct opd_run_cache {
  uint64_t epoch;
  uint32_t len;
  opd_job_t job; /* as prepare() left it; holds no arena references */
  unsigned char body[RUN_CACHE_MAX];
} opd_run_cache_t;

void opd__job_enqueue(opd_session_t *s, opd_job_t *job) {
  if (s->q_tail) s->q_tail->next = job;
  else s->q_head = job;
  s->q_tail = job;
  opd__acct_inflight(s, 1);
}

/* The parts of a prepared job that describe the run (not its progress). */
static void job_copy_plan(opd_job_t *dst, const opd_job_t *src) {
  const opd_kcall_t *c = &src->call;
  dst->op_index = src->op_index;
  dst->via = src->via;
  dst->bytes = src->bytes;
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

void opd__run_cache_store(const opd_req_t *r, const opd_job_t *job) {
  opd_session_t *s = r->s;
  if (r->body == NULL || r->body_len > RUN_CACHE_MAX) return;
  if (s->run_cache == NULL && (s->run_cache = malloc(sizeof *s->run_cache)) == NULL)
    return;
  opd_run_cache_t *c = s->run_cache;
  c->epoch = s->srv->arena_epoch;
  c->len = r->body_len;
  memcpy(c->body, r->body, r->body_len);
  job_copy_plan(&c->job, job);
}

int opd__run_cached(const opd_req_t *r, const unsigned char *body,
                    uint32_t len) {
  opd_session_t *s = r->s;
  uint64_t id = r->id;
  const opd_run_cache_t *c = s->run_cache;
  if (c == NULL || c->len != len || c->epoch != s->srv->arena_epoch ||
      memcmp(c->body, body, len) != 0)
    return 0;
  opd_server_t *srv = s->srv;
  srv->run_cache_hits++;
  if (s->q_head == NULL && s->running == NULL && opd__cpu_inline(srv, &c->job)) {
    /* nothing of this session queued, and small: run it now, as
     * opd__job_start would, on a job on the stack (its arenas cannot go
     * while the loop thread is in here) */
    opd_job_t job;
    job_copy_plan(&job, &c->job);
    job.s = s;
    job.req_id = id;
    job.via = r->via;
    job.t_recv = opd__metrics_on ? opd__now_ns() : 0;
    job.call.exec = &opd__exec_serial;
    opd__cpu_run_kernel(&job);
    job_reply(&job);
    return 1;
  }
  opd_job_t *job = opd__job_alloc(srv);
  if (job == NULL) return 0; /* the full path reports it */
  job_copy_plan(job, &c->job);
  for (int i = 0; i < job->n_arenas; i++) job->arenas[i]->refs++;
  job->s = s;
  job->req_id = id;
  job->via = r->via;
  if (job->device >= 0 || opd__metrics_on) /* the CUDA breakdown, metrics */
    job->t_recv = opd__now_ns();
  opd__job_enqueue(s, job);
  return 1;
}

void opd__run_cache_free(opd_session_t *s) {
  free(s->run_cache);
  s->run_cache = NULL;
}
