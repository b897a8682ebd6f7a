/* One client connection: socket I/O, framing, passed fds, closing.
 *
 * DESIGN
 * Reads go into a per-session buffer with recvmsg(); every complete frame
 * in it is decoded and checked in one pass (opd__mp_decode, common/wire.h)
 * and handed to opd__handle(). A framing error (length over the limit, bytes
 * that are not msgpack, a payload that is not [type, id, body]) ends the
 * session with a goodbye naming the problem: after it the stream cannot be
 * trusted. Replies are sent at once when the socket takes them; the rest
 * waits in wbuf until UV_WRITABLE.
 *
 * Back-pressure: a session stops being read while it has max_inflight runs
 * queued or max_wbuf reply bytes unsent, and is read again when that
 * clears, so a client that floods or stops reading costs bounded memory and
 * never slows the others.
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

#include "common/unixsock.h"
#include "common/wire.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/server.h"

static void on_poll(uv_poll_t *h, int status, int events);
static void on_poll_closed(uv_handle_t *h);
static int parse_frames(opd_session_t *s);
static void update_poll(opd_session_t *s);
static void send_goodbye(opd_session_t *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define READ_CHUNK (64 * 1024)
/* A session's read or write buffer larger than this is freed once empty:
 * an idle session holds no more than that, whatever it sent before. */
#define BUF_KEEP (4 * READ_CHUNK)

/* 0 when s may be served, else the code of its goodbye and why. */
static int admit(opd_server_t *srv, opd_session_t *s, char *why, size_t cap) {
  const opd_limits_t *l = &srv->cfg.limits;
  if (!opd__access_allowed(srv, s->uid, s->gid, s->pid)) {
    snprintf(why, cap, "uid %u may not use this daemon (not in "
             "--allow-users or --allow-groups)", (unsigned)s->uid);
    return OPD_EPERM;
  }
  int over_all = srv->n_sessions - srv->n_reserved > l->max_clients;
  int over_uid = s->acct->clients > l->max_uid_clients;
  if (!over_all && !over_uid) return 0;
  /* the reserve is for an admin whom others lock out, not one that fills
   * the daemon itself */
  if (opd__is_admin(srv, s->uid) && srv->n_reserved < l->reserved_clients &&
      s->acct->clients - 1 < (over_all ? l->max_clients : l->max_uid_clients)) {
    s->reserved = 1;
    srv->n_reserved++;
    return 0;
  }
  if (over_all)
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
    send_goodbye(s, code, "%s", why);
    opd__session_pump(s); /* closes once the goodbye is out */
    return;
  }
  LOG_INFO("session %llu: connected (pid %d uid %u gid %u%s)",
           (unsigned long long)s->id, (int)s->pid, (unsigned)s->uid,
           (unsigned)s->gid, s->reserved ? ", on a reserved slot" : "");
  update_poll(s);
}

/* ---- writing ---------------------------------------------------------- */

/* Sends what the socket takes now; the rest stays in wbuf. A queued fd goes
 * with the first byte of its frame. Returns 0, or -1 when the session was
 * closed because the peer is gone. */
static int flush(opd_session_t *s) {
  while (s->wlen > s->woff) {
    size_t end = s->wlen;
    int fd = -1;
    if (s->n_wfds > 0) {
      if (s->wfd_at[0] == s->woff) fd = s->wfd[0];
      if (s->n_wfds > (fd >= 0)) /* stop before the next fd's frame */
        end = s->wfd_at[fd >= 0 ? 1 : 0];
    }
    ssize_t n = fd >= 0 ? opd__send_fds(s->fd, s->wbuf + s->woff,
                                        end - s->woff, &fd, 1,
                                        MSG_NOSIGNAL | MSG_DONTWAIT)
                        : send(s->fd, s->wbuf + s->woff, end - s->woff,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      LOG_INFO("session %llu: send: %s", (unsigned long long)s->id,
               strerror(errno));
      opd__session_close(s);
      return -1;
    }
    if (fd >= 0) { /* the kernel holds its own reference now */
      close(fd);
      memmove(s->wfd, s->wfd + 1, (size_t)--s->n_wfds * sizeof *s->wfd);
      memmove(s->wfd_at, s->wfd_at + 1, (size_t)s->n_wfds * sizeof *s->wfd_at);
    }
    s->woff += (size_t)n;
  }
  if (s->woff == s->wlen) {
    s->woff = s->wlen = 0;
    if (s->wcap > BUF_KEEP) { /* after a burst of replies */
      free(s->wbuf);
      s->wbuf = NULL;
      s->wcap = 0;
    }
  }
  return 0;
}

