/* libFuzzer target: a whole daemon session fed bytes. The daemon's own
 * objects (every daemon/ file but main.c, the CPU-only CUDA stand-in, the
 * kernels, common/) run in this process on a private libuv loop; each
 * input is one client connection through a socketpair, or two.
 *
 * DESIGN
 * The server is created once (opd__server_init on a socket in a temporary
 * directory, never connected to) with small limits so that the fuzzer
 * reaches them: frames of 64 KiB, 4 arenas, 4 runs in flight, 64 KiB of
 * unread replies. Per input:
 *   socketpair -> opd__session_accept(srv, daemon end)
 *   byte 0, the prefix: which well-formed requests go first (bit 0 hello,
 *     bit 1 an arena of 16 KiB, bit 2 a second one of 4 KiB, bit 3 rings,
 *     bit 4 adaptive rings with an eventfd (else spin), bit 5 runs go to
 *     the thread pool (inline limit 0), bit 6 the arenas hold the input's
 *     bytes (else a float pattern), bit 7 replies are read after every
 *     command)
 *   then commands, each [op][len][data]: op & 7 is what to do, op & 8 says
 *     len is 2 bytes (little-endian) rather than 1, op & 16 sends it from
 *     a second client (connected with a hello when first named: attach
 *     and run on another session's publication, one closing while the
 *     other works):
 *     0 FRAME  data as one frame (the harness writes the length)
 *     1 RAW    data as raw bytes on the socket (framing, partial frames)
 *     2 RING   data as one submission-ring message (+ doorbell)
 *     3 POKE   hostile shared memory: data[0..1] an offset into the ring
 *              region, the rest written there (counters, seq words,
 *              lengths, the completion ring's tail)
 *     4 FDS    data[0] picks file descriptors to send (kind, count 1..10)
 *              with the frame data[1..]
 *     5 TURNS  1 + data[0] % 16 more loop turns
 *     6 READ   read the replies (socket and completion ring)
 *     7 SHUT   half-close the client's side
 *   after each command one uv_run(UV_RUN_NOWAIT); then the clients close
 *   and the loop runs until the sessions are freed.
 * Arena and session ids restart at 1 per input (every arena is gone when
 * an input ends, so none can be confused), which keeps inputs replayable:
 * the seeds' runs name arena 1 and 2.
 *
 * Oracles besides ASan/UBSan (a failure aborts with a message):
 *  - every reply frame, on the socket or the completion ring, decodes as
 *    [type, id, code, body-map];
 *  - after each input: the server has no session left (n_sessions 0), its
 *    counters of arenas, mappings, bytes, runs in flight, rings and
 *    published names are back to 0, and the process has exactly the file
 *    descriptors it had before it and no memfd mapping (all arenas and
 *    rings unmapped); leaks of memory show in ASan's leak check at exit.
 * Logging is formatted at debug level but written to /dev/null unless
 * OPD_FUZZ_LOG=1, which also prints every reply (libFuzzer and ASan keep
 * the real stderr).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/ring.h"
#include "common/wire.h"
#include "daemon/log.h"
#include "daemon/server.h"
#include "daemon/session.h"

#define FUZZ_TARGET "fuzz_session"
#define FUZZ_ERR real_stderr
#include "tests/fuzz/fuzz.h"

static FILE *real_stderr;
static uv_loop_t loop;
static opd_server_t srv;
static int base_fds;           /* open fds before this input */
static int verbose;            /* OPD_FUZZ_LOG: log and print replies */

#define ARENA_A (16 * 1024)
#define ARENA_B 4096
#define SQ_SLOTS 8
#define SQ_SLOT 512
#define CQ_SLOTS 8
#define CQ_SLOT 512
#define INLINE_BYTES (1u << 20)

/* ---- process state -------------------------------------------------- */

static int count_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  if (d == NULL) return -1;
  while (readdir(d) != NULL) n++;
  closedir(d);
  return n; /* includes the DIR's own fd, ".", "..": constant */
}

