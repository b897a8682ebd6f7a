/* Unit: framing and the msgpack decoder (common/wire.c); the encoder,
 * descriptors and name tables: test_wire_desc.c. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"

/* ---- frames --------------------------------------------------------------- */

Test(frame, length_is_little_endian_u32) {
  unsigned char h[4];
  opd__frame_put_len(h, 0x01020304u);
  cr_assert_eq(h[0], 0x04);
  cr_assert_eq(h[3], 0x01);
  cr_assert_eq(opd__frame_get_len(h), 0x01020304u);
  opd__frame_put_len(h, 0xffffffffu);
  cr_assert_eq(opd__frame_get_len(h), 0xffffffffu);
  opd__frame_put_len(h, 0);
  cr_assert_eq(opd__frame_get_len(h), 0);
}

/* ---- msgpack decoding ------------------------------------------------------ */

static int decode(const char *bytes, size_t len, char *err) {
  opd_mp_arena_t a;
  msgpack_object o;
  opd__mp_arena_init(&a);
  int rc = opd__mp_decode(&a, bytes, len, OPD_MAX_DEPTH, &o, err, 200);
  opd__mp_arena_destroy(&a);
  return rc;
}

#define OK(lit) cr_assert_eq(decode(lit, sizeof(lit) - 1, err), 0, "%s", err)
#define BAD(lit, needle)                                               \
  do {                                                                 \
    cr_assert_eq(decode(lit, sizeof(lit) - 1, err), OPD_EPROTO);       \
    cr_assert(strstr(err, needle) != NULL, "\"%s\" lacks \"%s\"", err, \
              needle);                                                 \
  } while (0)

Test(mpdecode, accepts_well_formed_objects) {
  char err[200];
  OK("\x00");
  OK("\xc0");
  OK("\x93\x01\x02\x81\xa1k\xc3");                  /* [1,2,{"k":true}] */
  OK("\xcb\x3f\xf0\x00\x00\x00\x00\x00\x00");       /* 1.0 */
  OK("\xca\x3f\x80\x00\x00");                       /* 1.0f */
  OK("\xd9\x03" "abc");                            /* str8 */
  OK("\xda\x00\x01" "a");                          /* str16 */
  OK("\xdc\x00\x02\x01\x02");                      /* array16 [1,2] */
  OK("\xdd\x00\x00\x00\x01\x01");                  /* array32 [1] */
  OK("\xde\x00\x01\xa1k\x05");                     /* map16 {"k":5} */
  OK("\xdf\x00\x00\x00\x00");                      /* map32 {} */
  OK("\xc4\x02\x00\x01");                          /* bin8 */
  OK("\xc5\x00\x00");                              /* bin16, empty */
  OK("\xd3\x80\x00\x00\x00\x00\x00\x00\x00");       /* int64 min */
  OK("\xcf\xff\xff\xff\xff\xff\xff\xff\xff");       /* uint64 max */
  OK("\x90");                                      /* [] */
  OK("\xa0");                                      /* "" */
}

Test(mpdecode, rejects_truncation_and_trailing_bytes) {
  char err[200];
  BAD("", "truncated");
  BAD("\x93\x01\x02", "array count 3 is larger than the 2 bytes left");
  BAD("\x92\x01\xcd\x01", "truncated");
  BAD("\xcb\x3f\xf0", "truncated");
  BAD("\xca\x3f", "truncated");
  BAD("\xd3\x80\x00", "truncated");
  BAD("\xa5" "ab", "truncated");
  BAD("\xd9", "truncated");
  BAD("\xda\x00", "truncated");
  BAD("\xc4\x05" "ab", "truncated");
  BAD("\xdc\x00", "truncated");
  BAD("\x01\x02", "1 bytes after");
  BAD("\x91\x01\xc0\xc0", "2 bytes after");
}

Test(mpdecode, rejects_counts_larger_than_the_bytes_left) {
  char err[200];
  BAD("\xdd\xff\xff\xff\xff", "array count 4294967295 is larger than the 0 bytes left");
  BAD("\xdf\x00\x01\x00\x00\x01", "map count 65536");
  BAD("\x9f\x01", "array count 15");
  BAD("\x81\x01", "map count 1 is larger than the 1 bytes left");
  BAD("\xdb\x7f\xff\xff\xff" "a", "truncated");    /* huge str32 */
  BAD("\xc6\xff\xff\xff\xff" "a", "truncated");    /* huge bin32 */
  /* the bytes still owed to the outer array's second element do not count:
   * the inner array may not claim them */
  BAD("\x92\x93\x01\x02\x03", "array count 3 is larger than the 2 bytes left");
  BAD("\x92\xa3" "abc", "truncated");
}

