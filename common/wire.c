/* Wire helpers: name tables, the msgpack decoder, descriptor codec and
 * validation. See wire.h for the DESIGN. */
#include "common/wire.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t errlen, const char *fmt, ...) {
  if (err == NULL || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* ---- name tables ------------------------------------------------------ */

const char *opd__errname(int code) {
  switch (code) {
    case 0: return "OK";
#define X(name, val, str) case val: return #name;
    OPD_ERRNO_MAP(X)
#undef X
  }
  return "unknown";
}

const char *opd__errdefault(int code) {
  switch (code) {
    case 0: return "success";
#define X(name, val, str) case val: return str;
    OPD_ERRNO_MAP(X)
#undef X
  }
  return "unknown error";
}

const char *opd__dtype_name(int dtype) {
  switch (dtype) {
#define X(name, val, size, str) case val: return str;
    OPD_DTYPE_MAP(X)
#undef X
  }
  return "unknown";
}

int opd__dtype_from_name(const char *name) {
#define X(n, val, size, str) if (strcmp(name, str) == 0) return val;
  OPD_DTYPE_MAP(X)
#undef X
  return 0;
}

const char *opd__msg_name(int type) {
  switch (type) {
#define X(name, val, str) case val: return str;
    OPD_MSG_MAP(X)
#undef X
  }
  return "unknown";
}

const char *opd__attr_type_name(int type) {
  switch (type) {
#define X(name, val, str) case val: return str;
    OPD_ATTR_TYPE_MAP(X)
#undef X
  }
  return "none";
}

/* ---- msgpack decoding ------------------------------------------------- */

enum { MP_CHUNK_MIN = 1024 }; /* objects in a malloc'd chunk, at least */

struct opd_mp_chunk {
  struct opd_mp_chunk *next;
  msgpack_object obj[];
};

void opd__mp_arena_free_chunks(opd_mp_arena_t *a) {
  while (a->chunks != NULL) {
    opd_mp_chunk_t *c = a->chunks;
    a->chunks = c->next;
    free(c);
  }
}

/* A new chunk for n objects that do not fit in the current one. The rest of
 * the current one is abandoned: less than n objects, so an arena never
 * holds more than twice what was asked of it, plus one minimum chunk. */
static msgpack_object *arena_grow(opd_mp_arena_t *a, size_t n) {
  size_t cap = n > MP_CHUNK_MIN ? n : MP_CHUNK_MIN;
  if (cap > (SIZE_MAX - sizeof(opd_mp_chunk_t)) / sizeof(msgpack_object))
    return NULL;
  opd_mp_chunk_t *c = malloc(sizeof *c + cap * sizeof(msgpack_object));
  if (c == NULL) return NULL;
  c->next = a->chunks;
  a->chunks = c;
  a->next = c->obj + n;
  a->end = c->obj + cap;
  return c->obj;
}

static inline msgpack_object *arena_take(opd_mp_arena_t *a, size_t n) {
  if ((size_t)(a->end - a->next) < n) return arena_grow(a, n);
  msgpack_object *o = a->next;
  a->next += n;
  return o;
}

/* Big-endian loads; the compiler turns each into one load and a bswap. */
static inline uint16_t ld16(const unsigned char *p) {
  return (uint16_t)(p[0] << 8 | p[1]);
}
static inline uint32_t ld32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
         (uint32_t)p[3];
}
static inline uint64_t ld64(const unsigned char *p) {
  return (uint64_t)ld32(p) << 32 | ld32(p + 4);
}

static inline void set_int(msgpack_object *o, int64_t v) {
  if (v >= 0) {
    o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
    o->via.u64 = (uint64_t)v;
  } else {
    o->type = MSGPACK_OBJECT_NEGATIVE_INTEGER;
    o->via.i64 = v;
  }
}

/* One pass over the bytes, with a stack of the containers being filled:
 * [cur, stop) are the objects still to read at this depth, `outer` counts
 * those of the levels above. Scalars and strings need only not run past
 * the end (bytes they take from objects still to come show up as
 * truncation there). A container's count must fit in the bytes left
 * after one for every object still to come (outer + stop - cur): so every
 * object ever allocated gets a byte of its own, and the objects allocated
 * for a payload never outnumber its bytes. */
