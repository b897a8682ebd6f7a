/* Wire helpers shared by the daemon and libopd: frames, the msgpack
 * decoder, tensor descriptors and the name tables of protocol.h.
 *
 * DESIGN
 * Every payload that crosses a trust boundary is decoded by
 * opd__mp_decode(): one pass over the bytes that both validates them and
 * builds msgpack-c's msgpack_object tree, so the handlers read it with
 * msgpack-c's types and the small typed getters below. It rejects what the
 * protocol does not use (ext, 0xc1), nesting deeper than OPD_MAX_DEPTH,
 * truncation, trailing bytes, and every array/map count larger than the
 * bytes left, *before* allocating for it: each object needs at least one
 * byte, so a 10-byte frame cannot claim 2^32 elements (msgpack-c's own
 * unpacker would allocate them, and it has no depth limit). A count must
 * fit in the bytes left after one for every object announced and not yet
 * read, so a payload never gets more objects allocated than it has bytes.
 *
 * Strings and bins point into the payload (zero copy, as msgpack-c's
 * unpacker does); arrays and maps come from an opd_mp_arena_t, a bump
 * allocator whose first 4 KiB live inside the struct, so the common small
 * request or reply decodes without malloc; bigger payloads add malloc'd
 * chunks, freed by opd__mp_arena_reset(). The payload buffer and the arena
 * must outlive the objects.
 *
 * The frames of every request and reply (the run request, the reply head,
 * the {"ns"} body) are encoded in place by the opd__mp_put_* functions
 * below rather than through msgpack-c's packer, whose callback costs a
 * call per header and per string; they write the same bytes.
 *
 * Every tensor descriptor is copied into a private opd_desc_t before it is
 * validated (opd__desc_validate), so nothing is read twice from memory a
 * client can still change.
 */
#ifndef OPD_WIRE_H
#define OPD_WIRE_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "opd/protocol.h"

/* Packs the C string s with msgpack-c's packer pk: how daemon and client
 * write the keys and strings of the messages they pack with msgpack-c. */
#define PACK_STR(pk, s) msgpack_pack_str_with_body((pk), (s), strlen(s))

/* A tensor descriptor as sent on the wire, after copying out. */
typedef struct opd_desc {
  uint64_t arena;                  /* arena id */
  uint64_t offset;                 /* byte offset of element 0 */
  int32_t dtype;                   /* OPD_DTYPE_* */
  int32_t rank;                    /* 0..OPD_MAX_RANK */
  int32_t contiguous;              /* 1 when strides were nil on the wire */
  int64_t shape[OPD_MAX_RANK];
  int64_t strides[OPD_MAX_RANK];   /* in elements */
} opd_desc_t;

/* Names. Unknown values give "unknown". */
const char *opd__errname(int code);     /* "EINVAL" */
const char *opd__errdefault(int code);  /* "invalid argument" */
const char *opd__dtype_name(int dtype); /* "float32" */
int opd__dtype_from_name(const char *name); /* OPD_DTYPE_*, 0 if unknown */
const char *opd__msg_name(int type);    /* "run" */
const char *opd__attr_type_name(int type); /* "float" */

