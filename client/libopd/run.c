/* libopd runs: submit, wait, run, prepared runs, infer.
 *
 * DESIGN
 * A run is a RUN frame (opd__build_run, frame.c) submitted on the
 * connection (opd__submit_frame) and a wait for its reply by id
 * (opd__wait_reply): opd_submit* and opd_wait split the two so that a
 * caller may have up to the daemon's max_inflight runs out at once, and
 * opd_run* is both back to back. A prepared run is the frame encoded once
 * with the largest id (0xcf + 8 bytes), so each submission copies it and
 * writes a new id in place: no encoding on the hot path. opd_infer asks
 * the daemon for the output shapes without running anything. Flags
 * (opd_run_async, opd_prepare_flags) go in the RUN body as "async";
 * stream-ordered runs are stream.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/libopd/cuda.h"
#include "client/libopd/internal.h"

int opd_tensor_init(opd_tensor_t *t, uint64_t arena, uint64_t offset,
                    int32_t dtype, int32_t rank, const int64_t *shape) {
  if (t == NULL || rank < 0 || rank > OPD_MAX_RANK || (rank && !shape))
    return opd__fail(OPD_EINVAL, "opd_tensor_init: rank %d out of 0..%d", rank,
                     OPD_MAX_RANK);
  memset(t, 0, sizeof *t);
  t->arena = arena;
  t->offset = offset;
  t->dtype = dtype;
  t->rank = rank;
  for (int i = 0; i < rank; i++) t->shape[i] = shape[i];
  return 0;
}

int opd_submit(opd_client_t *c, const char *op, const opd_tensor_t *in,
               uint32_t n_in, const opd_tensor_t *out, uint32_t n_out,
               const opd_attr_t *attrs, uint32_t n_attrs, uint64_t *req) {
  return opd_submit_on(c, NULL, op, in, n_in, out, n_out, attrs, n_attrs, req);
}

/* Submits a RUN with flags; *req its id. */
static int submit_flags(opd_client_t *c, const char *device, uint32_t flags,
                        const char *op, const opd_tensor_t *in, uint32_t n_in,
                        const opd_tensor_t *out, uint32_t n_out,
                        const opd_attr_t *attrs, uint32_t n_attrs,
                        uint64_t *req) {
  int rc = opd__check_usable(c);
  if (rc) return rc;
  if (req == NULL) return opd__fail(OPD_EINVAL, "req is NULL");
  uint64_t id = opd__new_id(c);
  rc = opd__submit_flags_id(c, device, flags, op, in, n_in, out, n_out, attrs,
                            n_attrs, id);
  if (rc == 0) *req = id;
  return rc;
}

/* ... with the id given (opd__new_id), for a caller that needs it first. */
int opd__submit_flags_id(opd_client_t *c, const char *device, uint32_t flags,
                         const char *op, const opd_tensor_t *in, uint32_t n_in,
                         const opd_tensor_t *out, uint32_t n_out,
                         const opd_attr_t *attrs, uint32_t n_attrs,
                         uint64_t id) {
  fbuf_t b;
  int rc = opd__build_run(&b, OPD_MSG_RUN, id, device, flags, op, in, n_in,
                          out, n_out, attrs, n_attrs);
  if (rc != 0) return rc;
  rc = opd__submit_frame(c, &b, id, 0, -1);
  opd__fbuf_free(&b);
  return rc;
}

int opd_submit_on(opd_client_t *c, const char *device, const char *op,
                  const opd_tensor_t *in, uint32_t n_in,
                  const opd_tensor_t *out, uint32_t n_out,
                  const opd_attr_t *attrs, uint32_t n_attrs, uint64_t *req) {
  return submit_flags(c, device, 0, op, in, n_in, out, n_out, attrs,
                           n_attrs, req);
}

int opd_submit_async(opd_client_t *c, const char *device, const char *op,
                     const opd_tensor_t *in, uint32_t n_in,
                     const opd_tensor_t *out, uint32_t n_out,
                     const opd_attr_t *attrs, uint32_t n_attrs, uint64_t *req) {
  return submit_flags(c, device, OPD_RUN_F_ASYNC, op, in, n_in, out,
                           n_out, attrs, n_attrs, req);
}

