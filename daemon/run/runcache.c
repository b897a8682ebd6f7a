/* The run cache: a session's last validated run request, queued again
 * without being decoded and checked when its body comes again.
 *
 * DESIGN
 * A client that loops one run (the same op on the same tensors: what
 * opd_prepare produces, and what most model servers do) sends the same
 * request bytes but for the id. Each session keeps its last validated run
 * request: its body bytes and the job prepare() made of them
 * (daemon/run/validate.c). A request whose body is byte-identical, while no
 * arena anywhere has been released since (srv->arena_epoch), is the same
 * validated job: its plan is copied instead of being decoded and checked
 * again. A host run with nothing of its session queued or running is
 * first offered to its backend at once on a job on the stack
 * (opd__runq_now: no pool job, no arena references, no queue; the CPU
 * backend finishes it now if it runs inline, else declines and nothing is
 * done); any other hit is copied into a job from the pool and queued as
 * any other (daemon/run/jobs.c). Either way the backend's launch decides
 * and runs it: there is one inline path. What prepare() checks depends only on the body and on the
 * session's arenas, which stay as they were until one is released (arena
 * ids are never reused; an arena's base, size, device and read-only flag
 * do not change). The body is compared in the private copy of the request
 * (never in the ring), so a client cannot change it after the comparison.
 */
#include <stdlib.h>
#include <string.h>

#include "common/clock.h" /* opd__now_ns */
#include "daemon/metrics.h"
#include "daemon/graph/graph.h"
#include "daemon/run/jobs.h"
#include "daemon/run/runcache.h"

#define RUN_CACHE_MAX 1024 /* bodies above this are not cached */

typedef struct opd_run_cache {
  uint64_t epoch;
  uint32_t len;
  opd_job_t job; /* as prepare() left it; holds no arena references */
  unsigned char body[RUN_CACHE_MAX];
} opd_run_cache_t;

void opd__run_cache_store(const opd_req_t *r, const opd_job_t *job) {
  opd_session_t *s = r->s;
  if (r->body == NULL || r->body_len > RUN_CACHE_MAX) return;
  if (s->run_cache == NULL && (s->run_cache = malloc(sizeof *s->run_cache)) == NULL)
    return;
  opd_run_cache_t *c = s->run_cache;
  c->epoch = s->srv->arena_epoch;
  c->len = r->body_len;
  memcpy(c->body, r->body, r->body_len);
  opd__job_copy_plan(&c->job, job);
}

int opd__run_cached(const opd_req_t *r, const unsigned char *body,
                    uint32_t len) {
  opd_session_t *s = r->s;
  const opd_run_cache_t *c = s->run_cache;
  if (c == NULL || c->len != len || c->epoch != s->srv->arena_epoch ||
      memcmp(c->body, body, len) != 0)
    return 0;
  opd_server_t *srv = s->srv;
  srv->run_cache_hits++;
  if (c->job.device < 0 && !opd__runq_running(s)) {
    /* a host run with nothing of the session before it: tried at once on
     * a job on the stack; its backend says whether it finishes now */
    opd_job_t now;
    opd__job_copy_plan(&now, &c->job);
    now.s = s;
    now.req_id = r->id;
    now.via = r->via;
    now.t_recv = opd__now_ns(); /* the class's queue wait (sched.c) */
    now.rc = 0;
    now.ns = 0;
    now.devq_slot = 0; /* a host run: never a device's slot (devq.c) */
    if (opd__runq_now(s, &now)) return 1;
  }
  opd_job_t *job = opd__job_alloc(srv);
  if (job == NULL) return 0; /* the full path reports it */
  opd__job_copy_plan(job, &c->job);
  for (int i = 0; i < job->n_arenas; i++) job->arenas[i]->refs++;
  if (job->graph != NULL) job->graph->refs++;
  job->s = s;
  job->req_id = r->id;
  job->via = r->via;
  job->t_recv = opd__now_ns(); /* the CUDA breakdown, metrics, classes */
  opd__runq_push(s, job);
  return 1;
}

void opd__run_cache_free(opd_session_t *s) {
  free(s->run_cache);
  s->run_cache = NULL;
}
