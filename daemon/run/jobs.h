/* Jobs and the session's run queue (daemon/run/jobs.c): a validated run's life
 * from its queue to its reply.
 *
 * DESIGN
 * The queue (opd_runq_t in the session, daemon/types.h) has one owner,
 * jobs.c: the others queue a run (opd__runq_push), ask the session's runs
 * to move on (opd__runq_start), drop them, note a SYNC, and read what is
 * out through the accessors below. A run's completion comes back here
 * (the job's done callback), which replies and moves the session on
 * through its ready callback.
 */
#ifndef OPD_JOBS_H
#define OPD_JOBS_H

#include <stdint.h>

#include "daemon/types.h"

/* A job from the pool (NULL: no memory); back to it, its arena references
 * dropped. */
opd_job_t *opd__job_alloc(opd_server_t *srv);
void opd__job_recycle(opd_server_t *srv, opd_job_t *j);
/* The parts of a prepared job that describe the run (op, tensors,
 * attributes, placement, the backend's plan), not its progress, copied
 * into dst; no arena reference is taken. */
void opd__job_copy_plan(opd_job_t *dst, const opd_job_t *src);

/* Queues a validated run (it holds its arenas' references) on its
 * session, counted as in flight; opd__runq_start starts it. */
void opd__runq_push(opd_session_t *s, opd_job_t *job);
/* Starts s's queued runs, one at a time and in order (an asynchronous
 * device run lets the next start, up to --max-async), while s is open;
 * answers the SYNCs waiting once nothing is queued, running or enqueued. */
void opd__runq_start(opd_session_t *s);
/* A run of s tried at once on a job on the caller's stack, when nothing of
 * s is queued or running and it is a host run: 1 when its backend finished
 * it now (answered, counted; no pool job, no arena references: the loop
 * thread holds them), 0 when it must be queued (nothing was done). */
int opd__runq_now(opd_session_t *s, opd_job_t *job);
/* Fails every queued run of s with code and msg (a running one finishes). */
void opd__runq_drop(opd_session_t *s, int code, const char *msg);
/* SYNC r: answered once the runs queued before it completed (by
 * opd__runq_start). 0, or OPD_ELIMIT when OPD_MAX_SYNCS wait already
 * (nothing replied). */
int opd__runq_sync(const opd_req_t *r);
/* A refused FLAG run's id for the last FLAG run of device dev still queued
 * in s, which writes it after its own: 1, or 0 when there is none. */
int opd__runq_flag_after(opd_session_t *s, int dev, uint64_t id);

/* Whether s has a run launched and not yet answered; whether it has none
 * of those nor any asynchronous one incomplete. */
static inline int opd__runq_running(const opd_session_t *s) {
  return s->runq.running != NULL;
}
static inline int opd__runq_idle(const opd_session_t *s) {
  return s->runq.running == NULL && s->runq.n_async == 0;
}

#endif /* OPD_JOBS_H */
