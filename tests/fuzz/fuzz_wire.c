/* libFuzzer target: the msgpack decoder every payload from a client goes
 * through (common/wire.c opd__mp_decode), checked three ways.
 *
 * DESIGN
 * Input: byte 0 picks max_depth (0..33; above 32 is clamped by the
 * decoder), the rest is the payload. The decoder must never crash, leak or
 * hit UB (ASan/UBSan), and its verdict is held against two independent
 * readers:
 *  - scan(), a recursive walker written here that only measures the bytes
 *    (well-formed, no ext / 0xc1, container nesting, every count at most
 *    the bytes left): the decoder accepts exactly when scan() says the
 *    payload is one complete object, nested no deeper than max_depth,
 *    with nothing after it;
 *  - msgpack-c's own unpacker (msgpack_unpack_next), run only when scan()
 *    found every count bounded (msgpack-c allocates a container's count
 *    up front: a 5-byte array header would ask for 100 GB): on an accepted
 *    payload it must read the same length and build the same tree (types,
 *    integers, float bits, string and bin bytes, which must point into the
 *    payload for the decoder).
 * The arena is reset between rounds, and a second decode into the same
 * arena must give the same tree (no state left behind).
 */
#include <msgpack.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"

#define FUZZ_TARGET "fuzz_wire"
#include "tests/fuzz/fuzz.h"

/* ---- scan: an independent walk over the bytes ------------------------- */

enum { SCAN_OK = 0, SCAN_TRUNC, SCAN_BADTYPE, SCAN_DEEP };

typedef struct scan {
  const unsigned char *p, *end;
  int max_nest;         /* deepest container nesting seen */
  int bounded;          /* every count <= bytes left at its header */
} scan_t;

static uint64_t be(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v = v << 8 | p[i];
  return v;
}

/* One object at sc->p, `level` containers above it. */
static int scan_obj(scan_t *sc, int level) {
  if (level > 40) return SCAN_DEEP; /* far past any max_depth: stop */
  if (sc->p >= sc->end) return SCAN_TRUNC;
  unsigned t = *sc->p++;
  size_t left = (size_t)(sc->end - sc->p);
  uint64_t n = 0, kids = 0;
  int hdr = 0, is_container = 0, skip = 0;

  if (t <= 0x7f || t >= 0xe0) return SCAN_OK;
  if ((t & 0xf0) == 0x80) { kids = 2 * (uint64_t)(t & 0x0f); is_container = 1; }
  else if ((t & 0xf0) == 0x90) { kids = t & 0x0f; is_container = 1; }
  else if ((t & 0xe0) == 0xa0) { n = t & 0x1f; skip = 1; }
  else {
    switch (t) {
      case 0xc0: case 0xc2: case 0xc3: return SCAN_OK;
      case 0xc4: hdr = 1; skip = 1; break;
      case 0xc5: hdr = 2; skip = 1; break;
      case 0xc6: hdr = 4; skip = 1; break;
      case 0xca: n = 4; break;
      case 0xcb: n = 8; break;
      case 0xcc: case 0xd0: n = 1; break;
      case 0xcd: case 0xd1: n = 2; break;
      case 0xce: case 0xd2: n = 4; break;
      case 0xcf: case 0xd3: n = 8; break;
      case 0xd9: hdr = 1; skip = 1; break;
      case 0xda: hdr = 2; skip = 1; break;
      case 0xdb: hdr = 4; skip = 1; break;
      case 0xdc: hdr = 2; is_container = 1; break;
      case 0xdd: hdr = 4; is_container = 1; break;
      case 0xde: hdr = 2; is_container = 2; break;
      case 0xdf: hdr = 4; is_container = 2; break;
      default: return SCAN_BADTYPE; /* 0xc1, ext */
    }
  }
  if (hdr) {
    if (left < (size_t)hdr) return SCAN_TRUNC;
    uint64_t v = be(sc->p, hdr);
    sc->p += hdr;
    left -= (size_t)hdr;
    if (is_container) kids = is_container == 2 ? 2 * v : v;
    else n = v;
  }
  if (!is_container) {
    (void)skip;
    if (n > left) return SCAN_TRUNC;
    sc->p += n;
    return SCAN_OK;
  }
  if (level + 1 > sc->max_nest) sc->max_nest = level + 1;
  if (kids > left) { /* cannot all fit: truncated, and msgpack-c would
                        allocate them all */
    sc->bounded = 0;
    return SCAN_TRUNC;
  }
  for (uint64_t i = 0; i < kids; i++) {
    int rc = scan_obj(sc, level + 1);
    if (rc != SCAN_OK) return rc;
  }
  return SCAN_OK;
}

/* ---- tree comparison -------------------------------------------------- */

