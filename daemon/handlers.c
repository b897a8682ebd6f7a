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
#include "daemon/access.h"
#include "daemon/log.h"
#include "daemon/server.h"


/* The packer for srv->scratch, emptied. Loop thread only. */
static msgpack_packer *scratch(opd_server_t *srv) {
  static msgpack_packer pk;
  msgpack_sbuffer_clear(&srv->scratch);
  msgpack_packer_init(&pk, &srv->scratch, msgpack_sbuffer_write);
  return &pk;
}

static void reply_scratch(opd_session_t *s, uint64_t id) {
  opd__reply(s, id, 0, s->srv->scratch.data, s->srv->scratch.size);
}

/* The reply {"arena": id} of register, alloc and import. */
static void reply_arena(opd_session_t *s, uint64_t id, uint64_t arena) {
  msgpack_packer *pk = scratch(s->srv);
  msgpack_pack_map(pk, 1);
  PACK_STR(pk, "arena");
  msgpack_pack_uint64(pk, arena);
  reply_scratch(s, id);
}

static void handle_hello(opd_session_t *s, uint64_t id,
                         int type, const msgpack_object *body) {
  (void)type;
  opd_server_t *srv = s->srv;
  const opd_limits_t *l = &srv->cfg.limits;
  uint64_t proto;

  if (opd__mp_uint(opd__mp_get(body, "protocol"), &proto) != 0) {
    opd__reply_error(s, id, OPD_EPROTO,
                     "hello: \"protocol\" (unsigned) is required");
    return;
  }
  if (proto != OPD_PROTOCOL_VERSION) {
    opd__reply_error(s, id, OPD_EVERSION,
                     "hello: the daemon speaks protocol %d, the client %llu",
                     OPD_PROTOCOL_VERSION, (unsigned long long)proto);
    return;
  }
  const msgpack_object *name = opd__mp_get(body, "client");
  if (name != NULL && opd__mp_str(name, s->client, sizeof s->client) != 0)
    snprintf(s->client, sizeof s->client, "?");
  char prio[16] = "normal";
  const msgpack_object *po = opd__mp_get(body, "priority");
  if (po != NULL && (opd__mp_str(po, prio, sizeof prio) != 0 ||
                     (strcmp(prio, "high") && strcmp(prio, "normal")))) {
    opd__reply_error(s, id, OPD_EINVAL,
                     "hello: \"priority\" must be \"high\" or \"normal\"");
    return;
  }
  s->priority = strcmp(prio, "high") == 0;
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
  if (srv->n_devices) PACK_STR(pk, "cuda");
  PACK_STR(pk, "devices");
  opd__cuda_pack_devices(srv, pk);
  PACK_STR(pk, "limits");
  msgpack_pack_map(pk, 8);
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
  char esc[4 * OPD_MAX_NAME];
  LOG_DEBUG("session %llu: hello from \"%s\"%s", (unsigned long long)s->id,
           opd__log_escape(s->client, esc, sizeof esc),
           s->priority ? " (high priority)" : "");
  reply_scratch(s, id);
}

static void handle_register(opd_session_t *s, uint64_t id,
                            int type, const msgpack_object *body) {
  (void)type;
  uint64_t size, arena;
  char err[200];

  int fd;
  if (opd__session_take_fds(s, 1, &fd, err, sizeof err) != 0) {
    opd__reply_error(s, id, OPD_EFD, "arena_register: the memfd: %s", err);
    return;
  }
  if (opd__mp_uint(opd__mp_get(body, "size"), &size) != 0) {
    close(fd);
    opd__reply_error(s, id, OPD_EPROTO,
                     "arena_register: \"size\" (unsigned) is required");
    return;
  }
  int rc = opd__arena_register(s, fd, size, &arena, err, sizeof err);
  if (rc != 0) {
    opd__reply_error(s, id, rc, "arena_register: %s", err);
    return;
  }
  reply_arena(s, id, arena);
}

