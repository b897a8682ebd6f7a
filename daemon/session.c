/* One client's session: admission, requests, its queue of runs, closing.
 *
 * DESIGN
 * The transports (daemon/sock.c, daemon/ringsvc.c) hand every payload up
 * through the callbacks this file sets (session_cb: payload, fail,
 * ready); a payload is decoded and checked in one pass (opd__mp_decode,
 * common/wire.h) and dispatched (daemon/handlers.c), and replies go out
 * through the outbox (daemon/outbox.c). A framing error (bytes that are
 * not msgpack, a payload that is not [type, id, body]) ends the session
 * with a goodbye naming the problem: after it the stream cannot be
 * trusted.
 *
 * Runs of one session execute in order, one at a time: the session's run
 * queue is daemon/run/jobs.c's, which this file asks to move on
 * (opd__runq_start) after each request and in each pump; a run's
 * completion comes back through the session's ready callback (its pump).
 * Nothing here is re-entered: handlers only queue, and pump is called
 * from the loop's own callbacks.
 *
 * Back-pressure: a session stops being read while it has max_inflight runs
 * queued or max_wbuf reply bytes unsent (opd__limit_read), and is read
 * again when that clears, so a client that floods or stops reading costs
 * bounded memory and never slows the others.
 *
 * Closing: opd__session_close() drops the socket at once (peer gone, framing
 * error); queued runs are dropped, a running one finishes first, then the
 * session's arenas are released and it is freed. opd__session_shutdown()
 * is the polite form used on SIGTERM: stop reading, fail queued runs with
 * OPD_ESHUTDOWN, let the running one reply, send a goodbye, flush, close.
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h" /* opd__now_ns */
#include "common/wire.h"
#include "daemon/graph/table.h"
#include "daemon/access.h"
#include "daemon/backend/backend.h"
#include "daemon/devq.h"
#include "daemon/handlers.h"
#include "daemon/limits.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/mem/arena.h"
#include "daemon/mem/publish.h"
#include "daemon/metrics.h"
#include "daemon/outbox.h"
#include "daemon/ringsvc.h"
#include "daemon/run/jobs.h"
#include "daemon/run/runcache.h"
#include "daemon/session.h"
#include "daemon/sock.h"

static void on_poll_closed(uv_handle_t *h);
static void pump(opd_session_t *s);
static const opd_transport_cb_t session_cb;

/* 0 when s may be served, else the code of its goodbye and why. */
static int admit(opd_server_t *srv, opd_session_t *s, char *why, size_t cap) {
  const opd_limits_t *l = &srv->cfg.limits;
  if (!opd__access_allowed(srv, s->uid, s->gid, s->pid)) {
    snprintf(why, cap, "uid %u may not use this daemon (not in "
             "--allow-users or --allow-groups)", (unsigned)s->uid);
    return OPD_EPERM;
  }
  int over_all = srv->n_sessions - srv->n_reserved > srv->max_clients;
  int over_uid = s->acct->clients > l->max_uid_clients;
  if (!over_all && !over_uid) return 0;
  /* the reserve is for an admin whom others lock out, not one that fills
   * the daemon itself */
  if (opd__is_admin(srv, s->uid) && srv->n_reserved < l->reserved_clients &&
      s->acct->clients - 1 < (over_all ? srv->max_clients : l->max_uid_clients)) {
    s->reserved = 1;
    srv->n_reserved++;
    return 0;
  }
  if (over_all && srv->max_clients < l->max_clients)
    snprintf(why, cap, "too many clients (limit %u: --max-clients %u, lowered "
             "by the daemon's fd limit %llu)", srv->max_clients, l->max_clients,
             (unsigned long long)srv->fd_limit);
  else if (over_all)
    snprintf(why, cap, "too many clients (limit %u); set by --max-clients",
             l->max_clients);
  else
    snprintf(why, cap, "uid %u has %u sessions, the limit "
             "(--max-uid-clients)", (unsigned)s->uid, l->max_uid_clients);
  return OPD_ELIMIT;
}

