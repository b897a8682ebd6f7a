/* libopd transport: socket and ring I/O, the reader, reply routing.
 *
 * DESIGN
 * Requests are framed into a local buffer (frame.c) and sent whole under
 * `send_mu`, so threads never interleave bytes: through the submission
 * ring when the connection has rings and no fd travels with the request,
 * else on the socket (fds as SCM_RIGHTS with the first byte,
 * common/unixsock.c). Replies are routed by id: the thread that finds no
 * reader becomes the reader (leader/follower, progress()), reads whatever
 * frames have arrived (read_some on the socket; ring_read_some spins on
 * the completion ring, or spins briefly and sleeps on its futex, and looks
 * at the socket for goodbyes and fd-carrying replies), marks each waiting
 * slot done and wakes the others; its own reply may come first or last.
 * The socket stays blocking; waits with a timeout use poll().
 *
 * Each reply is decoded in one pass (opd__mp_decode) into the connection's
 * arena, which needs no malloc for an ordinary reply, and the commonest
 * reply ({} or {"ns": uint}) is recognized without the decoder at all
 * (deliver_ok).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client/libopd/internal.h"
#include "common/clock.h"
#include "common/unixsock.h"

/* A spinning reader polls the socket this often */
#define SOCKET_LOOK_NS 50000
/* A spinning reader reads the clock (deadlines, the socket look, the
 * adaptive sleep) once per this many looks at the ring, so that a look
 * costs one load and a pause: ~2 us of spinning between clock reads. */
#define CLOCK_TURNS 64
/* An adaptive reader spins this long before it sleeps on the ring */
#define ADAPTIVE_SPIN_NS 20000
/* A spinning reader whose reply takes longer than this starts napping */
#define SPIN_BACKOFF_NS 100000

static slot_t *slot_find(opd_client_t *c, uint64_t id) {
  for (size_t i = 0; i < c->n_slots; i++)
    if (c->slots[i].id == id) return &c->slots[i];
  return NULL;
}

static void slot_remove(opd_client_t *c, slot_t *s) {
  if (s->msg) free(s->msg); /* both NULL after a plain success */
  if (s->payload) free(s->payload);
  if (s->fd >= 0) close(s->fd);
  *s = c->slots[--c->n_slots];
}

int opd__slot_add(opd_client_t *c, uint64_t id, int want_body) {
  if (c->n_slots == c->cap_slots) {
    size_t cap = c->cap_slots ? c->cap_slots * 2 : 16;
    slot_t *ns = realloc(c->slots, cap * sizeof *ns);
    if (ns == NULL) return OPD_ENOMEM;
    c->slots = ns;
    c->cap_slots = cap;
  }
  c->slots[c->n_slots++] = (slot_t){.id = id, .want_body = want_body, .fd = -1};
  c->n_pending++;
  return 0;
}

static void set_broken(opd_client_t *c, int code, const char *msg) {
  if (c->broken) return;
  c->broken = code;
  snprintf(c->broken_msg, sizeof c->broken_msg, "%s", msg);
}

/* The common reply without the decoder: [REPLY, id, 0, body] with body
 * {} or {"ns": uint}, as the daemon writes them in place (daemon/outbox.c
 * send_msg, daemon/jobs.c opd__job_finish). Returns 1 if p is one (delivered),
 * 0 for the full path. */
static int deliver_ok(opd_client_t *c, const unsigned char *p, uint32_t len) {
  uint64_t id, ns;
  if (len < 5 || p[0] != 0x94 || p[1] != OPD_MSG_REPLY) return 0;
  uint32_t k = opd__mp_get_uint(p + 2, len - 2, &id);
  if (k == 0 || 3 + k >= len || p[2 + k] != 0) return 0;
  const unsigned char *b = p + 3 + k;
  uint32_t blen = len - 3 - k;
  if (!(blen == 1 && b[0] == 0x80) &&
      !(blen > 4 && memcmp(b, "\x81\xa2ns", 4) == 0 &&
        opd__mp_get_uint(b + 4, blen - 4, &ns) == blen - 4))
    return 0;
  slot_t *s = slot_find(c, id);
  if (s != NULL && !s->done) {
    s->done = 1;
    s->code = 0;
    c->n_pending--;
    if (s->want_body && (s->payload = malloc(len)) != NULL) {
      memcpy(s->payload, p, len);
      s->payload_len = len;
    }
  }
  return 1;
}