int opd_wait(opd_client_t *c, uint64_t req, int timeout_ms) {
  int rc = opd__check_usable(c);
  if (rc) return rc;
  return opd__wait_reply(c, req, timeout_ms, NULL, NULL, NULL);
}

int opd_run(opd_client_t *c, const char *op, const opd_tensor_t *in,
            uint32_t n_in, const opd_tensor_t *out, uint32_t n_out,
            const opd_attr_t *attrs, uint32_t n_attrs) {
  return opd_run_on(c, NULL, op, in, n_in, out, n_out, attrs, n_attrs);
}

int opd__run_flags(opd_client_t *c, const char *device, uint32_t flags,
                   const char *op, const opd_tensor_t *in, uint32_t n_in,
                   const opd_tensor_t *out, uint32_t n_out,
                   const opd_attr_t *attrs, uint32_t n_attrs) {
  uint64_t req;
  int rc = submit_flags(c, device, flags, op, in, n_in, out, n_out, attrs,
                        n_attrs, &req);
  if (rc != 0) return rc;
  return opd__wait_reply(c, req, -1, NULL, NULL, NULL);
}

int opd_run_on(opd_client_t *c, const char *device, const char *op,
               const opd_tensor_t *in, uint32_t n_in, const opd_tensor_t *out,
               uint32_t n_out, const opd_attr_t *attrs, uint32_t n_attrs) {
  return opd__run_flags(c, device, 0, op, in, n_in, out, n_out, attrs, n_attrs);
}

int opd_run_async(opd_client_t *c, const char *device, const char *op,
                  const opd_tensor_t *in, uint32_t n_in,
                  const opd_tensor_t *out, uint32_t n_out,
                  const opd_attr_t *attrs, uint32_t n_attrs) {
  return opd__run_flags(c, device, OPD_RUN_F_ASYNC, op, in, n_in, out, n_out,
                        attrs, n_attrs);
}

/* ---- prepared runs: a RUN frame encoded once -------------------------- */

struct opd_prepared {
  const opd_client_t *c;  /* whose arena ids the request names */
  uint32_t flags;         /* OPD_RUN_F_* it was encoded with */
  char device[48];        /* "cuda:N" or a UUID of a stream-ordered one
                             (this process's device), else "" */
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
  return opd_prepare_flags(c, device, op, in, n_in, out, n_out, attrs, n_attrs,
                           0, p);
}

int opd_prepare_flags(opd_client_t *c, const char *device, const char *op,
                      const opd_tensor_t *in, uint32_t n_in,
                      const opd_tensor_t *out, uint32_t n_out,
                      const opd_attr_t *attrs, uint32_t n_attrs,
                      uint32_t flags, opd_prepared_t **p) {
  fbuf_t b;
  int rc = opd__check_usable(c);
  if (rc) return rc;
  if (p == NULL) return opd__fail(OPD_EINVAL, "opd_prepare: p is NULL");
  if (flags & ~(OPD_RUN_ASYNC | OPD_RUN_STREAM))
    return opd__fail(OPD_EINVAL, "opd_prepare_flags: flags 0x%x: only "
                     "OPD_RUN_ASYNC and OPD_RUN_STREAM are known", flags);
  uint32_t wire = 0;
  if (flags & OPD_RUN_ASYNC) wire |= OPD_RUN_F_ASYNC;
  if (flags & OPD_RUN_STREAM)
    wire |= OPD_RUN_F_ASYNC | OPD_RUN_F_WAIT | OPD_RUN_F_SIGNAL;
  if ((flags & OPD_RUN_STREAM) &&
      (device == NULL || strlen(device) >= sizeof((opd_prepared_t *)0)->device ||
       (strncmp(device, "cuda", 4) != 0 && strlen(device) < 32)))
    return opd__fail(OPD_EINVAL, "opd_prepare_flags: OPD_RUN_STREAM needs "
                     "device \"cuda\", \"cuda:N\" or a UUID");
  /* a stream-ordered run names this process's device: sent by its UUID */
  char dname[48];
  if (flags & OPD_RUN_STREAM) opd__cuda_wire(device, dname, sizeof dname);
  /* UINT64_MAX packs as 0xcf + 8 bytes: the slot new ids go into */
  rc = opd__build_run(&b, OPD_MSG_RUN, UINT64_MAX,
                      (flags & OPD_RUN_STREAM) ? dname : device, wire, op, in,
                      n_in, out, n_out, attrs, n_attrs);
  if (rc != 0) return rc;
  rc = opd__prepared_from(c, &b, wire, p);
  opd__fbuf_free(&b);
  if (rc == 0)
    snprintf((*p)->device, sizeof (*p)->device, "%s",
             (flags & OPD_RUN_STREAM) ? device : "");
  return rc;
}