/* On a failed fd check: what is open, for the report. */
static void list_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  if (d == NULL) return;
  while ((e = readdir(d)) != NULL) {
    char path[300], target[256];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n < 0) continue;
    target[n] = '\0';
    fprintf(real_stderr, "  fd %s -> %s\n", e->d_name, target);
  }
  closedir(d);
}

static int count_memfd_maps(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  int n = 0;
  if (f == NULL) return -1;
  while (fgets(line, sizeof line, f))
    if (strstr(line, "/memfd:")) n++;
  fclose(f);
  return n;
}

/* ---- what one input's client holds ---------------------------------- */

typedef struct client {
  int fd;                      /* our end of the socketpair; -1 closed */
  int shut;                    /* half-closed */
  unsigned char *ring;         /* our mapping of the ring region */
  size_t ring_size, cq_off;
  int efd;                     /* adaptive: the doorbell */
  opd_ring_t sq, cq;           /* producer / consumer views */
  int rings;                   /* set up and accepted */
  int cq_forged;               /* a POKE wrote into the completion ring:
                                  what it holds is no longer the daemon's */
  unsigned char rbuf[1 << 17]; /* socket replies not yet parsed */
  size_t rlen;
  uint64_t next_id;
} client_t;

static void check_reply(const unsigned char *p, size_t len, const char *where) {
  opd_mp_arena_t a;
  msgpack_object o;
  char err[200];
  opd__mp_arena_init(&a);
  int rc = opd__mp_decode(&a, p, len, OPD_MAX_DEPTH + 2, &o, err, sizeof err);
  CHECK(rc == 0, "a %s reply of %zu bytes does not decode: %s", where, len,
        err);
  CHECK(o.type == MSGPACK_OBJECT_ARRAY && o.via.array.size == 4 &&
            o.via.array.ptr[0].type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
            o.via.array.ptr[1].type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
            (o.via.array.ptr[2].type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
             o.via.array.ptr[2].type == MSGPACK_OBJECT_NEGATIVE_INTEGER) &&
            o.via.array.ptr[3].type == MSGPACK_OBJECT_MAP,
        "a %s reply is not [type, id, code, body-map]", where);
  uint64_t type = o.via.array.ptr[0].via.u64;
  if (verbose) {
    const msgpack_object *m = opd__mp_get(&o.via.array.ptr[3], "message");
    fprintf(real_stderr, "fuzz_session: %s %s %llu: code %lld %.*s\n", where,
            type == OPD_MSG_GOODBYE ? "goodbye" : "reply",
            (unsigned long long)o.via.array.ptr[1].via.u64,
            o.via.array.ptr[2].type == MSGPACK_OBJECT_NEGATIVE_INTEGER
                ? (long long)o.via.array.ptr[2].via.i64
                : (long long)o.via.array.ptr[2].via.u64,
            m && m->type == MSGPACK_OBJECT_STR ? (int)m->via.str.size : 0,
            m && m->type == MSGPACK_OBJECT_STR ? m->via.str.ptr : "");
  }
  CHECK(type == OPD_MSG_REPLY || type == OPD_MSG_GOODBYE,
        "a %s message of type %llu", where, (unsigned long long)type);
  if (o.via.array.ptr[2].type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
    /* an error names what was wrong */
    const msgpack_object *m = opd__mp_get(&o.via.array.ptr[3], "message");
    CHECK(m != NULL && m->type == MSGPACK_OBJECT_STR && m->via.str.size > 0,
          "an error reply without a message");
  }
  opd__mp_arena_destroy(&a);
}

