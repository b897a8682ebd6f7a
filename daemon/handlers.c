/* Request handlers: one function per message type of protocol.h.
 *
 * DESIGN
 * Every handler runs on the loop thread, reads only the unpacked request
 * (never the raw frame), and answers with exactly one reply: a packed body
 * on success or an error naming the request and the problem. RUN and INFER
 * go to validate.c; everything else is answered here, at once.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/wire.h"
#include "daemon/graph/table.h"
#include "daemon/access.h"
#include "daemon/backend/backend.h"
#include "daemon/handlers.h"
#include "daemon/log.h"
#include "daemon/mem/arena.h"
#include "daemon/mem/publish.h"
#include "daemon/outbox.h"
#include "daemon/plugins.h"
#include "daemon/ringsvc.h"
#include "daemon/run/jobs.h"
#include "daemon/run/validate.h"
#include "daemon/devq.h"
#include "daemon/sched.h"
#include "daemon/sock.h"
#include "daemon/stats.h"

/* The packer for srv->scratch, emptied. Loop thread only. */
static msgpack_packer *scratch(opd_server_t *srv) {
  static msgpack_packer pk;
  msgpack_sbuffer_clear(&srv->scratch);
  msgpack_packer_init(&pk, &srv->scratch, msgpack_sbuffer_write);
  return &pk;
}

static void reply_scratch(const opd_req_t *r) {
  opd__reply(r, r->s->srv->scratch.data, r->s->srv->scratch.size);
}

/* The reply {"arena": id} of register, alloc and import. */
static void reply_arena(const opd_req_t *r, uint64_t arena) {
  msgpack_packer *pk = scratch(r->s->srv);
  msgpack_pack_map(pk, 1);
  PACK_STR(pk, "arena");
  msgpack_pack_uint64(pk, arena);
  reply_scratch(r);
}

static void handle_hello(opd_req_t *r, int type,
                         const msgpack_object *body) {
  opd_session_t *s = r->s;
  (void)type;
  opd_server_t *srv = s->srv;
  const opd_limits_t *l = &srv->cfg.limits;
  uint64_t proto;

  if (opd__mp_uint(opd__mp_get(body, "protocol"), &proto) != 0) {
    opd__reply_error(r, OPD_EPROTO,
                     "hello: \"protocol\" (unsigned) is required");
    return;
  }
  if (proto != OPD_PROTOCOL_VERSION) {
    opd__reply_error(r, OPD_EVERSION,
                     "hello: the daemon speaks protocol %d, the client %llu",
                     OPD_PROTOCOL_VERSION, (unsigned long long)proto);
    return;
  }
  const msgpack_object *name = opd__mp_get(body, "client");
  if (name != NULL && opd__mp_str(name, s->client, sizeof s->client) != 0)
    snprintf(s->client, sizeof s->client, "?");
  char prio[16] = "normal";
  const msgpack_object *po = opd__mp_get(body, "priority");
  int cls = OPD_CLASS_BE;
  if (po != NULL && (opd__mp_str(po, prio, sizeof prio) != 0 ||
                     (cls = opd__class_parse(prio)) < 0)) {
    opd__reply_error(r, OPD_EINVAL, "hello: \"priority\" must be \"latency\" "
                     "(or \"high\") or \"best-effort\" (or \"normal\")");
    return;
  }
  if (cls == OPD_CLASS_LATENCY && !opd__sched_may_latency(srv, s)) {
    opd__reply_error(r, OPD_EPERM, "hello: uid %u may not ask for the latency "
                     "class (priority \"%s\"); the daemon grants it to the users "
                     "and groups of --latency-users / --latency-groups",
                     (unsigned)s->uid, prio);
    return;
  }
  opd__devq_class(s, cls == OPD_CLASS_LATENCY); /* a second hello may change it */
  s->hello = 1;

  msgpack_packer *pk = scratch(srv);
  char spin_why[200] = "";
  int spin = opd__spin_grant(srv, spin_why, sizeof spin_why);
  msgpack_pack_map(pk, spin ? 8 : 9);
  PACK_STR(pk, "rings");
  msgpack_pack_true(pk);
  PACK_STR(pk, "spin"); /* would a spin ring be granted now */
  if (spin) msgpack_pack_true(pk);
  else msgpack_pack_false(pk);
  if (!spin) {
    PACK_STR(pk, "spin_why");
    PACK_STR(pk, spin_why);
  }
  PACK_STR(pk, "protocol");
  msgpack_pack_uint32(pk, OPD_PROTOCOL_VERSION);
  PACK_STR(pk, "version");
  PACK_STR(pk, OPD_VERSION);
  PACK_STR(pk, "session");
  msgpack_pack_uint64(pk, s->id);
  PACK_STR(pk, "backends");
  msgpack_pack_array(pk, srv->n_devices ? 2 : 1);
  PACK_STR(pk, "cpu");
  if (srv->n_devices) PACK_STR(pk, opd__backend_dev.name);
  PACK_STR(pk, "devices");
  opd__backend_dev.describe(srv, pk);
  PACK_STR(pk, "limits");
  msgpack_pack_map(pk, 10);
  PACK_STR(pk, "max_frame");
  msgpack_pack_uint32(pk, l->max_frame);
  PACK_STR(pk, "max_rank");
  msgpack_pack_uint32(pk, OPD_MAX_RANK);
  PACK_STR(pk, "max_tensors");
  msgpack_pack_uint32(pk, OPD_MAX_TENSORS);
  PACK_STR(pk, "max_attrs");
  msgpack_pack_uint32(pk, OPD_MAX_ATTRS);
  PACK_STR(pk, "max_arenas");
  msgpack_pack_uint32(pk, l->max_arenas);
  PACK_STR(pk, "max_arena_bytes");
  msgpack_pack_uint64(pk, l->max_arena_bytes);
  PACK_STR(pk, "max_session_bytes");
  msgpack_pack_uint64(pk, l->max_session_bytes);
  PACK_STR(pk, "max_inflight");
  msgpack_pack_uint32(pk, l->max_inflight);
  PACK_STR(pk, "max_async");
  msgpack_pack_uint32(pk, l->max_async);
  PACK_STR(pk, "word_ahead");
  msgpack_pack_uint32(pk, l->word_ahead);
  char esc[4 * OPD_MAX_NAME];
  LOG_DEBUG("session %llu: hello from \"%s\"%s", (unsigned long long)s->id,
           opd__log_escape(s->client, esc, sizeof esc),
           s->priority ? " (latency class)" : "");
  reply_scratch(r);
}

