/* Classes of service: who may ask for the latency class, the CPU runs'
 * dispatch to the kernel threads by class, and each class's histograms;
 * see sched.h and docs/scheduling.md.
 *
 * DESIGN
 * A CPU run that leaves the loop thread takes one of libuv's threads for
 * its whole kernel, and libuv's queue is first come, first served: a
 * latency run sent behind a flood of best-effort runs would wait for all
 * of them. So such runs wait here instead, in one FIFO per class, and
 * are handed to libuv only while a thread is free for them: latency first;
 * each class holds at most all but one of the UV_THREADPOOL_SIZE threads
 * (one with a single thread: then libuv queues at most one run of each
 * class), so a latency run never waits behind a queue of best-effort
 * runs, and a latency flood always leaves best-effort work a thread: it
 * is never starved to zero. A flooding latency client is further held to
 * --max-inflight like any session.
 * Inside a kernel, the pool slices best-effort work and yields it to the
 * latency class's (kernels/runtime/exec.c).
 *
 * The histograms are the loop's (the only writer): a run's queue wait is
 * from its request taken to its kernel started, its run time the
 * kernel's; bucket bounds are fixed, 1 us to 10 s.
 */
#include <stdlib.h>
#include <string.h>

#include "common/clock.h" /* opd__now_ns */
#include "common/wire.h"
#include "daemon/access.h"
#include "daemon/graph/graph.h"
#include "daemon/log.h"
#include "daemon/sched.h"

static const double bounds[] = {1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4,
                                2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2,
                                2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5, 10};
#define N_BOUNDS ((int)(sizeof bounds / sizeof bounds[0]))

typedef struct {
  uint64_t n[N_BOUNDS + 1];      /* per bucket (not cumulative); last: +Inf */
  uint64_t count;
  uint64_t sum_ns;
} hist_t;

typedef struct opd_sched opd_sched_t;

struct opd_sched {
  unsigned *uids, *gids;         /* --latency-users / --latency-groups */
  int n_uids, n_gids;
  opd_job_t *head[OPD_N_CLASSES], *tail[OPD_N_CLASSES]; /* waiting */
  uint32_t waiting[OPD_N_CLASSES]; /* in each queue */
  uint32_t out[OPD_N_CLASSES];   /* handed to libuv, not yet back */
  uint32_t cap;                  /* threads a class may hold */
  uv_work_cb work;               /* the backend's callbacks */
  uv_after_work_cb after;
  hist_t wait[OPD_N_CLASSES], run[OPD_N_CLASSES];
  uint64_t runs[OPD_N_CLASSES];
};

int opd__class_parse(const char *name) {
  if (!strcmp(name, "latency") || !strcmp(name, "high")) return OPD_CLASS_LATENCY;
  if (!strcmp(name, "best-effort") || !strcmp(name, "normal")) return OPD_CLASS_BE;
  return -1;
}

const char *opd__class_name(int cls) {
  return cls == OPD_CLASS_LATENCY ? "latency" : "best-effort";
}

int opd__sched_init(opd_server_t *srv) {
  opd_sched_t *q = calloc(1, sizeof *q);
  if (q == NULL) {
    LOG_ERROR("scheduler: out of memory");
    return -1;
  }
  q->n_uids = opd__ids_resolve("--latency-users", srv->cfg.latency_users, 0, &q->uids);
  q->n_gids = q->n_uids < 0 ? -1 : opd__ids_resolve("--latency-groups",
                                                   srv->cfg.latency_groups, 1, &q->gids);
  if (q->n_uids < 0 || q->n_gids < 0) {
    free(q->uids);
    free(q);
    return -1;
  }
  const char *env = getenv("UV_THREADPOOL_SIZE"); /* main.c sets it */
  long threads = env ? strtol(env, NULL, 10) : 4;
  if (threads < 1) threads = 4;
  q->cap = threads > 1 ? (uint32_t)threads - 1 : 1;
  srv->sched = q;
  LOG_INFO("classes: the latency class for root, uid %u and %d user(s), "
           "%d group(s) (--latency-users \"%s\", --latency-groups \"%s\"); "
           "%u kernel-thread runs per class", (unsigned)srv->self_uid,
           q->n_uids, q->n_gids, srv->cfg.latency_users,
           srv->cfg.latency_groups, q->cap);
  return 0;
}