static void read_replies(client_t *c) {
  if (c->fd >= 0) {
    for (;;) {
      if (c->rlen == sizeof c->rbuf) c->rlen = 0; /* only whole frames kept */
      ssize_t n = recv(c->fd, c->rbuf + c->rlen, sizeof c->rbuf - c->rlen,
                       MSG_DONTWAIT);
      if (n <= 0) break;
      c->rlen += (size_t)n;
      size_t off = 0;
      while (c->rlen - off >= OPD_FRAME_HEADER) {
        uint32_t len = opd__frame_get_len(c->rbuf + off);
        CHECK(len <= srv.cfg.limits.max_frame + 64u,
              "a reply frame of %u bytes", len);
        if (c->rlen - off - OPD_FRAME_HEADER < len) break;
        check_reply(c->rbuf + off + OPD_FRAME_HEADER, len, "socket");
        off += OPD_FRAME_HEADER + len;
      }
      memmove(c->rbuf, c->rbuf + off, c->rlen - off);
      c->rlen -= off;
    }
  }
  if (c->rings) {
    unsigned char buf[CQ_SLOT];
    uint32_t len;
    /* a ring the harness itself scribbled on may be corrupt: stop there */
    for (int i = 0; i < 64 && opd__ring_pop(&c->cq, buf, sizeof buf, &len) == 0;
         i++)
      if (!c->cq_forged) check_reply(buf, len, "completion ring");
  }
}

static void turn(int n) {
  for (int i = 0; i < n; i++) uv_run(&loop, UV_RUN_NOWAIT);
}

/* Sends len bytes (and fds) on the socket; what the daemon does not take
 * after a few turns is dropped, as a client that gives up would. */
static void send_bytes(client_t *c, const void *p, size_t len, const int *fds,
                       int n_fds) {
  const unsigned char *b = p;
  if (c->fd < 0 || c->shut) return;
  for (int tries = 0; len > 0 && tries < 8; tries++) {
    union {
      char buf[CMSG_SPACE(sizeof(int) * 16)];
      struct cmsghdr align;
    } cbuf;
    struct iovec iov = {(void *)b, len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (n_fds > 0) {
      memset(&cbuf, 0, sizeof cbuf);
      msg.msg_control = cbuf.buf;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n_fds);
      struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n_fds);
      memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)n_fds);
    }
    ssize_t n = sendmsg(c->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      b += n;
      len -= (size_t)n;
      n_fds = 0; /* they went with the first byte */
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return; /* gone */
    turn(1);
    read_replies(c);
  }
}

static void send_frame(client_t *c, const void *p, size_t len, const int *fds,
                       int n_fds) {
  unsigned char *f = malloc(len + OPD_FRAME_HEADER);
  if (f == NULL) return;
  opd__frame_put_len(f, (uint32_t)len);
  if (len) memcpy(f + OPD_FRAME_HEADER, p, len);
  send_bytes(c, f, len + OPD_FRAME_HEADER, fds, n_fds);
  free(f);
}

/* A sealed memfd of size bytes (the arenas and the ring region). */
static int make_memfd(size_t size, int seal) {
  int fd = memfd_create("opd-fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  if (ftruncate(fd, (off_t)size) != 0 ||
      (seal && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)) {
    close(fd);
    return -1;
  }
  return fd;
}

/* ---- the prefix ----------------------------------------------------- */

static unsigned char *put_key(unsigned char *p, const char *k) {
  size_t n = strlen(k);
  p = opd__mp_put_str(p, (uint32_t)n);
  memcpy(p, k, n);
  return p + n;
}

static unsigned char *put_head(unsigned char *p, int type, uint64_t id,
                               uint32_t n_keys) {
  *p++ = 0x93;
  p = opd__mp_put_uint(p, (uint64_t)type);
  p = opd__mp_put_uint(p, id);
  return opd__mp_put_map(p, n_keys);
}

static void hello(client_t *c) {
  unsigned char b[64], *p = put_head(b, OPD_MSG_HELLO, c->next_id++, 2);
  p = put_key(p, "protocol");
  p = opd__mp_put_uint(p, OPD_PROTOCOL_VERSION);
  p = put_key(p, "client");
  p = put_key(p, "fuzz");
  send_frame(c, b, (size_t)(p - b), NULL, 0);
}

static void register_arena(client_t *c, size_t size, const uint8_t *fill,
                           size_t fill_len) {
  int fd = make_memfd(size, 1);
  if (fd < 0) return;
  void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m != MAP_FAILED) {
    float *f = m;
    if (fill_len > 0) {
      for (size_t i = 0; i < size; i++)
        ((unsigned char *)m)[i] = fill[i % fill_len];
    } else {
      for (size_t i = 0; i < size / sizeof(float); i++)
        f[i] = (float)((int)(i % 17) - 8) * 0.25f;
    }
    munmap(m, size);
  }
  unsigned char b[64], *p = put_head(b, OPD_MSG_ARENA_REGISTER, c->next_id++, 1);
  p = put_key(p, "size");
  p = opd__mp_put_uint(p, size);
  send_frame(c, b, (size_t)(p - b), &fd, 1);
  close(fd);
}