static void handle_register(opd_req_t *r, int type,
                            const msgpack_object *body) {
  opd_session_t *s = r->s;
  (void)type;
  uint64_t size, arena;
  opd_err_t err;

  int fd;
  if (opd__req_take_fds(r, 1, &fd, &err) != 0) {
    opd__reply_error(r, OPD_EFD, "arena_register: the memfd: %s", err.msg);
    return;
  }
  if (opd__mp_uint(opd__mp_get(body, "size"), &size) != 0) {
    close(fd);
    opd__reply_error(r, OPD_EPROTO,
                     "arena_register: \"size\" (unsigned) is required");
    return;
  }
  const msgpack_object *shm = opd__mp_get(body, "shm");
  if (shm != NULL && shm->type != MSGPACK_OBJECT_BOOLEAN) {
    close(fd);
    opd__reply_error(r, OPD_EPROTO, "arena_register: \"shm\" must be a bool");
    return;
  }
  int rc = opd__arena_register(s, fd, size, shm != NULL && shm->via.boolean,
                               &arena, &err);
  if (rc != 0) {
    opd__reply_error(r, rc, "arena_register: %s", err.msg);
    return;
  }
  reply_arena(r, arena);
}

static void handle_alloc(opd_req_t *r, int type,
                         const msgpack_object *body) {
  opd_session_t *s = r->s;
  (void)type;
  char dev[OPD_MAX_NAME];
  opd_err_t err;
  uint64_t size, arena;
  int req;
  if (opd__mp_str(opd__mp_get(body, "device"), dev, sizeof dev) != 0 ||
      opd__mp_uint(opd__mp_get(body, "size"), &size) != 0) {
    opd__reply_error(r, OPD_EPROTO,
                     "alloc: \"device\" (a string) and \"size\" (unsigned) "
                     "are required");
    return;
  }
  int rc = opd__device_parse(s->srv, dev, &req, &err);
  if (rc == 0 && req < 0) {
    rc = opd__errf(&err, OPD_EDEVICE, "device \"%s\" is not a cuda device "
                   "(host memory comes from arena_register)", dev);
  }
  const msgpack_object *ex = opd__mp_get(body, "exportable");
  int exportable = ex != NULL && ex->type == MSGPACK_OBJECT_BOOLEAN &&
                   ex->via.boolean;
  if (rc == 0)
    rc = opd__arena_alloc_device(s, req, size, exportable, &arena, &err);
  if (rc != 0) {
    opd__reply_error(r, rc, "alloc: %s", err.msg);
    return;
  }
  reply_arena(r, arena);
}