void opd__sched_free(opd_server_t *srv) {
  opd_sched_t *q = srv->sched;
  if (q == NULL) return;
  free(q->uids);
  free(q->gids);
  free(q);
  srv->sched = NULL;
}

int opd__sched_may_latency(const opd_server_t *srv, const opd_session_t *s) {
  const opd_sched_t *q = srv->sched;
  if (opd__is_admin(srv, s->uid)) return 1;
  for (int i = 0; q && i < q->n_uids; i++)
    if (q->uids[i] == (unsigned)s->uid) return 1;
  return q && opd__peer_in_groups(s->uid, s->gid, s->pid,
                                  (const gid_t *)q->gids, q->n_gids);
}

int opd__job_class(const opd_job_t *job) {
  if (job->graph != NULL && job->graph->cls != 0)
    return job->graph->cls == 2 ? OPD_CLASS_LATENCY : OPD_CLASS_BE;
  return job->s->priority ? OPD_CLASS_LATENCY : OPD_CLASS_BE;
}

/* The next run to hand over, taken off its queue; NULL when none may go. */
static opd_job_t *pick(opd_sched_t *q) {
  int lat = q->head[OPD_CLASS_LATENCY] != NULL && q->out[OPD_CLASS_LATENCY] < q->cap;
  int be = q->head[OPD_CLASS_BE] != NULL && q->out[OPD_CLASS_BE] < q->cap;
  if (!lat && !be) return NULL;
  int c = lat ? OPD_CLASS_LATENCY : OPD_CLASS_BE;
  opd_job_t *j = q->head[c];
  q->head[c] = j->next;
  if (q->head[c] == NULL) q->tail[c] = NULL;
  j->next = NULL;
  q->waiting[c]--;
  return j;
}

/* Hands over the runs that may go now; one libuv refuses fails at once. */
static void dispatch(opd_server_t *srv) {
  opd_sched_t *q = srv->sched;
  opd_job_t *j;
  while ((j = pick(q)) != NULL) {
    int c = opd__job_class(j);
    int rc = uv_queue_work(srv->loop, &j->work, q->work, q->after);
    if (rc == 0) {
      q->out[c]++;
      continue;
    }
    snprintf(j->call.err, sizeof j->call.err, "uv_queue_work: %s", uv_strerror(rc));
    j->rc = OPD_EINTERNAL;
    q->out[c]++; /* as if it ran: its after callback gives the slot back */
    q->after(&j->work, 0);
  }
}

int opd__sched_submit(opd_server_t *srv, opd_job_t *job, uv_work_cb work,
                      uv_after_work_cb after) {
  opd_sched_t *q = srv->sched;
  int c = opd__job_class(job);
  q->work = work;
  q->after = after;
  if (q->head[c] == NULL && q->out[c] < q->cap &&
      (c == OPD_CLASS_LATENCY || q->head[OPD_CLASS_LATENCY] == NULL)) {
    int rc = uv_queue_work(srv->loop, &job->work, work, after);
    if (rc == 0) q->out[c]++;
    return rc;
  }
  job->next = NULL;
  if (q->tail[c]) q->tail[c]->next = job;
  else q->head[c] = job;
  q->tail[c] = job;
  q->waiting[c]++;
  return 0;
}

void opd__sched_done(opd_server_t *srv, opd_job_t *job) {
  opd_sched_t *q = srv->sched;
  int c = opd__job_class(job);
  if (q->out[c] > 0) q->out[c]--;
  if (q->head[0] || q->head[1]) dispatch(srv);
}

static void hist_add(hist_t *h, uint64_t ns) {
  double s = (double)ns * 1e-9;
  int b = 0;
  while (b < N_BOUNDS && s > bounds[b]) b++;
  h->n[b]++;
  h->count++;
  h->sum_ns += ns;
}

void opd__sched_count(opd_server_t *srv, const opd_job_t *job) {
  opd_sched_t *q = srv->sched;
  if (q == NULL) return;
  int c = opd__job_class(job);
  q->runs[c]++;
  if (job->t_recv != 0 && job->t_start >= job->t_recv)
    hist_add(&q->wait[c], job->t_start - job->t_recv);
  hist_add(&q->run[c], job->ns);
}

