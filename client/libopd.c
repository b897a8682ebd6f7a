/* libopd: connection, request/reply routing, arenas, runs. See opd.h.
 *
 * DESIGN
 * Requests are framed into a local buffer and sent whole under `send_mu`,
 * so threads never interleave bytes. Replies are routed by id: the thread
 * that finds no reader becomes the reader (leader/follower), reads whatever
 * frames have arrived, marks each waiting slot done and wakes the others;
 * its own reply may come first or last. The socket stays blocking; waits
 * with a timeout use poll().
 *
 * The request path is kept cheap: a frame is packed into a stack buffer
 * (fbuf_t, no libc call per small chunk) and each reply is decoded in one
 * pass (opd__mp_decode) into the connection's arena, which needs no malloc
 * for an ordinary reply.
 *
 * A connection remembers the pid that made it: after fork() the child
 * gets OPD_ESTATE instead of reading replies meant for its parent.
 *
 * Before the first byte is sent, opd_connect checks who serves the socket
 * (SO_PEERCRED: root, this user or the daemon user, check_peer): the
 * connection will carry the caller's memory as memfds.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client/json.h"
#include "common/paths.h"
#include "common/ring.h"
#include "common/wire.h"
#include "opd/opd.h"

typedef struct slot {
  uint64_t id;
  int done;
  int want_body;                 /* keep the reply payload */
  int code;
  char *msg;                     /* error message (malloc) */
  char *payload;                 /* whole reply payload (malloc) */
  size_t payload_len;
  int fd;                        /* passed with the reply, or -1 */
} slot_t;

typedef struct carena {
  uint64_t id;
  void *base;
  uint64_t size;
  int fd;                        /* the memfd, kept for sharing */
} carena_t;

struct opd_client {
  int fd;
  pid_t pid;                     /* process that connected */
  unsigned fork_gen;             /* fork_gen when it connected */
  char path[108];
  pthread_mutex_t mu;            /* everything below but rbuf */
  pthread_cond_t cv;             /* a slot completed or the reader left */
  pthread_mutex_t send_mu;       /* one frame on the wire at a time */
  int reading;                   /* a thread is reading the socket */
  int broken;                    /* 0, or why the connection is unusable */
  char broken_msg[480];
  uint64_t next_id;
  slot_t *slots;
  size_t n_slots, cap_slots;
  size_t n_pending;              /* slots not done */
  unsigned char *rbuf;           /* owned by the reading thread */
  size_t rlen, rcap;
  int rfds[8];                   /* fds received, not yet claimed (mu) */
  int n_rfds;
  opd_mp_arena_t arena;          /* decodes one reply (under mu) */
  uint32_t max_frame;
  uint32_t max_inflight;
  carena_t *arenas;
  size_t n_arenas, cap_arenas;
  char *hello_json;
  size_t hello_len;
  int ring;                      /* 0: socket; OPD_RING_SPIN/_ADAPTIVE */
  char wait_why[240];            /* why the transport is not the one asked
                                    for ("" if it is) */
  opd_ring_t sq, cq;             /* we produce sq, consume cq */
  void *ring_base;
  size_t ring_size;
  int ring_efd;                  /* adaptive: the daemon's doorbell */
};

enum { RING_ADAPTIVE = 1, RING_SPIN = 2 };
#define SOCKET_LOOK_NS 50000 /* a spinning reader polls the socket this often */
/* A spinning reader reads the clock (deadlines, the socket look, the
 * adaptive sleep) once per this many looks at the ring, so that a look
 * costs one load and a pause: ~2 us of spinning between clock reads. */
#define CLOCK_TURNS 64
#define RING_SQ_SLOTS 256
#define RING_SQ_SLOT 2048
#define RING_CQ_SLOTS 512
#define RING_CQ_SLOT 1024
#define ADAPTIVE_SPIN_NS 20000
/* A spinning reader whose reply takes longer than this starts napping */
#define SPIN_BACKOFF_NS 100000

static __thread char last_error[512];

/* Bumped in the child of every fork(): a connection made before it is not
 * the child's. Cheaper than getpid() (a system call) on every request. */
static unsigned fork_gen;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void on_fork_child(void) { fork_gen++; }
static void install_atfork(void) { pthread_atfork(NULL, NULL, on_fork_child); }

static int fail(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...) {
  char msg[sizeof last_error]; /* arguments may point into last_error */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  memcpy(last_error, msg, sizeof msg);
  return code;
}

const char *opd_last_error(void) { return last_error; }
const char *opd_strerror(int code) { return opd__errdefault(code); }
const char *opd_errname(int code) { return opd__errname(code); }
const char *opd_dtype_name(int32_t dtype) { return opd__dtype_name(dtype); }
int32_t opd_dtype_size(int32_t dtype) {
  switch (dtype) {
#define X(name, val, size, str) case val: return size;
    OPD_DTYPE_MAP(X)
#undef X
  }
  return 0;
}
int32_t opd_dtype_from_name(const char *name) {
  return name ? opd__dtype_from_name(name) : 0;
}
const char *opd_version(void) { return OPD_VERSION; }
void opd_free(void *p) { free(p); }

int opd_socket_path(const char *given, char *buf, size_t cap) {
  return opd__socket_path(given, buf, cap);
}

/* ---- frame building ----------------------------------------------------- */

/* A growable buffer with room on the stack for the common small frame. */
typedef struct fbuf {
  char *data;
  size_t size, cap;
  int oom;
  char local[1024];
} fbuf_t;

static int fbuf_grow(fbuf_t *b, size_t len) {
  size_t cap = b->cap * 2;
  while (cap < b->size + len) cap *= 2;
  char *nd = b->data == b->local ? malloc(cap) : realloc(b->data, cap);
  if (nd == NULL) {
    b->oom = 1;
    return -1;
  }
  if (b->data == b->local) memcpy(nd, b->local, b->size);
  b->data = nd;
  b->cap = cap;
  return 0;
}

/* Copies what a frame is mostly made of, 1 to 16 bytes, with two
 * fixed-size (possibly overlapping) moves, which compile to plain loads
 * and stores rather than a call to memcpy. */
static inline void copy_small(char *d, const char *s, size_t len) {
  if (len >= 8 && len <= 16) {
    memcpy(d, s, 8);
    memcpy(d + len - 8, s + len - 8, 8);
  } else if (len >= 4 && len < 8) {
    memcpy(d, s, 4);
    memcpy(d + len - 4, s + len - 4, 4);
  } else if (len < 4) {
    if (len > 0) d[0] = s[0];
    if (len > 1) d[1] = s[1];
    if (len > 2) d[2] = s[2];
  } else {
    memcpy(d, s, len);
  }
}

/* msgpack-c's packer (the requests other than run and infer) calls this
 * for every header and every string body. */
static int fbuf_write(void *data, const char *buf, size_t len) {
  fbuf_t *b = data;
  if (b->size + len > b->cap && fbuf_grow(b, len) != 0) return -1;
  copy_small(b->data + b->size, buf, len);
  b->size += len;
  return 0;
}

/* Room for n more bytes at the end of b, or NULL (b->oom is set). */
static inline unsigned char *fbuf_room(fbuf_t *b, size_t n) {
  if (b->cap - b->size < n && fbuf_grow(b, n) != 0) return NULL;
  return (unsigned char *)b->data + b->size;
}

static inline void fbuf_set_end(fbuf_t *b, unsigned char *end) {
  b->size = (size_t)((char *)end - b->data);
}

/* The run and infer frames are packed with these: msgpack written in
 * place (common/wire.h), the same bytes msgpack-c's packer writes. */