int opd__prepared_from(opd_client_t *c, const fbuf_t *b, uint32_t flags,
                       opd_prepared_t **p) {
  opd_prepared_t *q = NULL;
  if (b->oom || (unsigned char)b->data[PREP_ID_AT] != 0xcf ||
      (q = malloc(sizeof *q + b->size)) == NULL)
    return opd__fail(OPD_ENOMEM, "out of memory preparing a run");
  q->c = c;
  q->flags = flags;
  q->device[0] = '\0';
  q->len = b->size;
  memcpy(q->frame, b->data, b->size);
  *p = q;
  return 0;
}

int opd_submit_prepared(opd_client_t *c, const opd_prepared_t *p,
                        uint64_t *req) {
  fbuf_t b;
  int rc = opd__check_usable(c);
  if (rc) return rc;
  if (p == NULL || req == NULL)
    return opd__fail(OPD_EINVAL, "opd_submit_prepared: NULL prepared run or req");
  if (p->c != c)
    return opd__fail(OPD_EINVAL, "this prepared run was made on another "
                     "connection (its arena ids are that connection's)");
  b.oom = 0;
  b.size = b.cap = p->len;
  b.data = p->len <= sizeof b.local ? b.local : malloc(p->len);
  if (b.data == NULL) return opd__fail(OPD_ENOMEM, "out of memory");
  memcpy(b.data, p->frame, p->len);
  uint64_t id = opd__new_id(c);
  for (int i = 0; i < 8; i++)
    b.data[PREP_ID_AT + 1 + i] = (char)(id >> (56 - 8 * i));
  rc = opd__submit_frame(c, &b, id, 0, -1);
  opd__fbuf_free(&b);
  if (rc == 0) *req = id;
  return rc;
}

int opd_run_prepared(opd_client_t *c, const opd_prepared_t *p) {
  uint64_t req;
  int rc = opd_submit_prepared(c, p, &req);
  if (rc != 0) return rc;
  return opd__wait_reply(c, req, -1, NULL, NULL, NULL);
}

void opd_prepared_free(opd_prepared_t *p) { free(p); }

const char *opd__prepared_device(const opd_prepared_t *p) {
  return p != NULL && p->device[0] ? p->device : NULL;
}

uint32_t opd__prepared_flags(const opd_prepared_t *p) {
  return p != NULL ? p->flags : 0;
}

int opd_infer(opd_client_t *c, const char *op, const opd_tensor_t *in,
              uint32_t n_in, const opd_attr_t *attrs, uint32_t n_attrs,
              opd_tensor_t *out, uint32_t cap, uint32_t *n_out) {
  fbuf_t b;
  reply_t r = {.payload = NULL};
  int rc = opd__check_usable(c);
  if (rc) return rc;
  if (n_out == NULL || (cap && out == NULL))
    return opd__fail(OPD_EINVAL, "opd_infer: NULL output array");
  uint64_t id = opd__new_id(c);
  rc = opd__build_run(&b, OPD_MSG_INFER, id, NULL, 0, op, in, n_in, NULL, 0, attrs,
                      n_attrs);
  if (rc != 0) return rc;
  rc = opd__submit_frame(c, &b, id, 1, -1);
  opd__fbuf_free(&b);
  if (rc == 0) rc = opd__wait_reply(c, id, -1, &r.payload, &r.len, NULL);
  if (rc != 0) return rc;

  const msgpack_object *body = opd__reply_decode(&r);
  const msgpack_object *arr = body ? opd__mp_get(body, "out") : NULL;
  if (arr == NULL || arr->type != MSGPACK_OBJECT_ARRAY) {
    rc = opd__fail(OPD_EPROTO, "infer: malformed reply");
  } else if (arr->via.array.size > cap) {
    rc = opd__fail(OPD_ELIMIT, "infer: %s has %u outputs, room for %u", op,
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
        rc = opd__fail(OPD_EPROTO, "infer: malformed reply");
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
  opd__reply_free(&r);
  return rc;
}