static void same_tree(const msgpack_object *a, const msgpack_object *b,
                      const unsigned char *buf, size_t len, int in_payload) {
  CHECK(a->type == b->type, "type %d vs %d", a->type, b->type);
  switch (a->type) {
    case MSGPACK_OBJECT_NIL: break;
    case MSGPACK_OBJECT_BOOLEAN:
      CHECK(a->via.boolean == b->via.boolean, "bool");
      break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
      CHECK(a->via.u64 == b->via.u64, "u64 %llu vs %llu",
            (unsigned long long)a->via.u64, (unsigned long long)b->via.u64);
      break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
      CHECK(a->via.i64 == b->via.i64 && a->via.i64 < 0, "i64 %lld vs %lld",
            (long long)a->via.i64, (long long)b->via.i64);
      break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
      CHECK(memcmp(&a->via.f64, &b->via.f64, sizeof(double)) == 0,
            "float bits differ");
      break;
    case MSGPACK_OBJECT_STR:
    case MSGPACK_OBJECT_BIN: {
      /* str and bin share a layout {size, ptr} */
      uint32_t n = a->via.str.size;
      CHECK(n == b->via.str.size, "str/bin size %u vs %u", n,
            b->via.str.size);
      CHECK(n == 0 || memcmp(a->via.str.ptr, b->via.str.ptr, n) == 0,
            "str/bin bytes differ");
      if (in_payload && n > 0) {
        const unsigned char *q = (const unsigned char *)a->via.str.ptr;
        CHECK(q >= buf && q + n <= buf + len, "str/bin not in the payload");
      }
      break;
    }
    case MSGPACK_OBJECT_ARRAY:
      CHECK(a->via.array.size == b->via.array.size, "array size");
      for (uint32_t i = 0; i < a->via.array.size; i++)
        same_tree(&a->via.array.ptr[i], &b->via.array.ptr[i], buf, len,
                  in_payload);
      break;
    case MSGPACK_OBJECT_MAP:
      CHECK(a->via.map.size == b->via.map.size, "map size");
      for (uint32_t i = 0; i < a->via.map.size; i++) {
        same_tree(&a->via.map.ptr[i].key, &b->via.map.ptr[i].key, buf, len,
                  in_payload);
        same_tree(&a->via.map.ptr[i].val, &b->via.map.ptr[i].val, buf, len,
                  in_payload);
      }
      break;
    default: CHECK(0, "type %d the decoder should not produce", a->type);
  }
}

/* Objects in a tree (containers included), to bound the arena's use. */
static uint64_t count_objs(const msgpack_object *o) {
  uint64_t n = 1;
  if (o->type == MSGPACK_OBJECT_ARRAY)
    for (uint32_t i = 0; i < o->via.array.size; i++)
      n += count_objs(&o->via.array.ptr[i]);
  else if (o->type == MSGPACK_OBJECT_MAP)
    for (uint32_t i = 0; i < o->via.map.size; i++)
      n += count_objs(&o->via.map.ptr[i].key) +
           count_objs(&o->via.map.ptr[i].val);
  return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int max_depth = data[0] % 34;
  const unsigned char *buf = data + 1;
  size_t len = size - 1;
  int eff_depth = max_depth > 32 ? 32 : max_depth;

  /* the decoder must not read past len: give it an exact heap copy */
  unsigned char *copy = malloc(len ? len : 1);
  if (copy == NULL) return 0;
  memcpy(copy, buf, len);

  opd_mp_arena_t arena;
  msgpack_object obj;
  char err[200] = "";
  opd__mp_arena_init(&arena);
  int rc = opd__mp_decode(&arena, copy, len, max_depth, &obj, err, sizeof err);
  CHECK(rc == 0 || rc == OPD_EPROTO || rc == OPD_ENOMEM, "rc %d", rc);
  CHECK(rc == 0 || err[0] != '\0', "a failure without a reason");
  CHECK(strlen(err) < sizeof err, "err not terminated");

  scan_t sc = {buf, buf + len, 0, 1};
  int src = scan_obj(&sc, 0);
  int complete = src == SCAN_OK && sc.p == sc.end;
  int want_ok = complete && sc.max_nest <= eff_depth;
  if (rc != OPD_ENOMEM)
    CHECK((rc == 0) == want_ok,
          "decoder says %d (%s), scan says %d (rest %zu, nesting %d, max %d)",
          rc, err, src, (size_t)(sc.end - sc.p), sc.max_nest, eff_depth);

  if (rc == 0) {
    /* every object allocated has a byte of its own */
    CHECK(count_objs(&obj) <= len, "%llu objects from %zu bytes",
          (unsigned long long)count_objs(&obj), len);
    /* msgpack-c's unpacker reads the same object */
    msgpack_zone zone;
    msgpack_zone_init(&zone, 2048);
    msgpack_object theirs;
    size_t off = 0;
    msgpack_unpack_return ur =
        msgpack_unpack((const char *)copy, len, &off, &zone, &theirs);
    CHECK(ur == MSGPACK_UNPACK_SUCCESS, "msgpack-c says %d", (int)ur);
    CHECK(off == len, "msgpack-c read %zu of %zu bytes", off, len);
    same_tree(&obj, &theirs, copy, len, 1);
    msgpack_zone_destroy(&zone);
    /* a second decode after a reset: the same tree */
    opd__mp_arena_reset(&arena);
    msgpack_object again;
    CHECK(opd__mp_decode(&arena, copy, len, max_depth, &again, err,
                         sizeof err) == 0,
          "second decode failed: %s", err);
    /* `obj` pointed into the reset arena: compare against msgpack-c's */
    msgpack_zone_init(&zone, 2048);
    off = 0;
    msgpack_unpack((const char *)copy, len, &off, &zone, &theirs);
    same_tree(&again, &theirs, copy, len, 1);
    msgpack_zone_destroy(&zone);
  } else if (complete && sc.bounded && len > 0) {
    /* refused only for its depth: msgpack-c (its own limit is 32) reads
     * it whole */
    msgpack_zone zone;
    msgpack_zone_init(&zone, 2048);
    msgpack_object theirs;
    size_t off = 0;
    msgpack_unpack_return ur =
        msgpack_unpack((const char *)copy, len, &off, &zone, &theirs);
    if (sc.max_nest <= 32)
      CHECK(ur == MSGPACK_UNPACK_SUCCESS && off == len,
            "msgpack-c refuses (%d) a payload scan accepts", (int)ur);
    msgpack_zone_destroy(&zone);
  }
  opd__mp_arena_destroy(&arena);
  free(copy);
  return 0;
}