static void handle_publish(opd_req_t *r, int type,
                           const msgpack_object *body) {
  opd_session_t *s = r->s;
  const char *what = opd__msg_name(type);
  /* room for "user/name" in attach and unpublish; publish checks that its
   * name has at most OPD_MAX_NAME - 1 bytes */
  char name[2 * OPD_MAX_NAME];
  opd_err_t err;
  uint64_t arena = 0;
  if (opd__mp_str(opd__mp_get(body, "name"), name, sizeof name) != 0 ||
      (type == OPD_MSG_PUBLISH &&
       opd__mp_uint(opd__mp_get(body, "arena"), &arena) != 0)) {
    opd__reply_error(r, OPD_EPROTO,
                     type == OPD_MSG_PUBLISH
                         ? "%s: \"arena\" (unsigned) and \"name\" (a string "
                           "of at most 63 bytes) are required"
                         : "%s: \"name\" (a string: \"name\" or "
                           "\"user/name\") is required",
                     what);
    return;
  }
  char meta[256] = "";
  const msgpack_object *mo = opd__mp_get(body, "meta");
  if (mo != NULL && opd__mp_str(mo, meta, sizeof meta) != 0) {
    opd__reply_error(r, OPD_EINVAL,
                     "%s: \"meta\" must be a string of at most 255 bytes",
                     what);
    return;
  }
  opd_readers_t readers, *rd = NULL;
  const msgpack_object *ro = opd__mp_get(body, "readers");
  if (type == OPD_MSG_PUBLISH && ro != NULL && ro->type != MSGPACK_OBJECT_NIL) {
    int rc = opd__readers_parse(ro, &readers, &err);
    if (rc != 0) {
      opd__reply_error(r, rc, "%s: %s", what, err.msg);
      return;
    }
    rd = &readers;
  }
  opd_arena_t *a = NULL;
  const char *ameta = "";
  int rc = type == OPD_MSG_PUBLISH
               ? opd__publish(s, arena, name, meta, rd, &err)
           : type == OPD_MSG_UNPUBLISH
               ? opd__unpublish(s, name, &err)
               : opd__attach(s, name, &a, &ameta, &err);
  if (rc != 0) {
    opd__reply_error(r, rc, "%s: %s", what, err.msg);
    return;
  }
  if (a == NULL) {
    opd__reply(r, NULL, 0);
    return;
  }
  char dev[16];
  int n = a->device < 0 ? snprintf(dev, sizeof dev, "cpu")
                        : snprintf(dev, sizeof dev, "cuda:%d", a->device);
  msgpack_packer *pk = scratch(s->srv);
  msgpack_pack_map(pk, 4);
  PACK_STR(pk, "meta");
  PACK_STR(pk, ameta);
  PACK_STR(pk, "arena");
  msgpack_pack_uint64(pk, a->id);
  PACK_STR(pk, "size");
  msgpack_pack_uint64(pk, a->size);
  PACK_STR(pk, "device");
  msgpack_pack_str_with_body(pk, dev, (size_t)n);
  reply_scratch(r);
}

static void handle_import(opd_req_t *r, int type,
                          const msgpack_object *body) {
  opd_session_t *s = r->s;
  (void)type;
  const msgpack_object *h = opd__mp_get(body, "handle");
  char dev[OPD_MAX_NAME];
  opd_err_t err;
  uint64_t offset, size, arena;
  int req;
  if (h == NULL || h->type != MSGPACK_OBJECT_BIN || h->via.bin.size != 64 ||
      opd__mp_uint(opd__mp_get(body, "offset"), &offset) != 0 ||
      opd__mp_uint(opd__mp_get(body, "size"), &size) != 0 ||
      opd__mp_str(opd__mp_get(body, "device"), dev, sizeof dev) != 0) {
    opd__reply_error(r, OPD_EPROTO,
                     "import: \"handle\" (64 bytes of bin), \"offset\", "
                     "\"size\" (unsigned) and \"device\" are required");
    return;
  }
  int rc = opd__device_parse(s->srv, dev, &req, &err);
  if (rc == 0 && req < 0) {
    rc = opd__errf(&err, OPD_EDEVICE, "device \"%s\" is not a cuda device",
                   dev);
  }
  if (rc == 0)
    rc = opd__arena_import(s, req, h->via.bin.ptr, offset, size, &arena, &err);
  if (rc != 0) {
    opd__reply_error(r, rc, "import: %s", err.msg);
    return;
  }
  reply_arena(r, arena);
}

