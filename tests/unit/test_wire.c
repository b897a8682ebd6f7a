/* Unit: framing, the msgpack pre-check, descriptor decoding and
 * validation, name tables. */
#include <criterion/criterion.h>
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

/* ---- msgpack pre-check ---------------------------------------------------- */

static int check(const char *bytes, size_t len, char *err) {
  return opd__mp_check(bytes, len, OPD_MAX_DEPTH, err, 200);
}

#define OK(lit) cr_assert_eq(check(lit, sizeof(lit) - 1, err), 0, "%s", err)
#define BAD(lit, needle)                                               \
  do {                                                                 \
    cr_assert_eq(check(lit, sizeof(lit) - 1, err), OPD_EPROTO);        \
    cr_assert(strstr(err, needle) != NULL, "\"%s\" lacks \"%s\"", err, \
              needle);                                                 \
  } while (0)

Test(mpcheck, accepts_well_formed_objects) {
  char err[200];
  OK("\x00");
  OK("\xc0");
  OK("\x93\x01\x02\x81\xa1k\xc3");                  /* [1,2,{"k":true}] */
  OK("\xcb\x3f\xf0\x00\x00\x00\x00\x00\x00");       /* 1.0 */
  OK("\xd9\x03" "abc");                            /* str8 */
  OK("\xdc\x00\x02\x01\x02");                      /* array16 [1,2] */
  OK("\xde\x00\x01\xa1k\x05");                     /* map16 {"k":5} */
  OK("\xc4\x02\x00\x01");                          /* bin8 */
  OK("\xd3\x80\x00\x00\x00\x00\x00\x00\x00");       /* int64 min */
  OK("\x90");                                      /* [] */
}

Test(mpcheck, rejects_truncation_and_trailing_bytes) {
  char err[200];
  BAD("", "truncated");
  BAD("\x93\x01\x02", "array count 3 is larger than the 2 bytes left");
  BAD("\x92\x01\xcd\x01", "truncated");
  BAD("\xcb\x3f\xf0", "truncated");
  BAD("\xa5" "ab", "truncated");
  BAD("\xd9", "truncated");
  BAD("\x01\x02", "1 bytes after");
}

Test(mpcheck, rejects_counts_larger_than_the_bytes_left) {
  char err[200];
  BAD("\xdd\xff\xff\xff\xff", "array count 4294967295 is larger than the 0 bytes left");
  BAD("\xdf\x00\x01\x00\x00\x01", "map count 65536");
  BAD("\x9f\x01", "array count 15");
  BAD("\xdb\x7f\xff\xff\xff" "a", "truncated");
}

Test(mpcheck, rejects_deep_nesting) {
  char err[200], deep[32];
  for (int i = 0; i < 31; i++) deep[i] = (char)0x91;
  deep[31] = 0x01;
  cr_assert_eq(opd__mp_check(deep, 32, OPD_MAX_DEPTH, err, sizeof err),
               OPD_EPROTO);
  cr_assert(strstr(err, "nesting deeper than 8") != NULL, "%s", err);
  /* exactly the limit is fine */
  cr_assert_eq(opd__mp_check(deep + 31 - OPD_MAX_DEPTH, OPD_MAX_DEPTH + 1,
                             OPD_MAX_DEPTH, err, sizeof err),
               0, "%s", err);
}

Test(mpcheck, rejects_unused_and_ext_types) {
  char err[200];
  BAD("\xc1", "0xc1");
  BAD("\xd4\x01\x02", "0xd4");
  BAD("\xc7\x01\x01\x00", "0xc7");
}

/* ---- descriptors ---------------------------------------------------------- */

static msgpack_object unpack(msgpack_sbuffer *sb, msgpack_zone *z) {
  msgpack_object o;
  size_t off = 0;
  cr_assert_eq(msgpack_unpack(sb->data, sb->size, &off, z, &o),
               MSGPACK_UNPACK_SUCCESS);
  return o;
}

Test(desc, pack_then_decode_round_trips) {
  opd_desc_t d = {.arena = 7, .offset = 128, .dtype = OPD_DTYPE_FLOAT32,
                  .rank = 3, .shape = {2, 3, 4}, .strides = {12, 1, 3}};
  msgpack_sbuffer sb;
  msgpack_packer pk;
  msgpack_zone z;
  msgpack_sbuffer_init(&sb);
  msgpack_zone_init(&z, 1024);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  opd__desc_pack(&pk, &d);
  msgpack_object o = unpack(&sb, &z);
  opd_desc_t e;
  char err[200];
  cr_assert_eq(opd__desc_decode(&o, &e, err, sizeof err), 0, "%s", err);
  cr_assert_eq(e.arena, 7);
  cr_assert_eq(e.offset, 128);
  cr_assert_eq(e.rank, 3);
  cr_assert_eq(e.contiguous, 0);
  cr_assert_eq(e.strides[2], 3);
  /* nil strides mean contiguous */
  d.contiguous = 1;
  msgpack_sbuffer_clear(&sb);
  opd__desc_pack(&pk, &d);
  o = unpack(&sb, &z);
  cr_assert_eq(opd__desc_decode(&o, &e, err, sizeof err), 0, "%s", err);
  cr_assert_eq(e.contiguous, 1);
  msgpack_zone_destroy(&z);
  msgpack_sbuffer_destroy(&sb);
}