static void write_frame(opd_session_t *s, const void *hdr, size_t hlen,
                        const void *body, size_t blen) {
  if (s->fd < 0) return; /* peer gone: replies are dropped */
  size_t need = s->wlen + hlen + blen;
  if (need > s->wcap) {
    size_t cap = s->wcap ? s->wcap : 4096;
    while (cap < need) cap *= 2;
    unsigned char *nb = realloc(s->wbuf, cap);
    if (nb == NULL) {
      LOG_ERROR("session %llu: out of memory queueing a reply",
                (unsigned long long)s->id);
      opd__session_close(s);
      return;
    }
    s->wbuf = nb;
    s->wcap = cap;
  }
  memcpy(s->wbuf + s->wlen, hdr, hlen);
  if (blen) memcpy(s->wbuf + s->wlen + hlen, body, blen);
  s->wlen += hlen + blen;
  if (s->wlen - s->woff == hlen + blen && flush(s) < 0) return;
  update_poll(s);
}

/* Frames [type, id, code, body] where body is packed bytes or {}. */
static void send_msg(opd_session_t *s, int type, uint64_t id, int code,
                     const char *body, size_t body_len) {
  /* the fixed head, written in place (common/wire.h): 1 + 3 * 9 bytes at
   * most */
  unsigned char hdr[OPD_FRAME_HEADER + 1 + 3 * OPD_MP_PUT_MAX];
  unsigned char *p = hdr + OPD_FRAME_HEADER;
  *p++ = 0x94;
  p = opd__mp_put_uint(p, (uint32_t)type);
  p = opd__mp_put_uint(p, id);
  p = opd__mp_put_int(p, code);
  size_t head = (size_t)(p - hdr) - OPD_FRAME_HEADER;
  static const char empty_map = (char)0x80;
  if (body == NULL) body = &empty_map, body_len = 1;
  if (s->ring && type == OPD_MSG_REPLY && !s->reply_socket && s->fd >= 0 &&
      opd__ring_reply(s, hdr + OPD_FRAME_HEADER, head, body, body_len))
    return;
  opd__frame_put_len(hdr, (uint32_t)(head + body_len));
  write_frame(s, hdr, OPD_FRAME_HEADER + head, body, body_len);
}

void opd__reply(opd_session_t *s, uint64_t id, int code, const char *body,
                size_t body_len) {
  send_msg(s, OPD_MSG_REPLY, id, code, body, body_len);
}

int opd__reply_fd(opd_session_t *s, uint64_t id, const char *body,
                  size_t body_len, int fd) {
  if (s->fd < 0 || s->n_wfds >= OPD_MAX_PENDING_FDS) {
    close(fd);
    return OPD_ELIMIT;
  }
  s->wfd_at[s->n_wfds] = s->wlen; /* where this frame will start */
  s->wfd[s->n_wfds++] = fd;
  s->reply_socket = 1; /* an fd travels only on the socket */
  send_msg(s, OPD_MSG_REPLY, id, 0, body, body_len);
  s->reply_socket = 0;
  return 0;
}

/* {"message": msg}, packed into out (cap bytes); msg is cut to fit. */
static size_t pack_text(char *out, size_t cap, const char *msg) {
  size_t n = strlen(msg);
  if (n + 16 > cap) n = cap - 16;
  msgpack_sbuffer sb = {.size = 0, .data = out, .alloc = cap};
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  msgpack_pack_map(&pk, 1);
  msgpack_pack_str_with_body(&pk, "message", 7);
  msgpack_pack_str_with_body(&pk, msg, n);
  return sb.size;
}

