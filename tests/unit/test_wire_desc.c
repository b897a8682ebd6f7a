/* Unit: the msgpack encoder against msgpack-c, descriptor encoding,
 * decoding and validation, the name tables (common/wire.c). The frames
 * and the decoder: test_wire.c. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"

/* ---- msgpack encoding ------------------------------------------------------ */

/* The in-place encoders write byte for byte what msgpack-c's packer does. */
#define SAME_AS_MSGPACK_C(put, pack)                                      \
  do {                                                                    \
    unsigned char mine[64];                                               \
    size_t len_ = (size_t)(put - mine);                                   \
    msgpack_sbuffer_clear(&sb);                                           \
    pack;                                                                 \
    cr_assert_eq(len_, sb.size, "%s: %zu bytes, msgpack-c %zu", #put,     \
                 len_, sb.size);                                          \
    cr_assert_eq(memcmp(mine, sb.data, len_), 0, "%s", #put);             \
  } while (0)

Test(mpput, scalars_and_headers_match_msgpack_c) {
  static const int64_t ints[] = {
      0, 1, 31, 32, 127, 128, 255, 256, 65535, 65536, 4294967295ll,
      4294967296ll, INT64_MAX, -1, -31, -32, -33, -127, -128, -129, -32767,
      -32768, -32769, -2147483647ll, INT32_MIN, (int64_t)INT32_MIN - 1,
      INT64_MIN + 1, INT64_MIN};
  static const uint64_t uints[] = {0, 127, 128, 255, 256, 65535, 65536,
                                   4294967295ull, 4294967296ull, UINT64_MAX};
  static const uint32_t counts[] = {0, 1, 15, 16, 31, 32, 255, 256, 65535,
                                    65536, 4294967295u};
  static const double doubles[] = {0.0, -0.0, 1.5, -2.25e300, 1e-310};
  msgpack_sbuffer sb;
  msgpack_packer pk;
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
    int64_t v = ints[i];
    SAME_AS_MSGPACK_C(opd__mp_put_int(mine, v), msgpack_pack_int64(&pk, v));
    if (v >= INT32_MIN && v <= INT32_MAX)
      SAME_AS_MSGPACK_C(opd__mp_put_int(mine, v), msgpack_pack_int(&pk, (int)v));
  }
  for (size_t i = 0; i < sizeof uints / sizeof uints[0]; i++) {
    uint64_t v = uints[i];
    SAME_AS_MSGPACK_C(opd__mp_put_uint(mine, v), msgpack_pack_uint64(&pk, v));
    if (v <= UINT32_MAX)
      SAME_AS_MSGPACK_C(opd__mp_put_uint(mine, v),
                        msgpack_pack_uint32(&pk, (uint32_t)v));
  }
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
    uint32_t c = counts[i];
    SAME_AS_MSGPACK_C(opd__mp_put_str(mine, c), msgpack_pack_str(&pk, c));
    SAME_AS_MSGPACK_C(opd__mp_put_array(mine, c), msgpack_pack_array(&pk, c));
    SAME_AS_MSGPACK_C(opd__mp_put_map(mine, c), msgpack_pack_map(&pk, c));
  }
  for (size_t i = 0; i < sizeof doubles / sizeof doubles[0]; i++)
    SAME_AS_MSGPACK_C(opd__mp_put_double(mine, doubles[i]),
                      msgpack_pack_double(&pk, doubles[i]));
  msgpack_sbuffer_destroy(&sb);
}

Test(mpput, descriptors_match_msgpack_c) {
  msgpack_sbuffer sb;
  msgpack_packer pk;
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  int64_t shape[OPD_MAX_RANK], strides[OPD_MAX_RANK];
  for (int i = 0; i < OPD_MAX_RANK; i++)
    shape[i] = (int64_t)1 << (7 * i), strides[i] = -((int64_t)1 << (8 * i));
  for (int rank = 0; rank <= OPD_MAX_RANK; rank++) {
    for (int strided = 0; strided < 2; strided++) {
      unsigned char mine[OPD_MP_DESC_MAX];
      size_t n = (size_t)(opd__mp_put_desc(mine, UINT64_MAX, 4096, -1, rank,
                                           shape, strided ? strides : NULL) -
                          mine);
      cr_assert_leq(n, sizeof mine);
      msgpack_sbuffer_clear(&sb);
      msgpack_pack_array(&pk, 5);
      msgpack_pack_uint64(&pk, UINT64_MAX);
      msgpack_pack_uint64(&pk, 4096);
      msgpack_pack_uint32(&pk, (uint32_t)-1);
      msgpack_pack_array(&pk, (size_t)rank);
      for (int i = 0; i < rank; i++) msgpack_pack_int64(&pk, shape[i]);
      if (strided) {
        msgpack_pack_array(&pk, (size_t)rank);
        for (int i = 0; i < rank; i++) msgpack_pack_int64(&pk, strides[i]);
      } else {
        msgpack_pack_nil(&pk);
      }
      cr_assert_eq(n, sb.size, "rank %d", rank);
      cr_assert_eq(memcmp(mine, sb.data, n), 0, "rank %d", rank);
    }
  }
  msgpack_sbuffer_destroy(&sb);
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

/* opd__mp_get_uint reads back every width opd__mp_put_uint writes, and
 * refuses what is not an unsigned integer or does not fit in the bytes. */
Test(mpput, get_uint_reads_every_width_and_refuses_the_rest) {
  const uint64_t vals[] = {0, 1, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x10000,
                           0xffffffffull, 0x100000000ull, UINT64_MAX};
  for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
    unsigned char buf[OPD_MP_PUT_MAX];
    size_t n = (size_t)(opd__mp_put_uint(buf, vals[i]) - buf);
    uint64_t v = 12345;
    cr_assert_eq(opd__mp_get_uint(buf, n, &v), n, "width of %llu",
                 (unsigned long long)vals[i]);
    cr_assert_eq(v, vals[i]);
    if (n > 1) cr_assert_eq(opd__mp_get_uint(buf, n - 1, &v), 0, "truncated");
  }
  uint64_t v;
  const unsigned char neg[] = {0xff}, str[] = {0xa1, 'x'}, i8[] = {0xd0, 1};
  cr_assert_eq(opd__mp_get_uint(neg, 1, &v), 0);
  cr_assert_eq(opd__mp_get_uint(str, 2, &v), 0);
  cr_assert_eq(opd__mp_get_uint(i8, 2, &v), 0);
  cr_assert_eq(opd__mp_get_uint(neg, 0, &v), 0);
}