static inline void put_map(fbuf_t *b, uint32_t n) {
  unsigned char *p = fbuf_room(b, OPD_MP_PUT_MAX);
  if (p) fbuf_set_end(b, opd__mp_put_map(p, n));
}

/* A string at p, where the caller made room for OPD_MP_PUT_MAX + len. */
static inline unsigned char *put_strp(unsigned char *p, const char *s,
                                      size_t len) {
  p = opd__mp_put_str(p, (uint32_t)len);
  copy_small((char *)p, s, len);
  return p + len;
}

static inline void put_str(fbuf_t *b, const char *s, size_t len) {
  unsigned char *p = fbuf_room(b, OPD_MP_PUT_MAX + len);
  if (p) fbuf_set_end(b, put_strp(p, s, len));
}

#define PUT_KEY(b, lit) put_str((b), (lit), sizeof(lit) - 1)
#define PUT_STR(b, s) put_str((b), (s), strlen(s))

/* Starts a request frame [type, id, body...]; the caller packs the body
 * map next, with pk (msgpack-c's packer into b) or the put_ helpers. */
static void frame_begin(fbuf_t *b, msgpack_packer *pk, int type, uint64_t id) {
  unsigned char *p = (unsigned char *)b->local + OPD_FRAME_HEADER;
  b->data = b->local;
  b->cap = sizeof b->local;
  b->oom = 0;
  if (pk) msgpack_packer_init(pk, b, fbuf_write);
  *p++ = 0x93; /* fits: local holds far more than 1 + 2 * OPD_MP_PUT_MAX */
  p = opd__mp_put_uint(p, (uint32_t)type);
  fbuf_set_end(b, opd__mp_put_uint(p, id));
}

static void fbuf_free(fbuf_t *b) {
  if (b->data != b->local) free(b->data);
}

#define PACK_STR(pk, s) msgpack_pack_str_with_body((pk), (s), strlen(s))

/* ---- connection state ----------------------------------------------------- */

static int check_usable(opd_client_t *c) {
  if (c == NULL) return fail(OPD_EINVAL, "no connection (NULL)");
  if (c->fork_gen != __atomic_load_n(&fork_gen, __ATOMIC_RELAXED))
    return fail(OPD_ESTATE,
                "this connection was made in process %d; after fork() "
                "connect again in the child",
                (int)c->pid);
  return 0;
}

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

/* Adds a pending slot; caller holds mu. */
static int slot_add(opd_client_t *c, uint64_t id, int want_body) {
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

/* Handles one reply payload; caller holds mu. */
/* The common reply without the decoder: [REPLY, id, 0, body] with body
 * {} or {"ns": uint}, as the daemon writes them in place (daemon/session.c
 * send_msg, daemon/run.c job_finish). Returns 1 if p is one (delivered),
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
  union {
    char b[CMSG_SPACE(sizeof(int) * 8)];
    struct cmsghdr align;
  } cbuf;
  struct iovec iov = {c->rbuf + c->rlen, c->rcap - c->rlen};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
                       .msg_control = cbuf.b, .msg_controllen = sizeof cbuf.b};
  ssize_t n;
  do n = recvmsg(c->fd, &msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0) return OPD_EIO;
  /* fds the daemon passed (export replies): kept in arrival order */
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    int nf = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (int i = 0; i < nf; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
      pthread_mutex_lock(&c->mu);
      if (c->n_rfds < 8) c->rfds[c->n_rfds++] = fd;
      else close(fd);
      pthread_mutex_unlock(&c->mu);
    }
  }
  if (n == 0) return OPD_ECLOSED;
  c->rlen += (size_t)n;
  return 0;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The ring transport's read_some: moves what the completion ring holds
 * into rbuf as frames (so deliver_frames treats both transports alike),
 * and watches the socket too (goodbyes, fd-carrying replies, EOF). Waits by
 * spinning (spin), or spinning briefly then sleeping on the ring's futex
 * (adaptive). Called without mu by the one reading thread. */
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
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    if (spin_start == 0) {
      spin_start = now, sock_at = now + SOCKET_LOOK_NS;
      if (timeout_ms >= 0) deadline = now + (uint64_t)timeout_ms * 1000000u;
    }
    /* the socket (goodbyes, fd-carrying replies, EOF): every
     * SOCKET_LOOK_NS of spinning (not at once: a system call there would
     * delay every reply), and before any sleep */
    int sleep_next = c->ring != RING_SPIN && now - spin_start >= ADAPTIVE_SPIN_NS;
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
    int64_t left = deadline < 0 ? -1 : deadline - now_ms();
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
    if (opd__ring_wait_room(&c->sq, c->ring == RING_SPIN ? 2000000 : 20000,
                            2000000) < 0) {
      rc = OPD_EPROTO;
      break;
    }
  }
  pthread_mutex_unlock(&c->send_mu);
  if (rc == 1) return fail(c->broken, "%s", c->broken_msg);
  if (rc < 0) return fail(OPD_EPROTO, "the submission ring is corrupt");
  return 0;
}

/* Sends a framed request (fbuf starts with room for the header): through
 * the ring when there is one and no fd travels with it, else the socket. */
static int send_frame_fds(opd_client_t *c, fbuf_t *b, const int *fds, int nfds);
static int send_frame(opd_client_t *c, fbuf_t *b, int pass_fd) {
  if (b->oom) return fail(OPD_ENOMEM, "out of memory building a request");
  size_t len = b->size - OPD_FRAME_HEADER;
  if (c->ring && pass_fd < 0 && len <= opd__ring_max_msg(&c->sq))
    return ring_send(c, b->data + OPD_FRAME_HEADER, (uint32_t)len);
  return send_frame_fds(c, b, &pass_fd, pass_fd >= 0);
}

