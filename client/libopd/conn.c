/* libopd connections: connect (peer check, hello, rings), close, fork.
 *
 * DESIGN
 * opd_connect_flags makes the connection in a fixed order, and nothing
 * of the caller's reaches the socket before the checks: the per-user
 * fallback directory must be this uid's own, and the peer that serves the
 * socket (SO_PEERCRED) must be root, this user or the daemon user
 * (check_peer), since the connection will carry the caller's memory as
 * memfds. Then HELLO (the daemon's limits and whether it offers rings),
 * then, unless the socket was asked for, RING_SETUP: a sealed memfd
 * holding both rings (common/memfd.c, common/ring.c) and an eventfd
 * doorbell, sent with the request; the reply says which wait was granted
 * (a spin asked for where cores are short becomes adaptive, and
 * opd_transport_why says so).
 *
 * A connection remembers the fork generation that made it: after fork()
 * the child gets OPD_ESTATE (opd__check_usable) instead of reading
 * replies meant for its parent, and opd_close in the child only drops its
 * copy (the parent's session and mappings are the parent's).
 */
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client/libopd/internal.h"
#include "client/libopd/json.h"
#include "common/memfd.h"
#include "common/paths.h"

/* The ring geometry a client asks for: submission and completion rings */
#define RING_SQ_SLOTS 256
#define RING_SQ_SLOT 2048
#define RING_CQ_SLOTS 512
#define RING_CQ_SLOT 1024

unsigned opd__fork_gen; /* internal.h */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void on_fork_child(void) { opd__fork_gen++; }
static void install_atfork(void) { pthread_atfork(NULL, NULL, on_fork_child); }

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
  if (flags & OPD_CONNECT_WAIT_SPIN) return OPD_RING_SPIN;
  if (flags & OPD_CONNECT_WAIT_ADAPTIVE) return OPD_RING_ADAPTIVE;
  if (flags & OPD_CONNECT_WAIT_SOCKET) return 0;
  const char *w = getenv("OPD_WAIT");
  if (w && strcmp(w, "spin") == 0) return OPD_RING_SPIN;
  if (w && strcmp(w, "socket") == 0) return 0;
  return OPD_RING_ADAPTIVE;
}

