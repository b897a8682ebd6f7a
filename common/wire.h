/* Wire helpers shared by the daemon and libopd: frames, a msgpack
 * pre-check, tensor descriptors and the name tables of protocol.h.
 *
 * DESIGN
 * msgpack-c's unpacker allocates `count` objects as soon as it reads an
 * array or map header, so a 10-byte frame claiming 2^32 elements would make
 * it allocate gigabytes, and it has no depth limit. Every payload that
 * crosses a trust boundary is therefore walked once by opd__mp_check(),
 * which rejects counts larger than the bytes left and nesting deeper than
 * OPD_MAX_DEPTH, before msgpack-c sees it. After that the unpacked objects
 * are read through the small typed getters below, and every tensor
 * descriptor is copied into a private opd_desc_t before it is validated
 * (opd__desc_validate), so nothing is read twice from memory a client can
 * still change.
 */
#ifndef OPD_WIRE_H
#define OPD_WIRE_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#include "opd/protocol.h"

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

/* Checks that buf[0..len) holds exactly one well-formed msgpack object,
 * nested at most max_depth deep, whose every array/map count fits in the
 * bytes left. Returns 0 or OPD_EPROTO with a reason in err. */
int opd__mp_check(const void *buf, size_t len, int max_depth, char *err,
                  size_t errlen);

/* Typed access to unpacked objects. Map lookups return NULL when the key
 * is absent or `map` is not a map. */
const msgpack_object *opd__mp_get(const msgpack_object *map, const char *key);
int opd__mp_uint(const msgpack_object *o, uint64_t *v);   /* 0 or EPROTO */
int opd__mp_int(const msgpack_object *o, int64_t *v);     /* 0 or EPROTO */
int opd__mp_str(const msgpack_object *o, char *buf, size_t cap); /* NUL-terminates;
                                                       EPROTO if too long */

/* Descriptor encode/decode. Decode copies everything into *d and checks
 * only the encoding (types, rank <= OPD_MAX_RANK); on failure it writes a
 * reason to err and returns OPD_EPROTO or OPD_ELIMIT. */
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