int opd__mp_decode(opd_mp_arena_t *a, const void *buf, size_t len,
                   int max_depth, msgpack_object *out, char *err,
                   size_t errlen) {
  enum { CAP = 32 };
  const unsigned char *p = buf, *end = p + len;
  struct { msgpack_object *cur, *stop; } stack[CAP]; /* the levels above */
  msgpack_object *cur = out, *stop = out + 1;
  size_t outer = 0;
  uint64_t objs; /* a container's objects: its count, twice that for a map */
  int depth = 0;

  if (max_depth > CAP) max_depth = CAP;
  for (;;) {
    if (cur == stop) {
      if (depth == 0) break;
      depth--;
      cur = stack[depth].cur;
      stop = stack[depth].stop;
      outer -= (size_t)(stop - cur);
      continue;
    }
    msgpack_object *o = cur++;
    if (p == end) goto truncated;
    unsigned t = *p++;
    uint64_t n; /* str/bin length or container count */

#define NEED(k) if ((size_t)(end - p) < (k)) goto truncated
    switch (t >> 4) { /* the fixed forms first: one jump */
      case 0x0: case 0x1: case 0x2: case 0x3:
      case 0x4: case 0x5: case 0x6: case 0x7:
        o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
        o->via.u64 = t;
        continue;
      case 0x8: n = t & 0x0f; goto map;
      case 0x9: n = t & 0x0f; goto array;
      case 0xa: case 0xb: n = t & 0x1f; goto str;
      case 0xe: case 0xf:
        o->type = MSGPACK_OBJECT_NEGATIVE_INTEGER;
        o->via.i64 = (int8_t)t;
        continue;
      default: break; /* 0xc0 to 0xdf */
    }
    switch (t) {
      case 0xc0: o->type = MSGPACK_OBJECT_NIL; continue;
      case 0xc2:
      case 0xc3:
        o->type = MSGPACK_OBJECT_BOOLEAN;
        o->via.boolean = t == 0xc3;
        continue;
      case 0xc4: NEED(1); n = p[0]; p += 1; goto bin;
      case 0xc5: NEED(2); n = ld16(p); p += 2; goto bin;
      case 0xc6: NEED(4); n = ld32(p); p += 4; goto bin;
      case 0xca: {
        NEED(4);
        uint32_t u = ld32(p);
        float f;
        memcpy(&f, &u, sizeof f);
        o->type = MSGPACK_OBJECT_FLOAT32;
        o->via.f64 = f;
        p += 4;
        continue;
      }
      case 0xcb: {
        NEED(8);
        uint64_t u = ld64(p);
        memcpy(&o->via.f64, &u, sizeof u);
        o->type = MSGPACK_OBJECT_FLOAT64;
        p += 8;
        continue;
      }
      case 0xcc: NEED(1); n = p[0]; p += 1; goto uint;
      case 0xcd: NEED(2); n = ld16(p); p += 2; goto uint;
      case 0xce: NEED(4); n = ld32(p); p += 4; goto uint;
      case 0xcf: NEED(8); n = ld64(p); p += 8; goto uint;
      case 0xd0: NEED(1); set_int(o, (int8_t)p[0]); p += 1; continue;
      case 0xd1: NEED(2); set_int(o, (int16_t)ld16(p)); p += 2; continue;
      case 0xd2: NEED(4); set_int(o, (int32_t)ld32(p)); p += 4; continue;
      case 0xd3: NEED(8); set_int(o, (int64_t)ld64(p)); p += 8; continue;
      case 0xd9: NEED(1); n = p[0]; p += 1; goto str;
      case 0xda: NEED(2); n = ld16(p); p += 2; goto str;
      case 0xdb: NEED(4); n = ld32(p); p += 4; goto str;
      case 0xdc: NEED(2); n = ld16(p); p += 2; goto array;
      case 0xdd: NEED(4); n = ld32(p); p += 4; goto array;
      case 0xde: NEED(2); n = ld16(p); p += 2; goto map;
      case 0xdf: NEED(4); n = ld32(p); p += 4; goto map;
      default:
        seterr(err, errlen, "msgpack type 0x%02x is not used by the protocol",
               t);
        return OPD_EPROTO;
    }
#undef NEED

  uint:
    o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
    o->via.u64 = n;
    continue;
  str:
    if (n > (size_t)(end - p)) goto truncated;
    o->type = MSGPACK_OBJECT_STR;
    o->via.str.size = (uint32_t)n;
    o->via.str.ptr = (const char *)p;
    p += n;
    continue;
  bin:
    if (n > (size_t)(end - p)) goto truncated;
    o->type = MSGPACK_OBJECT_BIN;
    o->via.bin.size = (uint32_t)n;
    o->via.bin.ptr = (const char *)p;
    p += n;
    continue;
  array:
    o->type = MSGPACK_OBJECT_ARRAY;
    objs = n;
    goto container;
  map:
    o->type = MSGPACK_OBJECT_MAP;
    objs = 2 * n; /* an entry is a key and a value */
  container: {
    /* o->via.map has via.array's layout: {size, pointer to the objects} */
    size_t left = (size_t)(end - p), owed = outer + (size_t)(stop - cur);
    if (objs > (left > owed ? left - owed : 0)) {
      seterr(err, errlen,
             "msgpack %s count %llu is larger than the %zu bytes left",
             o->type == MSGPACK_OBJECT_MAP ? "map" : "array",
             (unsigned long long)n, left > owed ? left - owed : 0);
      return OPD_EPROTO;
    }
    if (depth + 1 > max_depth) {
      seterr(err, errlen, "msgpack nesting deeper than %d levels", max_depth);
      return OPD_EPROTO;
    }
    msgpack_object *kids = objs ? arena_take(a, (size_t)objs) : a->next;
    if (kids == NULL) {
      seterr(err, errlen, "out of memory decoding a %zu-byte msgpack payload",
             len);
      return OPD_ENOMEM;
    }
    o->via.array.size = (uint32_t)n;
    o->via.array.ptr = kids;
    if (objs) {
      stack[depth].cur = cur;
      stack[depth].stop = stop;
      outer += (size_t)(stop - cur);
      depth++;
      cur = kids;
      stop = kids + (size_t)objs;
    }
    continue;
  }
  }

  if (p != end) {
    seterr(err, errlen, "%zu bytes after the msgpack object",
           (size_t)(end - p));
    return OPD_EPROTO;
  }
  return 0;
truncated:
  seterr(err, errlen, "msgpack payload is truncated");
  return OPD_EPROTO;
}

