/* Wire helpers: name tables, msgpack pre-check, descriptor codec and
 * validation. See wire.h for the DESIGN. */
#include "common/wire.h"

#include <stdarg.h>
#include <stdio.h>
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

/* ---- msgpack pre-check ------------------------------------------------ */

static uint64_t be(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v = v << 8 | p[i];
  return v;
}

int opd__mp_check(const void *buf, size_t len, int max_depth, char *err,
                  size_t errlen) {
  enum { CAP = 32 };
  const unsigned char *p = buf, *end = p + len;
  uint64_t left[CAP + 1]; /* objects still to read at each depth */
  int depth = 0;

  if (max_depth > CAP) max_depth = CAP;
  left[0] = 1;
  while (depth >= 0) {
    if (left[depth] == 0) {
      depth--;
      continue;
    }
    left[depth]--;
    if (p >= end) {
      seterr(err, errlen, "msgpack payload is truncated");
      return OPD_EPROTO;
    }
    unsigned t = *p++;
    size_t avail = (size_t)(end - p);
    uint64_t skip = 0;     /* bytes of payload after the header */
    uint64_t objs = 0;     /* objects inside a container */
    int container = 0, hdr = 0; /* hdr: bytes of length field */

    if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3) {
      /* fixint, nil, bool */
    } else if (t >= 0x80 && t <= 0x8f) {
      container = 1, objs = 2 * (uint64_t)(t & 0x0f);
    } else if (t >= 0x90 && t <= 0x9f) {
      container = 1, objs = t & 0x0f;
    } else if (t >= 0xa0 && t <= 0xbf) {
      skip = t & 0x1f;
    } else {
      switch (t) {
        case 0xc4: case 0xd9: hdr = 1; break;             /* bin8, str8 */
        case 0xc5: case 0xda: hdr = 2; break;             /* bin16, str16 */
        case 0xc6: case 0xdb: hdr = 4; break;             /* bin32, str32 */
        case 0xca: skip = 4; break;                       /* float32 */
        case 0xcb: skip = 8; break;                       /* float64 */
        case 0xcc: case 0xd0: skip = 1; break;
        case 0xcd: case 0xd1: skip = 2; break;
        case 0xce: case 0xd2: skip = 4; break;
        case 0xcf: case 0xd3: skip = 8; break;
        case 0xdc: container = 1, hdr = 2; break;         /* array16 */
        case 0xdd: container = 1, hdr = 4; break;         /* array32 */
        case 0xde: container = 2, hdr = 2; break;         /* map16 */
        case 0xdf: container = 2, hdr = 4; break;         /* map32 */
        default:
          seterr(err, errlen,
                 "msgpack type 0x%02x is not used by the protocol", t);
          return OPD_EPROTO;
      }
      if (hdr) {
        if (avail < (size_t)hdr) {
          seterr(err, errlen, "msgpack payload is truncated");
          return OPD_EPROTO;
        }
        uint64_t n = be(p, hdr);
        p += hdr, avail -= (size_t)hdr;
        if (container) objs = container == 2 ? 2 * n : n, container = 1;
        else skip = n;
      }
    }
    if (container) {
      if (objs > avail) {
        seterr(err, errlen,
               "msgpack %s count %llu is larger than the %zu bytes left",
               (t & 0xf0) == 0x80 || t >= 0xde ? "map" : "array",
               (unsigned long long)((t & 0xf0) == 0x80 || t >= 0xde ? objs / 2
                                                                    : objs),
               avail);
        return OPD_EPROTO;
      }
      if (depth + 1 > max_depth) {
        seterr(err, errlen, "msgpack nesting deeper than %d levels",
               max_depth);
        return OPD_EPROTO;
      }
      left[++depth] = objs;
    } else {
      if (skip > avail) {
        seterr(err, errlen, "msgpack payload is truncated");
        return OPD_EPROTO;
      }
      p += skip;
    }
  }
  if (p != end) {
    seterr(err, errlen, "%zu bytes after the msgpack object",
           (size_t)(end - p));
    return OPD_EPROTO;
  }
  return 0;
}

/* ---- typed getters ---------------------------------------------------- */

const msgpack_object *opd__mp_get(const msgpack_object *map, const char *key) {
  if (map == NULL || map->type != MSGPACK_OBJECT_MAP) return NULL;
  size_t klen = strlen(key);
  for (uint32_t i = 0; i < map->via.map.size; i++) {
    const msgpack_object *k = &map->via.map.ptr[i].key;
    if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == klen &&
        memcmp(k->via.str.ptr, key, klen) == 0)
      return &map->via.map.ptr[i].val;
  }
  return NULL;
}

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
  msgpack_pack_array(pk, 5);
  msgpack_pack_uint64(pk, d->arena);
  msgpack_pack_uint64(pk, d->offset);
  msgpack_pack_uint32(pk, (uint32_t)d->dtype);
  msgpack_pack_array(pk, (size_t)d->rank);
  for (int i = 0; i < d->rank; i++) msgpack_pack_int64(pk, d->shape[i]);
  if (d->contiguous) {
    msgpack_pack_nil(pk);
  } else {
    msgpack_pack_array(pk, (size_t)d->rank);
    for (int i = 0; i < d->rank; i++) msgpack_pack_int64(pk, d->strides[i]);
  }
}