/* Frame header: little-endian u32 payload length. */
static inline void opd__frame_put_len(unsigned char *h, uint32_t len) {
  h[0] = (unsigned char)len;
  h[1] = (unsigned char)(len >> 8);
  h[2] = (unsigned char)(len >> 16);
  h[3] = (unsigned char)(len >> 24);
}
static inline uint32_t opd__frame_get_len(const unsigned char *h) {
  return (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 |
         (uint32_t)h[3] << 24;
}

/* Room for decoded arrays and maps (see DESIGN). The first chunk is part
 * of the struct: once initialized, an arena must not be moved or copied. */
#define OPD_MP_ARENA_INLINE 4096 /* bytes of the first chunk */
typedef struct opd_mp_chunk opd_mp_chunk_t;
typedef struct opd_mp_arena {
  msgpack_object *next, *end;    /* free room of the current chunk */
  opd_mp_chunk_t *chunks;        /* malloc'd chunks, newest first */
  msgpack_object first[OPD_MP_ARENA_INLINE / sizeof(msgpack_object)];
} opd_mp_arena_t;

static inline void opd__mp_arena_init(opd_mp_arena_t *a) {
  a->chunks = NULL;
  a->next = a->first;
  a->end = a->first + sizeof a->first / sizeof a->first[0];
}
void opd__mp_arena_free_chunks(opd_mp_arena_t *a);
/* Forgets every object decoded into a; keeps the first chunk, frees the
 * others. */
static inline void opd__mp_arena_reset(opd_mp_arena_t *a) {
  if (a->chunks != NULL) opd__mp_arena_free_chunks(a);
  opd__mp_arena_init(a);
}
/* Frees what a holds; init it again before any further use. */
static inline void opd__mp_arena_destroy(opd_mp_arena_t *a) {
  opd__mp_arena_reset(a);
}

/* Decodes buf[0..len), which must hold exactly one msgpack object nested at
 * most max_depth (<= 32) deep, into *out; arrays and maps are allocated
 * from a, strings and bins point into buf. Returns 0, OPD_EPROTO (the
 * reason in err: truncation, an unused type, a count larger than the bytes
 * left, nesting, trailing bytes) or OPD_ENOMEM. On failure *out is
 * undefined and a may hold partial objects until it is reset. */
int opd__mp_decode(opd_mp_arena_t *a, const void *buf, size_t len,
                   int max_depth, msgpack_object *out, char *err,
                   size_t errlen);

/* Encoders that write straight into memory the caller has made room for
 * (OPD_MP_PUT_MAX bytes for one header or scalar), each returning the end
 * of what it wrote: no callback and no call per chunk, as msgpack-c's
 * packer makes. They write exactly msgpack-c's bytes (the smallest form;
 * signed values >= 0 in the unsigned forms; doubles as float64), so a
 * frame is the same whichever packed it; test_wire holds them to that. */
#define OPD_MP_PUT_MAX 9

static inline unsigned char *opd__mp_put_be(unsigned char *p, uint64_t v,
                                            int n) {
  for (int i = n - 1; i >= 0; i--, v >>= 8) p[i] = (unsigned char)v;
  return p + n;
}
static inline unsigned char *opd__mp_put_tagged(unsigned char *p, unsigned tag,
                                                uint64_t v, int n) {
  p[0] = (unsigned char)tag;
  return opd__mp_put_be(p + 1, v, n);
}
static inline unsigned char *opd__mp_put_uint(unsigned char *p, uint64_t v) {
  if (v < 0x80) { *p = (unsigned char)v; return p + 1; }
  if (v < 0x100) return opd__mp_put_tagged(p, 0xcc, v, 1);
  if (v < 0x10000) return opd__mp_put_tagged(p, 0xcd, v, 2);
  if (v < 0x100000000ull) return opd__mp_put_tagged(p, 0xce, v, 4);
  return opd__mp_put_tagged(p, 0xcf, v, 8);
}
static inline unsigned char *opd__mp_put_int(unsigned char *p, int64_t v) {
  if (v >= 0) return opd__mp_put_uint(p, (uint64_t)v);
  if (v >= -32) { *p = (unsigned char)(v & 0xff); return p + 1; }
  if (v >= INT8_MIN) return opd__mp_put_tagged(p, 0xd0, (uint64_t)v, 1);
  if (v >= INT16_MIN) return opd__mp_put_tagged(p, 0xd1, (uint64_t)v, 2);
  if (v >= INT32_MIN) return opd__mp_put_tagged(p, 0xd2, (uint64_t)v, 4);
  return opd__mp_put_tagged(p, 0xd3, (uint64_t)v, 8);
}
static inline unsigned char *opd__mp_put_double(unsigned char *p, double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  return opd__mp_put_tagged(p, 0xcb, u, 8);
}
/* Headers: a string's bytes follow its header, a container's n elements
 * (a map's n keys and values) follow its header. */
static inline unsigned char *opd__mp_put_str(unsigned char *p, uint32_t n) {
  if (n < 32) { *p = (unsigned char)(0xa0 | n); return p + 1; }
  if (n < 0x100) return opd__mp_put_tagged(p, 0xd9, n, 1);
  if (n < 0x10000) return opd__mp_put_tagged(p, 0xda, n, 2);
  return opd__mp_put_tagged(p, 0xdb, n, 4);
}
static inline unsigned char *opd__mp_put_array(unsigned char *p, uint32_t n) {
  if (n < 16) { *p = (unsigned char)(0x90 | n); return p + 1; }
  if (n < 0x10000) return opd__mp_put_tagged(p, 0xdc, n, 2);
  return opd__mp_put_tagged(p, 0xdd, n, 4);
}
static inline unsigned char *opd__mp_put_map(unsigned char *p, uint32_t n) {
  if (n < 16) { *p = (unsigned char)(0x80 | n); return p + 1; }
  if (n < 0x10000) return opd__mp_put_tagged(p, 0xde, n, 2);
  return opd__mp_put_tagged(p, 0xdf, n, 4);
}

/* The reverse for the fixed heads' unsigned integers: the size in bytes of
 * the msgpack unsigned integer at p (n bytes there), its value in *v; 0 if
 * p does not start with one that fits. */
static inline uint32_t opd__mp_get_uint(const unsigned char *p, size_t n,
                                        uint64_t *v) {
  if (n == 0) return 0;
  uint32_t k = p[0] < 0x80 ? 1
               : p[0] >= 0xcc && p[0] <= 0xcf ? 1u + (1u << (p[0] - 0xcc))
                                              : 0;
  if (k == 0 || k > n) return 0;
  uint64_t x = p[0] < 0x80 ? p[0] : 0;
  if (k == 9) { /* the full-width id of a prepared request */
    memcpy(&x, p + 1, 8);
    x = __builtin_bswap64(x);
  } else {
    for (uint32_t i = 1; i < k; i++) x = x << 8 | p[i];
  }
  *v = x;
  return k;
}

/* A tensor descriptor [arena, offset, dtype, shape, strides], strides nil
 * when `strides` is NULL; rank 0..OPD_MAX_RANK. At most OPD_MP_DESC_MAX
 * bytes. */
#define OPD_MP_DESC_MAX (1 + 3 * OPD_MP_PUT_MAX + 2 * (1 + OPD_MAX_RANK * OPD_MP_PUT_MAX))
static inline unsigned char *opd__mp_put_desc(unsigned char *p, uint64_t arena,
                                              uint64_t offset, int32_t dtype,
                                              int32_t rank,
                                              const int64_t *shape,
                                              const int64_t *strides) {
  *p++ = 0x95;
  p = opd__mp_put_uint(p, arena);
  p = opd__mp_put_uint(p, offset);
  p = opd__mp_put_uint(p, (uint32_t)dtype);
  p = opd__mp_put_array(p, (uint32_t)rank);
  for (int i = 0; i < rank; i++) p = opd__mp_put_int(p, shape[i]);
  if (strides == NULL) {
    *p++ = 0xc0;
  } else {
    p = opd__mp_put_array(p, (uint32_t)rank);
    for (int i = 0; i < rank; i++) p = opd__mp_put_int(p, strides[i]);
  }
  return p;
}

/* Typed access to unpacked objects. Map lookups return NULL when the key
 * is absent or `map` is not a map. */
static inline const msgpack_object *opd__mp_get(const msgpack_object *map,
                                                const char *key) {
  /* inline: for a literal key strlen is a constant and memcmp a compare */
  size_t klen = strlen(key);
  if (map == NULL || map->type != MSGPACK_OBJECT_MAP) return NULL;
  const msgpack_object_kv *kv = map->via.map.ptr;
  for (uint32_t i = 0; i < map->via.map.size; i++)
    if (kv[i].key.type == MSGPACK_OBJECT_STR &&
        kv[i].key.via.str.size == klen &&
        memcmp(kv[i].key.via.str.ptr, key, klen) == 0)
      return &kv[i].val;
  return NULL;
}
int opd__mp_uint(const msgpack_object *o, uint64_t *v);   /* 0 or EPROTO */
int opd__mp_int(const msgpack_object *o, int64_t *v);     /* 0 or EPROTO */
int opd__mp_str(const msgpack_object *o, char *buf, size_t cap); /* NUL-terminates;
                                                       EPROTO if too long */

/* Descriptor encode/decode. Decode copies everything into *d and checks
 * only the encoding (types, rank <= OPD_MAX_RANK); on failure it writes a
 * reason to err and returns OPD_EPROTO or OPD_ELIMIT. Pack writes what
 * opd__mp_put_desc() does (d->rank 0..OPD_MAX_RANK). */
int opd__desc_decode(const msgpack_object *o, opd_desc_t *d, char *err,
                     size_t errlen);
void opd__desc_pack(msgpack_packer *pk, const opd_desc_t *d);

/* Validates (daemon/desc.c) a decoded descriptor against an arena of arena_size bytes:
 * dtype known, shape >= 0, strides >= 0, no overflow in size computations,
 * offset aligned to the element size, the whole extent inside the arena.
 * Fills strides when d->contiguous, *numel and *extent (bytes spanned from
 * offset). Returns 0 or OPD_EDTYPE/ESHAPE/ELAYOUT/EOVERFLOW/EBOUNDS with a
 * reason in err (without the op name or tensor index). */
int opd__desc_validate(opd_desc_t *d, uint64_t arena_size, int64_t *numel,
                       uint64_t *extent, char *err, size_t errlen);

/* 1 when d's strides are C-contiguous for its shape. */
int opd__desc_is_contiguous(const opd_desc_t *d);


#endif /* OPD_WIRE_H */