static void setup_rings(client_t *c, int adaptive) {
  size_t off = (opd__ring_bytes(SQ_SLOTS, SQ_SLOT) + 4095) & ~(size_t)4095;
  size_t size = off + opd__ring_bytes(CQ_SLOTS, CQ_SLOT);
  size = (size + 4095) & ~(size_t)4095;
  int fds[2] = {make_memfd(size, 1), -1};
  if (fds[0] < 0) return;
  void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
  if (m == MAP_FAILED) {
    close(fds[0]);
    return;
  }
  if (opd__ring_init(m, off, SQ_SLOTS, SQ_SLOT, &c->sq) != 0 ||
      opd__ring_init((char *)m + off, size - off, CQ_SLOTS, CQ_SLOT, &c->cq) != 0)
    abort();
  if (adaptive) fds[1] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  c->ring = m;
  c->ring_size = size;
  c->cq_off = off;
  c->efd = fds[1];
  c->sq.doorbell = fds[1];
  unsigned char b[160], *p = put_head(b, OPD_MSG_RING_SETUP, c->next_id++, 6);
  p = put_key(p, "size");
  p = opd__mp_put_uint(p, size);
  p = put_key(p, "sq_slots");
  p = opd__mp_put_uint(p, SQ_SLOTS);
  p = put_key(p, "sq_slot_size");
  p = opd__mp_put_uint(p, SQ_SLOT);
  p = put_key(p, "cq_slots");
  p = opd__mp_put_uint(p, CQ_SLOTS);
  p = put_key(p, "cq_slot_size");
  p = opd__mp_put_uint(p, CQ_SLOT);
  p = put_key(p, "wait");
  p = put_key(p, adaptive ? "adaptive" : "spin");
  send_frame(c, b, (size_t)(p - b), fds, adaptive ? 2 : 1);
  close(fds[0]);
  c->rings = 1; /* if the daemon refused, the completion ring stays empty */
}

/* ---- commands -------------------------------------------------------- */

/* FDS: data[0] & 7 the kind, 1 + (data[0] >> 3) % 10 of them */
static void send_fds(client_t *c, const uint8_t *d, size_t n) {
  if (n < 1) return;
  int kind = d[0] & 7, count = 1 + (d[0] >> 3) % 10;
  int fds[16], got = 0;
  for (int i = 0; i < count; i++) {
    int fd = -1, p[2];
    switch (kind) {
      case 0: fd = make_memfd(4096, 1); break;            /* a good arena */
      case 1: fd = make_memfd(8192, 1); break;
      case 2: fd = make_memfd(4096, 0); break;            /* unsealed */
      case 3: fd = eventfd(0, EFD_CLOEXEC); break;
      case 4:
        if (pipe2(p, O_CLOEXEC) == 0) fd = p[0], close(p[1]);
        break;
      case 5: fd = open("/dev/null", O_RDONLY | O_CLOEXEC); break;
      case 6: fd = make_memfd(0, 1); break;               /* empty */
      default: fd = make_memfd(1, 1); break;              /* 1 byte */
    }
    if (fd >= 0) fds[got++] = fd;
  }
  send_frame(c, d + 1, n - 1, fds, got);
  for (int i = 0; i < got; i++) close(fds[i]);
}

static void ring_submit(client_t *c, const uint8_t *d, size_t n) {
  if (!c->rings) return;
  if (n > opd__ring_max_msg(&c->sq)) n = opd__ring_max_msg(&c->sq);
  int rc = opd__ring_push(&c->sq, d, (uint32_t)n);
  if (rc == 1) { /* full: let the daemon drain it once */
    turn(1);
    read_replies(c);
    opd__ring_push(&c->sq, d, (uint32_t)n);
  }
  if (c->efd >= 0) { /* ring the doorbell whatever the flag says */
    uint64_t one = 1;
    ssize_t w = write(c->efd, &one, sizeof one);
    (void)w;
  }
}

