/* Device admission by class of service; see devq.h and
 * docs/scheduling.md ("The GPU").
 *
 * DESIGN
 * Why a bound at all: a GPU runs the blocks of a high-priority stream's
 * kernel before the waiting blocks of low-priority ones, but only once
 * the kernel has reached the GPU, and everything a flood of best-effort
 * clients queued is there first (the work queues the driver feeds, and
 * the launches themselves on the loop thread). Measured on an H100
 * (2026-12-07, issue 39): a latency call took 444 us at p50 when 15
 * best-effort workers enqueued without waiting, against 16.6 us idle. So
 * best-effort runs reach the device only while fewer than
 * --device-be-inflight of them are there; a latency run then finds at
 * most that many kernels ahead of it, whose blocks its stream's priority
 * overtakes.
 *
 * Each device keeps a FIFO of the sessions that wait for a free slot (a
 * session waits for one device at a time: its queue is ordered). A
 * session that holds its share waits in none: the completion of one of
 * its own runs frees a slot and calls its ready callback anyway. The
 * wake-up goes through the loop watcher's check: a completion frees a
 * slot inside another session's callbacks, where calling this session's
 * pump would re-enter session code.
 */
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"
#include "daemon/devq.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/sched.h"

typedef struct opd_devq {
  int latency;                   /* latency sessions + latency graphs alive */
  uint32_t out[OPD_MAX_DEVICES]; /* best-effort runs holding a slot */
  opd_session_t *head[OPD_MAX_DEVICES], *tail[OPD_MAX_DEVICES]; /* waiting */
  uint32_t waiting[OPD_MAX_DEVICES];
  uint64_t deferred;             /* times a session had to wait */
  int wake;                      /* a slot freed (or the bound went off)
                                    with sessions waiting */
  opd_session_t *turn;           /* the session being woken: it goes
                                    before the others waiting */
} opd_devq_t;

static uint32_t bound(const opd_server_t *srv) {
  const opd_devq_t *q = srv->devq;
  return q->latency > 0 ? srv->cfg.limits.dev_be_inflight : 0; /* 0: no bound */
}

/* The slots one session may hold: half the device's, at least one. */
static uint32_t share(uint32_t b) { return b / 2 > 0 ? b / 2 : 1; }

static void unlink_waiter(opd_devq_t *q, int dev, opd_session_t *s) {
  opd_session_t **pp = &q->head[dev], *prev = NULL;
  while (*pp != NULL && *pp != s) {
    prev = *pp;
    pp = &(*pp)->devq_next;
  }
  if (*pp == NULL) return;
  *pp = s->devq_next;
  if (q->tail[dev] == s) q->tail[dev] = prev;
  s->devq_next = NULL;
  s->devq_wait = 0;
  q->waiting[dev]--;
}

static void enqueue(opd_devq_t *q, int dev, opd_session_t *s) {
  s->devq_wait = dev + 1;
  s->devq_next = NULL;
  if (q->tail[dev]) q->tail[dev]->devq_next = s;
  else q->head[dev] = s;
  q->tail[dev] = s;
  q->waiting[dev]++;
}

int opd__devq_admit(opd_session_t *s, opd_job_t *j) {
  opd_server_t *srv = s->srv;
  opd_devq_t *q = srv->devq;
  int dev = j->device;
  j->devq_slot = 0;
  if (q == NULL || dev < 0 || dev >= OPD_MAX_DEVICES ||
      opd__job_class(j) == OPD_CLASS_LATENCY)
    return 1;
  uint32_t b = bound(srv);
  if (b == 0) goto take;
  /* at its share: its own runs' completions wake it (job_done, async_done
   * call its ready), so it waits in no FIFO and blocks no one */
  if (s->devq_held[dev] >= share(b)) return 0;
  /* those waiting for a free slot go first, in turn */
  if (q->out[dev] < b && (q->turn == s || q->head[dev] == NULL || q->head[dev] == s)) {
    if (s->devq_wait) unlink_waiter(q, s->devq_wait - 1, s);
    goto take;
  }
  if (s->devq_wait == 0) {
    enqueue(q, dev, s);
    q->deferred++;
  }
  return 0;
take:
  j->devq_slot = 1;
  q->out[dev]++;
  s->devq_held[dev]++;
  return 1;
}