/* The transport in use: "spin", "adaptive" or "socket". */
const char *opd_transport(opd_client_t *c) {
  if (c == NULL) return "none";
  return c->ring == OPD_RING_SPIN ? "spin" : c->ring ? "adaptive" : "socket";
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
  PACK_STR(pk, opd__ring_mode_name(a->mode));
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
  char err[200];
  if (opd__memfd_create_sealed("opd-rings", "the ring region", size, &fds[0],
                               err, sizeof err) != 0) {
    rc = opd__fail(OPD_EIO, "creating the ring region: %s", err);
    goto out;
  }
  base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
  if (base == MAP_FAILED) {
    rc = opd__fail(OPD_EIO, "creating the ring region: %s", strerror(errno));
    goto out;
  }
  if (opd__ring_init(base, off, RING_SQ_SLOTS, RING_SQ_SLOT, &c->sq) != 0 ||
      opd__ring_init((char *)base + off, size - off, RING_CQ_SLOTS, RING_CQ_SLOT,
                     &c->cq) != 0) {
    rc = opd__fail(OPD_EINTERNAL, "formatting the rings");
    goto out;
  }
  /* an eventfd for spin too: where cores are short the daemon gives
   * adaptive instead (its reply says which) */
  if ((fds[1] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
    rc = opd__fail(OPD_EIO, "eventfd: %s", strerror(errno));
    goto out;
  }
  fbuf_t b;
  msgpack_packer pk;
  uint64_t id = opd__new_id(c);
  ring_args_t a = {size, mode};
  opd__frame_begin(&b, &pk, OPD_MSG_RING_SETUP, id);
  pack_ring_setup(&pk, &a);
  pthread_mutex_lock(&c->mu);
  rc = opd__slot_add(c, id, 1); /* the reply says which wait was granted */
  pthread_mutex_unlock(&c->mu);
  if (rc == 0) rc = opd__send_frame_fds(c, &b, fds, 2);
  opd__fbuf_free(&b);
  reply_t r = {.payload = NULL};
  if (rc == 0) rc = opd__wait_reply(c, id, 5000, &r.payload, &r.len, NULL);
  if (rc != 0) goto out;
  const msgpack_object *body = opd__reply_decode(&r);
  char granted[16] = "";
  if (body != NULL &&
      opd__mp_str(opd__mp_get(body, "wait"), granted, sizeof granted) == 0 &&
      strcmp(granted, "adaptive") == 0 && mode == OPD_RING_SPIN) {
    char why[200] = "";
    opd__mp_str(opd__mp_get(body, "why"), why, sizeof why);
    snprintf(c->wait_why, sizeof c->wait_why, "spin asked, adaptive given: %s",
             why);
    mode = OPD_RING_ADAPTIVE;
  }
  opd__reply_free(&r);
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
  c->sq.wakes = mode == OPD_RING_ADAPTIVE;
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
/* Why connect(2) failed, in words a user can act on: nobody serving the
 * socket (OPD_ECONNECT) or not allowed to open it (OPD_EPERM: the system
 * socket is for root and group opd). Returns the code. */
static int connect_failed(const char *path, int err) {
  if (err == EACCES || err == EPERM) {
    struct stat st;
    char grp[64] = "its group";
    char dir[108];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) *slash = '\0';
    /* the socket's group, else (not even searchable) its directory's */
    if (stat(path, &st) == 0 || stat(dir, &st) == 0) {
      struct group g, *gp = NULL;
      char gbuf[4096];
      if (getgrgid_r(st.st_gid, &g, gbuf, sizeof gbuf, &gp) == 0 && gp)
        snprintf(grp, sizeof grp, "group %s", gp->gr_name);
      else
        snprintf(grp, sizeof grp, "gid %u", (unsigned)st.st_gid);
    }
    return opd__fail(OPD_EPERM,
                     "cannot connect to the opd daemon at %s: permission "
                     "denied (not in %s? `sudo usermod -aG opd $USER`, then "
                     "log in again)", path, grp);
  }
  if (err == ENOENT || err == ECONNREFUSED)
    return opd__fail(OPD_ECONNECT,
                     "cannot connect to the opd daemon at %s: %s: it is not "
                     "running. Start it with `opd --socket %s` (or `systemctl "
                     "start opd`), or point OPD_SOCKET at the socket it serves",
                     path, err == ENOENT ? "no such socket" : "nobody serves it",
                     path);
  return opd__fail(OPD_ECONNECT, "cannot connect to the opd daemon at %s: %s",
                   path, strerror(err));
}

static int check_peer(opd_client_t *c) {
  struct ucred cr;
  socklen_t len = sizeof cr;
  uid_t me = geteuid(), daemon_uid;
  if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 ||
      len != sizeof cr)
    return opd__fail(OPD_ECONNECT, "cannot tell who serves the socket %s "
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
  return opd__fail(OPD_EPERM,
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

  if (out == NULL) return opd__fail(OPD_EINVAL, "opd_connect: out is NULL");
  *out = NULL;
  c = calloc(1, sizeof *c);
  if (c == NULL) return opd__fail(OPD_ENOMEM, "out of memory");
  c->fd = -1;
  c->ring_efd = -1;
  pthread_once(&atfork_once, install_atfork);
  c->pid = getpid();
  c->fork_gen = opd__fork_gen;
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

  if (opd__socket_path_client(socket_path, c->path, sizeof c->path) != 0) {
    rc = opd__fail(OPD_EINVAL, "socket path too long");
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
    rc = opd__fail(OPD_EPERM, "%s; refusing to connect to %s: another local "
                   "user may have made that directory to receive your tensors "
                   "(remove it, or point OPD_SOCKET at your daemon's socket)",
                   why, c->path);
    goto error;
  }
  strcpy(addr.sun_path, c->path);
  c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c->fd < 0 ||
      connect(c->fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    rc = connect_failed(c->path, errno);
    goto error;
  }
  if ((rc = check_peer(c)) != 0) goto error;
  rc = opd__call(c, OPD_MSG_HELLO, pack_hello, &flags, -1, &r.payload, &r.len);
  if (rc != 0) {
    if (rc != OPD_EVERSION)
      opd__fail(rc, "opd at %s refused the connection: %s", c->path,
                opd_last_error());
    goto error;
  }
  const msgpack_object *body = opd__reply_decode(&r);
  const msgpack_object *lim = body ? opd__mp_get(body, "limits") : NULL;
  uint64_t v;
  if (lim && opd__mp_uint(opd__mp_get(lim, "max_frame"), &v) == 0)
    c->max_frame = (uint32_t)v;
  if (lim && opd__mp_uint(opd__mp_get(lim, "max_inflight"), &v) == 0 && v > 0)
    c->max_inflight = (uint32_t)v;
  if (body) opd__json_from_msgpack(body, &c->hello_json, &c->hello_len);
  const msgpack_object *rings = body ? opd__mp_get(body, "rings") : NULL;
  int offered = rings && rings->type == MSGPACK_OBJECT_BOOLEAN && rings->via.boolean;
  opd__reply_free(&r);
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
  if (c->cuda_hooks != NULL &&
      c->fork_gen == __atomic_load_n(&opd__fork_gen, __ATOMIC_RELAXED))
    c->cuda_hooks->close(c); /* enqueued runs finished while the daemon
                                answers */
  if (c->fd >= 0) close(c->fd);
  for (size_t i = 0; i < c->n_arenas; i++) {
    if (c->arenas[i].fd < 0) continue; /* noted: the caller's mapping */
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
  if (c->cuda_hooks != NULL) c->cuda_hooks->free(c);
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
  if (json == NULL) return opd__fail(OPD_EINVAL, "json is NULL");
  *json = malloc(n + 1);
  if (*json == NULL) return opd__fail(OPD_ENOMEM, "out of memory");
  memcpy(*json, src, n);
  (*json)[n] = '\0';
  if (len) *len = n;
  return 0;
}

int opd_server_info(opd_client_t *c, char **json, size_t *len) {
  int rc = opd__check_usable(c);
  if (rc) return rc;
  if (c->hello_json == NULL) return opd__fail(OPD_EINTERNAL, "no hello reply");
  return copy_out(c->hello_json, c->hello_len, json, len);
}
