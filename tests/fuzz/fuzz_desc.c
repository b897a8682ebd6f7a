/* libFuzzer target: tensor descriptors, from the wire to a validated view
 * (common/wire.c opd__desc_decode, daemon/desc.c opd__desc_validate and
 * opd__desc_is_contiguous).
 *
 * DESIGN
 * Input: byte 0 picks the mode and the arena size; bytes 1..8 are an
 * offset override for raw mode.
 *  - mode 0 (msgpack): the rest is a msgpack payload, decoded like a
 *    request (opd__mp_decode) and then as a descriptor; a decoded
 *    descriptor must survive pack -> decode unchanged (opd__desc_pack and
 *    opd__mp_put_desc must write the same bytes);
 *  - mode 1 (raw): the rest fills rank, dtype, contiguous, shape and
 *    strides directly, so that the fuzzer reaches INT64_MAX-sized fields
 *    without going through msgpack's integer forms.
 * Every descriptor is then validated against an arena of the chosen size
 * and the verdict compared with ref_validate(), a reference written here
 * in saturating 128-bit arithmetic: accept exactly the same descriptors,
 * give the same numel, extent and contiguous strides. On an accepted one
 * the invariants the kernels rely on are checked: extent within the arena,
 * numel consistent with the shape, numel * esize and extent inside int64,
 * filled strides contiguous, strides never negative.
 */
#include <msgpack.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"
#include "kernels/common/kutil.h"

#define FUZZ_TARGET "fuzz_desc"
#include "tests/fuzz/fuzz.h"

typedef unsigned __int128 u128;
#define SAT ((u128)1 << 100) /* far above any int64 product we compare */

static u128 mul_sat(u128 a, u128 b) {
  if (a == 0 || b == 0) return 0;
  if (a >= SAT || b >= SAT || a > SAT / b) return SAT;
  return a * b;
}
static u128 add_sat(u128 a, u128 b) {
  return a >= SAT || b >= SAT || a + b >= SAT ? SAT : a + b;
}

/* The reference verdict: 0 or the error class the daemon must return. */
static int ref_validate(const opd_desc_t *d, uint64_t arena, int64_t *numel,
                        uint64_t *extent, int64_t *strides) {
  int esize = (int)opd__dtype_size(d->dtype);
  if (esize == 0) return OPD_EDTYPE;
  if (d->rank < 0 || d->rank > OPD_MAX_RANK) return OPD_ELIMIT;
  u128 n = 1;
  int empty = 0;
  for (int i = 0; i < d->rank; i++) {
    if (d->shape[i] < 0) return OPD_ESHAPE;
    if (d->shape[i] == 0) empty = 1;
    else n = mul_sat(n, (u128)d->shape[i]);
  }
  if (mul_sat(n, (u128)esize) > (u128)INT64_MAX) return OPD_EOVERFLOW;
  memcpy(strides, d->strides, sizeof d->strides);
  if (d->contiguous) {
    u128 s = 1;
    for (int i = d->rank - 1; i >= 0; i--) {
      strides[i] = (int64_t)s;
      if (d->shape[i] > 1) s = mul_sat(s, (u128)d->shape[i]);
    }
  }
  u128 span = 0;
  for (int i = 0; i < d->rank; i++) {
    if (strides[i] < 0) return OPD_ELAYOUT;
    u128 reach = d->shape[i] > 0 ? (u128)d->shape[i] - 1 : 0;
    span = add_sat(span, mul_sat(reach, (u128)strides[i]));
  }
  span = mul_sat(add_sat(span, 1), (u128)esize);
  if (span > (u128)INT64_MAX) return OPD_EOVERFLOW;
  if (empty) span = 0;
  if (d->offset % (uint64_t)esize != 0) return OPD_ELAYOUT;
  if ((u128)d->offset + span > (u128)arena) return OPD_EBOUNDS;
  *numel = empty ? 0 : (int64_t)n;
  *extent = (uint64_t)span;
  return 0;
}

static void check_validate(opd_desc_t d, uint64_t arena) {
  opd_desc_t in = d;
  int64_t numel = -7, ref_numel = -7, ref_strides[OPD_MAX_RANK];
  uint64_t extent = 7, ref_extent = 7;
  char err[200] = "";
  int rc = opd__desc_validate(&d, arena, &numel, &extent, err, sizeof err);
  int ref = ref_validate(&in, arena, &ref_numel, &ref_extent, ref_strides);
  CHECK(rc == ref, "validate says %d (%s), the reference %d", rc, err, ref);
  if (rc != 0) {
    CHECK(err[0] != '\0', "a refusal without a reason");
    return;
  }
  /* accepted: exactly the reference's figures */
  CHECK(numel == ref_numel, "numel %lld, expected %lld", (long long)numel,
        (long long)ref_numel);
  CHECK(extent == ref_extent, "extent %llu, expected %llu",
        (unsigned long long)extent, (unsigned long long)ref_extent);
  CHECK(memcmp(d.strides, ref_strides, sizeof(int64_t) * (size_t)d.rank) == 0,
        "strides differ from the reference");
  CHECK(memcmp(d.shape, in.shape, sizeof d.shape) == 0 &&
            d.offset == in.offset && d.dtype == in.dtype && d.rank == in.rank,
        "validate changed more than the strides");
  /* the invariants the kernels rely on */
  size_t esize = opd__dtype_size(d.dtype);
  CHECK(numel >= 0 && (u128)numel * esize <= (u128)INT64_MAX, "numel range");
  CHECK(extent <= (uint64_t)INT64_MAX, "extent range");
  CHECK(d.offset <= arena && extent <= arena - d.offset,
        "extent outside the arena");
  CHECK((numel == 0) == (extent == 0), "empty iff no bytes spanned");
  if (numel > 0) CHECK(extent >= esize, "a non-empty tensor spans an element");
  for (int i = 0; i < d.rank; i++) CHECK(d.strides[i] >= 0, "negative stride");
  if (d.contiguous) {
    CHECK(opd__desc_is_contiguous(&d), "filled strides are not contiguous");
    if (numel > 0) CHECK(extent == (uint64_t)numel * esize, "dense extent");
  }
  /* the last element's byte is the extent's last byte */
  if (numel > 0) {
    u128 last = 0;
    for (int i = 0; i < d.rank; i++)
      last += (u128)(d.shape[i] - 1) * (u128)d.strides[i];
    CHECK((last + 1) * esize == extent, "extent is not the last element's end");
  }
}

