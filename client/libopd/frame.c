/* libopd request encoding: frames, msgpack written in place, run bodies.
 *
 * DESIGN
 * A request is packed into an fbuf_t, a buffer with room on the stack for
 * the common small frame (1 KiB) that moves to the heap only when a frame
 * outgrows it, starting with OPD_FRAME_HEADER bytes left for the length
 * that the transport fills in when it sends. Control requests are packed
 * with msgpack-c's packer writing through fbuf_write; RUN and INFER, the
 * hot path, are written in place with common/wire.h's put helpers (the
 * same bytes msgpack-c writes), one look for room per piece and no libc
 * call per small chunk (copy_small). Nothing here touches the connection:
 * encoding is pure, so a prepared run (run.c) is this frame kept.
 */
#include <stdlib.h>
#include <string.h>

#include "client/libopd/internal.h"

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
void opd__frame_begin(fbuf_t *b, msgpack_packer *pk, int type, uint64_t id) {
  unsigned char *p = (unsigned char *)b->local + OPD_FRAME_HEADER;
  b->data = b->local;
  b->cap = sizeof b->local;
  b->oom = 0;
  if (pk) msgpack_packer_init(pk, b, fbuf_write);
  *p++ = 0x93; /* fits: local holds far more than 1 + 2 * OPD_MP_PUT_MAX */
  p = opd__mp_put_uint(p, (uint32_t)type);
  fbuf_set_end(b, opd__mp_put_uint(p, id));
}

void opd__fbuf_free(fbuf_t *b) {
  if (b->data != b->local) free(b->data);
}
static int pack_tensor_list(fbuf_t *b, const opd_tensor_t *t, uint32_t n,
                            const char *what) {
  unsigned char *p = fbuf_room(b, OPD_MP_PUT_MAX);
  if (p) fbuf_set_end(b, opd__mp_put_array(p, n));
  for (uint32_t i = 0; i < n; i++) {
    if (t[i].rank < 0 || t[i].rank > OPD_MAX_RANK)
      return opd__fail(OPD_ELIMIT, "%s %u: rank %d out of 0..%d", what, i,
                       t[i].rank, OPD_MAX_RANK);
    if ((p = fbuf_room(b, OPD_MP_DESC_MAX)) == NULL) continue;
    fbuf_set_end(b, opd__mp_put_desc(p, t[i].arena, t[i].offset, t[i].dtype,
                                     t[i].rank, t[i].shape,
                                     t[i].strided ? t[i].strides : NULL));
  }
  return 0;
}

int opd__pack_tensor(fbuf_t *b, const opd_tensor_t *t) {
  unsigned char *p = fbuf_room(b, OPD_MP_DESC_MAX);
  if (t->rank < 0 || t->rank > OPD_MAX_RANK)
    return opd__fail(OPD_ELIMIT, "rank %d out of 0..%d", t->rank, OPD_MAX_RANK);
  if (p != NULL)
    fbuf_set_end(b, opd__mp_put_desc(p, t->arena, t->offset, t->dtype, t->rank,
                                     t->shape, t->strided ? t->strides : NULL));
  return 0;
}

int opd__pack_tensors(fbuf_t *b, const opd_tensor_t *t, uint32_t n,
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
        return opd__fail(OPD_EINVAL, "attribute \"%s\" has no string", a->name);
      PUT_STR(b, a->s);
      return 0;
    case OPD_ATTR_INTS:
      if (a->n < 0 || a->n > OPD_MAX_RANK)
        return opd__fail(OPD_EINVAL, "attribute \"%s\": %d ints, at most %d",
                         a->name, a->n, OPD_MAX_RANK);
      if ((p = fbuf_room(b, (1 + OPD_MAX_RANK) * OPD_MP_PUT_MAX)) == NULL)
        return 0;
      p = opd__mp_put_array(p, (uint32_t)a->n);
      for (int k = 0; k < a->n; k++) p = opd__mp_put_int(p, a->ints[k]);
      fbuf_set_end(b, p);
      return 0;
  }
  return opd__fail(OPD_EINVAL, "attribute \"%s\" has unknown type %d", a->name,
                   a->type);
}

