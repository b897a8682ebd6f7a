/* Unit: descriptor validation at the edges of the size computation: empty
 * tensors with huge other dimensions, strides near INT64_MAX, contiguity of
 * shapes whose products overflow. Each case here once passed a check it
 * should fail or overflowed a signed multiply (UBSan); run it
 * under ASAN=1 with UBSAN_OPTIONS=halt_on_error=1 to see the UB gone. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "common/wire.h"

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

#define VALIDATE(d, arena) \
  opd__desc_validate(&(d), (arena), &numel, &ext, err, sizeof err)

Test(desc_edges, empty_tensor_with_huge_dims_overflows_like_a_full_one) {
  int64_t numel = -1;
  uint64_t ext = 1;
  char err[200] = "";
  /* the contiguous strides of (0, 2^62, 2^62) are 2^124: a signed
   * overflow in the stride loop before the fix */
  int64_t a[3] = {0, 1ll << 62, 1ll << 62};
  opd_desc_t d = mk(OPD_DTYPE_FLOAT32, 0, 3, a, NULL);
  cr_assert_eq(VALIDATE(d, 4096), OPD_EOVERFLOW, "%s", err);
  cr_assert(strstr(err, "overflows the size computation"), "%s", err);
  /* zero last: the same product, reached through the other order */
  int64_t b[3] = {1ll << 62, 1ll << 62, 0};
  d = mk(OPD_DTYPE_FLOAT32, 0, 3, b, NULL);
  cr_assert_eq(VALIDATE(d, 4096), OPD_EOVERFLOW, "%s", err);
  /* one non-zero dimension of INT64_MAX elements: INT64_MAX * 4 bytes do
   * not fit, empty or not (the element-count check skipped before) */
  int64_t c[2] = {0, INT64_MAX};
  d = mk(OPD_DTYPE_FLOAT32, 0, 2, c, NULL);
  cr_assert_eq(VALIDATE(d, 4096), OPD_EOVERFLOW, "%s", err);
  int64_t full[1] = {INT64_MAX};
  d = mk(OPD_DTYPE_FLOAT32, 0, 1, full, NULL);
  cr_assert_eq(VALIDATE(d, UINT64_MAX), OPD_EOVERFLOW, "%s", err);
  /* 2^31 * 2^31 elements: no multiply wraps, but the bytes exceed int64 */
  int64_t e[3] = {1ll << 31, 0, 1ll << 31};
  d = mk(OPD_DTYPE_FLOAT32, 0, 3, e, NULL);
  cr_assert_eq(VALIDATE(d, 4096), OPD_EOVERFLOW, "%s", err);
}

Test(desc_edges, bounded_empty_tensor_is_accepted_with_exact_strides) {
  int64_t numel = -1;
  uint64_t ext = 1;
  char err[200] = "";
  /* (2^20, 0, 2^20, 3) float32: 3 * 2^40 * 4 bytes if it were full, which
   * fits; empty, it spans nothing */
  int64_t sh[4] = {1ll << 20, 0, 1ll << 20, 3};
  opd_desc_t d = mk(OPD_DTYPE_FLOAT32, 64, 4, sh, NULL);
  cr_assert_eq(VALIDATE(d, 64), 0, "%s", err);
  cr_assert_eq(numel, 0);
  cr_assert_eq(ext, 0);
  cr_assert_eq(d.strides[3], 1);
  cr_assert_eq(d.strides[2], 3);
  cr_assert_eq(d.strides[1], 3ll << 20); /* a zero dimension counts as 1 */
  cr_assert_eq(d.strides[0], 3ll << 20);
  cr_assert(opd__desc_is_contiguous(&d), "its own strides are contiguous");
  /* the offset of an empty tensor still lies inside the arena */
  d = mk(OPD_DTYPE_FLOAT32, 68, 4, sh, NULL);
  cr_assert_eq(VALIDATE(d, 64), OPD_EBOUNDS, "%s", err);
  /* the largest non-zero product that fits: INT64_MAX / 8 float64s */
  int64_t m[2] = {INT64_MAX / 8, 0};
  d = mk(OPD_DTYPE_FLOAT64, 0, 2, m, NULL);
  cr_assert_eq(VALIDATE(d, 0), 0, "%s", err);
  cr_assert_eq(numel, 0);
  cr_assert_eq(d.strides[0], 1);
  int64_t m1[2] = {INT64_MAX / 8 + 1, 0};
  d = mk(OPD_DTYPE_FLOAT64, 0, 2, m1, NULL);
  cr_assert_eq(VALIDATE(d, 0), OPD_EOVERFLOW, "%s", err);
}