static void render_hist(FILE *f, const char *name, const char *cls,
                        const hist_t *h) {
  uint64_t cum = 0;
  for (int b = 0; b < N_BOUNDS; b++) {
    cum += h->n[b];
    fprintf(f, "%s_bucket{class=\"%s\",le=\"%g\"} %llu\n", name, cls, bounds[b],
            (unsigned long long)cum);
  }
  fprintf(f, "%s_bucket{class=\"%s\",le=\"+Inf\"} %llu\n", name, cls,
          (unsigned long long)h->count);
  fprintf(f, "%s_sum{class=\"%s\"} %.9f\n", name, cls, (double)h->sum_ns * 1e-9);
  fprintf(f, "%s_count{class=\"%s\"} %llu\n", name, cls,
          (unsigned long long)h->count);
}

void opd__sched_render(const opd_server_t *srv, FILE *f) {
  const opd_sched_t *q = srv->sched;
  if (q == NULL) return;
  static const char *const names[] = {"opd_class_queue_wait_seconds",
                                      "opd_class_run_seconds"};
  static const char *const help[] = {
      "runs' wait from request to kernel start (GPU: to launch), by class of service",
      "runs' kernel time (GPU: launch to completion seen), by class of service"};
  for (int k = 0; k < 2; k++) {
    fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", names[k], help[k], names[k]);
    for (int c = OPD_N_CLASSES - 1; c >= 0; c--)
      render_hist(f, names[k], opd__class_name(c), k ? &q->run[c] : &q->wait[c]);
  }
  fprintf(f, "# HELP opd_class_waiting CPU runs waiting for a kernel thread\n"
             "# TYPE opd_class_waiting gauge\n");
  for (int c = OPD_N_CLASSES - 1; c >= 0; c--)
    fprintf(f, "opd_class_waiting{class=\"%s\"} %u\n", opd__class_name(c),
            q->waiting[c]);
}

/* The bucket bound (us) below which a fraction p of h's runs fell. */
static double quantile_us(const hist_t *h, double p) {
  if (h->count == 0) return 0;
  uint64_t want = (uint64_t)((double)h->count * p + 0.999999), cum = 0;
  for (int b = 0; b < N_BOUNDS; b++)
    if ((cum += h->n[b]) >= want) return bounds[b] * 1e6;
  return bounds[N_BOUNDS - 1] * 1e6;
}

static void pack_hist(msgpack_packer *pk, const char *key, const hist_t *h) {
  PACK_STR(pk, key);
  msgpack_pack_map(pk, 4);
  PACK_STR(pk, "count");
  msgpack_pack_uint64(pk, h->count);
  PACK_STR(pk, "sum_ns");
  msgpack_pack_uint64(pk, h->sum_ns);
  PACK_STR(pk, "p50_us"); /* a bucket's upper bound */
  msgpack_pack_double(pk, quantile_us(h, 0.5));
  PACK_STR(pk, "p99_us");
  msgpack_pack_double(pk, quantile_us(h, 0.99));
}

void opd__sched_pack(const opd_server_t *srv, msgpack_packer *pk) {
  const opd_sched_t *q = srv->sched;
  PACK_STR(pk, "classes"); /* per class of service: CPU and GPU runs (sched.c) */
  msgpack_pack_map(pk, OPD_N_CLASSES);
  for (int c = OPD_N_CLASSES - 1; c >= 0; c--) {
    static const hist_t none;
    PACK_STR(pk, opd__class_name(c));
    msgpack_pack_map(pk, 5);
    PACK_STR(pk, "runs");
    msgpack_pack_uint64(pk, q ? q->runs[c] : 0);
    PACK_STR(pk, "waiting");
    msgpack_pack_uint32(pk, q ? q->waiting[c] : 0);
    PACK_STR(pk, "running");
    msgpack_pack_uint32(pk, q ? q->out[c] : 0);
    pack_hist(pk, "wait", q ? &q->wait[c] : &none);
    pack_hist(pk, "run", q ? &q->run[c] : &none);
  }
}