static void poke(client_t *c, const uint8_t *d, size_t n) {
  if (c->ring == NULL || n < 3) return;
  size_t off = ((size_t)d[0] | (size_t)d[1] << 8) % c->ring_size;
  size_t len = n - 2;
  if (len > c->ring_size - off) len = c->ring_size - off;
  memcpy(c->ring + off, d + 2, len);
  if (off + len > c->cq_off) c->cq_forged = 1;
}

static void client_close(client_t *c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  c->shut = 1; /* the second client is not connected again */
}

static void client_free(client_t *c) {
  client_close(c);
  if (c->ring) munmap(c->ring, c->ring_size);
  c->ring = NULL;
  if (c->efd >= 0) close(c->efd);
  c->efd = -1;
}

static void client_reset(client_t *c) {
  memset(c, 0, offsetof(client_t, rbuf));
  c->fd = c->efd = -1;
  c->rlen = 0;
  c->next_id = 1;
}

/* A new connection for c, accepted by the daemon. */
static void client_connect(client_t *c) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv))
    abort();
  c->fd = sv[0];
  opd__session_accept(&srv, sv[1]);
  turn(1);
}

static void run_input(const uint8_t *data, size_t size) {
  static client_t cl[2]; /* big receive buffers: not on the stack */
  client_t *c = &cl[0], *c2 = &cl[1];
  client_reset(c);
  client_reset(c2);
  srv.next_arena_id = 0;
  srv.next_session_id = 0;

  uint8_t pre = size > 0 ? data[0] : 0;
  if (size > 0) data++, size--;
  srv.cfg.limits.inline_bytes = (pre & 0x20) ? 0 : INLINE_BYTES;
  /* what --inline-us learnt from earlier inputs is forgotten: each input
   * starts from the same state (its own runs still teach later ones) */
  memset(srv.cost, 0, OPD_COST_SLOTS * sizeof *srv.cost);
  client_connect(c);
  const uint8_t *fill = (pre & 0x40) ? data : NULL;
  size_t fill_len = (pre & 0x40) ? (size < 4096 ? size : 4096) : 0;
  if (pre & 0x01) hello(c);
  turn(1);
  if (pre & 0x02) register_arena(c, ARENA_A, fill, fill_len);
  if (pre & 0x04) register_arena(c, ARENA_B, fill, fill_len);
  turn(1);
  if (pre & 0x08) setup_rings(c, (pre & 0x10) != 0);
  turn(2);
  read_replies(c);

  while (size >= 2) {
    uint8_t op = data[0];
    size_t len, hdr = (op & 8) ? 3 : 2;
    if (size < hdr) break;
    len = (op & 8) ? (size_t)data[1] | (size_t)data[2] << 8 : data[1];
    data += hdr;
    size -= hdr;
    if (len > size) len = size;
    client_t *to = c;
    if (op & 0x10) { /* the second client: connected (with a hello) when
                        first named */
      to = c2;
      if (c2->fd < 0 && !c2->shut) {
        client_connect(c2);
        hello(c2);
      }
    }
    switch (op & 7) {
      case 0: send_frame(to, data, len, NULL, 0); break;
      case 1: send_bytes(to, data, len, NULL, 0); break;
      case 2: ring_submit(to, data, len); break;
      case 3: poke(to, data, len); break;
      case 4: send_fds(to, data, len); break;
      case 5: turn(1 + (len ? data[0] % 16 : 0)); break;
      case 6: read_replies(to); break;
      case 7:
        if (to->fd >= 0 && !to->shut) shutdown(to->fd, SHUT_WR);
        to->shut = 1;
        break;
    }
    data += len;
    size -= len;
    turn(1);
    if (pre & 0x80) read_replies(c), read_replies(c2);
  }
  turn(2);
  read_replies(c);
  read_replies(c2);

  /* the clients go; the daemon must free the sessions (a pool job may
   * still be running: wait for it, boundedly) */
  client_close(c);
  client_close(c2);
  for (int i = 0; srv.n_sessions > 0; i++) {
    uv_run(&loop, UV_RUN_NOWAIT);
    if (i > 100) {
      struct timespec ts = {0, 100000};
      nanosleep(&ts, NULL);
    }
    CHECK(i < 50000, "a session was not freed after its client closed "
          "(%u left)", srv.n_sessions);
  }
  client_free(c);
  client_free(c2);
  turn(1);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  static char dir[] = "/tmp/opd-fuzz-XXXXXX";
  real_stderr = stderr;
  verbose = getenv("OPD_FUZZ_LOG") != NULL;
  if (!verbose) {
    /* the daemon's lines are formatted but not written; libFuzzer and
     * ASan report through the real stderr */
    FILE *null = fopen("/dev/null", "w");
    if (null != NULL) stderr = null;
  }
  opd__log_level = OPD_LOG_DEBUG;
  if (mkdtemp(dir) == NULL) abort();
  opd_config_t cfg;
  memset(&cfg, 0, sizeof cfg);
  /* limits the harness does not name (added later) are as large as they
   * go: they must not refuse what the named ones allow */
  memset(&cfg.limits, 0xff, sizeof cfg.limits);
  snprintf(cfg.socket_path, sizeof cfg.socket_path, "%s/opd.sock", dir);
  snprintf(cfg.devices, sizeof cfg.devices, "none");
  cfg.threads = 1;
  cfg.log_level = OPD_LOG_DEBUG;
  cfg.loop_cpu = -1;
  cfg.spin_window_ns = 1000; /* spin rings: 1 us windows, not 200 */
  cfg.spin = OPD_SPIN_ALWAYS; /* granted whatever the host's cores */
  cfg.limits.max_frame = 64 * 1024;
  cfg.limits.max_arenas = 4;
  cfg.limits.max_arena_bytes = 1u << 20;
  cfg.limits.max_session_bytes = 2u << 20;
  cfg.limits.max_inflight = 4;
  cfg.limits.max_clients = 16;
  cfg.limits.max_wbuf = 64 * 1024;
  cfg.limits.inline_bytes = INLINE_BYTES;
  if (uv_loop_init(&loop) != 0) abort();
  if (opd__server_init(&srv, &loop, &cfg) != 0) {
    fprintf(real_stderr, "fuzz_session: opd__server_init failed\n");
    abort();
  }
  /* the socket file is not needed: nothing connects to it */
  unlink(cfg.socket_path);
  rmdir(dir);
  /* one empty session first: whatever libuv creates lazily exists then */
  run_input((const uint8_t *)"\x0f", 1);
  if (verbose) list_fds();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* counted per input: libFuzzer itself may open some between inputs (the
   * symbolizer's pipes when it prints a new function) */
  base_fds = count_fds();
  run_input(data, size);
  CHECK(srv.n_sessions == 0, "%u sessions left", srv.n_sessions);
  /* what the daemon says it holds is back to nothing */
  CHECK(srv.arenas == 0 && srv.bytes_mapped == 0,
        "%llu arenas, %llu bytes mapped left", (unsigned long long)srv.arenas,
        (unsigned long long)srv.bytes_mapped);
  CHECK(srv.mappings == 0 && srv.host_bytes == 0,
        "%llu host mappings, %llu bytes left", (unsigned long long)srv.mappings,
        (unsigned long long)srv.host_bytes);
  CHECK(srv.inflight == 0 && srv.async_now == 0,
        "%u runs in flight, %u answered at enqueue, left", srv.inflight,
        srv.async_now);
  CHECK(srv.n_ring == 0 && srv.n_spin == 0 && srv.n_pubs == 0,
        "%d ring sessions, %d spinning, %u published names left", srv.n_ring,
        srv.n_spin, srv.n_pubs);
  int fds = count_fds();
  if (fds != base_fds) list_fds();
  CHECK(fds == base_fds, "%d open file descriptors after the input, %d "
        "before: a descriptor leaked", fds, base_fds);
  int maps = count_memfd_maps();
  CHECK(maps == 0, "%d memfd mappings left after the input", maps);
  return 0;
}