Test(mpdecode, rejects_deep_nesting) {
  char err[200], deep[40];
  opd_mp_arena_t a;
  msgpack_object o;
  opd__mp_arena_init(&a);
  for (int i = 0; i < 39; i++) deep[i] = (char)0x91;
  deep[39] = 0x01;
  cr_assert_eq(opd__mp_decode(&a, deep, 32, OPD_MAX_DEPTH, &o, err, sizeof err),
               OPD_EPROTO);
  cr_assert(strstr(err, "nesting deeper than 8") != NULL, "%s", err);
  /* exactly the limit is fine */
  opd__mp_arena_reset(&a);
  cr_assert_eq(opd__mp_decode(&a, deep + 39 - OPD_MAX_DEPTH, OPD_MAX_DEPTH + 1,
                              OPD_MAX_DEPTH, &o, err, sizeof err),
               0, "%s", err);
  cr_assert_eq(o.via.array.ptr->via.array.ptr->type, MSGPACK_OBJECT_ARRAY);
  /* an empty container counts as a level too */
  deep[OPD_MAX_DEPTH] = (char)0x90;
  cr_assert_eq(opd__mp_decode(&a, deep, OPD_MAX_DEPTH + 1, OPD_MAX_DEPTH, &o,
                              err, sizeof err),
               OPD_EPROTO);
  /* a limit above 32 is 32 */
  deep[OPD_MAX_DEPTH] = (char)0x91;
  cr_assert_eq(opd__mp_decode(&a, deep, 40, 1000, &o, err, sizeof err),
               OPD_EPROTO);
  cr_assert(strstr(err, "nesting deeper than 32") != NULL, "%s", err);
  opd__mp_arena_destroy(&a);
}

Test(mpdecode, rejects_unused_and_ext_types) {
  char err[200];
  BAD("\xc1", "msgpack type 0xc1 is not used by the protocol");
  BAD("\xd4\x01\x02", "0xd4");
  BAD("\xd5\x01\x02\x03", "0xd5");
  BAD("\xd6\x01\x00\x00\x00\x00", "0xd6");
  BAD("\xd7\x01\x00\x00\x00\x00\x00\x00\x00\x00", "0xd7");
  BAD("\xc7\x01\x01\x00", "0xc7");
  BAD("\xc8\x00\x01\x01\x00", "0xc8");
  BAD("\xc9\x00\x00\x00\x01\x01\x00", "0xc9");
  BAD("\x92\x01\xd8\x01", "0xd8");                /* nested too */
}

/* The decoder's tree equals msgpack-c's, strings pointing at the same
 * bytes (msgpack-c gives an empty string a NULL pointer; we point into the
 * buffer, so the pointer is compared only for non-empty ones). */
static void same(const msgpack_object *x, const msgpack_object *y) {
  cr_assert_eq(x->type, y->type);
  switch (x->type) {
    case MSGPACK_OBJECT_NIL: break;
    case MSGPACK_OBJECT_BOOLEAN: cr_assert_eq(x->via.boolean, y->via.boolean); break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: cr_assert_eq(x->via.u64, y->via.u64); break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: cr_assert_eq(x->via.i64, y->via.i64); break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
      cr_assert_eq(memcmp(&x->via.f64, &y->via.f64, sizeof(double)), 0);
      break;
    case MSGPACK_OBJECT_STR:
    case MSGPACK_OBJECT_BIN:
      cr_assert_eq(x->via.str.size, y->via.str.size);
      if (x->via.str.size) cr_assert_eq(x->via.str.ptr, y->via.str.ptr);
      break;
    case MSGPACK_OBJECT_ARRAY:
      cr_assert_eq(x->via.array.size, y->via.array.size);
      for (uint32_t i = 0; i < x->via.array.size; i++)
        same(&x->via.array.ptr[i], &y->via.array.ptr[i]);
      break;
    case MSGPACK_OBJECT_MAP:
      cr_assert_eq(x->via.map.size, y->via.map.size);
      for (uint32_t i = 0; i < x->via.map.size; i++) {
        same(&x->via.map.ptr[i].key, &y->via.map.ptr[i].key);
        same(&x->via.map.ptr[i].val, &y->via.map.ptr[i].val);
      }
      break;
    default: cr_assert_fail("unexpected type %d", x->type);
  }
}