void opd__reply_error(opd_session_t *s, uint64_t id, int code,
                      const char *fmt, ...) {
  char msg[512], body[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  size_t n = pack_text(body, sizeof body, msg);
  s->srv->errors++;
  if (opd__log_level >= OPD_LOG_DEBUG) {
    char esc[600];
    LOG_DEBUG("session %llu: request %llu: %s (%s)", (unsigned long long)s->id,
              (unsigned long long)id, opd__errname(code),
              opd__log_escape(msg, esc, sizeof esc));
  }
  opd__reply(s, id, code, body, n);
}

static void send_goodbye(opd_session_t *s, int code, const char *fmt, ...) {
  char msg[512], body[600], esc[600];
  va_list ap;
  if (s->goodbye == 2) return; /* one goodbye per session */
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  size_t n = pack_text(body, sizeof body, msg);
  send_msg(s, OPD_MSG_GOODBYE, 0, code, body, n);
  if (!s->quiet)
    LOG_INFO("session %llu: closing: %s", (unsigned long long)s->id,
             opd__log_escape(msg, esc, sizeof esc));
  s->closing = 1;
  s->goodbye = 2; /* sent: close once the running job and wbuf are done */
  s->t_goodbye = opd__now_ns();
}

void opd__session_goodbye(opd_session_t *s, int code, const char *why) {
  send_goodbye(s, code, "%s", why);
  opd__session_pump(s);
}

int opd__session_take_fds(opd_session_t *s, int need, int *fds, char *err,
                          size_t errlen) {
  if (s->n_fds < need) {
    if (s->fd_lost)
      snprintf(err, errlen, "the daemon could not receive the file "
               "descriptor%s sent with the request: it is out of file "
               "descriptors (%s); try again when it has fewer clients",
               need > 1 ? "s" : "", s->fd_lost == ENFILE ? "ENFILE" : "EMFILE");
    else if (s->n_fds == 0)
      snprintf(err, errlen, "no file descriptor was sent with the request "
               "(send %s with SCM_RIGHTS in the same sendmsg as the "
               "request's bytes)", need > 1 ? "them" : "it");
    else
      snprintf(err, errlen, "%d file descriptors must be sent with the "
               "request, %d came", need, s->n_fds);
    return OPD_EFD;
  }
  memcpy(fds, s->fds, (size_t)need * sizeof *fds);
  s->n_fds -= need;
  memmove(s->fds, s->fds + need, (size_t)s->n_fds * sizeof *s->fds);
  return 0;
}

/* ---- reading ---------------------------------------------------------- */

/* Not read while its runs are at a limit (its own, its uid's, the
 * daemon's) or while its unread replies (socket buffer and completion-ring
 * overflow) pass --max-reply-bytes. */
static int throttled(const opd_session_t *s) {
  const opd_limits_t *l = &s->srv->cfg.limits;
  return opd__limit_inflight(s) ||
         s->wlen - s->woff + s->over_bytes >= l->max_wbuf;
}

static void update_poll(opd_session_t *s) {
  if (s->fd < 0) return;
  int want = 0;
  if (!s->closing && !throttled(s)) want |= UV_READABLE;
  if (s->wlen > s->woff) want |= UV_WRITABLE;
  if (want == s->poll_events) return;
  s->poll_events = want;
  if (want)
    uv_poll_start(&s->poll, want, on_poll);
  else
    uv_poll_stop(&s->poll);
}

/* Closes the fds the request just handled did not claim: they belong to
 * the frame they came with, never to a later request. */
static void close_stray_fds(opd_session_t *s) {
  for (int i = 0; i < s->n_fds; i++) close(s->fds[i]);
  if (s->n_fds > 0)
    LOG_DEBUG("session %llu: closed %d file descriptor(s) its request did "
              "not take", (unsigned long long)s->id, s->n_fds);
  s->n_fds = 0;
  s->fd_lost = 0;
}

static void close_later_fds(opd_session_t *s) {
  for (int i = 0; i < s->n_later; i++) close(s->later[i]);
  s->n_later = 0;
  s->lost_err = 0;
}

/* Which frame fds that came with the bytes just read belong to. The
 * kernel hands fds over with the read that takes the first bytes of their
 * sendmsg and ends that read there, but the read may begin with earlier
 * bytes sent without fds. So the owner is the last frame that begins in
 * this read (libopd sends a frame and its fds in one sendmsg), or, when
 * none does, the frame the read continues: either way the last frame that
 * begins in rbuf (which begins at a frame). */
static size_t fds_owner(const opd_session_t *s) {
  size_t p = 0;
  while (s->rlen - p >= OPD_FRAME_HEADER) {
    uint32_t len = opd__frame_get_len(s->rbuf + p);
    if (len > s->srv->cfg.limits.max_frame) break; /* the parser ends it */
    size_t next = p + OPD_FRAME_HEADER + len;
    if (next >= s->rlen) break;
    p = next;
  }
  return p;
}

/* Keeps the fds just received for the frame at `owner` (closing those
 * there is no room for). */
static void take_fds(opd_session_t *s, const int *fds, int n, size_t owner) {
  for (int i = 0; i < n; i++) {
    if (s->n_later < OPD_MAX_PENDING_FDS) {
      s->later_at[s->n_later] = owner;
      s->later[s->n_later++] = fds[i];
    } else {
      close(fds[i]);
    }
  }
}

/* MSG_CTRUNC: more fds than a request may carry, or none could be
 * installed because this process (EMFILE) or the system (ENFILE) is out
 * of them. A probe dup tells which. */
static int fds_short(int sock) {
  int probe = fcntl(sock, F_DUPFD_CLOEXEC, 0);
  if (probe >= 0) {
    close(probe);
    return 0;
  }
  return errno == EMFILE || errno == ENFILE ? errno : 0;
}

static void do_read(opd_session_t *s) {
  const opd_limits_t *l = &s->srv->cfg.limits;
  size_t max = (size_t)l->max_frame + OPD_FRAME_HEADER + READ_CHUNK;
  if (s->rcap - s->rlen < READ_CHUNK && s->rcap < max) {
    size_t cap = s->rcap ? s->rcap * 2 : READ_CHUNK;
    if (cap > max) cap = max;
    unsigned char *nb = realloc(s->rbuf, cap);
    if (nb == NULL) {
      opd__session_close(s);
      return;
    }
    s->rbuf = nb;
    s->rcap = cap;
  }
  if (s->rcap == s->rlen) return; /* full of frames we are not taking */
  int fds[OPD_MAX_PENDING_FDS], nfds, ctrunc;
  ssize_t n = opd__recv_fds(s->fd, s->rbuf + s->rlen, s->rcap - s->rlen, fds,
                            OPD_MAX_PENDING_FDS, &nfds, &ctrunc,
                            MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
    LOG_INFO("session %llu: recvmsg: %s", (unsigned long long)s->id,
             strerror(errno));
    opd__session_close(s);
    return;
  }
  size_t owner = 0;
  if (n > 0) s->rlen += (size_t)n;
  if (n > 0 && (nfds > 0 || ctrunc)) owner = fds_owner(s);
  if (nfds > 0) take_fds(s, fds, nfds, owner);
  if (ctrunc) {
    int why = fds_short(s->fd);
    if (why != 0) {
      s->lost_err = why; /* the request that wanted them says so */
      s->lost_at = owner;
      LOG_WARN("session %llu: a file descriptor it sent was lost: the daemon "
               "is out of file descriptors (%s)", (unsigned long long)s->id,
               strerror(why));
    } else {
      send_goodbye(s, OPD_EPROTO,
                   "more than %d file descriptors sent at once",
                   OPD_MAX_PENDING_FDS);
      return;
    }
  }
  if (n == 0) {
    LOG_DEBUG("session %llu: peer closed the connection",
             (unsigned long long)s->id);
    opd__session_close(s);
  }
}

/* Decodes one payload and hands it to opd__handle(). The arena is on the
 * stack: nothing decoded outlives the call, and a nested call (a handler
 * pumping the session) has its own. */
void opd__handle_payload(opd_session_t *s, const unsigned char *p,
                         uint32_t len) {
  char err[200];
  msgpack_object obj;
  opd_mp_arena_t arena;

  /* [RUN, id, body]: a body the session's run cache holds skips the
   * decoder (daemon/jobs.c); any other is remembered for the cache */
  if (len > 3 && p[0] == 0x93 && p[1] == OPD_MSG_RUN && s->hello) {
    uint64_t id;
    uint32_t k = opd__mp_get_uint(p + 2, len - 2, &id);
    if (k > 0) {
      if (opd__run_cached(s, id, p + 2 + k, len - 2 - k)) {
        s->srv->requests++;
        return;
      }
      s->run_body = p + 2 + k;
      s->run_body_len = len - 2 - k;
    }
  }
  opd__mp_arena_init(&arena);
  int rc = opd__mp_decode(&arena, p, len, OPD_MAX_DEPTH, &obj, err, sizeof err);
  if (rc != 0) {
    send_goodbye(s, rc, "bad frame: %s", err);
  } else if (obj.type != MSGPACK_OBJECT_ARRAY || obj.via.array.size != 3 ||
             obj.via.array.ptr[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
             obj.via.array.ptr[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
             obj.via.array.ptr[2].type != MSGPACK_OBJECT_MAP) {
    send_goodbye(s, OPD_EPROTO,
                 "bad frame: a request must be [type, id, body-map]");
  } else {
    s->srv->requests++;
    opd__handle(s, &obj);
  }
  s->run_body = NULL;
  opd__mp_arena_destroy(&arena);
}

/* Handles the complete frames in rbuf. Returns the number handled. */
static int parse_frames(opd_session_t *s) {
  size_t off = 0;
  int handled = 0, partial = 0;
  if (s->parsing) return 0; /* a frame's handler got here again */
  s->parsing = 1;
  while (s->fd >= 0 && !s->closing && !throttled(s) &&
         s->rlen - off >= OPD_FRAME_HEADER) {
    uint32_t len = opd__frame_get_len(s->rbuf + off);
    if (len > s->srv->cfg.limits.max_frame) {
      send_goodbye(s, OPD_ETOOBIG,
                   "frame of %u bytes exceeds the limit of %u bytes", len,
                   s->srv->cfg.limits.max_frame);
      break;
    }
    size_t end = off + OPD_FRAME_HEADER + len;
    if (s->rlen < end) {
      partial = 1;
      break;
    }
    /* this frame's fds (those of later frames wait), offered to its
     * request and closed after it if it did not take them */
    int k = 0;
    while (k < s->n_later && s->later_at[k] <= off) k++;
    memcpy(s->fds, s->later, (size_t)k * sizeof *s->fds);
    s->n_fds = k;
    s->n_later -= k;
    memmove(s->later, s->later + k, (size_t)s->n_later * sizeof *s->later);
    memmove(s->later_at, s->later_at + k,
            (size_t)s->n_later * sizeof *s->later_at);
    if (s->lost_err && s->lost_at <= off) {
      s->fd_lost = s->lost_err;
      s->lost_err = 0;
    }
    opd__handle_payload(s, s->rbuf + off + OPD_FRAME_HEADER, len);
    close_stray_fds(s);
    off = end;
    handled++;
  }
  if (s->fd >= 0 && !s->closing && !throttled(s) && s->rlen > off &&
      s->rlen - off < OPD_FRAME_HEADER)
    partial = 1;
  if (s->fd >= 0 && off > 0) {
    memmove(s->rbuf, s->rbuf + off, s->rlen - off);
    s->rlen -= off;
    for (int i = 0; i < s->n_later; i++) s->later_at[i] -= off;
    s->lost_at = s->lost_at > off ? s->lost_at - off : 0;
  }
  if (s->rlen == 0 && s->rcap > BUF_KEEP) { /* after a big frame */
    free(s->rbuf);
    s->rbuf = NULL;
    s->rcap = 0;
  }
  /* a frame begun and not finished: the clock of --frame-timeout-ms
   * starts at the first look that finds it so */
  if (!partial) s->t_partial = 0;
  else if (s->t_partial == 0 || handled > 0) s->t_partial = opd__now_ns();
  s->parsing = 0;
  return handled;
}

static void on_poll(uv_poll_t *h, int status, int events) {
  opd_session_t *s = h->data;
  if (status < 0) {
    LOG_INFO("session %llu: poll: %s", (unsigned long long)s->id,
             uv_strerror(status));
    opd__session_close(s);
    return;
  }
  if ((events & UV_WRITABLE) && flush(s) < 0) return;
  if ((events & UV_READABLE) && !s->closing) do_read(s);
  opd__session_pump(s);
}

/* ---- closing ---------------------------------------------------------- */

static void maybe_free(opd_session_t *s) {
  if (!s->poll_closed || s->running != NULL) return;
  opd_server_t *srv = s->srv;
  opd__unpublish_all(s);
  opd__ring_free(s);
  opd__run_cache_free(s);
  opd__arena_release_all(s);
  opd__cuda_session_release(s);
  if (s->prev) s->prev->next = s->next;
  else srv->sessions = s->next;
  if (s->next) s->next->prev = s->prev;
  srv->n_sessions--;
  if (s->reserved) srv->n_reserved--;
  s->acct->clients--;
  opd__acct_put(srv, s->acct);
  if (!s->quiet) LOG_DEBUG("session %llu: closed", (unsigned long long)s->id);
  srv->trim_pending += s->rcap + s->wcap;
  free(s->arenas);
  free(s->rbuf);
  free(s->wbuf);
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

static void drop_queue(opd_session_t *s, int code, const char *msg) {
  while (s->q_head) {
    opd_job_t *j = s->q_head;
    s->q_head = j->next;
    opd__acct_inflight(s, -1);
    opd__job_drop(j, code, msg);
  }
  s->q_tail = NULL;
}

void opd__session_close(opd_session_t *s) {
  if (s->fd < 0) return;
  int fd = s->fd;
  s->closing = 1;
  s->fd = -1; /* first: dropped jobs send nothing, and a failed send cannot
                 get back here to close the handle twice */
  drop_queue(s, OPD_ECLOSED, "connection closed");
  close_stray_fds(s);
  close_later_fds(s);
  for (int i = 0; i < s->n_wfds; i++) close(s->wfd[i]);
  s->n_wfds = 0;
  opd__ring_close(s);
  uv_close((uv_handle_t *)&s->poll, on_poll_closed);
  close(fd);
}

void opd__session_shutdown(opd_session_t *s) {
  if (s->fd < 0 || s->goodbye) return;
  s->closing = 1;
  drop_queue(s, s->srv->goodbye_code, s->srv->goodbye_why);
  s->goodbye = 1;
  opd__session_pump(s);
}

void opd__session_pump(opd_session_t *s) {
  if (s->pumping) return; /* the outer call's loop picks the work up */
  s->pumping = 1;
  for (;;) {
    if (s->running == NULL && s->q_head != NULL && s->fd >= 0) {
      opd_job_t *j = s->q_head;
      s->q_head = j->next;
      if (s->q_head == NULL) s->q_tail = NULL;
      s->running = j;
      opd__job_start(j); /* inline jobs are finished when it returns */
      continue;
    }
    /* frames read now, or left in rbuf while the session was throttled */
    if (s->rlen >= OPD_FRAME_HEADER && parse_frames(s) > 0)
      continue;
    break;
  }
  s->pumping = 0;
  if (s->fd < 0) {
    maybe_free(s);
    return;
  }
  if (s->goodbye && s->running == NULL) {
    if (s->goodbye == 1)
      send_goodbye(s, s->srv->goodbye_code, "%s", s->srv->goodbye_why);
    if (s->fd >= 0 && s->wlen == s->woff) {
      opd__session_close(s);
      return;
    }
  }
  update_poll(s);
}

/* ---- deadlines and limits that came free ------------------------------ */

void opd__sessions_sweep(opd_server_t *srv, uint64_t now) {
  const opd_limits_t *l = &srv->cfg.limits;
  uint64_t hs = (uint64_t)l->handshake_ms * 1000000u;
  uint64_t fr = (uint64_t)l->frame_ms * 1000000u;
  for (opd_session_t *s = srv->sessions, *next; s; s = next) {
    next = s->next;
    if (s->fd < 0) continue;
    if (!(s->poll_events & (UV_READABLE | UV_WRITABLE))) {
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
      if (now - s->t_goodbye > fr && s->running == NULL) opd__session_close(s);
      continue;
    }
    char why[160];
    if (!s->hello && now - s->t_accept > hs) {
      snprintf(why, sizeof why, s->rlen > 0
               ? "no hello within %u ms (--handshake-timeout-ms): a frame "
                 "was left unfinished"
               : "no hello within %u ms (--handshake-timeout-ms)",
               l->handshake_ms);
      opd__session_goodbye(s, OPD_ETIMEDOUT, why);
    } else if (s->t_partial != 0 && now - s->t_partial > fr) {
      snprintf(why, sizeof why, "a frame was left unfinished for %u ms "
               "(--frame-timeout-ms)", l->frame_ms);
      opd__session_goodbye(s, OPD_ETIMEDOUT, why);
    }
  }
}

void opd__sessions_unthrottle(opd_server_t *srv) {
  srv->unthrottle = 0;
  for (opd_session_t *s = srv->sessions, *next; s; s = next) {
    next = s->next;
    if (s->fd >= 0 && !s->closing && !(s->poll_events & UV_READABLE))
      opd__session_pump(s);
  }
}
