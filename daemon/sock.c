/* The socket transport: a session's Unix socket, framing, the fds passed
 * with frames, and the bytes of replies not yet sent.
 *
 * DESIGN
 * Connections are driven with uv_poll_t on the raw socket rather than a
 * uv_pipe_t: arenas arrive as memfds over SCM_RIGHTS, and libuv's stream
 * API accepts only sockets and pipes as passed handles. We read with
 * recvmsg() (checking MSG_CTRUNC) into a per-session buffer and hand every
 * complete frame up through the session's callbacks (s->cb: payload, fail,
 * ready); this file never calls session or handler code. Replies are sent
 * at once when the socket takes them; the rest waits in wbuf until
 * UV_WRITABLE. A framing error (length over the limit, too many fds) and a
 * dead peer go up as cb->fail, which ends the session.
 *
 * Fds belong to their frame: the kernel ends a read at a sendmsg that
 * carries fds, but may begin that read with earlier frames, so fds go to
 * the last frame that begins in that read (fds_owner) and those its
 * request does not take are closed after it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h" /* opd__now_ns */
#include "common/unixsock.h"
#include "common/wire.h"
#include "daemon/limits.h"
#include "daemon/log.h"
#include "daemon/sock.h"

#define READ_CHUNK (64 * 1024)
/* A session's read or write buffer larger than this is freed once empty:
 * an idle session holds no more than that, whatever it sent before. */
#define BUF_KEEP (4 * READ_CHUNK)

static void on_poll(uv_poll_t *h, int status, int events);

/* The transport cannot go on: tell the session (code 0: the peer is gone;
 * else the goodbye's code), with why. */