static int send_frame_fds(opd_client_t *c, fbuf_t *b, const int *fds,
                          int nfds) {
  if (b->size - OPD_FRAME_HEADER > c->max_frame)
    return fail(OPD_ETOOBIG, "request of %zu bytes exceeds the daemon's "
                "frame limit of %u", b->size - OPD_FRAME_HEADER, c->max_frame);
  opd__frame_put_len((unsigned char *)b->data,
                     (uint32_t)(b->size - OPD_FRAME_HEADER));
  union {
    char buf[CMSG_SPACE(sizeof(int) * 2)];
    struct cmsghdr align;
  } cbuf;
  size_t off = 0;
  int rc = 0;
  pthread_mutex_lock(&c->send_mu);
  while (off < b->size) {
    struct iovec iov = {b->data + off, b->size - off};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds > 0 && off == 0) {
      memset(&cbuf, 0, sizeof cbuf);
      msg.msg_control = cbuf.buf;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
      struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
      memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
    }
    ssize_t n = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      rc = fail(errno == EPIPE || errno == ECONNRESET ? OPD_ECLOSED : OPD_EIO,
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
  char why[sizeof last_error];
  snprintf(why, sizeof why, "%s", last_error);
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
    rc = fail(c->broken, "%s", c->broken_msg);
  else
    fail(rc, "%s", why);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* Registers slot `id`, sends the frame. On failure the slot is gone. */
static int submit_frame(opd_client_t *c, fbuf_t *b, uint64_t id, int want_body,
                        int pass_fd) {
  pthread_mutex_lock(&c->mu);
  int rc = c->broken ? c->broken : 0;
  if (rc == 0 && c->n_pending >= c->max_inflight)
    rc = progress(c, below_inflight, NULL, -1);
  if (rc == 0) rc = slot_add(c, id, want_body);
  pthread_mutex_unlock(&c->mu);
  if (rc != 0)
    return rc == OPD_ENOMEM ? fail(rc, "out of memory")
                            : fail(rc, "%s", c->broken_msg);
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
static int wait_reply(opd_client_t *c, uint64_t id, int timeout_ms,
                      char **payload, size_t *len, int *fd) {
  int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
  pthread_mutex_lock(&c->mu);
  slot_t *s = slot_find(c, id);
  if (s == NULL) {
    pthread_mutex_unlock(&c->mu);
    return fail(OPD_EINVAL, "request %llu is not pending on this connection",
                (unsigned long long)id);
  }
  int rc = progress(c, slot_done, &id, deadline);
  s = slot_find(c, id);
  if (rc == OPD_ETIMEDOUT && s != NULL && !s->done) {
    pthread_mutex_unlock(&c->mu);
    return fail(rc, "request %llu: no reply within %d ms",
                (unsigned long long)id, timeout_ms);
  }
  if (s != NULL && s->done) {
    rc = s->code;
    if (rc != 0) fail(rc, "%s", s->msg ? s->msg : opd__errdefault(rc));
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
    fail(rc, "%s", c->broken_msg);
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

static uint64_t new_id(opd_client_t *c) {
  return __atomic_add_fetch(&c->next_id, 1, __ATOMIC_RELAXED);
}

/* A request with a body packed by `pack`; *payload gets the reply. */
static int call(opd_client_t *c, int type,
                void (*pack)(msgpack_packer *, const void *), const void *arg,
                int pass_fd, char **payload, size_t *len) {
  fbuf_t b;
  msgpack_packer pk;
  uint64_t id = new_id(c);
  frame_begin(&b, &pk, type, id);
  if (pack) pack(&pk, arg);
  else msgpack_pack_map(&pk, 0);
  int rc = submit_frame(c, &b, id, payload != NULL, pass_fd);
  fbuf_free(&b);
  if (rc != 0) return rc;
  return wait_reply(c, id, -1, payload, len, NULL);
}

/* A control request's reply payload and its decoded form: call() or
 * wait_reply() fills payload and len, reply_decode() decodes it with the
 * same decoder as every other reply (strings point into payload), and
 * reply_free() releases both. */
typedef struct reply {
  char *payload;
  size_t len;
  opd_mp_arena_t arena;
  msgpack_object obj;
} reply_t;

/* The body map of the reply, or NULL if it is malformed. */
static const msgpack_object *reply_decode(reply_t *r) {
  char err[160];
  opd__mp_arena_init(&r->arena);
  if (r->payload == NULL ||
      opd__mp_decode(&r->arena, r->payload, r->len, OPD_MAX_DEPTH, &r->obj, err,
                     sizeof err) != 0 ||
      r->obj.type != MSGPACK_OBJECT_ARRAY || r->obj.via.array.size != 4)
    return NULL;
  return &r->obj.via.array.ptr[3];
}

static void reply_free(reply_t *r) {
  opd__mp_arena_destroy(&r->arena);
  free(r->payload);
  r->payload = NULL;
}

/* ---- connect / close ------------------------------------------------------ */

static void pack_hello(msgpack_packer *pk, const void *arg) {
  uint32_t flags = *(const uint32_t *)arg;
  char name[64];
  snprintf(name, sizeof name, "libopd %s pid %d", OPD_VERSION, (int)getpid());
  msgpack_pack_map(pk, (flags & OPD_CONNECT_HIGH_PRIORITY) ? 3 : 2);
  if (flags & OPD_CONNECT_HIGH_PRIORITY) {
    PACK_STR(pk, "priority");
    PACK_STR(pk, "high");
  }
  PACK_STR(pk, "protocol");
  msgpack_pack_uint32(pk, OPD_PROTOCOL_VERSION);
  PACK_STR(pk, "client");
  PACK_STR(pk, name);
}

/* The transport asked for: flags, else $OPD_WAIT, else adaptive rings. */
static int wait_mode(uint32_t flags) {
  if (flags & OPD_CONNECT_WAIT_SPIN) return RING_SPIN;
  if (flags & OPD_CONNECT_WAIT_ADAPTIVE) return RING_ADAPTIVE;
  if (flags & OPD_CONNECT_WAIT_SOCKET) return 0;
  const char *w = getenv("OPD_WAIT");
  if (w && strcmp(w, "spin") == 0) return RING_SPIN;
  if (w && strcmp(w, "socket") == 0) return 0;
  return RING_ADAPTIVE;
}

/* The transport in use: "spin", "adaptive" or "socket". */
const char *opd_transport(opd_client_t *c) {
  if (c == NULL) return "none";
  return c->ring == RING_SPIN ? "spin" : c->ring ? "adaptive" : "socket";
}

const char *opd_transport_why(opd_client_t *c) {
  return c != NULL ? c->wait_why : "";
}

typedef struct ring_args {
  uint64_t size;
  int mode;
} ring_args_t;

static void pack_ring_setup(msgpack_packer *pk, const void *arg) {
  const ring_args_t *a = arg;
  msgpack_pack_map(pk, 6);
  PACK_STR(pk, "size");
  msgpack_pack_uint64(pk, a->size);
  PACK_STR(pk, "sq_slots");
  msgpack_pack_uint32(pk, RING_SQ_SLOTS);
  PACK_STR(pk, "sq_slot_size");
  msgpack_pack_uint32(pk, RING_SQ_SLOT);
  PACK_STR(pk, "cq_slots");
  msgpack_pack_uint32(pk, RING_CQ_SLOTS);
  PACK_STR(pk, "cq_slot_size");
  msgpack_pack_uint32(pk, RING_CQ_SLOT);
  PACK_STR(pk, "wait");
  PACK_STR(pk, a->mode == RING_SPIN ? "spin" : "adaptive");
}

/* Creates the ring region (a sealed memfd), formats both rings, and hands
 * them (with the doorbell eventfd for adaptive) to the daemon. On failure
 * the connection stays on the socket only if the daemon refused; local
 * failures are errors. */
static int setup_rings(opd_client_t *c, int mode) {
  size_t off = (opd__ring_bytes(RING_SQ_SLOTS, RING_SQ_SLOT) + 4095) & ~(size_t)4095;
  size_t size = off + opd__ring_bytes(RING_CQ_SLOTS, RING_CQ_SLOT);
  size = (size + 4095) & ~(size_t)4095;
  int fds[2] = {-1, -1}, rc = 0;
  void *base = MAP_FAILED;
  fds[0] = memfd_create("opd-rings", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fds[0] < 0 || ftruncate(fds[0], (off_t)size) != 0 ||
      fcntl(fds[0], F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 ||
      (base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0)) ==
          MAP_FAILED) {
    rc = fail(OPD_EIO, "creating the ring region: %s", strerror(errno));
    goto out;
  }
  if (opd__ring_init(base, off, RING_SQ_SLOTS, RING_SQ_SLOT, &c->sq) != 0 ||
      opd__ring_init((char *)base + off, size - off, RING_CQ_SLOTS, RING_CQ_SLOT,
                     &c->cq) != 0) {
    rc = fail(OPD_EINTERNAL, "formatting the rings");
    goto out;
  }
  /* an eventfd for spin too: where cores are short the daemon gives
   * adaptive instead (its reply says which) */
  if ((fds[1] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
    rc = fail(OPD_EIO, "eventfd: %s", strerror(errno));
    goto out;
  }
  fbuf_t b;
  msgpack_packer pk;
  uint64_t id = new_id(c);
  ring_args_t a = {size, mode};
  frame_begin(&b, &pk, OPD_MSG_RING_SETUP, id);
  pack_ring_setup(&pk, &a);
  pthread_mutex_lock(&c->mu);
  rc = slot_add(c, id, 1); /* the reply says which wait was granted */
  pthread_mutex_unlock(&c->mu);
  if (rc == 0) rc = send_frame_fds(c, &b, fds, 2);
  fbuf_free(&b);
  reply_t r = {.payload = NULL};
  if (rc == 0) rc = wait_reply(c, id, 5000, &r.payload, &r.len, NULL);
  if (rc != 0) goto out;
  const msgpack_object *body = reply_decode(&r);
  char granted[16] = "";
  if (body != NULL &&
      opd__mp_str(opd__mp_get(body, "wait"), granted, sizeof granted) == 0 &&
      strcmp(granted, "adaptive") == 0 && mode == RING_SPIN) {
    char why[200] = "";
    opd__mp_str(opd__mp_get(body, "why"), why, sizeof why);
    snprintf(c->wait_why, sizeof c->wait_why, "spin asked, adaptive given: %s",
             why);
    mode = RING_ADAPTIVE;
  }
  reply_free(&r);
  c->sq.doorbell = fds[1];
  c->ring_efd = fds[1];
  fds[1] = -1;
  c->ring_base = base;
  c->ring_size = size;
  base = MAP_FAILED;
  c->ring = mode;
  /* who may sleep (common/ring.h, wakes): the daemon never waits for room
   * in the completion ring (it keeps replies aside), and it sleeps on the
   * submission ring only for adaptive sessions; a spinning client never
   * sleeps at all (ring_send, ring_read_some) */
  c->cq.wakes = 0;
  c->sq.wakes = mode == RING_ADAPTIVE;
out:
  if (base != MAP_FAILED) munmap(base, size);
  if (fds[0] >= 0) close(fds[0]);
  if (fds[1] >= 0) close(fds[1]);
  return rc;
}

/* The name of uid `uid` into name[cap] ("" if it has none); returns name. */
static const char *user_name(uid_t uid, char *name, size_t cap) {
  struct passwd pw, *res = NULL;
  char buf[4096];
  name[0] = '\0';
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) == 0 && res != NULL)
    snprintf(name, cap, "%s", res->pw_name);
  return name;
}

/* The uid that `user` names (a user name, or digits for a numeric uid)
 * into *uid. Returns 0, or -1 when it names no one (no such user). */
static int user_uid(const char *user, uid_t *uid) {
  struct passwd pw, *res = NULL;
  char buf[4096], *end;
  if (user[0] >= '0' && user[0] <= '9') {
    errno = 0;
    unsigned long v = strtoul(user, &end, 10);
    if (errno != 0 || *end != '\0' || v != (unsigned long)(uid_t)v ||
        (uid_t)v == (uid_t)-1)
      return -1;
    *uid = (uid_t)v;
    return 0;
  }
  if (getpwnam_r(user, &pw, buf, sizeof buf, &res) != 0 || res == NULL)
    return -1;
  *uid = res->pw_uid;
  return 0;
}

/* Checks who serves the connected socket c->fd before anything is sent to
 * it (memfds hold the caller's tensors): its SO_PEERCRED uid must be root,
 * this process's effective uid, or the daemon user ($OPD_DAEMON_USER, a
 * name or a numeric uid; unset or empty: "opd"). Another local user could
 * otherwise serve a squatted socket path (/tmp/opd-<uid>) and receive the
 * client's memory. Returns 0, OPD_EPERM (refused, the message names the
 * peer and who would have been accepted) or OPD_ECONNECT (no credentials);
 * the socket is left open either way. */
static int check_peer(opd_client_t *c) {
  struct ucred cr;
  socklen_t len = sizeof cr;
  uid_t me = geteuid(), daemon_uid;
  if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 ||
      len != sizeof cr)
    return fail(OPD_ECONNECT, "cannot tell who serves the socket %s "
                "(SO_PEERCRED: %s); refusing to send it memory", c->path,
                strerror(errno));
  if (cr.uid == 0 || cr.uid == me) return 0;
  const char *user = getenv("OPD_DAEMON_USER");
  if (user == NULL || user[0] == '\0') user = "opd";
  int known = user_uid(user, &daemon_uid) == 0;
  if (known && cr.uid == daemon_uid) return 0;
  char peer[64], who[96], hint[64];
  if (user_name(cr.uid, peer, sizeof peer)[0] != '\0')
    snprintf(hint, sizeof hint, "%s", peer);
  else
    snprintf(hint, sizeof hint, "%u", (unsigned)cr.uid);
  if (known)
    snprintf(who, sizeof who, " (uid %u)", (unsigned)daemon_uid);
  else
    snprintf(who, sizeof who, " (no such user)");
  return fail(OPD_EPERM,
              "the socket %s is served by uid %u (%s, pid %d), not by root, "
              "uid %u or the daemon user %s%s; refusing to send it memory. "
              "If you trust that user's daemon, set OPD_DAEMON_USER=%s",
              c->path, (unsigned)cr.uid, peer[0] ? peer : "no user name",
              (int)cr.pid, (unsigned)me, user, who, hint);
}

int opd_connect(const char *socket_path, opd_client_t **out) {
  return opd_connect_flags(socket_path, 0, out);
}

int opd_connect_flags(const char *socket_path, uint32_t flags,
                      opd_client_t **out) {
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  opd_client_t *c = NULL;
  reply_t r = {.payload = NULL};
  int rc;

  if (out == NULL) return fail(OPD_EINVAL, "opd_connect: out is NULL");
  *out = NULL;
  c = calloc(1, sizeof *c);
  if (c == NULL) return fail(OPD_ENOMEM, "out of memory");
  c->fd = -1;
  c->ring_efd = -1;
  pthread_once(&atfork_once, install_atfork);
  c->pid = getpid();
  c->fork_gen = fork_gen;
  c->max_frame = OPD_MAX_FRAME_DEFAULT;
  c->max_inflight = 64;
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->send_mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&c->cv, &ca);
  pthread_condattr_destroy(&ca);
  opd__mp_arena_init(&c->arena);

  if (opd__socket_path(socket_path, c->path, sizeof c->path) != 0) {
    rc = fail(OPD_EINVAL, "socket path too long");
    goto error;
  }
  /* the per-user fallback lies in /tmp, where anyone may make it first:
   * it must be this uid's own (the daemon checks it the same way) */
  char fb[64], why[512];
  size_t fbl;
  opd__fallback_dir(fb, sizeof fb);
  fbl = strlen(fb);
  if (strncmp(c->path, fb, fbl) == 0 && c->path[fbl] == '/' &&
      access(fb, F_OK) == 0 &&
      opd__dir_check(fb, geteuid(), 0, why, sizeof why) == OPD_EPERM) {
    rc = fail(OPD_EPERM, "%s; refusing to connect to %s: another local "
              "user may have made that directory to receive your tensors "
              "(remove it, or point OPD_SOCKET at your daemon's socket)",
              why, c->path);
    goto error;
  }
  strcpy(addr.sun_path, c->path);
  c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c->fd < 0 ||
      connect(c->fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    rc = fail(OPD_ECONNECT,
              "cannot connect to the opd daemon at %s: %s. Is it running? "
              "Start it with `opd --socket %s` (or `systemctl start opd`), "
              "or point OPD_SOCKET at the socket it serves",
              c->path, strerror(errno), c->path);
    goto error;
  }
  if ((rc = check_peer(c)) != 0) goto error;
  rc = call(c, OPD_MSG_HELLO, pack_hello, &flags, -1, &r.payload, &r.len);
  if (rc != 0) {
    if (rc != OPD_EVERSION)
      fail(rc, "opd at %s refused the connection: %s", c->path,
           opd_last_error());
    goto error;
  }
  const msgpack_object *body = reply_decode(&r);
  const msgpack_object *lim = body ? opd__mp_get(body, "limits") : NULL;
  uint64_t v;
  if (lim && opd__mp_uint(opd__mp_get(lim, "max_frame"), &v) == 0)
    c->max_frame = (uint32_t)v;
  if (lim && opd__mp_uint(opd__mp_get(lim, "max_inflight"), &v) == 0 && v > 0)
    c->max_inflight = (uint32_t)v;
  if (body) opd__json_from_msgpack(body, &c->hello_json, &c->hello_len);
  const msgpack_object *rings = body ? opd__mp_get(body, "rings") : NULL;
  int offered = rings && rings->type == MSGPACK_OBJECT_BOOLEAN && rings->via.boolean;
  reply_free(&r);
  int mode = wait_mode(flags);
  if (mode != 0 && offered && (rc = setup_rings(c, mode)) != 0) goto error;
  *out = c;
  return 0;
error:
  free(r.payload);
  opd_close(c);
  return rc;
}

void opd_close(opd_client_t *c) {
  if (c == NULL) return;
  /* after fork() the child only drops its copy: the parent's session and
   * mappings are the parent's */
  if (c->fd >= 0) close(c->fd);
  for (size_t i = 0; i < c->n_arenas; i++) {
    munmap(c->arenas[i].base, c->arenas[i].size);
    close(c->arenas[i].fd);
  }
  for (size_t i = 0; i < c->n_slots; i++) {
    free(c->slots[i].msg);
    free(c->slots[i].payload);
  }
  for (int i = 0; i < c->n_rfds; i++) close(c->rfds[i]);
  if (c->ring_base) munmap(c->ring_base, c->ring_size);
  if (c->ring_efd >= 0) close(c->ring_efd);
  free(c->slots);
  free(c->arenas);
  free(c->rbuf);
  free(c->hello_json);
  opd__mp_arena_destroy(&c->arena);
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->send_mu);
  pthread_cond_destroy(&c->cv);
  free(c);
}

static int copy_out(const char *src, size_t n, char **json, size_t *len) {
  if (json == NULL) return fail(OPD_EINVAL, "json is NULL");
  *json = malloc(n + 1);
  if (*json == NULL) return fail(OPD_ENOMEM, "out of memory");
  memcpy(*json, src, n);
  (*json)[n] = '\0';
  if (len) *len = n;
  return 0;
}

int opd_server_info(opd_client_t *c, char **json, size_t *len) {
  int rc = check_usable(c);
  if (rc) return rc;
  if (c->hello_json == NULL) return fail(OPD_EINTERNAL, "no hello reply");
  return copy_out(c->hello_json, c->hello_len, json, len);
}

/* ---- arenas --------------------------------------------------------------- */

/* A request whose reply is {"arena": id}: register, alloc, import. */
static int call_for_arena(opd_client_t *c, int type,
                          void (*pack)(msgpack_packer *, const void *),
                          const void *arg, int pass_fd, uint64_t *arena) {
  reply_t r = {.payload = NULL};
  int rc = call(c, type, pack, arg, pass_fd, &r.payload, &r.len);
  if (rc != 0) return rc;
  const msgpack_object *body = reply_decode(&r);
  if (body == NULL || opd__mp_uint(opd__mp_get(body, "arena"), arena) != 0)
    rc = fail(OPD_EPROTO, "%s: reply without an arena id", opd__msg_name(type));
  reply_free(&r);
  return rc;
}

static void pack_register(msgpack_packer *pk, const void *arg) {
  msgpack_pack_map(pk, 1);
  PACK_STR(pk, "size");
  msgpack_pack_uint64(pk, *(const uint64_t *)arg);
}

int opd_arena_register_fd(opd_client_t *c, int fd, uint64_t size,
                          uint64_t *arena) {
  int rc = check_usable(c);
  if (rc) return rc;
  if (arena == NULL) return fail(OPD_EINVAL, "arena is NULL");
  return call_for_arena(c, OPD_MSG_ARENA_REGISTER, pack_register, &size, fd,
                        arena);
}

int opd_arena_create(opd_client_t *c, uint64_t size, uint64_t *arena,
                     void **base) {
  int rc = check_usable(c);
  if (rc) return rc;
  if (arena == NULL || base == NULL)
    return fail(OPD_EINVAL, "arena and base must not be NULL");
  if (size == 0) return fail(OPD_EINVAL, "an arena needs at least one byte");
  *base = NULL;
  int fd = memfd_create("opd-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return fail(OPD_EIO, "memfd_create: %s", strerror(errno));
  void *p = MAP_FAILED;
  if (ftruncate(fd, (off_t)size) != 0) {
    rc = fail(errno == EFBIG || errno == EINVAL ? OPD_EINVAL : OPD_ENOMEM,
              "cannot size an arena of %llu bytes: %s",
              (unsigned long long)size, strerror(errno));
    goto out;
  }
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    rc = fail(OPD_EIO, "sealing the arena: %s", strerror(errno));
    goto out;
  }
  p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    rc = fail(OPD_ENOMEM, "mapping an arena of %llu bytes: %s",
              (unsigned long long)size, strerror(errno));
    goto out;
  }
  pthread_mutex_lock(&c->mu);
  if (c->n_arenas == c->cap_arenas) {
    size_t cap = c->cap_arenas ? c->cap_arenas * 2 : 8;
    carena_t *na = realloc(c->arenas, cap * sizeof *na);
    if (na != NULL) c->arenas = na, c->cap_arenas = cap;
  }
  int room = c->n_arenas < c->cap_arenas;
  pthread_mutex_unlock(&c->mu);
  if (!room) {
    rc = fail(OPD_ENOMEM, "out of memory");
    goto out;
  }
  rc = opd_arena_register_fd(c, fd, size, arena);
  if (rc != 0) goto out;
  pthread_mutex_lock(&c->mu);
  c->arenas[c->n_arenas++] = (carena_t){*arena, p, size, fd};
  pthread_mutex_unlock(&c->mu);
  *base = p;
  return 0;
out:
  if (p != MAP_FAILED) munmap(p, size);
  close(fd);
  return rc;
}