/* Handles one reply payload; caller holds mu. */
static void deliver(opd_client_t *c, const unsigned char *p, uint32_t len) {
  char err[160];
  msgpack_object o;

  if (deliver_ok(c, p, len)) return;

  int rc = opd__mp_decode(&c->arena, p, len, OPD_MAX_DEPTH, &o, err, sizeof err);
  if (rc != 0 || o.type != MSGPACK_OBJECT_ARRAY || o.via.array.size != 4) {
    char why[240];
    snprintf(why, sizeof why, "the daemon sent a malformed reply (%s)",
             rc != 0 ? err : "not [type, id, code, body]");
    set_broken(c, rc != 0 ? rc : OPD_EPROTO, why);
    opd__mp_arena_reset(&c->arena);
    return;
  }
  const msgpack_object *f = o.via.array.ptr;
  uint64_t type = 0, id = 0;
  int64_t code = 0;
  opd__mp_uint(&f[0], &type);
  opd__mp_uint(&f[1], &id);
  opd__mp_int(&f[2], &code);
  const msgpack_object *m = opd__mp_get(&f[3], "message");
  char msg[400];
  msg[0] = '\0'; /* not `= ""`: that would clear all 400 bytes per reply */
  if (m != NULL && m->type == MSGPACK_OBJECT_STR) { /* long: truncated */
    size_t n = m->via.str.size < sizeof msg - 1 ? m->via.str.size : sizeof msg - 1;
    memcpy(msg, m->via.str.ptr, n);
    msg[n] = '\0';
  }

  if (type == OPD_MSG_GOODBYE) {
    char full[460];
    snprintf(full, sizeof full, "the daemon closed the connection: %s",
             msg[0] ? msg : opd__errdefault((int)code));
    set_broken(c, code < 0 ? (int)code : OPD_ECLOSED, full);
  } else if (type == OPD_MSG_REPLY) {
    slot_t *s = slot_find(c, id);
    if (s != NULL && !s->done) {
      s->done = 1;
      s->code = (int)code;
      c->n_pending--;
      if (code < 0) s->msg = strdup(msg[0] ? msg : opd__errdefault((int)code));
      if (s->want_body && code == 0 && (s->payload = malloc(len)) != NULL) {
        memcpy(s->payload, p, len);
        s->payload_len = len;
      }
    }
    const msgpack_object *has_fd = opd__mp_get(&f[3], "fd");
    if (has_fd != NULL && has_fd->type == MSGPACK_OBJECT_BOOLEAN &&
        has_fd->via.boolean && c->n_rfds > 0) {
      int fd = c->rfds[0];
      memmove(c->rfds, c->rfds + 1, (size_t)--c->n_rfds * sizeof(int));
      if (s != NULL && s->fd < 0) s->fd = fd;
      else close(fd);
    }
  }
  opd__mp_arena_reset(&c->arena);
}

/* Reads what has arrived (waiting up to timeout_ms, < 0 forever) into rbuf.
 * Called without mu by the one reading thread. Returns 0, OPD_ETIMEDOUT,
 * or a connection error. */