static void fail(opd_session_t *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(opd_session_t *s, int code, const char *fmt, ...) {
  char why[200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  s->cb->fail(s, code, why);
}

/* ---- writing ---------------------------------------------------------- */

/* Sends what the socket takes now; the rest stays in wbuf. A queued fd goes
 * with the first byte of its frame. Returns 0, or -1 when the peer is gone
 * (the session was told). */
static int flush(opd_session_t *s) {
  while (s->sock.wlen > s->sock.woff) {
    size_t end = s->sock.wlen;
    int fd = -1;
    if (s->sock.n_wfds > 0) {
      if (s->sock.wfd_at[0] == s->sock.woff) fd = s->sock.wfd[0];
      if (s->sock.n_wfds > (fd >= 0)) /* stop before the next fd's frame */
        end = s->sock.wfd_at[fd >= 0 ? 1 : 0];
    }
    ssize_t n = fd >= 0 ? opd__send_fds(s->fd, s->sock.wbuf + s->sock.woff,
                                        end - s->sock.woff, &fd, 1,
                                        MSG_NOSIGNAL | MSG_DONTWAIT)
                        : send(s->fd, s->sock.wbuf + s->sock.woff, end - s->sock.woff,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      fail(s, 0, "send: %s", strerror(errno));
      return -1;
    }
    if (fd >= 0) { /* the kernel holds its own reference now */
      close(fd);
      memmove(s->sock.wfd, s->sock.wfd + 1, (size_t)--s->sock.n_wfds * sizeof *s->sock.wfd);
      memmove(s->sock.wfd_at, s->sock.wfd_at + 1, (size_t)s->sock.n_wfds * sizeof *s->sock.wfd_at);
    }
    s->sock.woff += (size_t)n;
  }
  if (s->sock.woff == s->sock.wlen) {
    s->sock.woff = s->sock.wlen = 0;
    if (s->sock.wcap > BUF_KEEP) { /* after a burst of replies */
      free(s->sock.wbuf);
      s->sock.wbuf = NULL;
      s->sock.wcap = 0;
    }
  }
  return 0;
}

void opd__sock_write(opd_session_t *s, const void *hdr, size_t hlen,
                     const void *body, size_t blen) {
  if (s->fd < 0) return; /* peer gone: replies are dropped */
  size_t need = s->sock.wlen + hlen + blen;
  if (need > s->sock.wcap) {
    size_t cap = s->sock.wcap ? s->sock.wcap : 4096;
    while (cap < need) cap *= 2;
    unsigned char *nb = realloc(s->sock.wbuf, cap);
    if (nb == NULL) {
      fail(s, 0, "out of memory queueing a reply");
      return;
    }
    s->sock.wbuf = nb;
    s->sock.wcap = cap;
  }
  memcpy(s->sock.wbuf + s->sock.wlen, hdr, hlen);
  if (blen) memcpy(s->sock.wbuf + s->sock.wlen + hlen, body, blen);
  s->sock.wlen += hlen + blen;
  if (s->sock.wlen - s->sock.woff == hlen + blen && flush(s) < 0) return;
  opd__sock_update(s);
}

int opd__sock_queue_fd(opd_session_t *s, int fd) {
  if (s->fd < 0 || s->sock.n_wfds >= OPD_MAX_PENDING_FDS) {
    close(fd);
    return OPD_ELIMIT;
  }
  s->sock.wfd_at[s->sock.n_wfds] = s->sock.wlen; /* where the next frame will start */
  s->sock.wfd[s->sock.n_wfds++] = fd;
  return 0;
}

void opd__sock_update(opd_session_t *s) {
  if (s->fd < 0) return;
  int want = 0;
  if (!s->closing && !opd__limit_read(s)) want |= UV_READABLE;
  if (s->sock.wlen > s->sock.woff) want |= UV_WRITABLE;
  if (want == s->sock.poll_events) return;
  s->sock.poll_events = want;
  if (want)
    uv_poll_start(&s->poll, want, on_poll);
  else
    uv_poll_stop(&s->poll);
}

/* ---- fds -------------------------------------------------------------- */

int opd__req_take_fds(opd_req_t *r, int need, int *fds, opd_err_t *err) {
  if (r->n_fds < need && r->fd_lost)
    return opd__errf(err, OPD_EFD, "the daemon could not receive the file "
                     "descriptor%s sent with the request: it is out of file "
                     "descriptors (%s); try again when it has fewer clients",
                     need > 1 ? "s" : "",
                     r->fd_lost == ENFILE ? "ENFILE" : "EMFILE");
  if (r->n_fds == 0 && need > 0)
    return opd__errf(err, OPD_EFD, "no file descriptor was sent with the "
                     "request (send %s with SCM_RIGHTS in the same sendmsg as "
                     "the request's bytes)", need > 1 ? "them" : "it");
  if (r->n_fds < need)
    return opd__errf(err, OPD_EFD, "%d file descriptors must be sent with the "
                     "request, %d came", need, r->n_fds);
  memcpy(fds, r->fds, (size_t)need * sizeof *fds);
  r->n_fds -= need;
  memmove(r->fds, r->fds + need, (size_t)r->n_fds * sizeof *r->fds);
  return 0;
}

/* Closes the fds a request did not claim: they belong to the frame they
 * came with, never to a later request. */
static void close_stray_fds(opd_session_t *s, opd_req_t *r) {
  for (int i = 0; i < r->n_fds; i++) close(r->fds[i]);
  if (r->n_fds > 0)
    LOG_DEBUG("session %llu: closed %d file descriptor(s) its request did "
              "not take", (unsigned long long)s->id, r->n_fds);
  r->n_fds = 0;
}

/* Which frame fds that came with the bytes just read belong to: the last
 * frame that begins in this read (libopd sends a frame and its fds in one
 * sendmsg), or, when none does, the frame the read continues: either way
 * the last frame that begins in rbuf (which begins at a frame). */
static size_t fds_owner(const opd_session_t *s) {
  size_t p = 0;
  while (s->sock.rlen - p >= OPD_FRAME_HEADER) {
    uint32_t len = opd__frame_get_len(s->sock.rbuf + p);
    if (len > s->srv->cfg.limits.max_frame) break; /* the parser ends it */
    size_t next = p + OPD_FRAME_HEADER + len;
    if (next >= s->sock.rlen) break;
    p = next;
  }
  return p;
}

/* Keeps the fds just received for the frame at `owner` (closing those
 * there is no room for). */
static void take_fds(opd_session_t *s, const int *fds, int n, size_t owner) {
  for (int i = 0; i < n; i++) {
    if (s->sock.n_later < OPD_MAX_PENDING_FDS) {
      s->sock.later_at[s->sock.n_later] = owner;
      s->sock.later[s->sock.n_later++] = fds[i];
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

/* ---- reading ---------------------------------------------------------- */

static void do_read(opd_session_t *s) {
  const opd_limits_t *l = &s->srv->cfg.limits;
  size_t max = (size_t)l->max_frame + OPD_FRAME_HEADER + READ_CHUNK;
  if (s->sock.rcap - s->sock.rlen < READ_CHUNK && s->sock.rcap < max) {
    size_t cap = s->sock.rcap ? s->sock.rcap * 2 : READ_CHUNK;
    if (cap > max) cap = max;
    unsigned char *nb = realloc(s->sock.rbuf, cap);
    if (nb == NULL) {
      fail(s, 0, "out of memory reading a frame");
      return;
    }
    s->sock.rbuf = nb;
    s->sock.rcap = cap;
  }
  if (s->sock.rcap == s->sock.rlen) return; /* full of frames we are not taking */
  int fds[OPD_MAX_PENDING_FDS], nfds, ctrunc;
  ssize_t n = opd__recv_fds(s->fd, s->sock.rbuf + s->sock.rlen, s->sock.rcap - s->sock.rlen, fds,
                            OPD_MAX_PENDING_FDS, &nfds, &ctrunc,
                            MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
    fail(s, 0, "recvmsg: %s", strerror(errno));
    return;
  }
  size_t owner = 0;
  if (n > 0) s->sock.rlen += (size_t)n;
  if (n > 0 && (nfds > 0 || ctrunc)) owner = fds_owner(s);
  if (nfds > 0) take_fds(s, fds, nfds, owner);
  if (ctrunc) {
    int why = fds_short(s->fd);
    if (why != 0) {
      s->sock.lost_err = why; /* the request that wanted them says so */
      s->sock.lost_at = owner;
      LOG_WARN("session %llu: a file descriptor it sent was lost: the daemon "
               "is out of file descriptors (%s)", (unsigned long long)s->id,
               strerror(why));
    } else {
      fail(s, OPD_EPROTO, "more than %d file descriptors sent at once",
           OPD_MAX_PENDING_FDS);
      return;
    }
  }
  if (n == 0) fail(s, 0, "peer closed the connection");
}

int opd__sock_frames(opd_session_t *s) {
  size_t off = 0;
  int handled = 0, partial = 0;
  while (s->fd >= 0 && !s->closing && !opd__limit_read(s) &&
         s->sock.rlen - off >= OPD_FRAME_HEADER) {
    uint32_t len = opd__frame_get_len(s->sock.rbuf + off);
    if (len > s->srv->cfg.limits.max_frame) {
      fail(s, OPD_ETOOBIG, "frame of %u bytes exceeds the limit of %u bytes",
           len, s->srv->cfg.limits.max_frame);
      break;
    }
    size_t end = off + OPD_FRAME_HEADER + len;
    if (s->sock.rlen < end) {
      partial = 1;
      break;
    }
    /* this frame's fds (those of later frames wait), offered to its
     * request and closed after it if it did not take them */
    opd_req_t r = {.s = s, .via = s->ring ? OPD_VIA_RING : OPD_VIA_SOCKET};
    int k = 0;
    while (k < s->sock.n_later && s->sock.later_at[k] <= off) k++;
    memcpy(r.fds, s->sock.later, (size_t)k * sizeof *r.fds);
    r.n_fds = k;
    s->sock.n_later -= k;
    memmove(s->sock.later, s->sock.later + k, (size_t)s->sock.n_later * sizeof *s->sock.later);
    memmove(s->sock.later_at, s->sock.later_at + k,
            (size_t)s->sock.n_later * sizeof *s->sock.later_at);
    if (s->sock.lost_err && s->sock.lost_at <= off) {
      r.fd_lost = s->sock.lost_err;
      s->sock.lost_err = 0;
    }
    s->cb->payload(&r, s->sock.rbuf + off + OPD_FRAME_HEADER, len);
    close_stray_fds(s, &r);
    off = end;
    handled++;
  }
  if (s->fd >= 0 && !s->closing && !opd__limit_read(s) && s->sock.rlen > off &&
      s->sock.rlen - off < OPD_FRAME_HEADER)
    partial = 1;
  if (s->fd >= 0 && off > 0) {
    memmove(s->sock.rbuf, s->sock.rbuf + off, s->sock.rlen - off);
    s->sock.rlen -= off;
    for (int i = 0; i < s->sock.n_later; i++) s->sock.later_at[i] -= off;
    s->sock.lost_at = s->sock.lost_at > off ? s->sock.lost_at - off : 0;
  }
  if (s->sock.rlen == 0 && s->sock.rcap > BUF_KEEP) { /* after a big frame */
    free(s->sock.rbuf);
    s->sock.rbuf = NULL;
    s->sock.rcap = 0;
  }
  /* a frame begun and not finished: the clock of --frame-timeout-ms
   * starts at the first look that finds it so */
  if (!partial) s->sock.t_partial = 0;
  else if (s->sock.t_partial == 0 || handled > 0) s->sock.t_partial = opd__now_ns();
  return handled;
}

static void on_poll(uv_poll_t *h, int status, int events) {
  opd_session_t *s = h->data;
  if (status < 0) {
    fail(s, 0, "poll: %s", uv_strerror(status));
    return;
  }
  if ((events & UV_WRITABLE) && flush(s) < 0) return;
  if ((events & UV_READABLE) && !s->closing) do_read(s);
  s->cb->ready(s);
}

/* ---- closing ---------------------------------------------------------- */

void opd__sock_close(opd_session_t *s) {
  for (int i = 0; i < s->sock.n_later; i++) close(s->sock.later[i]);
  s->sock.n_later = 0;
  s->sock.lost_err = 0;
  for (int i = 0; i < s->sock.n_wfds; i++) close(s->sock.wfd[i]);
  s->sock.n_wfds = 0;
}

void opd__sock_free(opd_session_t *s) {
  s->srv->trim_pending += s->sock.rcap + s->sock.wcap;
  free(s->sock.rbuf);
  free(s->sock.wbuf);
  s->sock.rbuf = s->sock.wbuf = NULL;
  s->sock.rcap = s->sock.wcap = 0;
}