int opd__pack_attrs(fbuf_t *b, const opd_attr_t *a, uint32_t n) {
  put_map(b, n);
  for (uint32_t i = 0; i < n; i++) {
    if (a[i].name == NULL) return opd__fail(OPD_EINVAL, "attribute %u has no name", i);
    PUT_STR(b, a[i].name);
    int rc = put_attr(b, &a[i]);
    if (rc != 0) return rc;
  }
  return 0;
}

int opd__build_run(fbuf_t *b, int type, uint64_t id, const char *device,
                   uint32_t flags, const char *op, const opd_tensor_t *in,
                   uint32_t n_in, const opd_tensor_t *out, uint32_t n_out,
                   const opd_attr_t *attrs, uint32_t n_attrs) {
  if (op == NULL) return opd__fail(OPD_EINVAL, "op name is NULL");
  if ((n_in && !in) || (n_out && !out) || (n_attrs && !attrs))
    return opd__fail(OPD_EINVAL, "NULL tensor or attribute array with a count");
  size_t op_len = strlen(op), dev_len = device ? strlen(device) : 0;
  opd__frame_begin(b, NULL, type, id);
  if (flags & ~(OPD_RUN_F_ALL | OPD_RUN_SLOT_MASK))
    return opd__fail(OPD_EINVAL, "run flags 0x%x: only OPD_RUN_ASYNC and "
                     "OPD_RUN_STREAM are known", flags);
  /* {"async"?: uint, "device"?: str, "op": str, "in": ...: one look for
   * room for it all */
  unsigned char *p = fbuf_room(b, 8 * OPD_MP_PUT_MAX + op_len + dev_len);
  if (p != NULL) {
    p = opd__mp_put_map(p, (type == OPD_MSG_RUN ? 4u : 3u) + (device != NULL) +
                               (flags != 0));
    if (flags != 0) {
      p = put_strp(p, "async", 5);
      p = opd__mp_put_uint(p, flags);
    }
    if (device != NULL) {
      p = put_strp(p, "device", 6);
      p = put_strp(p, device, dev_len);
    }
    p = put_strp(p, "op", 2);
    p = put_strp(p, op, op_len);
    fbuf_set_end(b, put_strp(p, "in", 2));
  }
  int rc = opd__pack_tensors(b, in, n_in, "input");
  if (rc == 0 && type == OPD_MSG_RUN) {
    PUT_KEY(b, "out");
    rc = opd__pack_tensors(b, out, n_out, "output");
  }
  if (rc == 0) {
    PUT_KEY(b, "attrs");
    rc = opd__pack_attrs(b, attrs, n_attrs);
  }
  if (rc != 0) opd__fbuf_free(b);
  return rc;
}

/* A RUN of graph `graph` (daemon/graph/): {"async"?, "graph", "in", "out"}. */
int opd__build_graph_run(fbuf_t *b, uint64_t id, uint64_t graph, uint32_t flags,
                         const opd_tensor_t *in, uint32_t n_in,
                         const opd_tensor_t *out, uint32_t n_out) {
  if ((n_in && !in) || (n_out && !out))
    return opd__fail(OPD_EINVAL, "NULL tensor array with a count");
  if (flags & ~OPD_RUN_F_ASYNC)
    return opd__fail(OPD_EINVAL, "graph run flags 0x%x: only OPD_RUN_ASYNC "
                     "is known", flags);
  opd__frame_begin(b, NULL, OPD_MSG_RUN, id);
  unsigned char *p = fbuf_room(b, 6 * OPD_MP_PUT_MAX + 16);
  if (p != NULL) {
    p = opd__mp_put_map(p, 3u + (flags != 0));
    if (flags != 0) {
      p = put_strp(p, "async", 5);
      p = opd__mp_put_uint(p, flags);
    }
    p = put_strp(p, "graph", 5);
    p = opd__mp_put_uint(p, graph);
    fbuf_set_end(b, put_strp(p, "in", 2));
  }
  int rc = opd__pack_tensors(b, in, n_in, "input");
  if (rc == 0) {
    PUT_KEY(b, "out");
    rc = opd__pack_tensors(b, out, n_out, "output");
  }
  if (rc != 0) opd__fbuf_free(b);
  return rc;
}