/* Admission: who the peer is (SO_PEERCRED), whether it may be served
 * (--allow-users / --allow-groups), and whether a slot is free — the
 * daemon's and its uid's, or else one of the slots reserved for root and
 * the daemon's own user. A refused peer gets one goodbye naming why. */
void opd__session_accept(opd_server_t *srv, int fd) {
  opd_session_t *s = calloc(1, sizeof *s);
  struct ucred cred = {.pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1};
  socklen_t clen = sizeof cred;

  if (s == NULL || (s->arenas = calloc(srv->cfg.limits.max_arenas,
                                        sizeof *s->arenas)) == NULL) {
    LOG_ERROR("out of memory accepting a client");
    free(s);
    close(fd);
    return;
  }
  s->srv = srv;
  s->fd = fd;
  s->cb = &session_cb;
  s->ring_doorbell = -1;
  s->id = ++srv->next_session_id;
  s->t_accept = opd__now_ns();
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0) {
    s->pid = cred.pid;
    s->uid = cred.uid;
    s->gid = cred.gid;
  } else {
    s->uid = (uid_t)-1; /* nobody's: limited, never an admin */
    s->gid = (gid_t)-1;
  }
  if ((s->acct = opd__acct_get(srv, s->uid)) == NULL ||
      uv_poll_init(srv->loop, &s->poll, fd) != 0) {
    LOG_ERROR("out of memory (or uv_poll_init failed) accepting session %llu",
              (unsigned long long)s->id);
    opd__acct_put(srv, s->acct);
    free(s->arenas);
    free(s);
    close(fd);
    return;
  }
  s->acct->clients++;
  s->poll.data = s;
  s->next = srv->sessions;
  if (srv->sessions) srv->sessions->prev = s;
  srv->sessions = s;
  srv->n_sessions++;
  srv->sessions_total++;
  char why[160];
  int code = admit(srv, s, why, sizeof why);
  if (code != 0) {
    /* one log line for a refused peer, one goodbye naming why */
    LOG_WARN("session %llu: refused pid %d uid %u gid %u: %s",
             (unsigned long long)s->id, (int)s->pid, (unsigned)s->uid,
             (unsigned)s->gid, why);
    s->quiet = 1;
    opd__metrics_refused();
    opd__out_goodbye(s, code, "%s", why);
    pump(s); /* closes once the goodbye is out */
    return;
  }
  LOG_INFO("session %llu: connected (pid %d uid %u gid %u%s)",
           (unsigned long long)s->id, (int)s->pid, (unsigned)s->uid,
           (unsigned)s->gid, s->reserved ? ", on a reserved slot" : "");
  opd__sock_update(s);
}

/* ---- requests --------------------------------------------------------- */

/* The transports' payload callback: decodes one payload and hands it to
 * opd__handle(), then starts the runs it queued. The arena is on the
 * stack: nothing decoded outlives the call. */