static void handle_export(opd_req_t *r, int type,
                          const msgpack_object *body) {
  opd_session_t *s = r->s;
  (void)type;
  uint64_t arena;
  opd_err_t err;
  int fd;
  if (opd__mp_uint(opd__mp_get(body, "arena"), &arena) != 0) {
    opd__reply_error(r, OPD_EPROTO, "export: \"arena\" (unsigned) is required");
    return;
  }
  opd_arena_t *a = opd__arena_find(s, arena);
  if (a == NULL) {
    opd__reply_error(r, OPD_EARENA,
                     "export: unknown arena %llu (not registered by this "
                     "session)", (unsigned long long)arena);
    return;
  }
  if (a->readonly) {
    opd__reply_error(r, OPD_EREADONLY, "export: arena %llu is attached "
                     "read-only; only its publisher can export it",
                     (unsigned long long)arena);
    return;
  }
  if (a->vmm == NULL) {
    opd__reply_error(r, OPD_EINVAL, "export: arena %llu is not exportable "
                     "device memory (alloc it with \"exportable\": true)",
                     (unsigned long long)arena);
    return;
  }
  uint64_t alloc_size = 0;
  int rc = opd__backend_dev.export(s->srv, a->vmm, &fd, &alloc_size, &err);
  if (rc != 0) {
    opd__reply_error(r, rc, "export: %s", err.msg);
    return;
  }
  char dev[16];
  int n = snprintf(dev, sizeof dev, "cuda:%d", a->device);
  msgpack_packer *pk = scratch(s->srv);
  msgpack_pack_map(pk, 4);
  PACK_STR(pk, "size");
  msgpack_pack_uint64(pk, a->size);
  PACK_STR(pk, "alloc_size");
  msgpack_pack_uint64(pk, alloc_size);
  PACK_STR(pk, "device");
  msgpack_pack_str_with_body(pk, dev, (size_t)n);
  PACK_STR(pk, "fd");
  msgpack_pack_true(pk);
  if (opd__reply_fd(r, s->srv->scratch.data, s->srv->scratch.size, fd) != 0)
    opd__reply_error(r, OPD_ELIMIT, "export: too many file descriptors "
                     "waiting to be sent; read the replies first");
}

static void handle_ring_setup(opd_req_t *r, int type,
                              const msgpack_object *body) {
  opd_session_t *s = r->s;
  (void)type;
  opd_err_t err;
  char why[200];
  int mode;
  int rc = opd__ring_setup(r, body, &mode, why, sizeof why, &err);
  if (rc != 0) {
    opd__reply_error(r, rc, "ring_setup: %s", err.msg);
    return;
  }
  /* {"wait": granted, "why"?: why not spin}; this reply still goes to the
   * socket: the client reads it there */
  msgpack_packer *pk = scratch(s->srv);
  msgpack_pack_map(pk, why[0] ? 2 : 1);
  PACK_STR(pk, "wait");
  PACK_STR(pk, opd__ring_mode_name(mode));
  if (why[0]) {
    PACK_STR(pk, "why");
    PACK_STR(pk, why);
  }
  reply_scratch(r); /* r->via: the socket, which it came by */
}

static void handle_release(opd_req_t *r, int type,
                           const msgpack_object *body) {
  opd_session_t *s = r->s;
  (void)type;
  uint64_t arena;
  if (opd__mp_uint(opd__mp_get(body, "arena"), &arena) != 0) {
    opd__reply_error(r, OPD_EPROTO,
                     "arena_release: \"arena\" (unsigned) is required");
    return;
  }
  if (opd__arena_release(s, arena) != 0) {
    opd__reply_error(r, OPD_EARENA,
                     "arena_release: unknown arena %llu (not registered by "
                     "this session)",
                     (unsigned long long)arena);
    return;
  }
  opd__reply(r, NULL, 0);
}

/* STAGING: a client's count of the inputs it copied into shared memory
 * before its runs (its fallback for memory the daemon cannot map), added
 * to the daemon's, which STATS reports. */
