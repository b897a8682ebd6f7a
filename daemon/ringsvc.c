/* The shared-memory transport: a session's submission and completion rings
 * (common/ring.h), serviced by the event loop.
 *
 * DESIGN
 * The loop thread itself serves the rings, so requests from a ring go
 * through exactly the code a socket frame does (the session's payload
 * callback, s->cb) with no locks and no hand-off. The rings are a watcher
 * of the loop scheduler (daemon/loop.h): every ring session is serviced
 * after each poll (check); while any session waits by spinning the loop
 * does not block and serves the spinning rings back to back in its spin
 * windows (poll), so a spinning client is answered without a wake-up.
 * Adaptive sessions sleep the daemon side through their eventfd: before
 * the loop blocks (arm) it sets each adaptive submission ring's sleeping
 * flag and looks once more; the client rings the eventfd only when it
 * sees that flag. This file knows nothing of backends.
 *
 * Back-pressure and safety: a reply that does not fit in the completion
 * ring waits in a private overflow list, and the session's submissions are
 * not taken while that list is non-empty or while its runs are at a limit
 * (daemon/limits.c); the list's bytes count toward --max-reply-bytes, past
 * which the socket is not read either (a client that sends on the socket
 * and never reads its completion ring), so a client that stops consuming
 * costs bounded memory. Nor does it cost a core: while its completion ring
 * stays full the loop looks again every OVER_RETRY_MS (and at every turn
 * something else wakes it for: the client's next request rings the
 * doorbell), where it used to keep itself from blocking and spun at 100%
 * for as long as the client did not read. Every
 * entry is copied out of the ring before it is parsed (opd__ring_pop); a
 * corrupt counter or length closes that session with a goodbye.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/memfd.h"
#include "common/clock.h" /* opd__now_ns */
#include "common/wire.h"
#include "daemon/devq.h"
#include "daemon/limits.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/mem/arena.h"
#include "daemon/ringsvc.h"
#include "daemon/sock.h"
#include "daemon/ticks.h"

#define RING_BUDGET 64 /* requests per session per loop iteration */
#define OVER_RETRY_MS 1 /* a full completion ring's next look, at most */

typedef struct overflow {
  struct overflow *next;
  uint32_t len;
  unsigned char data[];
} overflow_t;

static size_t cq_offset(uint32_t sq_slots, uint32_t sq_slot_size) {
  return (opd__ring_bytes(sq_slots, sq_slot_size) + 4095) & ~(size_t)4095;
}