void opd__devq_release(opd_server_t *srv, opd_job_t *j) {
  opd_devq_t *q = srv->devq;
  if (!j->devq_slot || q == NULL || j->device < 0) return;
  j->devq_slot = 0;
  int dev = j->device;
  if (q->out[dev] > 0) q->out[dev]--;
  if (j->s->devq_held[dev] > 0) j->s->devq_held[dev]--;
  if (q->head[dev] != NULL) {
    q->wake = 1;
    opd__loop_kick(srv);
  }
}

void opd__devq_session_end(opd_session_t *s) {
  opd_devq_t *q = s->srv->devq;
  if (q != NULL && s->devq_wait) unlink_waiter(q, s->devq_wait - 1, s);
}

void opd__devq_latency(opd_server_t *srv, int delta) {
  opd_devq_t *q = srv->devq;
  if (q == NULL) return;
  q->latency += delta;
  if (q->latency <= 0) { /* the bound is off: everyone waiting may go */
    q->latency = 0;
    q->wake = 1;
    opd__loop_kick(srv);
  }
}

int opd__devq_latency_users(const opd_server_t *srv) {
  return srv->devq != NULL ? srv->devq->latency : 0;
}

void opd__devq_class(opd_session_t *s, int latency) {
  if (latency != s->priority) opd__devq_latency(s->srv, latency ? 1 : -1);
  s->priority = latency; /* the count drops again at the session's end */
}

/* Wakes the sessions waiting where a slot is free, first come first: each
 * leaves the FIFO and its queue moves on (its admit lets it pass the
 * others, as its turn); one that needs a slot again after that waits at
 * the back. */
static void devq_check(opd_server_t *srv) {
  opd_devq_t *q = srv->devq;
  if (!q->wake) return;
  q->wake = 0;
  for (int dev = 0; dev < OPD_MAX_DEVICES; dev++) {
    uint32_t n = q->waiting[dev];
    while (n-- > 0 && q->head[dev] != NULL) {
      uint32_t b = bound(srv);
      if (b != 0 && q->out[dev] >= b) break;
      opd_session_t *s = q->head[dev];
      unlink_waiter(q, dev, s);
      q->turn = s;
      s->cb->ready(s); /* its queue moves on */
      q->turn = NULL;
    }
  }
}

static const opd_watcher_t devq_watcher = {.name = "devq", .check = devq_check};

int opd__devq_init(opd_server_t *srv) {
  opd_devq_t *q = calloc(1, sizeof *q);
  if (q == NULL) {
    LOG_ERROR("device queue: out of memory");
    return -1;
  }
  srv->devq = q;
  opd__loop_watch(srv, &devq_watcher);
  return 0;
}

void opd__devq_free(opd_server_t *srv) {
  free(srv->devq);
  srv->devq = NULL;
}

void opd__devq_pack(const opd_server_t *srv, msgpack_packer *pk) {
  const opd_devq_t *q = srv->devq;
  int n = srv->n_devices;
  PACK_STR(pk, "device_queue"); /* best-effort admission (devq.c) */
  msgpack_pack_map(pk, 5);
  PACK_STR(pk, "bound");
  msgpack_pack_uint32(pk, srv->cfg.limits.dev_be_inflight);
  PACK_STR(pk, "active");
  if (q != NULL && bound(srv) != 0) msgpack_pack_true(pk);
  else msgpack_pack_false(pk);
  PACK_STR(pk, "be_inflight");
  msgpack_pack_array(pk, (size_t)n);
  for (int d = 0; d < n; d++) msgpack_pack_uint32(pk, q ? q->out[d] : 0);
  PACK_STR(pk, "waiting");
  msgpack_pack_array(pk, (size_t)n);
  for (int d = 0; d < n; d++) msgpack_pack_uint32(pk, q ? q->waiting[d] : 0);
  PACK_STR(pk, "deferred");
  msgpack_pack_uint64(pk, q ? q->deferred : 0);
}