static void handle_alloc(opd_session_t *s, uint64_t id,
                         int type, const msgpack_object *body) {
  (void)type;
  char dev[OPD_MAX_NAME], err[300];
  uint64_t size, arena;
  int req;
  if (opd__mp_str(opd__mp_get(body, "device"), dev, sizeof dev) != 0 ||
      opd__mp_uint(opd__mp_get(body, "size"), &size) != 0) {
    opd__reply_error(s, id, OPD_EPROTO,
                     "alloc: \"device\" (a string) and \"size\" (unsigned) "
                     "are required");
    return;
  }
  int rc = opd__device_parse(s->srv, dev, &req, err, sizeof err);
  if (rc == 0 && req < 0) {
    rc = OPD_EDEVICE;
    snprintf(err, sizeof err, "device \"%s\" is not a cuda device (host "
             "memory comes from arena_register)", dev);
  }
  const msgpack_object *ex = opd__mp_get(body, "exportable");
  int exportable = ex != NULL && ex->type == MSGPACK_OBJECT_BOOLEAN &&
                   ex->via.boolean;
  if (rc == 0)
    rc = opd__arena_alloc_device(s, req, size, exportable, &arena, err,
                                 sizeof err);
  if (rc != 0) {
    opd__reply_error(s, id, rc, "alloc: %s", err);
    return;
  }
  reply_arena(s, id, arena);
}