int opd_arena_fd(opd_client_t *c, uint64_t arena, int *fd) {
  int rc = check_usable(c);
  if (rc) return rc;
  if (fd == NULL) return fail(OPD_EINVAL, "fd is NULL");
  rc = OPD_EARENA;
  pthread_mutex_lock(&c->mu);
  for (size_t i = 0; i < c->n_arenas; i++)
    if (c->arenas[i].id == arena) *fd = c->arenas[i].fd, rc = 0;
  pthread_mutex_unlock(&c->mu);
  if (rc != 0) /* only a failure sets the last error */
    fail(rc, "arena %llu was not created by this connection",
         (unsigned long long)arena);
  return rc;
}

typedef struct alloc_args {
  const char *device;
  uint64_t size;
  int exportable;
} alloc_args_t;

static void pack_alloc(msgpack_packer *pk, const void *arg) {
  const alloc_args_t *a = arg;
  msgpack_pack_map(pk, a->exportable ? 3 : 2);
  if (a->exportable) {
    PACK_STR(pk, "exportable");
    msgpack_pack_true(pk);
  }
  PACK_STR(pk, "device");
  PACK_STR(pk, a->device);
  PACK_STR(pk, "size");
  msgpack_pack_uint64(pk, a->size);
}

int opd_alloc(opd_client_t *c, const char *device, uint64_t size,
              uint64_t *arena) {
  return opd_alloc_flags(c, device, size, 0, arena);
}