Test(desc, decode_rejects_bad_encodings) {
  msgpack_sbuffer sb;
  msgpack_packer pk;
  msgpack_zone z;
  opd_desc_t e;
  char err[200];
  msgpack_sbuffer_init(&sb);
  msgpack_zone_init(&z, 1024);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  /* 4 fields */
  msgpack_pack_array(&pk, 4);
  for (int i = 0; i < 4; i++) msgpack_pack_int(&pk, 1);
  msgpack_object o = unpack(&sb, &z);
  cr_assert_eq(opd__desc_decode(&o, &e, err, sizeof err), OPD_EPROTO);
  /* a negative arena id */
  msgpack_sbuffer_clear(&sb);
  msgpack_pack_array(&pk, 5);
  msgpack_pack_int(&pk, -1);
  msgpack_pack_int(&pk, 0);
  msgpack_pack_int(&pk, 1);
  msgpack_pack_array(&pk, 0);
  msgpack_pack_nil(&pk);
  o = unpack(&sb, &z);
  cr_assert_eq(opd__desc_decode(&o, &e, err, sizeof err), OPD_EPROTO);
  cr_assert(strstr(err, "must be unsigned") != NULL, "%s", err);
  /* rank 9 */
  msgpack_sbuffer_clear(&sb);
  msgpack_pack_array(&pk, 5);
  msgpack_pack_int(&pk, 1);
  msgpack_pack_int(&pk, 0);
  msgpack_pack_int(&pk, 1);
  msgpack_pack_array(&pk, 9);
  for (int i = 0; i < 9; i++) msgpack_pack_int(&pk, 1);
  msgpack_pack_nil(&pk);
  o = unpack(&sb, &z);
  cr_assert_eq(opd__desc_decode(&o, &e, err, sizeof err), OPD_ELIMIT);
  cr_assert(strstr(err, "rank 9 exceeds the maximum of 8") != NULL, "%s", err);
  /* strides of the wrong length */
  msgpack_sbuffer_clear(&sb);
  msgpack_pack_array(&pk, 5);
  msgpack_pack_int(&pk, 1);
  msgpack_pack_int(&pk, 0);
  msgpack_pack_int(&pk, 1);
  msgpack_pack_array(&pk, 2);
  msgpack_pack_int(&pk, 2);
  msgpack_pack_int(&pk, 2);
  msgpack_pack_array(&pk, 1);
  msgpack_pack_int(&pk, 1);
  o = unpack(&sb, &z);
  cr_assert_eq(opd__desc_decode(&o, &e, err, sizeof err), OPD_EPROTO);
  msgpack_zone_destroy(&z);
  msgpack_sbuffer_destroy(&sb);
}

static opd_desc_t mk(int dtype, uint64_t offset, int rank, const int64_t *shape,
                     const int64_t *strides) {
  opd_desc_t d = {.arena = 1, .offset = offset, .dtype = dtype, .rank = rank,
                  .contiguous = strides == NULL};
  for (int i = 0; i < rank; i++) {
    d.shape[i] = shape[i];
    if (strides) d.strides[i] = strides[i];
  }
  return d;
}

Test(desc, validate_computes_strides_numel_extent) {
  int64_t sh[3] = {2, 3, 4}, numel;
  uint64_t ext;
  char err[200];
  opd_desc_t d = mk(OPD_DTYPE_FLOAT32, 64, 3, sh, NULL);
  cr_assert_eq(opd__desc_validate(&d, 4096, &numel, &ext, err, sizeof err), 0,
               "%s", err);
  cr_assert_eq(numel, 24);
  cr_assert_eq(ext, 96);
  cr_assert_eq(d.strides[0], 12);
  cr_assert_eq(d.strides[1], 4);
  cr_assert_eq(d.strides[2], 1);
  /* exactly at the end of the arena */
  d = mk(OPD_DTYPE_FLOAT32, 4096 - 96, 3, sh, NULL);
  cr_assert_eq(opd__desc_validate(&d, 4096, &numel, &ext, err, sizeof err), 0);
  /* rank 0: one element */
  d = mk(OPD_DTYPE_INT64, 8, 0, NULL, NULL);
  cr_assert_eq(opd__desc_validate(&d, 16, &numel, &ext, err, sizeof err), 0);
  cr_assert_eq(numel, 1);
  cr_assert_eq(ext, 8);
  /* a zero-size dim: empty, any offset inside the arena is fine */
  int64_t z[2] = {0, 5};
  d = mk(OPD_DTYPE_FLOAT32, 4096, 2, z, NULL);
  cr_assert_eq(opd__desc_validate(&d, 4096, &numel, &ext, err, sizeof err), 0);
  cr_assert_eq(numel, 0);
  cr_assert_eq(ext, 0);
  /* broadcast strides of 0 */
  int64_t bs[2] = {0, 1};
  int64_t bsh[2] = {1000, 4};
  d = mk(OPD_DTYPE_FLOAT32, 0, 2, bsh, bs);
  cr_assert_eq(opd__desc_validate(&d, 16, &numel, &ext, err, sizeof err), 0);
  cr_assert_eq(ext, 16);
  cr_assert(!opd__desc_is_contiguous(&d));
}