Test(desc_edges, empty_tensor_strides_are_checked) {
  int64_t numel = -1;
  uint64_t ext = 1;
  char err[200] = "";
  int64_t sh[2] = {0, 4};
  /* a negative stride is refused whatever the shape (was skipped) */
  int64_t neg[2] = {4, -1};
  opd_desc_t d = mk(OPD_DTYPE_FLOAT32, 0, 2, sh, neg);
  cr_assert_eq(VALIDATE(d, 4096), OPD_ELAYOUT, "%s", err);
  cr_assert(strstr(err, "negative stride -1 in dimension 1"), "%s", err);
  /* 3 * INT64_MAX elements of reach: the bound of a non-empty tensor */
  int64_t big[2] = {1, INT64_MAX};
  d = mk(OPD_DTYPE_FLOAT32, 0, 2, sh, big);
  cr_assert_eq(VALIDATE(d, 4096), OPD_EOVERFLOW, "%s", err);
  /* strides that reach 3 * 2^62 bytes: no wrap in uint64, but too far
   * for the kernels' int64 offsets */
  int64_t far[2] = {1, 1ll << 60};
  d = mk(OPD_DTYPE_FLOAT32, 0, 2, sh, far);
  cr_assert_eq(VALIDATE(d, 4096), OPD_EOVERFLOW, "%s", err);
  /* in range: accepted, nothing spanned */
  int64_t ok[2] = {4, 1};
  d = mk(OPD_DTYPE_FLOAT32, 4096, 2, sh, ok);
  cr_assert_eq(VALIDATE(d, 4096), 0, "%s", err);
  cr_assert_eq(numel, 0);
  cr_assert_eq(ext, 0);
}

Test(desc_edges, non_empty_extent_fits_in_int64) {
  int64_t numel = -1;
  uint64_t ext = 1;
  char err[200] = "";
  /* broadcast (stride 0) rows reach little; a stride of 2^61 float32s
   * reaches 2^63 bytes: refused even against an unbounded arena (infer) */
  int64_t sh[2] = {2, 2};
  int64_t st[2] = {1ll << 61, 1};
  opd_desc_t d = mk(OPD_DTYPE_FLOAT32, 0, 2, sh, st);
  cr_assert_eq(VALIDATE(d, UINT64_MAX), OPD_EOVERFLOW, "%s", err);
  int64_t st2[2] = {1ll << 40, 1};
  d = mk(OPD_DTYPE_FLOAT32, 0, 2, sh, st2);
  cr_assert_eq(VALIDATE(d, UINT64_MAX), 0, "%s", err);
  cr_assert_eq(numel, 4);
  cr_assert_eq(ext, ((1ull << 40) + 2) * 4);
}

Test(desc_edges, is_contiguous_never_overflows) {
  /* not validated: the check alone must stay defined for any shape */
  int64_t sh[3] = {2, 1ll << 62, 1ll << 62};
  int64_t st[3] = {0, 1ll << 62, 1};
  opd_desc_t d = mk(OPD_DTYPE_FLOAT32, 0, 3, sh, st);
  cr_assert(!opd__desc_is_contiguous(&d));
  int64_t sh2[3] = {1, INT64_MAX, 2};
  int64_t st2[3] = {7, 2, 1};
  d = mk(OPD_DTYPE_UINT8, 0, 3, sh2, st2);
  cr_assert(opd__desc_is_contiguous(&d), "a size-1 dimension's stride is free");
  int64_t sh3[2] = {3, 2};
  int64_t st3[2] = {2, 1};
  d = mk(OPD_DTYPE_UINT8, 0, 2, sh3, st3);
  cr_assert(opd__desc_is_contiguous(&d));
  st3[0] = 3;
  d = mk(OPD_DTYPE_UINT8, 0, 2, sh3, st3);
  cr_assert(!opd__desc_is_contiguous(&d));
}