static int read_some(opd_client_t *c, int timeout_ms) {
  if (c->rcap - c->rlen < 65536) {
    size_t cap = c->rcap ? c->rcap * 2 : 65536 * 2;
    size_t max = (size_t)c->max_frame + OPD_FRAME_HEADER + 65536;
    if (cap > max && c->rcap >= max) cap = c->rcap;
    if (cap != c->rcap) {
      unsigned char *nb = realloc(c->rbuf, cap);
      if (nb == NULL) return OPD_ENOMEM;
      c->rbuf = nb;
      c->rcap = cap;
    }
  }
  if (timeout_ms >= 0) {
    struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
    int r;
    do r = poll(&pfd, 1, timeout_ms);
    while (r < 0 && errno == EINTR);
    if (r == 0) return OPD_ETIMEDOUT;
  }
  int fds[8], nfds, ctrunc;
  ssize_t n;
  do n = opd__recv_fds(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, fds, 8,
                       &nfds, &ctrunc, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0) return OPD_EIO;
  /* fds the daemon passed (export replies): kept in arrival order */
  if (nfds > 0) {
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < nfds; i++) {
      if (c->n_rfds < 8) c->rfds[c->n_rfds++] = fds[i];
      else close(fds[i]);
    }
    pthread_mutex_unlock(&c->mu);
  }
  if (n == 0) return OPD_ECLOSED;
  c->rlen += (size_t)n;
  return 0;
}

/* Moves what the completion ring holds into rbuf as frames (while rbuf
 * has room for a slot). Returns 1 if it moved something, 0 if the ring was
 * empty, OPD_EPROTO if it is corrupt. */
static int ring_drain(opd_client_t *c, uint32_t max) {
  int got = 0;
  while (c->rcap - c->rlen >= max + OPD_FRAME_HEADER) {
    uint32_t len;
    int rc = opd__ring_pop(&c->cq, c->rbuf + c->rlen + OPD_FRAME_HEADER, max,
                           &len);
    if (rc < 0) return OPD_EPROTO;
    if (rc == 1) break;
    opd__frame_put_len(c->rbuf + c->rlen, len);
    c->rlen += OPD_FRAME_HEADER + len;
    got = 1;
  }
  return got;
}

/* The ring transport's read_some: moves what the completion ring holds
 * into rbuf as frames (so deliver_frames treats both transports alike),
 * and watches the socket too (goodbyes, fd-carrying replies, EOF). Waits by
 * spinning (spin), or spinning briefly then sleeping on the ring's futex
 * (adaptive). Called without mu by the one reading thread. */
static int ring_read_some(opd_client_t *c, int timeout_ms) {
  uint32_t max = opd__ring_max_msg(&c->cq);
  if (c->rcap - c->rlen < max + OPD_FRAME_HEADER) {
    size_t cap = c->rcap ? c->rcap * 2 : 65536 * 2;
    while (cap - c->rlen < max + OPD_FRAME_HEADER) cap *= 2;
    unsigned char *nb = realloc(c->rbuf, cap);
    if (nb == NULL) return OPD_ENOMEM;
    c->rbuf = nb;
    c->rcap = cap;
  }
  uint64_t spin_start = 0, sock_at = 0; /* when to look at the socket */
  uint64_t deadline = 0;                 /* ns; 0: none (timeout_ms < 0) */
  for (unsigned turn = 1;; turn++) {
    int got = ring_drain(c, max);
    if (got != 0) return got < 0 ? got : 0;
    /* the clock only every CLOCK_TURNS (a reply within ~2 us never reads
     * it) */
    if (turn % CLOCK_TURNS != 0) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      continue;
    }
    uint64_t now = opd__now_ns();
    if (spin_start == 0) {
      spin_start = now, sock_at = now + SOCKET_LOOK_NS;
      if (timeout_ms >= 0) deadline = now + (uint64_t)timeout_ms * 1000000u;
    }
    /* the socket (goodbyes, fd-carrying replies, EOF): every
     * SOCKET_LOOK_NS of spinning (not at once: a system call there would
     * delay every reply), and before any sleep */
    int sleep_next = c->ring != OPD_RING_SPIN && now - spin_start >= ADAPTIVE_SPIN_NS;
    if (now >= sock_at || sleep_next) {
      struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
      if (poll(&pfd, 1, 0) > 0) {
        /* replies the daemon pushed before its goodbye come first */
        if (ring_drain(c, max) < 0) return OPD_EPROTO;
        return read_some(c, 0);
      }
      sock_at = now + SOCKET_LOOK_NS;
    }
    if (deadline && now >= deadline) return OPD_ETIMEDOUT;
    if (!sleep_next) {
      uint64_t spun = now - spin_start;
      if (spun >= SPIN_BACKOFF_NS) {
        /* a request that runs long: its kernels need the cores more than
         * this wait does; nap an eighth of the time waited so far (at
         * most 1 ms), so that the reply is late by at most ~1/8 */
        struct timespec nap = {0, (long)(spun / 8 < 1000000 ? spun / 8 : 1000000)};
        nanosleep(&nap, NULL);
        continue;
      }
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      continue;
    }
    /* adaptive: sleep on the ring (the daemon wakes it), at most 2 ms at a
     * time so that the socket is looked at too */
    int64_t left = deadline ? (int64_t)(deadline - now) : 2000000;
    if (left > 2000000) left = 2000000;
    if (opd__ring_wait_message(&c->cq, 0, left) < 0) return OPD_EPROTO;
    sock_at = 0; /* look at the socket next turn */
  }
}