Test(desc, validate_rejects_what_it_must) {
  int64_t numel;
  uint64_t ext;
  char err[200];
  int64_t sh[2] = {4, 4};
  opd_desc_t d = mk(OPD_DTYPE_FLOAT32, 4, 2, sh, NULL);
  cr_assert_eq(opd__desc_validate(&d, 64, &numel, &ext, err, sizeof err),
               OPD_EBOUNDS);
  cr_assert(strstr(err, "bytes [4, 4+64) lie outside the arena of 64 bytes"),
            "%s", err);
  d = mk(OPD_DTYPE_FLOAT32, UINT64_MAX - 8, 2, sh, NULL);
  cr_assert_eq(opd__desc_validate(&d, 64, &numel, &ext, err, sizeof err),
               OPD_ELAYOUT); /* misaligned comes first */
  d = mk(OPD_DTYPE_FLOAT32, UINT64_MAX - 15, 2, sh, NULL);
  cr_assert_eq(opd__desc_validate(&d, UINT64_MAX, &numel, &ext, err, sizeof err),
               OPD_EBOUNDS, "offset + extent wraps around");
  int64_t huge[3] = {1ll << 40, 1ll << 40, 1};
  d = mk(OPD_DTYPE_FLOAT32, 0, 3, huge, NULL);
  cr_assert_eq(opd__desc_validate(&d, 64, &numel, &ext, err, sizeof err),
               OPD_EOVERFLOW);
  int64_t big_stride[2] = {INT64_MAX / 2, 1};
  d = mk(OPD_DTYPE_FLOAT32, 0, 2, sh, big_stride);
  cr_assert_eq(opd__desc_validate(&d, 64, &numel, &ext, err, sizeof err),
               OPD_EOVERFLOW);
  int64_t neg[2] = {-1, 4};
  d = mk(OPD_DTYPE_FLOAT32, 0, 2, neg, NULL);
  cr_assert_eq(opd__desc_validate(&d, 64, &numel, &ext, err, sizeof err),
               OPD_ESHAPE);
  int64_t neg_stride[2] = {4, -1};
  d = mk(OPD_DTYPE_FLOAT32, 0, 2, sh, neg_stride);
  cr_assert_eq(opd__desc_validate(&d, 64, &numel, &ext, err, sizeof err),
               OPD_ELAYOUT);
  d = mk(99, 0, 2, sh, NULL);
  cr_assert_eq(opd__desc_validate(&d, 64, &numel, &ext, err, sizeof err),
               OPD_EDTYPE);
  d = mk(OPD_DTYPE_FLOAT64, 4, 2, sh, NULL);
  cr_assert_eq(opd__desc_validate(&d, 4096, &numel, &ext, err, sizeof err),
               OPD_ELAYOUT);
  cr_assert(strstr(err, "not aligned to the 8-byte float64"), "%s", err);
}

/* ---- names ----------------------------------------------------------------- */

Test(names, tables_come_from_the_x_macros) {
  cr_assert_str_eq(opd__errname(OPD_EDTYPE), "EDTYPE");
  cr_assert_str_eq(opd__errdefault(OPD_EBOUNDS), "tensor extends outside its arena");
  cr_assert_str_eq(opd__errname(-999), "unknown");
  cr_assert_str_eq(opd__dtype_name(OPD_DTYPE_BFLOAT16), "bfloat16");
  cr_assert_eq(opd__dtype_from_name("int64"), OPD_DTYPE_INT64);
  cr_assert_eq(opd__dtype_from_name("float128"), 0);
  cr_assert_str_eq(opd__msg_name(OPD_MSG_ARENA_REGISTER), "arena_register");
  cr_assert_str_eq(opd__attr_type_name(OPD_ATTR_INTS), "ints");
}