/* ---- typed getters ---------------------------------------------------- */

int opd__mp_uint(const msgpack_object *o, uint64_t *v) {
  if (o == NULL || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
    return OPD_EPROTO;
  *v = o->via.u64;
  return 0;
}

int opd__mp_int(const msgpack_object *o, int64_t *v) {
  if (o == NULL) return OPD_EPROTO;
  if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
    *v = o->via.i64;
    return 0;
  }
  if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX) {
    *v = (int64_t)o->via.u64;
    return 0;
  }
  return OPD_EPROTO;
}

int opd__mp_str(const msgpack_object *o, char *buf, size_t cap) {
  if (o == NULL || o->type != MSGPACK_OBJECT_STR || o->via.str.size >= cap)
    return OPD_EPROTO;
  memcpy(buf, o->via.str.ptr, o->via.str.size);
  buf[o->via.str.size] = '\0';
  return 0;
}

/* ---- descriptors ------------------------------------------------------ */

int opd__desc_decode(const msgpack_object *o, opd_desc_t *d, char *err,
                     size_t errlen) {
  memset(d, 0, sizeof *d);
  if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 5) {
    seterr(err, errlen,
           "a tensor must be [arena, offset, dtype, shape, strides]");
    return OPD_EPROTO;
  }
  const msgpack_object *f = o->via.array.ptr;
  uint64_t dtype;
  if (opd__mp_uint(&f[0], &d->arena) || opd__mp_uint(&f[1], &d->offset) ||
      opd__mp_uint(&f[2], &dtype)) {
    seterr(err, errlen, "tensor arena, offset and dtype must be unsigned");
    return OPD_EPROTO;
  }
  d->dtype = dtype > 255 ? 0 : (int32_t)dtype;
  const msgpack_object *sh = &f[3], *st = &f[4];
  if (sh->type != MSGPACK_OBJECT_ARRAY) {
    seterr(err, errlen, "tensor shape must be an array");
    return OPD_EPROTO;
  }
  if (sh->via.array.size > OPD_MAX_RANK) {
    seterr(err, errlen, "tensor rank %u exceeds the maximum of %d",
           sh->via.array.size, OPD_MAX_RANK);
    return OPD_ELIMIT;
  }
  d->rank = (int32_t)sh->via.array.size;
  for (int i = 0; i < d->rank; i++) {
    if (opd__mp_int(&sh->via.array.ptr[i], &d->shape[i])) {
      seterr(err, errlen, "tensor shape must hold integers");
      return OPD_EPROTO;
    }
  }
  if (st->type == MSGPACK_OBJECT_NIL) {
    d->contiguous = 1;
    return 0;
  }
  if (st->type != MSGPACK_OBJECT_ARRAY ||
      st->via.array.size != (uint32_t)d->rank) {
    seterr(err, errlen, "tensor strides must be nil or %d integers",
           d->rank);
    return OPD_EPROTO;
  }
  for (int i = 0; i < d->rank; i++) {
    if (opd__mp_int(&st->via.array.ptr[i], &d->strides[i])) {
      seterr(err, errlen, "tensor strides must hold integers");
      return OPD_EPROTO;
    }
  }
  return 0;
}

void opd__desc_pack(msgpack_packer *pk, const opd_desc_t *d) {
  unsigned char buf[OPD_MP_DESC_MAX];
  unsigned char *end =
      opd__mp_put_desc(buf, d->arena, d->offset, d->dtype, d->rank, d->shape,
                       d->contiguous ? NULL : d->strides);
  pk->callback(pk->data, (const char *)buf, (size_t)(end - buf));
}