int opd_alloc_flags(opd_client_t *c, const char *device, uint64_t size,
                    uint32_t flags, uint64_t *arena) {
  int rc = check_usable(c);
  if (rc) return rc;
  if (device == NULL || arena == NULL)
    return fail(OPD_EINVAL, "opd_alloc: device and arena must not be NULL");
  alloc_args_t a = {device, size, (flags & OPD_ALLOC_EXPORTABLE) != 0};
  return call_for_arena(c, OPD_MSG_ALLOC, pack_alloc, &a, -1, arena);
}

typedef struct pub_args {
  uint64_t arena;
  const char *name;
  int with_arena;
  const char *meta;
  const char *const *readers;    /* publish: NULL, or n_readers entries */
  int n_readers;
} pub_args_t;

static void pack_pub(msgpack_packer *pk, const void *arg) {
  const pub_args_t *a = arg;
  msgpack_pack_map(pk, 1 + (a->with_arena != 0) + (a->meta != NULL) +
                           (a->readers != NULL));
  PACK_STR(pk, "name");
  PACK_STR(pk, a->name);
  if (a->with_arena) {
    PACK_STR(pk, "arena");
    msgpack_pack_uint64(pk, a->arena);
  }
  if (a->meta != NULL) {
    PACK_STR(pk, "meta");
    PACK_STR(pk, a->meta);
  }
  if (a->readers != NULL) {
    PACK_STR(pk, "readers");
    msgpack_pack_array(pk, (size_t)a->n_readers);
    for (int i = 0; i < a->n_readers; i++) PACK_STR(pk, a->readers[i]);
  }
}

