/* libopd control messages: arenas, allocations, publications, CUDA
 * import/export, ping, and the daemon's ops and stats as JSON.
 *
 * DESIGN
 * Each control call is one request and one reply on the connection
 * (opd__call, transport.c): a pack function writes the body with msgpack-c's
 * packer, the reply is decoded with the same decoder as every other reply
 * (opd__reply_decode) and read field by field; a reply missing a field the
 * call returns is OPD_EPROTO, never a zero. Arenas made here
 * (opd_arena_create: a sealed memfd from common/memfd.c, mapped here and
 * registered with the daemon) are remembered on the connection (c->arenas,
 * under mu) so that release and close unmap them; arenas the caller
 * registered and maps itself can be noted there too (opd_arena_note, fd
 * -1: never unmapped here), so that opd_arena_find turns a pointer into
 * (arena, offset) for all of them (torch's CPU kernel); fds travel with the
 * requests that carry them (register) or the replies (export).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client/libopd/internal.h"
#include "client/libopd/json.h"
#include "common/memfd.h"

/* A request whose reply is {"arena": id}: register, alloc, import. */
static int call_for_arena(opd_client_t *c, int type,
                          void (*pack)(msgpack_packer *, const void *),
                          const void *arg, int pass_fd, uint64_t *arena) {
  reply_t r = {.payload = NULL};
  int rc = opd__call(c, type, pack, arg, pass_fd, &r.payload, &r.len);
  if (rc != 0) return rc;
  const msgpack_object *body = opd__reply_decode(&r);
  if (body == NULL || opd__mp_uint(opd__mp_get(body, "arena"), arena) != 0)
    rc = opd__fail(OPD_EPROTO, "%s: reply without an arena id", opd__msg_name(type));
  opd__reply_free(&r);
  return rc;
}

static void pack_register(msgpack_packer *pk, const void *arg) {
  msgpack_pack_map(pk, 1);
  PACK_STR(pk, "size");
  msgpack_pack_uint64(pk, *(const uint64_t *)arg);
}

int opd_arena_register_fd(opd_client_t *c, int fd, uint64_t size,
                          uint64_t *arena) {
  int rc = opd__check_usable(c);
  if (rc) return rc;
  if (arena == NULL) return opd__fail(OPD_EINVAL, "arena is NULL");
  return call_for_arena(c, OPD_MSG_ARENA_REGISTER, pack_register, &size, fd,
                        arena);
}

static void pack_register_shm(msgpack_packer *pk, const void *arg) {
  msgpack_pack_map(pk, 2);
  PACK_STR(pk, "size");
  msgpack_pack_uint64(pk, *(const uint64_t *)arg);
  PACK_STR(pk, "shm");
  msgpack_pack_true(pk);
}

int opd_arena_register_shm(opd_client_t *c, int fd, uint64_t size,
                           uint64_t *arena) {
  int rc = opd__check_usable(c);
  if (rc) return rc;
  if (arena == NULL) return opd__fail(OPD_EINVAL, "arena is NULL");
  return call_for_arena(c, OPD_MSG_ARENA_REGISTER, pack_register_shm, &size,
                        fd, arena);
}

static void pack_staging(msgpack_packer *pk, const void *arg) {
  const uint64_t *v = arg;
  msgpack_pack_map(pk, 2);
  PACK_STR(pk, "copies");
  msgpack_pack_uint64(pk, v[0]);
  PACK_STR(pk, "bytes");
  msgpack_pack_uint64(pk, v[1]);
}

int opd_note_staging(opd_client_t *c, uint64_t copies, uint64_t bytes) {
  int rc = opd__check_usable(c);
  if (rc) return rc;
  uint64_t v[2] = {copies, bytes};
  return opd__call(c, OPD_MSG_STAGING, pack_staging, v, -1, NULL, NULL);
}