static void handle_staging(opd_req_t *r, int type,
                           const msgpack_object *body) {
  (void)type;
  uint64_t copies, bytes;
  if (opd__mp_uint(opd__mp_get(body, "copies"), &copies) != 0 ||
      opd__mp_uint(opd__mp_get(body, "bytes"), &bytes) != 0) {
    opd__reply_error(r, OPD_EPROTO, "staging: \"copies\" and \"bytes\" "
                     "(unsigned) are required");
    return;
  }
  r->s->srv->staged_copies += copies;
  r->s->srv->staged_bytes += bytes;
  opd__reply(r, NULL, 0);
}

/* STATS: the daemon's counters (daemon/stats.c). */
static void handle_stats(opd_req_t *r, int type,
                         const msgpack_object *body) {
  (void)type, (void)body;
  opd__stats_pack(r->s->srv, scratch(r->s->srv));
  reply_scratch(r);
}

static void handle_run(opd_req_t *r, int type,
                       const msgpack_object *body) {
  opd__run_request(r, body, type == OPD_MSG_INFER);
}

static void handle_ops(opd_req_t *r, int type,
                       const msgpack_object *body) {
  opd_session_t *s = r->s;
  (void)type, (void)body;
  opd__reply(r, s->srv->ops_body, s->srv->ops_body_len);
}

static void handle_plugins(opd_req_t *r, int type,
                           const msgpack_object *body) {
  (void)type, (void)body;
  opd__plugins_pack(scratch(r->s->srv));
  reply_scratch(r);
}

static void handle_ping(opd_req_t *r, int type,
                        const msgpack_object *body) {
  (void)type, (void)body;
  opd__reply(r, NULL, 0);
}

/* STREAM: the events ordering this session's runs on a device with a
 * client's CUDA stream (include/opd/protocol.h). */
static void handle_stream(opd_req_t *r, int type,
                          const msgpack_object *body) {
  opd_session_t *s = r->s;
  (void)type;
  const msgpack_object *ev = opd__mp_get(body, "event");
  char dev[OPD_MAX_NAME];
  opd_err_t err;
  int req;
  if (ev == NULL || ev->type != MSGPACK_OBJECT_BIN || ev->via.bin.size != 64 ||
      opd__mp_str(opd__mp_get(body, "device"), dev, sizeof dev) != 0) {
    opd__reply_error(r, OPD_EPROTO,
                     "stream: \"event\" (the 64 bytes of a "
                     "cudaIpcEventHandle_t, bin) and \"device\" are required");
    return;
  }
  /* the body first: a malformed one is EPROTO on any daemon */
  const msgpack_object *fl = opd__mp_get(body, "flag");
  const msgpack_object *evs = opd__mp_get(body, "events");
  const msgpack_object *wm = opd__mp_get(body, "wait_ms");
  opd_stream_req_t rq = {.event = ev->via.bin.ptr};
  uint64_t wait_ms = 0;
  int rc = 0;
  if (fl != NULL && fl->type != MSGPACK_OBJECT_BOOLEAN)
    rc = opd__errf(&err, OPD_EPROTO, "\"flag\" must be true or false");
  if (rc == 0 && wm != NULL && (opd__mp_uint(wm, &wait_ms) != 0 || wait_ms == 0 ||
                                wait_ms > s->srv->cfg.limits.stream_wait_ms))
    rc = opd__errf(&err, OPD_EPROTO, "\"wait_ms\" must be 1..%u (the daemon's "
                   "--stream-wait-ms)", s->srv->cfg.limits.stream_wait_ms);
  rq.wait_ms = (uint32_t)wait_ms;
  rq.flag = rc == 0 && fl != NULL && fl->via.boolean;
  if (rq.flag) {
    if (evs == NULL || evs->type != MSGPACK_OBJECT_BIN || evs->via.bin.size == 0 ||
        evs->via.bin.size % 64 != 0 || evs->via.bin.size / 64 > OPD_STREAM_EVENTS)
      rc = opd__errf(&err, OPD_EPROTO, "\"flag\" needs \"events\": 1..%d "
                     "event handles of 64 bytes, back to back (bin)",
                     OPD_STREAM_EVENTS);
    else
      rq.events = evs->via.bin.ptr, rq.n_events = evs->via.bin.size / 64;
  }
  if (rc == 0) rc = opd__device_parse(s->srv, dev, &req, &err);
  if (rc == 0 && req < 0)
    rc = opd__errf(&err, OPD_EDEVICE, "device \"%s\" is not a cuda device",
                   dev);
  opd_stream_rep_t rp = {.words = 0};
  if (rc == 0) rc = opd__backend_dev.stream(s, req, &rq, &rp, &err);
  if (rc != 0) {
    opd__reply_error(r, rc, "stream: %s", err.msg);
    return;
  }
  msgpack_packer *pk = scratch(s->srv);
  msgpack_pack_map(pk, rq.flag ? 3 : 1);
  PACK_STR(pk, "event");
  msgpack_pack_bin(pk, 64);
  msgpack_pack_bin_body(pk, rp.event, 64);
  if (rq.flag) {
    PACK_STR(pk, "flag");
    msgpack_pack_bin(pk, 64);
    msgpack_pack_bin_body(pk, rp.flag, 64);
    PACK_STR(pk, "words");
    if (rp.words) msgpack_pack_true(pk);
    else msgpack_pack_false(pk);
  }
  reply_scratch(r);
}