int opd_publish(opd_client_t *c, uint64_t arena, const char *name,
                const char *meta) {
  return opd_publish2(c, arena, name, meta, NULL, 0);
}

int opd_publish2(opd_client_t *c, uint64_t arena, const char *name,
                 const char *meta, const char *const *readers, int n_readers) {
  int rc = check_usable(c);
  if (rc) return rc;
  if (name == NULL) return fail(OPD_EINVAL, "opd_publish: name is NULL");
  if (n_readers < 0 || (n_readers > 0 && readers == NULL))
    return fail(OPD_EINVAL, "opd_publish: %d readers given with %s",
                n_readers, readers ? "a list" : "no list");
  for (int i = 0; i < n_readers; i++)
    if (readers[i] == NULL)
      return fail(OPD_EINVAL, "opd_publish: readers[%d] is NULL", i);
  pub_args_t a = {arena, name, 1, meta, n_readers ? readers : NULL,
                  n_readers};
  return call(c, OPD_MSG_PUBLISH, pack_pub, &a, -1, NULL, NULL);
}

int opd_unpublish(opd_client_t *c, const char *name) {
  int rc = check_usable(c);
  if (rc) return rc;
  if (name == NULL) return fail(OPD_EINVAL, "opd_unpublish: name is NULL");
  pub_args_t a = {0, name, 0, NULL, NULL, 0};
  return call(c, OPD_MSG_UNPUBLISH, pack_pub, &a, -1, NULL, NULL);
}

int opd_attach(opd_client_t *c, const char *name, uint64_t *arena,
               uint64_t *size, char *device, size_t device_cap, char *meta,
               size_t meta_cap) {
  reply_t r = {.payload = NULL};
  int rc = check_usable(c);
  if (rc) return rc;
  if (name == NULL || arena == NULL)
    return fail(OPD_EINVAL, "opd_attach: name and arena must not be NULL");
  pub_args_t a = {0, name, 0, NULL, NULL, 0};
  rc = call(c, OPD_MSG_ATTACH, pack_pub, &a, -1, &r.payload, &r.len);
  if (rc != 0) return rc;
  const msgpack_object *body = reply_decode(&r);
  uint64_t sz = 0;
  if (body == NULL || opd__mp_uint(opd__mp_get(body, "arena"), arena) != 0 ||
      opd__mp_uint(opd__mp_get(body, "size"), &sz) != 0)
    rc = fail(OPD_EPROTO, "attach: malformed reply");
  if (rc == 0 && size) *size = sz;
  if (rc == 0 && device && device_cap &&
      opd__mp_str(opd__mp_get(body, "device"), device, device_cap) != 0)
    device[0] = '\0';
  if (rc == 0 && meta && meta_cap &&
      opd__mp_str(opd__mp_get(body, "meta"), meta, meta_cap) != 0)
    meta[0] = '\0';
  reply_free(&r);
  return rc;
}

typedef struct import_args {
  const void *handle;
  size_t handle_len;
  uint64_t offset, size;
  const char *device;
} import_args_t;

static void pack_import(msgpack_packer *pk, const void *arg) {
  const import_args_t *a = arg;
  msgpack_pack_map(pk, 4);
  PACK_STR(pk, "handle");
  msgpack_pack_bin(pk, a->handle_len);
  msgpack_pack_bin_body(pk, a->handle, a->handle_len);
  PACK_STR(pk, "offset");
  msgpack_pack_uint64(pk, a->offset);
  PACK_STR(pk, "size");
  msgpack_pack_uint64(pk, a->size);
  PACK_STR(pk, "device");
  PACK_STR(pk, a->device);
}

int opd_import_cuda(opd_client_t *c, const void *handle, size_t handle_len,
                    uint64_t offset, uint64_t size, const char *device,
                    uint64_t *arena) {
  int rc = check_usable(c);
  if (rc) return rc;
  if (handle == NULL || handle_len != 64 || device == NULL || arena == NULL)
    return fail(OPD_EINVAL, "opd_import_cuda: a 64-byte handle, a device and "
                "an arena pointer are required");
  import_args_t a = {handle, handle_len, offset, size, device};
  return call_for_arena(c, OPD_MSG_IMPORT, pack_import, &a, -1, arena);
}

int opd_export_cuda(opd_client_t *c, uint64_t arena, int *fd,
                    uint64_t *alloc_size) {
  reply_t r = {.payload = NULL};
  int rc = check_usable(c);
  if (rc) return rc;
  if (fd == NULL) return fail(OPD_EINVAL, "opd_export_cuda: fd is NULL");
  *fd = -1;
  fbuf_t b;
  msgpack_packer pk;
  uint64_t id = new_id(c);
  frame_begin(&b, &pk, OPD_MSG_EXPORT, id);
  msgpack_pack_map(&pk, 1);
  PACK_STR(&pk, "arena");
  msgpack_pack_uint64(&pk, arena);
  rc = submit_frame(c, &b, id, 1, -1);
  fbuf_free(&b);
  if (rc == 0) rc = wait_reply(c, id, -1, &r.payload, &r.len, fd);
  if (rc != 0) return rc;
  const msgpack_object *body = reply_decode(&r);
  uint64_t sz = 0;
  if (body == NULL || opd__mp_uint(opd__mp_get(body, "alloc_size"), &sz) != 0 ||
      *fd < 0) {
    rc = fail(OPD_EPROTO, "export: the reply carried no file descriptor");
    if (*fd >= 0) close(*fd), *fd = -1;
  } else if (alloc_size) {
    *alloc_size = sz;
  }
  reply_free(&r);
  return rc;
}

static void pack_release(msgpack_packer *pk, const void *arg) {
  msgpack_pack_map(pk, 1);
  PACK_STR(pk, "arena");
  msgpack_pack_uint64(pk, *(const uint64_t *)arg);
}