static void handle_publish(opd_session_t *s, uint64_t id, int type,
                           const msgpack_object *body) {
  const char *what = opd__msg_name(type);
  /* room for "user/name" in attach and unpublish; publish checks that its
   * name has at most OPD_MAX_NAME - 1 bytes */
  char name[2 * OPD_MAX_NAME], err[300];
  uint64_t arena = 0;
  if (opd__mp_str(opd__mp_get(body, "name"), name, sizeof name) != 0 ||
      (type == OPD_MSG_PUBLISH &&
       opd__mp_uint(opd__mp_get(body, "arena"), &arena) != 0)) {
    opd__reply_error(s, id, OPD_EPROTO,
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
    opd__reply_error(s, id, OPD_EINVAL,
                     "%s: \"meta\" must be a string of at most 255 bytes",
                     what);
    return;
  }
  opd_readers_t readers, *rd = NULL;
  const msgpack_object *ro = opd__mp_get(body, "readers");
  if (type == OPD_MSG_PUBLISH && ro != NULL && ro->type != MSGPACK_OBJECT_NIL) {
    int rc = opd__readers_parse(ro, &readers, err, sizeof err);
    if (rc != 0) {
      opd__reply_error(s, id, rc, "%s: %s", what, err);
      return;
    }
    rd = &readers;
  }
  opd_arena_t *a = NULL;
  const char *ameta = "";
  int rc = type == OPD_MSG_PUBLISH
               ? opd__publish(s, arena, name, meta, rd, err, sizeof err)
           : type == OPD_MSG_UNPUBLISH
               ? opd__unpublish(s, name, err, sizeof err)
               : opd__attach(s, name, &a, &ameta, err, sizeof err);
  if (rc != 0) {
    opd__reply_error(s, id, rc, "%s: %s", what, err);
    return;
  }
  if (a == NULL) {
    opd__reply(s, id, 0, NULL, 0);
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
  reply_scratch(s, id);
}

static void handle_import(opd_session_t *s, uint64_t id,
                          int type, const msgpack_object *body) {
  (void)type;
  const msgpack_object *h = opd__mp_get(body, "handle");
  char dev[OPD_MAX_NAME], err[300];
  uint64_t offset, size, arena;
  int req;
  if (h == NULL || h->type != MSGPACK_OBJECT_BIN || h->via.bin.size != 64 ||
      opd__mp_uint(opd__mp_get(body, "offset"), &offset) != 0 ||
      opd__mp_uint(opd__mp_get(body, "size"), &size) != 0 ||
      opd__mp_str(opd__mp_get(body, "device"), dev, sizeof dev) != 0) {
    opd__reply_error(s, id, OPD_EPROTO,
                     "import: \"handle\" (64 bytes of bin), \"offset\", "
                     "\"size\" (unsigned) and \"device\" are required");
    return;
  }
  int rc = opd__device_parse(s->srv, dev, &req, err, sizeof err);
  if (rc == 0 && req < 0) {
    rc = OPD_EDEVICE;
    snprintf(err, sizeof err, "device \"%s\" is not a cuda device", dev);
  }
  if (rc == 0)
    rc = opd__arena_import(s, req, h->via.bin.ptr, offset, size, &arena, err,
                           sizeof err);
  if (rc != 0) {
    opd__reply_error(s, id, rc, "import: %s", err);
    return;
  }
  reply_arena(s, id, arena);
}

static void handle_export(opd_session_t *s, uint64_t id,
                          int type, const msgpack_object *body) {
  (void)type;
  uint64_t arena;
  char err[300];
  int fd;
  if (opd__mp_uint(opd__mp_get(body, "arena"), &arena) != 0) {
    opd__reply_error(s, id, OPD_EPROTO, "export: \"arena\" (unsigned) is required");
    return;
  }
  opd_arena_t *a = opd__arena_find(s, arena);
  if (a == NULL) {
    opd__reply_error(s, id, OPD_EARENA,
                     "export: unknown arena %llu (not registered by this "
                     "session)", (unsigned long long)arena);
    return;
  }
  if (a->readonly) {
    opd__reply_error(s, id, OPD_EREADONLY, "export: arena %llu is attached "
                     "read-only; only its publisher can export it",
                     (unsigned long long)arena);
    return;
  }
  if (a->vmm == NULL) {
    opd__reply_error(s, id, OPD_EINVAL, "export: arena %llu is not exportable "
                     "device memory (alloc it with \"exportable\": true)",
                     (unsigned long long)arena);
    return;
  }
  int rc = opd__cuda_export(s->srv, a->vmm, &fd, err, sizeof err);
  if (rc != 0) {
    opd__reply_error(s, id, rc, "export: %s", err);
    return;
  }
  char dev[16];
  int n = snprintf(dev, sizeof dev, "cuda:%d", a->device);
  msgpack_packer *pk = scratch(s->srv);
  msgpack_pack_map(pk, 4);
  PACK_STR(pk, "size");
  msgpack_pack_uint64(pk, a->size);
  PACK_STR(pk, "alloc_size");
  msgpack_pack_uint64(pk, opd__cuda_vmm_size(a->vmm));
  PACK_STR(pk, "device");
  msgpack_pack_str_with_body(pk, dev, (size_t)n);
  PACK_STR(pk, "fd");
  msgpack_pack_true(pk);
  if (opd__reply_fd(s, id, s->srv->scratch.data, s->srv->scratch.size, fd) != 0)
    opd__reply_error(s, id, OPD_ELIMIT, "export: too many file descriptors "
                     "waiting to be sent; read the replies first");
}

static void handle_ring_setup(opd_session_t *s, uint64_t id,
                              int type, const msgpack_object *body) {
  (void)type;
  char err[300], why[200];
  int mode;
  int rc = opd__ring_setup(s, body, &mode, why, sizeof why, err, sizeof err);
  if (rc != 0) {
    opd__reply_error(s, id, rc, "ring_setup: %s", err);
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
  s->reply_socket = 1;
  reply_scratch(s, id);
  s->reply_socket = 0;
}

static void handle_release(opd_session_t *s, uint64_t id,
                           int type, const msgpack_object *body) {
  (void)type;
  uint64_t arena;
  if (opd__mp_uint(opd__mp_get(body, "arena"), &arena) != 0) {
    opd__reply_error(s, id, OPD_EPROTO,
                     "arena_release: \"arena\" (unsigned) is required");
    return;
  }
  if (opd__arena_release(s, arena) != 0) {
    opd__reply_error(s, id, OPD_EARENA,
                     "arena_release: unknown arena %llu (not registered by "
                     "this session)",
                     (unsigned long long)arena);
    return;
  }
  opd__reply(s, id, 0, NULL, 0);
}

static void handle_stats(opd_session_t *s, uint64_t id, int type,
                         const msgpack_object *body) {
  (void)type, (void)body;
  opd_server_t *srv = s->srv;
  msgpack_packer *pk = scratch(srv);
  msgpack_pack_map(pk, 17);
  PACK_STR(pk, "mappings"); /* host mmaps held for clients: arenas + rings */
  msgpack_pack_uint64(pk, srv->mappings);
  PACK_STR(pk, "mapped_bytes");
  msgpack_pack_uint64(pk, srv->host_bytes);
  PACK_STR(pk, "inflight");
  msgpack_pack_uint32(pk, srv->inflight);
  PACK_STR(pk, "uids");
  uint32_t nu = 0;
  for (const opd_acct_t *a = srv->accts; a; a = a->next) nu++;
  msgpack_pack_uint32(pk, nu);
  PACK_STR(pk, "reserved_sessions");
  msgpack_pack_uint32(pk, srv->n_reserved);
  PACK_STR(pk, "published");
  msgpack_pack_uint32(pk, srv->n_pubs);
  PACK_STR(pk, "devices");
  msgpack_pack_uint32(pk, (uint32_t)srv->n_devices);
  PACK_STR(pk, "sessions");
  msgpack_pack_uint32(pk, srv->n_sessions);
  PACK_STR(pk, "sessions_total");
  msgpack_pack_uint64(pk, srv->sessions_total);
  PACK_STR(pk, "requests");
  msgpack_pack_uint64(pk, srv->requests);
  PACK_STR(pk, "errors");
  msgpack_pack_uint64(pk, srv->errors);
  PACK_STR(pk, "run_cache_hits");
  msgpack_pack_uint64(pk, srv->run_cache_hits);
  PACK_STR(pk, "arenas");
  msgpack_pack_uint64(pk, srv->arenas);
  PACK_STR(pk, "bytes_mapped");
  msgpack_pack_uint64(pk, srv->bytes_mapped);
  PACK_STR(pk, "uptime_ns");
  msgpack_pack_uint64(pk, opd__now_ns() - srv->start_ns);
  PACK_STR(pk, "healthy");
  if (srv->healthy) msgpack_pack_true(pk);
  else msgpack_pack_false(pk);
  PACK_STR(pk, "ops");
  msgpack_pack_map(pk, (size_t)opd__n_ops);
  for (int i = 0; i < opd__n_ops; i++) {
    PACK_STR(pk, opd__ops[i]->name);
    msgpack_pack_map(pk, 3);
    PACK_STR(pk, "calls");
    msgpack_pack_uint64(pk, srv->op_stats[i].calls);
    PACK_STR(pk, "errors");
    msgpack_pack_uint64(pk, srv->op_stats[i].errors);
    PACK_STR(pk, "ns");
    msgpack_pack_uint64(pk, srv->op_stats[i].ns);
  }
  reply_scratch(s, id);
}

static void handle_run(opd_session_t *s, uint64_t id, int type,
                       const msgpack_object *body) {
  opd__run_request(s, id, body, type == OPD_MSG_INFER);
}

static void handle_ops(opd_session_t *s, uint64_t id, int type,
                       const msgpack_object *body) {
  (void)type, (void)body;
  opd__reply(s, id, 0, s->srv->ops_body, s->srv->ops_body_len);
}

static void handle_ping(opd_session_t *s, uint64_t id, int type,
                        const msgpack_object *body) {
  (void)type, (void)body;
  opd__reply(s, id, 0, NULL, 0);
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
  X(STATS, handle_stats, 0)                     \
  X(ALLOC, handle_alloc, 0)                     \
  X(PUBLISH, handle_publish, 0)                 \
  X(ATTACH, handle_publish, 0)                  \
  X(UNPUBLISH, handle_publish, 0)               \
  X(IMPORT, handle_import, 0)                   \
  X(EXPORT, handle_export, 0)                   \
  X(RING_SETUP, handle_ring_setup, 0)

typedef void handler_fn(opd_session_t *s, uint64_t id, int type,
                        const msgpack_object *body);
static const struct {
  handler_fn *fn;
  unsigned flags;
} dispatch[OPD_MSG_COUNT_] = {
#define X(msg, fn, flags) [OPD_MSG_##msg] = {fn, flags},
    OPD_DISPATCH(X)
#undef X
};

void opd__handle(opd_session_t *s, const msgpack_object *req) {
  uint64_t type = req->via.array.ptr[0].via.u64;
  uint64_t id = req->via.array.ptr[1].via.u64;
  const msgpack_object *body = &req->via.array.ptr[2];

  if (type >= OPD_MSG_COUNT_ || dispatch[type].fn == NULL) {
    opd__reply_error(s, id, OPD_EPROTO, "unknown message type %llu",
                     (unsigned long long)type);
    return;
  }
  if (!s->hello && !(dispatch[type].flags & PRE_HELLO)) {
    opd__reply_error(s, id, OPD_ESTATE, "%s: send hello first",
                     opd__msg_name((int)type));
    return;
  }
  dispatch[type].fn(s, id, (int)type, body);
}

/* ---- the OPS body, packed once at start ------------------------------- */

static void pack_dtypes(msgpack_packer *pk, uint32_t mask) {
  int n = 0;
#define X(name, val, size, str) n += (mask >> val) & 1;
  OPD_DTYPE_MAP(X)
#undef X
  msgpack_pack_array(pk, (size_t)n);
#define X(name, val, size, str) \
  if ((mask >> val) & 1) PACK_STR(pk, str);
  OPD_DTYPE_MAP(X)
#undef X
}

static void pack_io(msgpack_packer *pk, const opd_io_spec_t *io, int n,
                    int n_min) {
  msgpack_pack_array(pk, (size_t)n);
  for (int i = 0; i < n; i++) {
    msgpack_pack_map(pk, 4);
    PACK_STR(pk, "name");
    PACK_STR(pk, io[i].name ? io[i].name : "");
    PACK_STR(pk, "dtypes");
    pack_dtypes(pk, io[i].dtypes);
    PACK_STR(pk, "shape");
    PACK_STR(pk, io[i].doc ? io[i].doc : "");
    PACK_STR(pk, "optional");
    if (i >= n_min) msgpack_pack_true(pk);
    else msgpack_pack_false(pk);
  }
}

static void pack_attr_val(msgpack_packer *pk, const opd_attr_val_t *v,
                          int type) {
  switch (type) {
    case OPD_ATTR_INT: msgpack_pack_int64(pk, v->i); break;
    case OPD_ATTR_FLOAT: msgpack_pack_double(pk, v->f); break;
    case OPD_ATTR_BOOL:
      if (v->i) msgpack_pack_true(pk);
      else msgpack_pack_false(pk);
      break;
    case OPD_ATTR_STR: PACK_STR(pk, v->s); break;
    case OPD_ATTR_INTS:
      msgpack_pack_array(pk, (size_t)v->n);
      for (int i = 0; i < v->n; i++) msgpack_pack_int64(pk, v->ints[i]);
      break;
    default: msgpack_pack_nil(pk);
  }
}

int opd__ops_pack(opd_server_t *srv) {
  msgpack_sbuffer sb;
  msgpack_packer pk;
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  msgpack_pack_map(&pk, 1);
  PACK_STR(&pk, "ops");
  msgpack_pack_array(&pk, (size_t)opd__n_ops);
  for (int i = 0; i < opd__n_ops; i++) {
    const opd_op_def_t *op = opd__ops[i];
    msgpack_pack_map(&pk, 10);
    PACK_STR(&pk, "name");
    PACK_STR(&pk, op->name);
    PACK_STR(&pk, "min_inputs");
    msgpack_pack_int32(&pk, op->n_in_min);
    PACK_STR(&pk, "max_inputs");
    msgpack_pack_int32(&pk, op->n_in_max);
    PACK_STR(&pk, "summary");
    PACK_STR(&pk, op->summary ? op->summary : "");
    /* a variadic op (noop) repeats its last input spec: list it once */
    int n_in = op->n_in_max;
    while (n_in > 1 && op->in[n_in - 1].name != NULL &&
           op->in[n_in - 2].name != NULL &&
           strcmp(op->in[n_in - 1].name, op->in[n_in - 2].name) == 0)
      n_in--;
    PACK_STR(&pk, "inputs");
    pack_io(&pk, op->in, n_in, op->n_in_min);
    PACK_STR(&pk, "outputs");
    pack_io(&pk, op->out, op->n_out, op->n_out);
    PACK_STR(&pk, "attrs");
    msgpack_pack_array(&pk, (size_t)op->n_attrs);
    for (int a = 0; a < op->n_attrs; a++) {
      const opd_attr_spec_t *sp = &op->attrs[a];
      msgpack_pack_map(&pk, 6);
      PACK_STR(&pk, "name");
      PACK_STR(&pk, sp->name);
      PACK_STR(&pk, "type");
      PACK_STR(&pk, opd__attr_type_name(sp->type));
      PACK_STR(&pk, "default");
      if (sp->required) msgpack_pack_nil(&pk);
      else pack_attr_val(&pk, &sp->def, sp->type);
      PACK_STR(&pk, "required");
      if (sp->required) msgpack_pack_true(&pk);
      else msgpack_pack_false(&pk);
      PACK_STR(&pk, "doc");
      PACK_STR(&pk, sp->doc ? sp->doc : "");
      PACK_STR(&pk, "choices");
      if (sp->choices) PACK_STR(&pk, sp->choices);
      else msgpack_pack_nil(&pk);
    }
    PACK_STR(&pk, "shape");
    PACK_STR(&pk, op->shape_doc ? op->shape_doc : "");
    PACK_STR(&pk, "inplace");
    if (op->flags & OPD_OPF_INPLACE) msgpack_pack_true(&pk);
    else msgpack_pack_false(&pk);
    PACK_STR(&pk, "strided");
    if (op->flags & OPD_OPF_STRIDED) msgpack_pack_true(&pk);
    else msgpack_pack_false(&pk);
  }
  if (sb.size > srv->cfg.limits.max_frame - 64) {
    LOG_ERROR("the operator list (%zu bytes) does not fit in a frame",
              sb.size);
    msgpack_sbuffer_destroy(&sb);
    return OPD_ELIMIT;
  }
  srv->ops_body = sb.data;
  srv->ops_body_len = sb.size;
  return 0;
}
