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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/wire.h"
#include "daemon/log.h"
#include "daemon/server.h"

static void on_poll(uv_poll_t *h, int status, int events);
static void on_poll_closed(uv_handle_t *h);
static int parse_frames(opd_session_t *s);
static void update_poll(opd_session_t *s);
static void send_goodbye(opd_session_t *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define READ_CHUNK (64 * 1024)

void opd__session_accept(opd_server_t *srv, int fd) {
  opd_session_t *s = calloc(1, sizeof *s);
  struct ucred cred;
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
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0) {
    s->pid = cred.pid;
    s->uid = cred.uid;
    s->gid = cred.gid;
  }
  if (uv_poll_init(srv->loop, &s->poll, fd) != 0) {
    LOG_ERROR("uv_poll_init failed for session %llu",
              (unsigned long long)s->id);
    free(s->arenas);
    free(s);
    close(fd);
    return;
  }
  s->poll.data = s;
  s->next = srv->sessions;
  if (srv->sessions) srv->sessions->prev = s;
  srv->sessions = s;
  srv->n_sessions++;
  srv->sessions_total++;
  LOG_INFO("session %llu: connected (pid %d uid %u gid %u)",
           (unsigned long long)s->id, (int)s->pid, (unsigned)s->uid,
           (unsigned)s->gid);
  if (srv->n_sessions > srv->cfg.limits.max_clients) {
    send_goodbye(s, OPD_ELIMIT, "too many clients (limit %u)",
                 srv->cfg.limits.max_clients);
    return;
  }
  update_poll(s);
}

/* ---- writing ---------------------------------------------------------- */

/* Sends what the socket takes now; the rest stays in wbuf. Returns 0, or -1
 * when the session was closed because the peer is gone. */
static ssize_t send_fd(int sock, const void *buf, size_t len, int fd) {
  union {
    char b[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } cbuf;
  struct iovec iov = {(void *)buf, len};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
                       .msg_control = cbuf.b, .msg_controllen = sizeof cbuf.b};
  memset(&cbuf, 0, sizeof cbuf);
  struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &fd, sizeof fd);
  return sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
}

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
    ssize_t n = fd >= 0 ? send_fd(s->fd, s->wbuf + s->woff, end - s->woff, fd)
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
  if (s->woff == s->wlen) s->woff = s->wlen = 0;
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

static size_t pack_message(char *out, size_t cap, const char *fmt,
                           va_list ap) {
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
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
  char body[600];
  va_list ap;
  va_start(ap, fmt);
  size_t n = pack_message(body, sizeof body, fmt, ap);
  va_end(ap);
  s->srv->errors++;
  LOG_DEBUG("session %llu: request %llu: %s (%.*s)",
            (unsigned long long)s->id, (unsigned long long)id,
            opd__errname(code), (int)n, body);
  opd__reply(s, id, code, body, n);
}

static void send_goodbye(opd_session_t *s, int code, const char *fmt, ...) {
  char body[600];
  va_list ap;
  va_start(ap, fmt);
  size_t n = pack_message(body, sizeof body, fmt, ap);
  va_end(ap);
  send_msg(s, OPD_MSG_GOODBYE, 0, code, body, n);
  LOG_INFO("session %llu: closing: %s", (unsigned long long)s->id, body + 10);
  s->closing = 1;
  s->goodbye = 2; /* sent: close once the running job and wbuf are done */
}

void opd__session_goodbye(opd_session_t *s, int code, const char *why) {
  send_goodbye(s, code, "%s", why);
  opd__session_pump(s);
}

/* ---- reading ---------------------------------------------------------- */

static int throttled(const opd_session_t *s) {
  const opd_limits_t *l = &s->srv->cfg.limits;
  return s->n_queued >= l->max_inflight || s->wlen - s->woff >= l->max_wbuf;
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

static void take_fds(opd_session_t *s, struct msghdr *msg) {
  for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    int *fds = (int *)CMSG_DATA(c);
    for (size_t i = 0; i < n; i++) {
      int fd;
      memcpy(&fd, &fds[i], sizeof fd);
      if (s->n_fds < OPD_MAX_PENDING_FDS)
        s->fds[s->n_fds++] = fd;
      else
        close(fd);
    }
  }
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
  union {
    char buf[CMSG_SPACE(sizeof(int) * OPD_MAX_PENDING_FDS)];
    struct cmsghdr align;
  } cbuf;
  struct iovec iov = {s->rbuf + s->rlen, s->rcap - s->rlen};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
                       .msg_control = cbuf.buf,
                       .msg_controllen = sizeof cbuf.buf};
  ssize_t n = recvmsg(s->fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
    LOG_INFO("session %llu: recvmsg: %s", (unsigned long long)s->id,
             strerror(errno));
    opd__session_close(s);
    return;
  }
  if (msg.msg_controllen > 0) take_fds(s, &msg);
  if (msg.msg_flags & MSG_CTRUNC) {
    send_goodbye(s, OPD_EPROTO,
                 "more than %d file descriptors sent at once",
                 OPD_MAX_PENDING_FDS);
    return;
  }
  if (n == 0) {
    LOG_INFO("session %llu: peer closed the connection",
             (unsigned long long)s->id);
    opd__session_close(s);
    return;
  }
  s->rlen += (size_t)n;
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
   * decoder (daemon/run.c); any other is remembered for the cache */
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
  int handled = 0;
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
    if (s->rlen - off < (size_t)OPD_FRAME_HEADER + len) break;
    opd__handle_payload(s, s->rbuf + off + OPD_FRAME_HEADER, len);
    off += OPD_FRAME_HEADER + len;
    handled++;
  }
  if (s->fd >= 0 && off > 0) {
    memmove(s->rbuf, s->rbuf + off, s->rlen - off);
    s->rlen -= off;
  }
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
  LOG_INFO("session %llu: closed", (unsigned long long)s->id);
  free(s->arenas);
  free(s->rbuf);
  free(s->wbuf);
  free(s);
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
    s->n_queued--;
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
  for (int i = 0; i < s->n_fds; i++) close(s->fds[i]);
  s->n_fds = 0;
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