int opd_arena_create(opd_client_t *c, uint64_t size, uint64_t *arena,
                     void **base) {
  int rc = opd__check_usable(c);
  if (rc) return rc;
  if (arena == NULL || base == NULL)
    return opd__fail(OPD_EINVAL, "arena and base must not be NULL");
  if (size == 0) return opd__fail(OPD_EINVAL, "an arena needs at least one byte");
  *base = NULL;
  char err[200];
  int fd;
  rc = opd__memfd_create_sealed("opd-arena", "an arena", size, &fd, err,
                                sizeof err);
  if (rc != 0) return opd__fail(rc, "%s", err);
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    rc = opd__fail(OPD_ENOMEM, "mapping an arena of %llu bytes: %s",
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
    rc = opd__fail(OPD_ENOMEM, "out of memory");
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
  int rc = opd__check_usable(c);
  if (rc) return rc;
  if (fd == NULL) return opd__fail(OPD_EINVAL, "fd is NULL");
  rc = OPD_EARENA;
  pthread_mutex_lock(&c->mu);
  for (size_t i = 0; i < c->n_arenas; i++)
    if (c->arenas[i].id == arena && c->arenas[i].fd >= 0)
      *fd = c->arenas[i].fd, rc = 0;
  pthread_mutex_unlock(&c->mu);
  if (rc != 0) /* only a failure sets the last error */
    opd__fail(rc, "arena %llu was not created by this connection",
              (unsigned long long)arena);
  return rc;
}

/* A noted arena is kept with fd -1: not ours to unmap or close. */
int opd_arena_note(opd_client_t *c, uint64_t arena, void *base, uint64_t size) {
  if (c == NULL) return opd__fail(OPD_EINVAL, "opd_arena_note: no connection");
  int rc = 0;
  pthread_mutex_lock(&c->mu);
  size_t i = 0;
  while (i < c->n_arenas && c->arenas[i].id != arena) i++;
  if (base == NULL || size == 0) { /* forget a noted one */
    if (i < c->n_arenas && c->arenas[i].fd < 0)
      c->arenas[i] = c->arenas[--c->n_arenas];
    pthread_mutex_unlock(&c->mu);
    return 0;
  }
  if (i == c->n_arenas && c->n_arenas == c->cap_arenas) {
    size_t cap = c->cap_arenas ? c->cap_arenas * 2 : 8;
    carena_t *na = realloc(c->arenas, cap * sizeof *na);
    if (na != NULL) c->arenas = na, c->cap_arenas = cap;
  }
  if (i < c->n_arenas) {
    if (c->arenas[i].fd < 0) c->arenas[i].base = base, c->arenas[i].size = size;
  } else if (c->n_arenas < c->cap_arenas) {
    c->arenas[c->n_arenas++] = (carena_t){arena, base, size, -1};
  } else {
    rc = OPD_ENOMEM;
  }
  pthread_mutex_unlock(&c->mu);
  return rc ? opd__fail(rc, "out of memory") : 0;
}

int opd_arena_find(opd_client_t *c, const void *p, uint64_t nbytes,
                   uint64_t *arena, uint64_t *offset) {
  int rc = OPD_ENOENT;
  uintptr_t a = (uintptr_t)p;
  if (c == NULL || p == NULL) return OPD_ENOENT;
  pthread_mutex_lock(&c->mu);
  for (size_t i = 0; i < c->n_arenas; i++) {
    uintptr_t b = (uintptr_t)c->arenas[i].base;
    if (a >= b && a - b <= c->arenas[i].size &&
        nbytes <= c->arenas[i].size - (a - b)) {
      *arena = c->arenas[i].id, *offset = a - b, rc = 0;
      break;
    }
  }
  pthread_mutex_unlock(&c->mu);
  return rc; /* a miss is no error: the last error is left as it was */
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
  int rc = opd__check_usable(c);
  if (rc) return rc;
  if (device == NULL || arena == NULL)
    return opd__fail(OPD_EINVAL, "opd_alloc: device and arena must not be NULL");
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
  int rc = opd__check_usable(c);
  if (rc) return rc;
  if (name == NULL) return opd__fail(OPD_EINVAL, "opd_publish: name is NULL");
  if (n_readers < 0 || (n_readers > 0 && readers == NULL))
    return opd__fail(OPD_EINVAL, "opd_publish: %d readers given with %s",
                     n_readers, readers ? "a list" : "no list");
  for (int i = 0; i < n_readers; i++)
    if (readers[i] == NULL)
      return opd__fail(OPD_EINVAL, "opd_publish: readers[%d] is NULL", i);
  pub_args_t a = {arena, name, 1, meta, n_readers ? readers : NULL,
                  n_readers};
  return opd__call(c, OPD_MSG_PUBLISH, pack_pub, &a, -1, NULL, NULL);
}

int opd_unpublish(opd_client_t *c, const char *name) {
  int rc = opd__check_usable(c);
  if (rc) return rc;
  if (name == NULL) return opd__fail(OPD_EINVAL, "opd_unpublish: name is NULL");
  pub_args_t a = {0, name, 0, NULL, NULL, 0};
  return opd__call(c, OPD_MSG_UNPUBLISH, pack_pub, &a, -1, NULL, NULL);
}

int opd_attach(opd_client_t *c, const char *name, uint64_t *arena,
               uint64_t *size, char *device, size_t device_cap, char *meta,
               size_t meta_cap) {
  reply_t r = {.payload = NULL};
  int rc = opd__check_usable(c);
  if (rc) return rc;
  if (name == NULL || arena == NULL)
    return opd__fail(OPD_EINVAL, "opd_attach: name and arena must not be NULL");
  pub_args_t a = {0, name, 0, NULL, NULL, 0};
  rc = opd__call(c, OPD_MSG_ATTACH, pack_pub, &a, -1, &r.payload, &r.len);
  if (rc != 0) return rc;
  const msgpack_object *body = opd__reply_decode(&r);
  uint64_t sz = 0;
  if (body == NULL || opd__mp_uint(opd__mp_get(body, "arena"), arena) != 0 ||
      opd__mp_uint(opd__mp_get(body, "size"), &sz) != 0)
    rc = opd__fail(OPD_EPROTO, "attach: malformed reply");
  if (rc == 0 && size) *size = sz;
  if (rc == 0 && device && device_cap &&
      opd__mp_str(opd__mp_get(body, "device"), device, device_cap) != 0)
    device[0] = '\0';
  if (rc == 0 && meta && meta_cap &&
      opd__mp_str(opd__mp_get(body, "meta"), meta, meta_cap) != 0)
    meta[0] = '\0';
  opd__reply_free(&r);
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
  int rc = opd__check_usable(c);
  if (rc) return rc;
  if (handle == NULL || handle_len != 64 || device == NULL || arena == NULL)
    return opd__fail(OPD_EINVAL, "opd_import_cuda: a 64-byte handle, a device and "
                     "an arena pointer are required");
  import_args_t a = {handle, handle_len, offset, size, device};
  return call_for_arena(c, OPD_MSG_IMPORT, pack_import, &a, -1, arena);
}

int opd_export_cuda(opd_client_t *c, uint64_t arena, int *fd,
                    uint64_t *alloc_size) {
  reply_t r = {.payload = NULL};
  int rc = opd__check_usable(c);
  if (rc) return rc;
  if (fd == NULL) return opd__fail(OPD_EINVAL, "opd_export_cuda: fd is NULL");
  *fd = -1;
  fbuf_t b;
  msgpack_packer pk;
  uint64_t id = opd__new_id(c);
  opd__frame_begin(&b, &pk, OPD_MSG_EXPORT, id);
  msgpack_pack_map(&pk, 1);
  PACK_STR(&pk, "arena");
  msgpack_pack_uint64(&pk, arena);
  rc = opd__submit_frame(c, &b, id, 1, -1);
  opd__fbuf_free(&b);
  if (rc == 0) rc = opd__wait_reply(c, id, -1, &r.payload, &r.len, fd);
  if (rc != 0) return rc;
  const msgpack_object *body = opd__reply_decode(&r);
  uint64_t sz = 0;
  if (body == NULL || opd__mp_uint(opd__mp_get(body, "alloc_size"), &sz) != 0 ||
      *fd < 0) {
    rc = opd__fail(OPD_EPROTO, "export: the reply carried no file descriptor");
    if (*fd >= 0) close(*fd), *fd = -1;
  } else if (alloc_size) {
    *alloc_size = sz;
  }
  opd__reply_free(&r);
  return rc;
}

static void pack_release(msgpack_packer *pk, const void *arg) {
  msgpack_pack_map(pk, 1);
  PACK_STR(pk, "arena");
  msgpack_pack_uint64(pk, *(const uint64_t *)arg);
}

int opd_arena_release(opd_client_t *c, uint64_t arena) {
  int rc = opd__check_usable(c);
  if (rc) return rc;
  rc = opd__call(c, OPD_MSG_ARENA_RELEASE, pack_release, &arena, -1, NULL, NULL);
  /* unmap our side even if the daemon did not know it */
  pthread_mutex_lock(&c->mu);
  for (size_t i = 0; i < c->n_arenas; i++) {
    if (c->arenas[i].id != arena) continue;
    if (c->arenas[i].fd >= 0) { /* made here; a noted one is the caller's */
      munmap(c->arenas[i].base, c->arenas[i].size);
      close(c->arenas[i].fd);
    }
    c->arenas[i] = c->arenas[--c->n_arenas];
    break;
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}
int opd_ping(opd_client_t *c) {
  int rc = opd__check_usable(c);
  if (rc) return rc;
  return opd__call(c, OPD_MSG_PING, NULL, NULL, -1, NULL, NULL);
}

/* ---- introspection: ops and stats as JSON ---------------------------- */

static int json_call(opd_client_t *c, int type, char **json, size_t *len) {
  reply_t r = {.payload = NULL};
  int rc = opd__check_usable(c);
  if (rc) return rc;
  if (json == NULL) return opd__fail(OPD_EINVAL, "json is NULL");
  rc = opd__call(c, type, NULL, NULL, -1, &r.payload, &r.len);
  if (rc != 0) return rc;
  const msgpack_object *body = opd__reply_decode(&r);
  if (body == NULL) rc = opd__fail(OPD_EPROTO, "malformed reply");
  else if (opd__json_from_msgpack(body, json, len) != 0)
    rc = opd__fail(OPD_ENOMEM, "out of memory");
  opd__reply_free(&r);
  return rc;
}

int opd_ops_json(opd_client_t *c, char **json, size_t *len) {
  return json_call(c, OPD_MSG_OPS, json, len);
}

int opd_plugins_json(opd_client_t *c, char **json, size_t *len) {
  return json_call(c, OPD_MSG_PLUGINS, json, len);
}

int opd_stats_json(opd_client_t *c, char **json, size_t *len) {
  return json_call(c, OPD_MSG_STATS, json, len);
}