/* Delivers complete frames in rbuf; caller holds mu and is the reader. */
static void deliver_frames(opd_client_t *c) {
  size_t off = 0;
  while (c->rlen - off >= OPD_FRAME_HEADER) {
    uint32_t len = opd__frame_get_len(c->rbuf + off);
    if (len > c->max_frame + 1024u) {
      set_broken(c, OPD_EPROTO, "the daemon sent an oversized frame");
      break;
    }
    if (c->rlen - off < OPD_FRAME_HEADER + (size_t)len) break;
    deliver(c, c->rbuf + off + OPD_FRAME_HEADER, len);
    off += OPD_FRAME_HEADER + len;
  }
  if (off > 0 && c->rlen > off) memmove(c->rbuf, c->rbuf + off, c->rlen - off);
  c->rlen -= off;
}

/* Waits (holding mu on entry and exit) until done(c, arg) is true, the
 * connection breaks, or the deadline (< 0: none) passes. Returns 0,
 * OPD_ETIMEDOUT or the broken code. */
static int progress(opd_client_t *c, int (*done)(opd_client_t *, void *),
                    void *arg, int64_t deadline) {
  while (!done(c, arg)) {
    if (c->broken) return c->broken;
    int64_t left = deadline < 0 ? -1 : deadline - opd__now_ms();
    if (deadline >= 0 && left <= 0) return OPD_ETIMEDOUT;
    if (!c->reading) {
      c->reading = 1;
      pthread_mutex_unlock(&c->mu);
      int ms = (int)(left > INT32_MAX ? INT32_MAX : left);
      int rc = c->ring ? ring_read_some(c, ms) : read_some(c, ms);
      pthread_mutex_lock(&c->mu);
      c->reading = 0;
      if (rc == OPD_ECLOSED)
        set_broken(c, rc, "the daemon closed the connection");
      else if (rc == OPD_EPROTO)
        set_broken(c, rc, "the completion ring is corrupt");
      else if (rc != 0 && rc != OPD_ETIMEDOUT)
        set_broken(c, rc, "reading from the daemon failed");
      deliver_frames(c);
      pthread_cond_broadcast(&c->cv);
    } else if (deadline < 0) {
      pthread_cond_wait(&c->cv, &c->mu);
    } else {
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      int64_t ns = ts.tv_nsec + (left % 1000) * 1000000;
      ts.tv_sec += left / 1000 + ns / 1000000000;
      ts.tv_nsec = ns % 1000000000;
      pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
  }
  return 0;
}

static int slot_done(opd_client_t *c, void *arg) {
  slot_t *s = slot_find(c, *(uint64_t *)arg);
  return s == NULL || s->done;
}

static int below_inflight(opd_client_t *c, void *arg) {
  (void)arg;
  return c->n_pending < c->max_inflight;
}

/* Pushes a request payload to the submission ring, waiting for room. */
static int ring_send(opd_client_t *c, const void *p, uint32_t len) {
  int rc;
  pthread_mutex_lock(&c->send_mu);
  while ((rc = opd__ring_push(&c->sq, p, len)) == 1) {
    if (c->broken) break;
    /* full: the daemon is behind; wait (bounded, then re-check broken);
     * a spinning client spins all the while: the daemon does not look
     * for it sleeping (ringsvc.c) */
    if (opd__ring_wait_room(&c->sq, c->ring == OPD_RING_SPIN ? 2000000 : 20000,
                            2000000) < 0) {
      rc = OPD_EPROTO;
      break;
    }
  }
  pthread_mutex_unlock(&c->send_mu);
  if (rc == 1) return opd__fail(c->broken, "%s", c->broken_msg);
  if (rc < 0) return opd__fail(OPD_EPROTO, "the submission ring is corrupt");
  return 0;
}

/* Sends a framed request (fbuf starts with room for the header): through
 * the ring when there is one and no fd travels with it, else the socket. */
static int send_frame(opd_client_t *c, fbuf_t *b, int pass_fd) {
  if (b->oom) return opd__fail(OPD_ENOMEM, "out of memory building a request");
  size_t len = b->size - OPD_FRAME_HEADER;
  if (c->ring && pass_fd < 0 && len <= opd__ring_max_msg(&c->sq))
    return ring_send(c, b->data + OPD_FRAME_HEADER, (uint32_t)len);
  return opd__send_frame_fds(c, b, &pass_fd, pass_fd >= 0);
}

int opd__send_frame_fds(opd_client_t *c, fbuf_t *b, const int *fds,
                        int nfds) {
  if (b->size - OPD_FRAME_HEADER > c->max_frame)
    return opd__fail(OPD_ETOOBIG, "request of %zu bytes exceeds the daemon's "
                     "frame limit of %u", b->size - OPD_FRAME_HEADER, c->max_frame);
  opd__frame_put_len((unsigned char *)b->data,
                     (uint32_t)(b->size - OPD_FRAME_HEADER));
  size_t off = 0;
  int rc = 0;
  pthread_mutex_lock(&c->send_mu);
  while (off < b->size) {
    /* the fds go with the first byte only */
    ssize_t n = opd__send_fds(c->fd, b->data + off, b->size - off, fds,
                              off == 0 ? nfds : 0, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      rc = opd__fail(errno == EPIPE || errno == ECONNRESET ? OPD_ECLOSED : OPD_EIO,
                     "sending to the daemon failed: %s", strerror(errno));
      break;
    }
    off += (size_t)n;
  }
  pthread_mutex_unlock(&c->send_mu);
  return rc;
}

/* A send failed because the daemon closed the connection: it may have said
 * why in a goodbye that is still unread (shutting down, too many clients,
 * a poisoned GPU). Reads what is there and returns that reason's code with
 * its message, or `rc` when there is none. */
static int salvage_goodbye(opd_client_t *c, int rc) {
  char why[OPD_ERRMSG_CAP];
  snprintf(why, sizeof why, "%s", opd_last_error());
  pthread_mutex_lock(&c->mu);
  if (!c->reading && !c->broken) {
    c->reading = 1;
    pthread_mutex_unlock(&c->mu);
    int r = read_some(c, 100);
    pthread_mutex_lock(&c->mu);
    c->reading = 0;
    if (r == 0) deliver_frames(c);
    pthread_cond_broadcast(&c->cv);
  }
  if (c->broken && c->broken != OPD_ECLOSED)
    rc = opd__fail(c->broken, "%s", c->broken_msg);
  else
    opd__fail(rc, "%s", why);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* Registers slot `id`, sends the frame. On failure the slot is gone. */
int opd__submit_frame(opd_client_t *c, fbuf_t *b, uint64_t id, int want_body,
                      int pass_fd) {
  pthread_mutex_lock(&c->mu);
  int rc = c->broken ? c->broken : 0;
  if (rc == 0 && c->n_pending >= c->max_inflight)
    rc = progress(c, below_inflight, NULL, -1);
  if (rc == 0) rc = opd__slot_add(c, id, want_body);
  pthread_mutex_unlock(&c->mu);
  if (rc != 0)
    return rc == OPD_ENOMEM ? opd__fail(rc, "out of memory")
                            : opd__fail(rc, "%s", c->broken_msg);
  rc = send_frame(c, b, pass_fd);
  if (rc == OPD_ECLOSED || rc == OPD_EIO) rc = salvage_goodbye(c, rc);
  if (rc != 0) {
    pthread_mutex_lock(&c->mu);
    slot_t *s = slot_find(c, id);
    if (s != NULL) {
      if (!s->done) c->n_pending--;
      slot_remove(c, s);
    }
    pthread_mutex_unlock(&c->mu);
  }
  return rc;
}

/* Waits for request id; on success with a body, *payload (malloc) is the
 * whole reply payload. */
int opd__wait_reply(opd_client_t *c, uint64_t id, int timeout_ms,
                    char **payload, size_t *len, int *fd) {
  int64_t deadline = timeout_ms < 0 ? -1 : opd__now_ms() + timeout_ms;
  pthread_mutex_lock(&c->mu);
  slot_t *s = slot_find(c, id);
  if (s == NULL) {
    pthread_mutex_unlock(&c->mu);
    return opd__fail(OPD_EINVAL, "request %llu is not pending on this connection",
                     (unsigned long long)id);
  }
  int rc = progress(c, slot_done, &id, deadline);
  s = slot_find(c, id);
  if (rc == OPD_ETIMEDOUT && s != NULL && !s->done) {
    pthread_mutex_unlock(&c->mu);
    return opd__fail(rc, "request %llu: no reply within %d ms",
                     (unsigned long long)id, timeout_ms);
  }
  if (s != NULL && s->done) {
    rc = s->code;
    if (rc != 0) opd__fail(rc, "%s", s->msg ? s->msg : opd__errdefault(rc));
    if (payload) {
      *payload = s->payload;
      *len = s->payload_len;
      s->payload = NULL;
    }
    if (fd) {
      *fd = s->fd;
      s->fd = -1;
    }
    slot_remove(c, s);
  } else {
    if (s != NULL) {
      c->n_pending--;
      slot_remove(c, s);
    }
    opd__fail(rc, "%s", c->broken_msg);
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* A request with a body packed by `pack`; *payload gets the reply. */
int opd__call(opd_client_t *c, int type,
              void (*pack)(msgpack_packer *, const void *), const void *arg,
              int pass_fd, char **payload, size_t *len) {
  fbuf_t b;
  msgpack_packer pk;
  uint64_t id = opd__new_id(c);
  opd__frame_begin(&b, &pk, type, id);
  if (pack) pack(&pk, arg);
  else msgpack_pack_map(&pk, 0);
  int rc = opd__submit_frame(c, &b, id, payload != NULL, pass_fd);
  opd__fbuf_free(&b);
  if (rc != 0) return rc;
  return opd__wait_reply(c, id, -1, payload, len, NULL);
}

/* The body map of the reply, or NULL if it is malformed. */
const msgpack_object *opd__reply_decode(reply_t *r) {
  char err[160];
  opd__mp_arena_init(&r->arena);
  if (r->payload == NULL ||
      opd__mp_decode(&r->arena, r->payload, r->len, OPD_MAX_DEPTH, &r->obj, err,
                     sizeof err) != 0 ||
      r->obj.type != MSGPACK_OBJECT_ARRAY || r->obj.via.array.size != 4)
    return NULL;
  return &r->obj.via.array.ptr[3];
}

void opd__reply_free(reply_t *r) {
  opd__mp_arena_destroy(&r->arena);
  free(r->payload);
  r->payload = NULL;
}