int opd_arena_release(opd_client_t *c, uint64_t arena) {
  int rc = check_usable(c);
  if (rc) return rc;
  rc = call(c, OPD_MSG_ARENA_RELEASE, pack_release, &arena, -1, NULL, NULL);
  /* unmap our side even if the daemon did not know it */
  pthread_mutex_lock(&c->mu);
  for (size_t i = 0; i < c->n_arenas; i++) {
    if (c->arenas[i].id != arena) continue;
    munmap(c->arenas[i].base, c->arenas[i].size);
    close(c->arenas[i].fd);
    c->arenas[i] = c->arenas[--c->n_arenas];
    break;
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* ---- runs ----------------------------------------------------------------- */

int opd_tensor_init(opd_tensor_t *t, uint64_t arena, uint64_t offset,
                    int32_t dtype, int32_t rank, const int64_t *shape) {
  if (t == NULL || rank < 0 || rank > OPD_MAX_RANK || (rank && !shape))
    return fail(OPD_EINVAL, "opd_tensor_init: rank %d out of 0..%d", rank,
                OPD_MAX_RANK);
  memset(t, 0, sizeof *t);
  t->arena = arena;
  t->offset = offset;
  t->dtype = dtype;
  t->rank = rank;
  for (int i = 0; i < rank; i++) t->shape[i] = shape[i];
  return 0;
}

static int pack_tensor_list(fbuf_t *b, const opd_tensor_t *t, uint32_t n,
                            const char *what) {
  unsigned char *p = fbuf_room(b, OPD_MP_PUT_MAX);
  if (p) fbuf_set_end(b, opd__mp_put_array(p, n));
  for (uint32_t i = 0; i < n; i++) {
    if (t[i].rank < 0 || t[i].rank > OPD_MAX_RANK)
      return fail(OPD_ELIMIT, "%s %u: rank %d out of 0..%d", what, i,
                  t[i].rank, OPD_MAX_RANK);
    if ((p = fbuf_room(b, OPD_MP_DESC_MAX)) == NULL) continue;
    fbuf_set_end(b, opd__mp_put_desc(p, t[i].arena, t[i].offset, t[i].dtype,
                                     t[i].rank, t[i].shape,
                                     t[i].strided ? t[i].strides : NULL));
  }
  return 0;
}

static inline int pack_tensors(fbuf_t *b, const opd_tensor_t *t, uint32_t n,
                               const char *what) {
  if (n > 0) return pack_tensor_list(b, t, n, what);
  unsigned char *p = fbuf_room(b, 1);
  if (p) fbuf_set_end(b, opd__mp_put_array(p, 0)); /* [] */
  return 0;
}

/* One attribute's value; 0 or OPD_EINVAL. */
static int put_attr(fbuf_t *b, const opd_attr_t *a) {
  unsigned char *p;
  switch (a->type) {
    case OPD_ATTR_INT:
      if ((p = fbuf_room(b, OPD_MP_PUT_MAX))) fbuf_set_end(b, opd__mp_put_int(p, a->i));
      return 0;
    case OPD_ATTR_FLOAT:
      if ((p = fbuf_room(b, OPD_MP_PUT_MAX))) fbuf_set_end(b, opd__mp_put_double(p, a->f));
      return 0;
    case OPD_ATTR_BOOL:
      if ((p = fbuf_room(b, 1))) {
        *p = a->i ? 0xc3 : 0xc2; /* true, false */
        fbuf_set_end(b, p + 1);
      }
      return 0;
    case OPD_ATTR_STR:
      if (a->s == NULL)
        return fail(OPD_EINVAL, "attribute \"%s\" has no string", a->name);
      PUT_STR(b, a->s);
      return 0;
    case OPD_ATTR_INTS:
      if (a->n < 0 || a->n > OPD_MAX_RANK)
        return fail(OPD_EINVAL, "attribute \"%s\": %d ints, at most %d",
                    a->name, a->n, OPD_MAX_RANK);
      if ((p = fbuf_room(b, (1 + OPD_MAX_RANK) * OPD_MP_PUT_MAX)) == NULL)
        return 0;
      p = opd__mp_put_array(p, (uint32_t)a->n);
      for (int k = 0; k < a->n; k++) p = opd__mp_put_int(p, a->ints[k]);
      fbuf_set_end(b, p);
      return 0;
  }
  return fail(OPD_EINVAL, "attribute \"%s\" has unknown type %d", a->name,
              a->type);
}

static int pack_attrs(fbuf_t *b, const opd_attr_t *a, uint32_t n) {
  put_map(b, n);
  for (uint32_t i = 0; i < n; i++) {
    if (a[i].name == NULL) return fail(OPD_EINVAL, "attribute %u has no name", i);
    PUT_STR(b, a[i].name);
    int rc = put_attr(b, &a[i]);
    if (rc != 0) return rc;
  }
  return 0;
}

/* Builds a RUN or INFER frame for id into b. */
static int build_run(fbuf_t *b, int type, uint64_t id, const char *device,
                     const char *op, const opd_tensor_t *in, uint32_t n_in,
                     const opd_tensor_t *out, uint32_t n_out,
                     const opd_attr_t *attrs, uint32_t n_attrs) {
  if (op == NULL) return fail(OPD_EINVAL, "op name is NULL");
  if ((n_in && !in) || (n_out && !out) || (n_attrs && !attrs))
    return fail(OPD_EINVAL, "NULL tensor or attribute array with a count");
  size_t op_len = strlen(op), dev_len = device ? strlen(device) : 0;
  frame_begin(b, NULL, type, id);
  /* {"device"?: str, "op": str, "in": ...: one look for room for it all */
  unsigned char *p = fbuf_room(b, 6 * OPD_MP_PUT_MAX + op_len + dev_len);
  if (p != NULL) {
    p = opd__mp_put_map(p, (type == OPD_MSG_RUN ? 4u : 3u) + (device != NULL));
    if (device != NULL) {
      p = put_strp(p, "device", 6);
      p = put_strp(p, device, dev_len);
    }
    p = put_strp(p, "op", 2);
    p = put_strp(p, op, op_len);
    fbuf_set_end(b, put_strp(p, "in", 2));
  }
  int rc = pack_tensors(b, in, n_in, "input");
  if (rc == 0 && type == OPD_MSG_RUN) {
    PUT_KEY(b, "out");
    rc = pack_tensors(b, out, n_out, "output");
  }
  if (rc == 0) {
    PUT_KEY(b, "attrs");
    rc = pack_attrs(b, attrs, n_attrs);
  }
  if (rc != 0) fbuf_free(b);
  return rc;
}

int opd_submit(opd_client_t *c, const char *op, const opd_tensor_t *in,
               uint32_t n_in, const opd_tensor_t *out, uint32_t n_out,
               const opd_attr_t *attrs, uint32_t n_attrs, uint64_t *req) {
  return opd_submit_on(c, NULL, op, in, n_in, out, n_out, attrs, n_attrs, req);
}

int opd_submit_on(opd_client_t *c, const char *device, const char *op,
                  const opd_tensor_t *in, uint32_t n_in,
                  const opd_tensor_t *out, uint32_t n_out,
                  const opd_attr_t *attrs, uint32_t n_attrs, uint64_t *req) {
  fbuf_t b;
  int rc = check_usable(c);
  if (rc) return rc;
  if (req == NULL) return fail(OPD_EINVAL, "req is NULL");
  uint64_t id = new_id(c);
  rc = build_run(&b, OPD_MSG_RUN, id, device, op, in, n_in, out, n_out, attrs,
                 n_attrs);
  if (rc != 0) return rc;
  rc = submit_frame(c, &b, id, 0, -1);
  fbuf_free(&b);
  if (rc == 0) *req = id;
  return rc;
}

int opd_wait(opd_client_t *c, uint64_t req, int timeout_ms) {
  int rc = check_usable(c);
  if (rc) return rc;
  return wait_reply(c, req, timeout_ms, NULL, NULL, NULL);
}

int opd_run(opd_client_t *c, const char *op, const opd_tensor_t *in,
            uint32_t n_in, const opd_tensor_t *out, uint32_t n_out,
            const opd_attr_t *attrs, uint32_t n_attrs) {
  return opd_run_on(c, NULL, op, in, n_in, out, n_out, attrs, n_attrs);
}

int opd_run_on(opd_client_t *c, const char *device, const char *op,
               const opd_tensor_t *in, uint32_t n_in, const opd_tensor_t *out,
               uint32_t n_out, const opd_attr_t *attrs, uint32_t n_attrs) {
  uint64_t req;
  int rc = opd_submit_on(c, device, op, in, n_in, out, n_out, attrs, n_attrs,
                         &req);
  if (rc != 0) return rc;
  return wait_reply(c, req, -1, NULL, NULL, NULL);
}

/* ---- prepared runs ---------------------------------------------------- */

struct opd_prepared {
  const opd_client_t *c;  /* whose arena ids the request names */
  size_t len;             /* bytes of frame */
  char frame[];           /* length header + [4, id, body] */
};

/* The id of a prepared frame: after the length, 0x93 and the type, a
 * uint64 written full width (0xcf + 8 bytes) so that any id fits. */
#define PREP_ID_AT (OPD_FRAME_HEADER + 2)

int opd_prepare(opd_client_t *c, const char *device, const char *op,
                const opd_tensor_t *in, uint32_t n_in, const opd_tensor_t *out,
                uint32_t n_out, const opd_attr_t *attrs, uint32_t n_attrs,
                opd_prepared_t **p) {
  fbuf_t b;
  int rc = check_usable(c);
  if (rc) return rc;
  if (p == NULL) return fail(OPD_EINVAL, "opd_prepare: p is NULL");
  /* UINT64_MAX packs as 0xcf + 8 bytes: the slot new ids go into */
  rc = build_run(&b, OPD_MSG_RUN, UINT64_MAX, device, op, in, n_in, out, n_out,
                 attrs, n_attrs);
  if (rc != 0) return rc;
  opd_prepared_t *q = NULL;
  if (b.oom || (unsigned char)b.data[PREP_ID_AT] != 0xcf ||
      (q = malloc(sizeof *q + b.size)) == NULL) {
    fbuf_free(&b);
    return fail(OPD_ENOMEM, "out of memory preparing a run");
  }
  q->c = c;
  q->len = b.size;
  memcpy(q->frame, b.data, b.size);
  fbuf_free(&b);
  *p = q;
  return 0;
}

int opd_submit_prepared(opd_client_t *c, const opd_prepared_t *p,
                        uint64_t *req) {
  fbuf_t b;
  int rc = check_usable(c);
  if (rc) return rc;
  if (p == NULL || req == NULL)
    return fail(OPD_EINVAL, "opd_submit_prepared: NULL prepared run or req");
  if (p->c != c)
    return fail(OPD_EINVAL, "this prepared run was made on another "
                "connection (its arena ids are that connection's)");
  b.oom = 0;
  b.size = b.cap = p->len;
  b.data = p->len <= sizeof b.local ? b.local : malloc(p->len);
  if (b.data == NULL) return fail(OPD_ENOMEM, "out of memory");
  memcpy(b.data, p->frame, p->len);
  uint64_t id = new_id(c);
  for (int i = 0; i < 8; i++)
    b.data[PREP_ID_AT + 1 + i] = (char)(id >> (56 - 8 * i));
  rc = submit_frame(c, &b, id, 0, -1);
  fbuf_free(&b);
  if (rc == 0) *req = id;
  return rc;
}

int opd_run_prepared(opd_client_t *c, const opd_prepared_t *p) {
  uint64_t req;
  int rc = opd_submit_prepared(c, p, &req);
  if (rc != 0) return rc;
  return wait_reply(c, req, -1, NULL, NULL, NULL);
}

void opd_prepared_free(opd_prepared_t *p) { free(p); }

int opd_infer(opd_client_t *c, const char *op, const opd_tensor_t *in,
              uint32_t n_in, const opd_attr_t *attrs, uint32_t n_attrs,
              opd_tensor_t *out, uint32_t cap, uint32_t *n_out) {
  fbuf_t b;
  reply_t r = {.payload = NULL};
  int rc = check_usable(c);
  if (rc) return rc;
  if (n_out == NULL || (cap && out == NULL))
    return fail(OPD_EINVAL, "opd_infer: NULL output array");
  uint64_t id = new_id(c);
  rc = build_run(&b, OPD_MSG_INFER, id, NULL, op, in, n_in, NULL, 0, attrs,
                 n_attrs);
  if (rc != 0) return rc;
  rc = submit_frame(c, &b, id, 1, -1);
  fbuf_free(&b);
  if (rc == 0) rc = wait_reply(c, id, -1, &r.payload, &r.len, NULL);
  if (rc != 0) return rc;

  const msgpack_object *body = reply_decode(&r);
  const msgpack_object *arr = body ? opd__mp_get(body, "out") : NULL;
  if (arr == NULL || arr->type != MSGPACK_OBJECT_ARRAY) {
    rc = fail(OPD_EPROTO, "infer: malformed reply");
  } else if (arr->via.array.size > cap) {
    rc = fail(OPD_ELIMIT, "infer: %s has %u outputs, room for %u", op,
              arr->via.array.size, cap);
  } else {
    *n_out = arr->via.array.size;
    for (uint32_t i = 0; i < arr->via.array.size && rc == 0; i++) {
      const msgpack_object *e = &arr->via.array.ptr[i];
      uint64_t dt;
      if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 2 ||
          opd__mp_uint(&e->via.array.ptr[0], &dt) != 0 ||
          e->via.array.ptr[1].type != MSGPACK_OBJECT_ARRAY ||
          e->via.array.ptr[1].via.array.size > OPD_MAX_RANK) {
        rc = fail(OPD_EPROTO, "infer: malformed reply");
        break;
      }
      const msgpack_object *sh = &e->via.array.ptr[1];
      memset(&out[i], 0, sizeof out[i]);
      out[i].dtype = (int32_t)dt;
      out[i].rank = (int32_t)sh->via.array.size;
      for (uint32_t d = 0; d < sh->via.array.size; d++)
        opd__mp_int(&sh->via.array.ptr[d], &out[i].shape[d]);
    }
  }
  reply_free(&r);
  return rc;
}

int opd_ping(opd_client_t *c) {
  int rc = check_usable(c);
  if (rc) return rc;
  return call(c, OPD_MSG_PING, NULL, NULL, -1, NULL, NULL);
}

/* ---- introspection -------------------------------------------------------- */

static int json_call(opd_client_t *c, int type, char **json, size_t *len) {
  reply_t r = {.payload = NULL};
  int rc = check_usable(c);
  if (rc) return rc;
  if (json == NULL) return fail(OPD_EINVAL, "json is NULL");
  rc = call(c, type, NULL, NULL, -1, &r.payload, &r.len);
  if (rc != 0) return rc;
  const msgpack_object *body = reply_decode(&r);
  if (body == NULL) rc = fail(OPD_EPROTO, "malformed reply");
  else if (opd__json_from_msgpack(body, json, len) != 0)
    rc = fail(OPD_ENOMEM, "out of memory");
  reply_free(&r);
  return rc;
}

int opd_ops_json(opd_client_t *c, char **json, size_t *len) {
  return json_call(c, OPD_MSG_OPS, json, len);
}

int opd_stats_json(opd_client_t *c, char **json, size_t *len) {
  return json_call(c, OPD_MSG_STATS, json, len);
}