static void on_payload(opd_req_t *r, const unsigned char *p, uint32_t len) {
  opd_session_t *s = r->s;
  char err[200];
  msgpack_object obj;
  opd_mp_arena_t arena;

  /* [RUN, id, body]: a body the session's run cache holds skips the
   * decoder (daemon/run/runcache.c); any other is remembered for the cache */
  if (len > 3 && p[0] == 0x93 && p[1] == OPD_MSG_RUN && s->hello) {
    uint64_t id;
    uint32_t k = opd__mp_get_uint(p + 2, len - 2, &id);
    if (k > 0) {
      r->id = id;
      if (opd__run_cached(r, p + 2 + k, len - 2 - k)) {
        s->srv->requests++;
        opd__runq_start(s);
        return;
      }
      r->body = p + 2 + k;
      r->body_len = len - 2 - k;
    }
  }
  opd__mp_arena_init(&arena);
  int rc = opd__mp_decode(&arena, p, len, OPD_MAX_DEPTH, &obj, err, sizeof err);
  if (rc != 0) {
    opd__out_goodbye(s, rc, "bad frame: %s", err);
  } else if (obj.type != MSGPACK_OBJECT_ARRAY || obj.via.array.size != 3 ||
             obj.via.array.ptr[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
             obj.via.array.ptr[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
             obj.via.array.ptr[2].type != MSGPACK_OBJECT_MAP) {
    opd__out_goodbye(s, OPD_EPROTO,
                     "bad frame: a request must be [type, id, body-map]");
  } else {
    s->srv->requests++;
    r->id = obj.via.array.ptr[1].via.u64;
    opd__handle(r, &obj);
  }
  opd__mp_arena_destroy(&arena);
  opd__runq_start(s);
}

/* The transports' fail callback: code 0, the peer is gone (or the socket
 * failed): close now; else a goodbye naming why. */
static void on_fail(opd_session_t *s, int code, const char *why) {
  if (code == 0) {
    /* the peer went (or its socket failed): a debug line, the session's
     * one line at info is its connect */
    LOG_DEBUG("session %llu: %s", (unsigned long long)s->id, why);
    opd__session_close(s);
  } else {
    opd__out_goodbye(s, code, "%s", why);
  }
}

static const opd_transport_cb_t session_cb = {
    .payload = on_payload, .fail = on_fail, .ready = pump};

/* ---- closing ---------------------------------------------------------- */

static void maybe_free(opd_session_t *s) {
  /* runs still on a device use the session's streams and arenas */
  if (!s->poll_closed || !opd__runq_idle(s)) return;
  opd_server_t *srv = s->srv;
  opd__unpublish_all(s);
  opd__ring_free(s);
  opd__run_cache_free(s);
  opd__graphs_release_all(s);
  opd__arena_release_all(s);
  opd__backend_dev.session_end(s);
  opd__devq_session_end(s);
  if (s->priority) opd__devq_latency(srv, -1); /* counted at hello */
  if (s->prev) s->prev->next = s->next;
  else srv->sessions = s->next;
  if (s->next) s->next->prev = s->prev;
  srv->n_sessions--;
  if (s->reserved) srv->n_reserved--;
  s->acct->clients--;
  opd__acct_put(srv, s->acct);
  if (!s->quiet) LOG_DEBUG("session %llu: closed", (unsigned long long)s->id);
  opd__sock_free(s);
  free(s->arenas);
  free(s);
  /* freed memory back to the system, not kept in malloc's free lists:
   * after many clients went, the daemon returns to its baseline */
  if (srv->trim_pending > (1u << 20)) {
    malloc_trim(0);
    srv->trim_pending = 0;
  }
  if (srv->stopping && srv->n_sessions == 0) {
    /* the last session is gone: let the loop end */
    uv_stop(srv->loop);
  }
}

static void on_poll_closed(uv_handle_t *h) {
  opd_session_t *s = h->data;
  s->poll_closed = 1;
  maybe_free(s);
}

void opd__session_close(opd_session_t *s) {
  if (s->fd < 0) return;
  int fd = s->fd;
  s->closing = 1;
  s->fd = -1; /* first: dropped jobs send nothing, and a failed send cannot
                 get back here to close the handle twice */
  opd__runq_drop(s, OPD_ECLOSED, "connection closed");
  opd__sock_close(s);
  opd__ring_close(s);
  uv_close((uv_handle_t *)&s->poll, on_poll_closed);
  close(fd);
}

void opd__session_shutdown(opd_session_t *s) {
  if (s->fd < 0 || s->goodbye) return;
  s->closing = 1;
  opd__runq_drop(s, s->srv->goodbye_code, s->srv->goodbye_why);
  s->goodbye = 1;
  pump(s);
}

/* The session moves on: its queued runs, the frames read now or left in
 * rbuf while it was throttled, then a close it is due. Called from the
 * loop's callbacks only (the socket's, a run's completion, the ring and
 * sessions watchers, timers, signals), never from inside a request. */
static void pump(opd_session_t *s) {
  do opd__runq_start(s);
  while (opd__sock_unread(s) >= OPD_FRAME_HEADER && opd__sock_frames(s) > 0);
  if (s->fd < 0) {
    maybe_free(s);
    return;
  }
  if (s->goodbye && opd__runq_idle(s)) {
    if (s->goodbye == 1)
      opd__out_goodbye(s, s->srv->goodbye_code, "%s", s->srv->goodbye_why);
    if (s->fd >= 0 && opd__sock_unsent(s) == 0) {
      opd__session_close(s);
      return;
    }
  }
  opd__sock_update(s);
}

/* ---- deadlines and limits that came free ------------------------------ */

void opd__sessions_sweep(opd_server_t *srv, uint64_t now) {
  const opd_limits_t *l = &srv->cfg.limits;
  uint64_t hs = (uint64_t)l->handshake_ms * 1000000u;
  uint64_t fr = (uint64_t)l->frame_ms * 1000000u;
  for (opd_session_t *s = srv->sessions, *next; s; s = next) {
    next = s->next;
    if (s->fd < 0) continue;
    if (!opd__sock_armed(s, UV_READABLE | UV_WRITABLE)) {
      /* not read (throttled) and nothing to write: the loop does not poll
       * its socket, so a peer that died is found here */
      struct pollfd pfd = {.fd = s->fd, .events = 0};
      if (poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLHUP | POLLERR))) {
        LOG_INFO("session %llu: peer gone while its session was not read",
                 (unsigned long long)s->id);
        opd__session_close(s);
        continue;
      }
    }
    if (s->goodbye == 2) {
      /* a peer that does not read its goodbye is not waited for */
      if (now - s->t_goodbye > fr && !opd__runq_running(s))
        opd__session_close(s);
      continue;
    }
    char why[160];
    if (!s->hello && now - s->t_accept > hs) {
      snprintf(why, sizeof why, opd__sock_unread(s) > 0
               ? "no hello within %u ms (--handshake-timeout-ms): a frame "
                 "was left unfinished"
               : "no hello within %u ms (--handshake-timeout-ms)",
               l->handshake_ms);
      opd__out_goodbye(s, OPD_ETIMEDOUT, "%s", why);
      pump(s);
    } else if (opd__sock_partial_since(s) != 0 &&
               now - opd__sock_partial_since(s) > fr) {
      snprintf(why, sizeof why, "a frame was left unfinished for %u ms "
               "(--frame-timeout-ms)", l->frame_ms);
      opd__out_goodbye(s, OPD_ETIMEDOUT, "%s", why);
      pump(s);
    }
  }
}

/* Reads the throttled sessions again (their limits came free). */
static void unthrottle(opd_server_t *srv) {
  srv->unthrottle = 0;
  for (opd_session_t *s = srv->sessions, *next; s; s = next) {
    next = s->next;
    if (s->fd >= 0 && !s->closing && !opd__sock_armed(s, UV_READABLE))
      pump(s);
  }
}

/* The sessions' watcher (daemon/loop.h): after each poll phase, the
 * throttled sessions are read again once a uid's or the daemon's run limit
 * came free; until then the loop does not block. */
static void sessions_check(opd_server_t *srv) {
  if (srv->unthrottle) unthrottle(srv);
}

static int sessions_wants_spin(const opd_server_t *srv, uint64_t now) {
  (void)now;
  return srv->unthrottle;
}

static const opd_watcher_t sessions_watcher = {
    .name = "sessions", .check = sessions_check,
    .wants_spin = sessions_wants_spin};

void opd__sessions_init(opd_server_t *srv) {
  opd__loop_watch(srv, &sessions_watcher);
}