/* SYNC: noted here; the session's run queue answers it once its runs
 * before it completed (opd__runq_start, daemon/run/jobs.c, which on_payload
 * calls next). */
static void handle_sync(opd_req_t *r, int type, const msgpack_object *body) {
  (void)type, (void)body;
  if (opd__runq_sync(r) != 0)
    opd__reply_error(r, OPD_ELIMIT, "sync: %d SYNCs of this session are "
                     "waiting already, the limit", OPD_MAX_SYNCS);
}

static void handle_graph(opd_req_t *r, int type, const msgpack_object *body) {
  if (type == OPD_MSG_GRAPH_DEFINE)
    opd__graph_define(r, body);
  else
    opd__graph_destroy_request(r, body);
}

/* The requests a client may send: X(message, handler, flags), one row
 * each (a message missing here is "unknown"; REPLY and GOODBYE are the
 * daemon's own). PRE_HELLO: allowed before the hello. */
#define PRE_HELLO 1u
#define OPD_DISPATCH(X)                         \
  X(HELLO, handle_hello, PRE_HELLO)             \
  X(PING, handle_ping, PRE_HELLO)               \
  X(ARENA_REGISTER, handle_register, 0)         \
  X(ARENA_RELEASE, handle_release, 0)           \
  X(RUN, handle_run, 0)                         \
  X(INFER, handle_run, 0)                       \
  X(OPS, handle_ops, 0)                         \
  X(PLUGINS, handle_plugins, 0)                 \
  X(STATS, handle_stats, 0)                     \
  X(ALLOC, handle_alloc, 0)                     \
  X(PUBLISH, handle_publish, 0)                 \
  X(ATTACH, handle_publish, 0)                  \
  X(UNPUBLISH, handle_publish, 0)               \
  X(IMPORT, handle_import, 0)                   \
  X(EXPORT, handle_export, 0)                   \
  X(RING_SETUP, handle_ring_setup, 0)           \
  X(STREAM, handle_stream, 0)                   \
  X(SYNC, handle_sync, 0)                       \
  X(GRAPH_DEFINE, handle_graph, 0)              \
  X(GRAPH_DESTROY, handle_graph, 0)             \
  X(STAGING, handle_staging, 0)

typedef void handler_fn(opd_req_t *r, int type, const msgpack_object *body);
static const struct {
  handler_fn *fn;
  unsigned flags;
} dispatch[OPD_MSG_COUNT_] = {
#define X(msg, fn, flags) [OPD_MSG_##msg] = {fn, flags},
    OPD_DISPATCH(X)
#undef X
};

void opd__handle(opd_req_t *r, const msgpack_object *req) {
  opd_session_t *s = r->s;
  uint64_t type = req->via.array.ptr[0].via.u64;
  const msgpack_object *body = &req->via.array.ptr[2];

  if (type >= OPD_MSG_COUNT_ || dispatch[type].fn == NULL) {
    opd__reply_error(r, OPD_EPROTO, "unknown message type %llu",
                     (unsigned long long)type);
    return;
  }
  if (!s->hello && !(dispatch[type].flags & PRE_HELLO)) {
    opd__reply_error(r, OPD_ESTATE, "%s: send hello first",
                     opd__msg_name((int)type));
    return;
  }
  dispatch[type].fn(r, (int)type, body);
}