/* Decodes data with both decoders and compares; returns 0 or our code. */
static int compare_with_msgpack_c(const char *data, size_t len, int must_pass) {
  opd_mp_arena_t a;
  msgpack_object ours, theirs;
  msgpack_zone z;
  char err[200];
  size_t off = 0;
  opd__mp_arena_init(&a);
  msgpack_zone_init(&z, 1024);
  int rc = opd__mp_decode(&a, data, len, OPD_MAX_DEPTH, &ours, err, sizeof err);
  if (must_pass) cr_assert_eq(rc, 0, "%s", err);
  if (rc == 0) { /* whatever we accept, msgpack-c reads the same way (what
                  * we reject it might not survive: a huge count makes it
                  * allocate that many objects) */
    cr_assert_eq(msgpack_unpack(data, len, &off, &z, &theirs),
                 MSGPACK_UNPACK_SUCCESS);
    cr_assert_eq(off, len);
    same(&ours, &theirs);
  } else {
    cr_assert(rc == OPD_EPROTO && err[0] != '\0');
  }
  msgpack_zone_destroy(&z);
  opd__mp_arena_destroy(&a);
  return rc;
}

static void pack_sample(msgpack_packer *pk) {
  static const char bin[3] = {0, 1, 2};
  msgpack_pack_array(pk, 3);
  msgpack_pack_uint32(pk, OPD_MSG_RUN);
  msgpack_pack_uint64(pk, 1ull << 40);
  msgpack_pack_map(pk, 8);
  msgpack_pack_str_with_body(pk, "op", 2);
  msgpack_pack_str_with_body(pk, "softmax", 7);
  msgpack_pack_str_with_body(pk, "in", 2);
  opd_desc_t d = {.arena = 3, .offset = 4096, .dtype = OPD_DTYPE_FLOAT32,
                  .rank = 2, .shape = {300, 70000}, .contiguous = 1};
  msgpack_pack_array(pk, 2);
  opd__desc_pack(pk, &d);
  d.contiguous = 0, d.strides[0] = -1, d.strides[1] = 1ll << 33;
  opd__desc_pack(pk, &d);
  msgpack_pack_str_with_body(pk, "attrs", 5);
  msgpack_pack_map(pk, 6);
  msgpack_pack_str_with_body(pk, "f", 1);
  msgpack_pack_double(pk, -2.5);
  msgpack_pack_str_with_body(pk, "g", 1);
  msgpack_pack_float(pk, 0.25f);
  msgpack_pack_str_with_body(pk, "b", 1);
  msgpack_pack_true(pk);
  msgpack_pack_str_with_body(pk, "n", 1);
  msgpack_pack_int64(pk, -129);
  msgpack_pack_str_with_body(pk, "s", 1);
  msgpack_pack_str_with_body(pk, "", 0);
  msgpack_pack_str_with_body(pk, "e", 1);
  msgpack_pack_array(pk, 0);
  msgpack_pack_str_with_body(pk, "bin", 3);
  msgpack_pack_bin_with_body(pk, bin, sizeof bin);
  msgpack_pack_str_with_body(pk, "neg", 3);
  msgpack_pack_array(pk, 4);
  msgpack_pack_int8(pk, -1);
  msgpack_pack_int16(pk, -300);
  msgpack_pack_int32(pk, -70000);
  msgpack_pack_int64(pk, INT64_MIN);
  msgpack_pack_str_with_body(pk, "pos", 3);
  msgpack_pack_array(pk, 5);
  msgpack_pack_fix_int8(pk, 5);   /* int8 holding a positive value */
  msgpack_pack_fix_uint8(pk, 200);
  msgpack_pack_fix_uint16(pk, 1);
  msgpack_pack_fix_uint32(pk, 7);
  msgpack_pack_fix_uint64(pk, UINT64_MAX);
  msgpack_pack_str_with_body(pk, "nil", 3);
  msgpack_pack_nil(pk);
  msgpack_pack_uint8(pk, 9);       /* a non-string key */
  msgpack_pack_false(pk);
}

Test(mpdecode, builds_the_same_tree_as_msgpack_c) {
  msgpack_sbuffer sb;
  msgpack_packer pk;
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  pack_sample(&pk);
  compare_with_msgpack_c(sb.data, sb.size, 1);
  /* long strings and containers: 16- and 32-bit headers */
  msgpack_sbuffer_clear(&sb);
  char big[70000];
  memset(big, 'x', sizeof big);
  msgpack_pack_array(&pk, 3);
  msgpack_pack_str_with_body(&pk, big, 300);
  msgpack_pack_str_with_body(&pk, big, sizeof big);
  msgpack_pack_array(&pk, 70000);
  for (int i = 0; i < 70000; i++) msgpack_pack_int(&pk, i - 35000);
  compare_with_msgpack_c(sb.data, sb.size, 1);
  msgpack_sbuffer_destroy(&sb);
}