static int is_eventfd(int fd) {
  char path[64], target[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(path, target, sizeof target - 1);
  if (n < 0) return 0;
  target[n] = '\0';
  return strcmp(target, "anon_inode:[eventfd]") == 0;
}

static void service_session(opd_session_t *s);

/* How long serving a ring takes, from its request seen to its replies
 * pushed (one request, in a ping-pong; a GPU run: to its launch): the
 * daemon's share of a CPU round trip, reported at shutdown. */
#define SVC_BUCKETS 1000 /* 10 ns each */
#define SVC_SAMPLE 16    /* one service in this many is timed */

static void svc_record(opd_server_t *srv, uint64_t ns) {
  if (srv->svc_hist == NULL &&
      (srv->svc_hist = calloc(SVC_BUCKETS, sizeof *srv->svc_hist)) == NULL)
    return;
  opd__hist_add(srv->svc_hist, SVC_BUCKETS, ns, 10);
  srv->svc_n++;
}

static double svc_pct(const opd_server_t *srv, double q) {
  return opd__hist_pct(srv->svc_hist, SVC_BUCKETS, srv->svc_n, q, 10.0);
}

/* The ring watcher (daemon/loop.h). In a spin window: the submission
 * rings that hold a request are served the moment it is there, the
 * latency class's sessions first (docs/scheduling.md): a flood of
 * best-effort requests that came in the same turn waits behind them. With
 * no latency user, one pass over the sessions, as before. */
static int ring_poll(opd_server_t *srv) {
  int served = 0, two = opd__devq_latency_users(srv) > 0;
  for (int pass = two; pass >= 0; pass--) {
    for (opd_session_t *s = srv->sessions, *next; s; s = next) {
      next = s->next;
      if (!s->ring || s->fd < 0 || s->closing || (two && s->priority != pass)) continue;
      if (opd__ring_ready(&s->sq) != 0) { /* a request, or corrupt */
        if ((++srv->svc_seen & (SVC_SAMPLE - 1)) == 0) {
          uint64_t t0 = opd__ticks();
          service_session(s);
          svc_record(srv, opd__ticks_ns(opd__ticks() - t0));
        } else {
          service_session(s);
        }
        served = 1;
      }
    }
  }
  return served;
}

/* After each poll phase: every ring session (overflow, submissions), the
 * latency class's first. */
static void ring_check(opd_server_t *srv) {
  int two = opd__devq_latency_users(srv) > 0;
  for (int pass = two; pass >= 0; pass--)
    for (opd_session_t *s = srv->sessions, *next; s; s = next) {
      next = s->next;
      if (!two || s->priority == pass) service_session(s);
    }
}

/* now 0: without reading the clock (a linger that has passed counts until
 * the loop's next clock read). A linger holds only while nothing runs on
 * the kernel threads: with runs there the loop would nap between its
 * looks (daemon/loop.c, 100 us a nap on the 2-core VM, where its 20 us
 * are asked for) and a request would wait longer than the doorbell's
 * wake-up takes (a latency client's 1x1024 softmax beside a best-effort
 * layernorm loop: p50 6 us without the linger, 28-66 with it, 2026-12-08). */
static int ring_wants_spin(const opd_server_t *srv, uint64_t now) {
  return srv->n_spin > 0 ||
         (srv->linger_until != 0 && srv->pool_jobs == 0 &&
          (now == 0 || now < srv->linger_until));
}

/* Before the loop blocks: adaptive rings must ring the doorbell. A
 * session held back (replies waiting for its completion ring, or its runs
 * at a limit) is not looked at: its submissions wait on purpose, and what
 * frees it wakes the loop itself (the retry timer, a run's completion). */
static int ring_arm(opd_server_t *srv) {
  int woke = 0;
  if (srv->n_ring == 0) return 0;
  for (opd_session_t *s = srv->sessions; s; s = s->next) {
    if (s->ring != OPD_RING_ADAPTIVE || s->fd < 0 || s->ring_over != NULL ||
        opd__limit_inflight(s))
      continue;
    if (opd__ring_arm_sleep(&s->sq) != 0) woke = 1;
  }
  return woke;
}

static const opd_watcher_t ring_watcher = {
    .name = "rings", .check = ring_check, .poll = ring_poll,
    .wants_spin = ring_wants_spin, .arm = ring_arm};

void opd__ring_report(opd_server_t *srv) {
  if (srv->svc_n > 0)
    LOG_INFO("spin: %llu ring services in spin windows (one in %d timed), "
             "from request seen to reply pushed (GPU runs: to launched): "
             "p50 %.0f ns, p99 %.0f ns",
             (unsigned long long)srv->svc_seen, SVC_SAMPLE, svc_pct(srv, 0.5),
             svc_pct(srv, 0.99));
  if (srv->lingers > 0)
    LOG_INFO("spin: %llu runs of adaptive clients (asynchronous GPU runs, "
             "graph runs, CPU runs on the loop) kept the loop serving the "
             "rings for %u us after them (--linger-us)",
             (unsigned long long)srv->lingers, srv->cfg.linger_ns / 1000);
  free(srv->svc_hist);
  srv->svc_hist = NULL;
}

static void free_handle(uv_handle_t *h) { free(h); }

static void on_doorbell(uv_poll_t *h, int status, int events) {
  opd_session_t *s = h->data;
  uint64_t v;
  (void)status, (void)events;
  /* drain the counter; the check handle services the ring right after */
  while (read(s->ring_doorbell, &v, sizeof v) > 0) {
  }
}

/* Spinning takes a core on each side: the client's wait and the daemon's
 * loop. On a host with few cores that is the core the kernel threads need,
 * and every run above the inline limit gets slower than over adaptive
 * (bench/bench_spin.py). So under --spin auto a spin session is granted
 * only while, with it, the spinning sessions and the loop leave a quarter
 * of the CPUs (at least one) to the work; otherwise it gets adaptive. */
int opd__spin_grant(const opd_server_t *srv, char *why, size_t cap) {
  if (srv->cfg.spin == OPD_SPIN_ALWAYS) return 1;
  if (srv->cfg.spin == OPD_SPIN_NEVER) {
    snprintf(why, cap, "spinning is off (--spin never)");
    return 0;
  }
  int need = srv->n_cpus / 4 > 1 ? srv->n_cpus / 4 : 1;
  int left = srv->n_cpus - 1 - (srv->n_spin + 1);
  if (left >= need) return 1;
  snprintf(why, cap, "%d CPUs: the loop and %d spinning session(s) would "
           "leave %d for the kernels, under the %d kept free (--spin auto)",
           srv->n_cpus, srv->n_spin + 1, left > 0 ? left : 0, need);
  return 0;
}

/* Lingering spins the loop's core only, and only while that leaves a
 * quarter of the CPUs (at least one) to the rest, as for spin rings; not
 * under --spin never. A model's forward through torch.ops.opd makes a
 * run every 50-500 us: without the linger each of them waits for the
 * loop to wake (2026-12-01, bench/results/2026-12-01-h200-linger.txt:
 * a layernorm call 90.5 us without the linger, 55.0 us with it). */
void opd__ring_linger(opd_session_t *s) {
  opd_server_t *srv = s->srv;
  if (s->ring != OPD_RING_ADAPTIVE || srv->cfg.linger_ns == 0 ||
      srv->cfg.spin == OPD_SPIN_NEVER)
    return;
  int need = srv->n_cpus / 4 > 1 ? srv->n_cpus / 4 : 1;
  if (srv->cfg.spin != OPD_SPIN_ALWAYS && srv->n_cpus - 1 - srv->n_spin < need)
    return;
  srv->linger_until = opd__now_ns() + srv->cfg.linger_ns;
  srv->lingers++;
}

int opd__ring_setup(opd_req_t *r, const msgpack_object *body, int *granted,
                    char *why, size_t whylen, opd_err_t *err) {
  opd_session_t *s = r->s;
  opd_server_t *srv = s->srv;
  uint64_t size, sqn, sqs, cqn, cqs;
  char wait[16];
  if (s->ring) {
    return opd__errf(err, OPD_ESTATE, "this session already has rings");
  }
  if (opd__mp_uint(opd__mp_get(body, "size"), &size) ||
      opd__mp_uint(opd__mp_get(body, "sq_slots"), &sqn) ||
      opd__mp_uint(opd__mp_get(body, "sq_slot_size"), &sqs) ||
      opd__mp_uint(opd__mp_get(body, "cq_slots"), &cqn) ||
      opd__mp_uint(opd__mp_get(body, "cq_slot_size"), &cqs) ||
      opd__mp_str(opd__mp_get(body, "wait"), wait, sizeof wait)) {
    return opd__errf(err, OPD_EPROTO,
                     "\"size\", \"sq_slots\", \"sq_slot_size\", "
                     "\"cq_slots\", \"cq_slot_size\" (unsigned) and \"wait\" are "
                     "required");
  }
  int mode = opd__ring_mode_from_name(wait);
  if (mode == 0) {
    return opd__errf(err, OPD_EINVAL,
                     "\"wait\" must be spin or adaptive, got \"%s\"", wait);
  }
  /* spin: the memfd, and an eventfd too when the client allows being
   * given adaptive instead (libopd sends both) */
  int need = mode == OPD_RING_ADAPTIVE || r->n_fds >= 2 ? 2 : 1;
  int fds[2] = {-1, -1};
  opd_err_t fwhy;
  if (opd__req_take_fds(r, need, fds, &fwhy) != 0)
    return opd__errf(err, OPD_EFD, "%s rings need the memfd%s: %s", wait,
                     need == 2 ? " and an eventfd" : "", fwhy.msg);
  int memfd = fds[0], efd = fds[1];
  why[0] = '\0';
  if (mode == OPD_RING_SPIN && !opd__spin_grant(srv, why, whylen)) {
    if (efd >= 0) {
      mode = OPD_RING_ADAPTIVE;
      LOG_INFO("session %llu: spin asked, adaptive given: %s",
               (unsigned long long)s->id, why);
    } else { /* a client that cannot take adaptive: it spins, we warn */
      LOG_WARN("session %llu: spins without cores to spare: %s",
               (unsigned long long)s->id, why);
      why[0] = '\0';
    }
  }
  *granted = mode;

  void *base = NULL;
  int rc = 0;
  size_t off = 0;
  if (sqn > (1u << 20) || cqn > (1u << 20) || sqs > 65536 || cqs > 65536) {
    rc = opd__errf(err, OPD_EINVAL, "ring geometry out of range");
    goto fail;
  }
  off = cq_offset((uint32_t)sqn, (uint32_t)sqs);
  if (size > ((uint64_t)64 << 20) ||
      size < off + opd__ring_bytes((uint32_t)cqn, (uint32_t)cqs)) {
    rc = opd__errf(err, OPD_EINVAL,
                   "a region of %llu bytes does not hold the rings "
                   "(or exceeds 64 MiB)", (unsigned long long)size);
    goto fail;
  }
  if ((rc = opd__memfd_map(memfd, size, &base, err)) != 0) goto fail;
  if (opd__ring_attach(base, off, (uint32_t)sqn, (uint32_t)sqs, &s->sq) != 0 ||
      opd__ring_attach((char *)base + off, size - off, (uint32_t)cqn,
                       (uint32_t)cqs, &s->cq) != 0) {
    rc = opd__errf(err, OPD_EINVAL,
                   "the rings are not formatted (bad geometry, magic "
                   "or counters)");
    goto fail;
  }
  if (efd >= 0) {
    if (!is_eventfd(efd)) {
      rc = opd__errf(err, OPD_EFD,
                     "the second file descriptor is not an eventfd");
      goto fail;
    }
    fcntl(efd, F_SETFL, fcntl(efd, F_GETFL) | O_NONBLOCK);
    /* its own allocation: it may be closed after the session is freed */
    if ((s->ring_poll = malloc(sizeof *s->ring_poll)) == NULL) {
      rc = opd__errf(err, OPD_ENOMEM, "out of memory");
      goto fail;
    }
    uv_poll_init(srv->loop, s->ring_poll, efd);
    s->ring_poll->data = s;
    uv_poll_start(s->ring_poll, UV_READABLE, on_doorbell);
    s->ring_doorbell = efd;
  }
  s->ring_buf = malloc(opd__ring_max_msg(&s->sq));
  if (s->ring_buf == NULL) {
    rc = opd__errf(err, OPD_ENOMEM, "out of memory");
    goto fail_poll;
  }
  close(memfd);
  s->ring_base = base;
  s->ring_size = size;
  s->ring = mode;
  srv->mappings++;
  srv->host_bytes += size;
  /* a spinning client never sleeps (libopd), so its rings skip the look
   * at its sleeping flags (a full fence per message; common/ring.h); if it
   * sleeps anyway, only its own replies wait */
  s->sq.wakes = s->cq.wakes = mode == OPD_RING_ADAPTIVE;
  if (mode == OPD_RING_SPIN) srv->n_spin++;
  srv->n_ring++;
  opd__loop_update(srv);
  LOG_DEBUG("session %llu: %s rings, %llu+%llu slots", (unsigned long long)s->id,
           opd__ring_mode_name(mode), (unsigned long long)sqn, (unsigned long long)cqn);
  return 0;
fail_poll:
  if (s->ring_poll) {
    uv_close((uv_handle_t *)s->ring_poll, free_handle);
    s->ring_poll = NULL;
    s->ring_doorbell = -1;
  }
fail:
  if (base) munmap(base, size);
  close(memfd);
  if (efd >= 0) close(efd);
  return rc;
}

/* A completion ring the client broke (counters out of bounds): the session
 * ends with a goodbye on the socket, as the submission side does. */
static void cq_broken(opd_session_t *s) {
  if (s->cq_corrupt) return;
  s->cq_corrupt = 1;
  s->cb->fail(s, OPD_EPROTO, "the completion ring is corrupt (a counter or "
              "a length out of bounds)");
}

/* Pushes a reply payload to the completion ring, or queues it (O(1): the
 * list keeps its tail; its bytes count toward --max-reply-bytes, past
 * which the session is not read, so the list stays bounded). */
int opd__ring_reply(opd_session_t *s, const void *head, size_t hlen,
                    const void *body, size_t blen) {
  size_t len = hlen + blen;
  if (s->cq_corrupt) return 1; /* dropped: the session is ending */
  if (len > opd__ring_max_msg(&s->cq)) return 0; /* too big: the socket */
  if (s->ring_over == NULL) {
    int rc = opd__ring_push2(&s->cq, head, (uint32_t)hlen, body, (uint32_t)blen);
    if (rc == 0) return 1;
    if (rc < 0) {
      cq_broken(s);
      return 1;
    }
  }
  overflow_t *o = malloc(sizeof *o + len);
  if (o == NULL) {
    s->cb->fail(s, 0, "out of memory queueing a reply");
    return 1;
  }
  o->next = NULL;
  o->len = (uint32_t)len;
  memcpy(o->data, head, hlen);
  memcpy(o->data + hlen, body, blen);
  if (s->ring_over == NULL) s->ring_over = o;
  else ((overflow_t *)s->ring_over_tail)->next = o;
  s->ring_over_tail = o;
  s->over_bytes += (uint32_t)len;
  opd__loop_kick(s->srv); /* retry soon: the client frees room silently */
  return 1;
}

/* Moves queued replies into the completion ring. Returns 1 if some stay. */
static int drain_overflow(opd_session_t *s) {
  overflow_t *o;
  while ((o = s->ring_over) != NULL) {
    int rc = opd__ring_push(&s->cq, o->data, o->len);
    if (rc == 1) return 1;
    if (rc < 0) {
      cq_broken(s);
      return 0;
    }
    s->ring_over = o->next;
    if (s->ring_over == NULL) s->ring_over_tail = NULL;
    s->over_bytes -= o->len;
    free(o);
  }
  return 0;
}

static void on_over_retry(uv_timer_t *t) {
  opd__loop_kick(t->data); /* the check phase serves the rings */
}

static void service_session(opd_session_t *s) {
  if (s->fd < 0 || !s->ring) return;
  int had_over = s->ring_over != NULL;
  if (drain_overflow(s) && !uv_is_active((uv_handle_t *)&s->srv->over_timer))
    uv_timer_start(&s->srv->over_timer, on_over_retry, OVER_RETRY_MS, 0);
  if (s->fd < 0) return;
  if (had_over && s->ring_over == NULL) s->cb->ready(s); /* read again */
  if (s->fd < 0) return;
  for (int i = 0; i < RING_BUDGET; i++) {
    if (s->closing || s->ring_over != NULL || opd__limit_inflight(s))
      break; /* back-pressure: leave the rest in the ring */
    uint32_t len;
    int rc = opd__ring_pop(&s->sq, s->ring_buf, opd__ring_max_msg(&s->sq), &len);
    if (rc == 1) break;
    if (rc < 0) {
      s->cb->fail(s, OPD_EPROTO, "the submission ring is corrupt (a counter "
                  "or a length out of bounds)");
      s->cb->ready(s); /* closes once the goodbye is out */
      return;
    }
    opd_req_t r = {.s = s, .via = OPD_VIA_RING};
    s->cb->payload(&r, s->ring_buf, len);
    if (s->fd < 0) return;
  }
  s->cb->ready(s);
}

void opd__ring_init_server(opd_server_t *srv) {
  opd__loop_watch(srv, &ring_watcher);
  uv_timer_init(srv->loop, &srv->over_timer);
  srv->over_timer.data = srv;
  uv_unref((uv_handle_t *)&srv->over_timer);
}

/* At close: stop the doorbell; the mapping goes in opd__ring_free. */
void opd__ring_close(opd_session_t *s) {
  if (!s->ring) return;
  opd_server_t *srv = s->srv;
  if (s->ring == OPD_RING_SPIN) srv->n_spin--;
  srv->n_ring--;
  if (s->ring_poll) {
    uv_close((uv_handle_t *)s->ring_poll, free_handle);
    s->ring_poll = NULL; /* the fd is closed in opd__ring_free */
  }
  opd__loop_update(srv);
}

void opd__ring_free(opd_session_t *s) {
  while (s->ring_over) {
    overflow_t *o = s->ring_over;
    s->ring_over = o->next;
    free(o);
  }
  s->ring_over_tail = NULL;
  s->over_bytes = 0;
  if (s->ring_doorbell >= 0) close(s->ring_doorbell);
  s->ring_doorbell = -1;
  if (s->ring_base) {
    munmap(s->ring_base, s->ring_size);
    s->srv->mappings--;
    s->srv->host_bytes -= s->ring_size;
  }
  s->ring_base = NULL;
  free(s->ring_buf);
  s->ring_buf = NULL;
  s->ring = 0;
}