static void check_roundtrip(const opd_desc_t *d) {
  unsigned char a[OPD_MP_DESC_MAX];
  unsigned char *end = opd__mp_put_desc(a, d->arena, d->offset, d->dtype,
                                        d->rank, d->shape,
                                        d->contiguous ? NULL : d->strides);
  size_t alen = (size_t)(end - a);
  CHECK(alen <= sizeof a, "put_desc wrote %zu bytes", alen);
  msgpack_sbuffer sb;
  msgpack_packer pk;
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  opd__desc_pack(&pk, d);
  CHECK(sb.size == alen && memcmp(sb.data, a, alen) == 0,
        "desc_pack and put_desc differ");
  msgpack_sbuffer_destroy(&sb);
  opd_mp_arena_t arena;
  msgpack_object o;
  opd_desc_t back;
  char err[200];
  opd__mp_arena_init(&arena);
  CHECK(opd__mp_decode(&arena, a, alen, OPD_MAX_DEPTH, &o, err, sizeof err) == 0,
        "a packed descriptor does not decode: %s", err);
  CHECK(opd__desc_decode(&o, &back, err, sizeof err) == 0,
        "a packed descriptor is refused: %s", err);
  CHECK(back.arena == d->arena && back.offset == d->offset &&
            back.dtype == d->dtype && back.rank == d->rank &&
            back.contiguous == d->contiguous &&
            memcmp(back.shape, d->shape, sizeof(int64_t) * (size_t)d->rank) == 0 &&
            (d->contiguous ||
             memcmp(back.strides, d->strides,
                    sizeof(int64_t) * (size_t)d->rank) == 0),
        "pack -> decode changed the descriptor");
  opd__mp_arena_destroy(&arena);
}

static uint64_t rd64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 9) return 0;
  /* arena sizes: small, page-ish, large, unbounded (infer) */
  static const uint64_t arenas[8] = {0, 1, 64, 4096, 1u << 20, 1ull << 40,
                                     (uint64_t)INT64_MAX, UINT64_MAX};
  int mode = data[0] & 1;
  uint64_t arena = arenas[(data[0] >> 1) & 7];
  uint64_t offset = rd64(data + 1);
  data += 9;
  size -= 9;

  if (mode == 0) {
    unsigned char *copy = malloc(size ? size : 1);
    if (copy == NULL) return 0;
    memcpy(copy, data, size);
    opd_mp_arena_t ma;
    msgpack_object o;
    char err[200];
    opd__mp_arena_init(&ma);
    if (opd__mp_decode(&ma, copy, size, OPD_MAX_DEPTH, &o, err, sizeof err) ==
        0) {
      opd_desc_t d;
      int rc = opd__desc_decode(&o, &d, err, sizeof err);
      CHECK(rc == 0 || rc == OPD_EPROTO || rc == OPD_ELIMIT, "decode rc %d", rc);
      if (rc == 0) {
        CHECK(d.rank >= 0 && d.rank <= OPD_MAX_RANK, "rank %d", d.rank);
        CHECK(d.dtype >= 0 && d.dtype <= 255, "dtype %d", d.dtype);
        check_roundtrip(&d);
        check_validate(d, arena);
      } else {
        CHECK(err[0] != '\0', "a refusal without a reason");
      }
    }
    opd__mp_arena_destroy(&ma);
    free(copy);
    return 0;
  }

  /* raw: rank, dtype, contiguous, then up to 8 shape and 8 stride words */
  if (size < 2) return 0;
  opd_desc_t d;
  memset(&d, 0, sizeof d);
  d.arena = 1;
  d.offset = offset;
  d.rank = data[0] % (OPD_MAX_RANK + 2) - (data[0] >= 250); /* 9, or -1 */
  d.dtype = data[1] % 11;
  d.contiguous = (data[1] >> 4) & 1;
  data += 2;
  size -= 2;
  for (int i = 0; i < OPD_MAX_RANK && size >= 8; i++, data += 8, size -= 8)
    memcpy(&d.shape[i], data, 8);
  for (int i = 0; i < OPD_MAX_RANK && size >= 8; i++, data += 8, size -= 8)
    memcpy(&d.strides[i], data, 8);
  /* small dims are the interesting ones next to a huge one */
  for (int i = 0; i < OPD_MAX_RANK; i++)
    if ((d.shape[i] & 0x7f00000000000000ll) == 0x7f00000000000000ll)
      d.shape[i] &= 0xff;
  if (d.rank >= 0 && d.rank <= OPD_MAX_RANK && d.dtype > 0 && d.dtype <= 9 &&
      d.rank > 0)
    (void)opd__desc_is_contiguous(&d); /* defined for any shape */
  check_validate(d, arena);
  return 0;
}