Test(mpdecode, strings_point_into_the_payload_and_maps_are_searchable) {
  const char buf[] = "\x83\xa2op\xa4noop\x01\x02\xa1k\xc3";
  opd_mp_arena_t a;
  msgpack_object o;
  char err[200];
  opd__mp_arena_init(&a);
  cr_assert_eq(opd__mp_decode(&a, buf, sizeof buf - 1, OPD_MAX_DEPTH, &o, err,
                              sizeof err), 0, "%s", err);
  const msgpack_object *op = opd__mp_get(&o, "op");
  cr_assert(op != NULL && op->type == MSGPACK_OBJECT_STR);
  cr_assert_eq(op->via.str.ptr, buf + 5, "zero copy");
  char name[8];
  cr_assert_eq(opd__mp_str(op, name, sizeof name), 0);
  cr_assert_str_eq(name, "noop");
  const msgpack_object *k = opd__mp_get(&o, "k");
  cr_assert(k != NULL && k->type == MSGPACK_OBJECT_BOOLEAN && k->via.boolean);
  cr_assert_null(opd__mp_get(&o, "o"));
  cr_assert_null(opd__mp_get(&o, "opx"));
  cr_assert_null(opd__mp_get(&o, ""));
  cr_assert_null(opd__mp_get(op, "op"), "not a map");
  /* 3 entries: 6 objects from the first chunk, nothing malloc'd */
  cr_assert_eq(a.next - a.first, 6);
  cr_assert_null(a.chunks);
  opd__mp_arena_destroy(&a);
}

Test(mpdecode, big_payloads_grow_the_arena_and_reset_keeps_the_first_chunk) {
  msgpack_sbuffer sb;
  msgpack_packer pk;
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  /* 3000 small arrays: more objects than the first chunk holds */
  msgpack_pack_array(&pk, 3000);
  for (int i = 0; i < 3000; i++) {
    msgpack_pack_array(&pk, 2);
    msgpack_pack_int(&pk, i);
    msgpack_pack_str_with_body(&pk, "ab", 2);
  }
  opd_mp_arena_t a;
  msgpack_object o;
  char err[200];
  opd__mp_arena_init(&a);
  for (int round = 0; round < 3; round++) {
    cr_assert_eq(opd__mp_decode(&a, sb.data, sb.size, OPD_MAX_DEPTH, &o, err,
                                sizeof err), 0, "%s", err);
    cr_assert_not_null(a.chunks);
    cr_assert_eq(o.via.array.size, 3000);
    cr_assert_eq(o.via.array.ptr[2999].via.array.ptr[0].via.u64, 2999);
    cr_assert_eq(o.via.array.ptr[2999].via.array.ptr[1].via.str.size, 2);
    opd__mp_arena_reset(&a);
    cr_assert_null(a.chunks);
    cr_assert_eq(a.next, a.first);
  }
  opd__mp_arena_destroy(&a);
  msgpack_sbuffer_destroy(&sb);
}

/* Hostile bytes: every prefix and many corruptions of a real request.
 * Never a crash or an overread (ASan build), and whatever is accepted is
 * what msgpack-c reads. */
Test(mpdecode, survives_truncations_and_corruptions) {
  msgpack_sbuffer sb;
  msgpack_packer pk;
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  pack_sample(&pk);
  for (size_t n = 0; n < sb.size; n++) {
    char *cut = malloc(n ? n : 1); /* exact size: ASan sees an overread */
    memcpy(cut, sb.data, n);
    cr_assert_neq(compare_with_msgpack_c(cut, n, 0), 0, "prefix %zu", n);
    free(cut);
  }
  unsigned seed = 12345;
  char *buf = malloc(sb.size);
  for (int i = 0; i < 20000; i++) {
    memcpy(buf, sb.data, sb.size);
    for (int k = 0; k < 1 + i % 3; k++) {
      seed = seed * 1103515245u + 12345u;
      buf[(seed >> 8) % sb.size] = (char)(seed >> 20);
    }
    compare_with_msgpack_c(buf, sb.size, 0);
  }
  free(buf);
  msgpack_sbuffer_destroy(&sb);
}
