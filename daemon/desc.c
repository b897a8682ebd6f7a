/* Tensor descriptor validation: the daemon's bounds, overflow and layout
 * checks on a descriptor after it has been copied out of the request.
 *
 * DESIGN
 * Every size computation uses checked arithmetic (__builtin_*_overflow) so
 * that no shape or stride a client sends can wrap around and pass a bounds
 * check it should fail. Declared in common/wire.h next to the descriptor.
 */
#include <stdarg.h>
#include <stdio.h>

#include "common/wire.h"
#include "kernels/common/kutil.h"

static void seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

int opd__desc_is_contiguous(const opd_desc_t *d) {
  /* the strides opd__desc_validate fills for a contiguous tensor: a zero
   * dimension counts as 1, so an empty tensor's own strides pass too; a
   * product past INT64_MAX matches no stride (only size-1 dimensions may
   * follow it) */
  int64_t expect = 1;
  int big = 0;
  for (int i = d->rank - 1; i >= 0; i--) {
    if (d->shape[i] == 1) continue;
    if (big || d->strides[i] != expect) return 0;
    if (d->shape[i] > 1 && __builtin_mul_overflow(expect, d->shape[i], &expect))
      big = 1;
  }
  return 1;
}

int opd__desc_validate(opd_desc_t *d, uint64_t arena_size, int64_t *numel,
                       uint64_t *extent, char *err, size_t errlen) {
  int esize = (int)opd__dtype_size(d->dtype);
  char sbuf[160];

  if (esize == 0) {
    seterr(err, errlen, "unknown dtype %d", d->dtype);
    return OPD_EDTYPE;
  }
  if (d->rank < 0 || d->rank > OPD_MAX_RANK) {
    seterr(err, errlen, "rank %d exceeds the maximum of %d", d->rank,
           OPD_MAX_RANK);
    return OPD_ELIMIT;
  }
  /* n: the product of the non-zero dimensions, checked so that n * esize
   * fits in an int64_t. An empty tensor (a zero dimension) is bounded the
   * same way: its other dimensions could not be sent in a non-empty one,
   * and the contiguous strides below are products of them. */
  uint64_t n = 1;
  int empty = 0;
  for (int i = 0; i < d->rank; i++) {
    if (d->shape[i] < 0) {
      seterr(err, errlen, "negative dimension in shape %s",
             opd__shape_str(sbuf, sizeof sbuf, d->shape, d->rank));
      return OPD_ESHAPE;
    }
  }
  for (int i = 0; i < d->rank; i++) {
    if (d->shape[i] == 0) {
      empty = 1;
      continue;
    }
    if (__builtin_mul_overflow(n, (uint64_t)d->shape[i], &n) ||
        n > (uint64_t)INT64_MAX / (uint64_t)esize) {
      seterr(err, errlen, "shape %s overflows the size computation",
             opd__shape_str(sbuf, sizeof sbuf, d->shape, d->rank));
      return OPD_EOVERFLOW;
    }
  }
  if (d->contiguous) {
    /* suffix products of the non-zero dimensions: each divides n, so none
     * overflows; checked all the same */
    int64_t s = 1;
    for (int i = d->rank - 1; i >= 0; i--) {
      d->strides[i] = s;
      if (d->shape[i] > 1 && __builtin_mul_overflow(s, d->shape[i], &s)) {
        seterr(err, errlen, "shape %s overflows the stride computation",
               opd__shape_str(sbuf, sizeof sbuf, d->shape, d->rank));
        return OPD_EOVERFLOW;
      }
    }
  }
  /* span = 1 + sum (shape-1)*stride elements, extent = span * esize bytes;
   * an empty tensor's strides are held to the same bound with its zero
   * dimensions taken as 1, and it spans no bytes */
  uint64_t span = 0;
  for (int i = 0; i < d->rank; i++) {
    if (d->strides[i] < 0) {
      seterr(err, errlen, "negative stride %lld in dimension %d",
             (long long)d->strides[i], i);
      return OPD_ELAYOUT;
    }
  }
  for (int i = 0; i < d->rank; i++) {
    uint64_t t;
    uint64_t reach = d->shape[i] > 0 ? (uint64_t)d->shape[i] - 1 : 0;
    if (__builtin_mul_overflow(reach, (uint64_t)d->strides[i], &t) ||
        __builtin_add_overflow(span, t, &span)) {
      seterr(err, errlen, "strides overflow the size computation");
      return OPD_EOVERFLOW;
    }
  }
  if (__builtin_add_overflow(span, 1, &span) ||
      __builtin_mul_overflow(span, (uint64_t)esize, &span) ||
      span > (uint64_t)INT64_MAX) {
    seterr(err, errlen, "strides overflow the size computation");
    return OPD_EOVERFLOW;
  }
  if (empty) span = 0;
  if (d->offset % (uint64_t)esize != 0) {
    seterr(err, errlen, "offset %llu is not aligned to the %d-byte %s",
           (unsigned long long)d->offset, esize, opd__dtype_name(d->dtype));
    return OPD_ELAYOUT;
  }
  uint64_t last;
  if (__builtin_add_overflow(d->offset, span, &last) || last > arena_size ||
      d->offset > arena_size) {
    seterr(err, errlen,
           "bytes [%llu, %llu+%llu) lie outside the arena of %llu bytes",
           (unsigned long long)d->offset, (unsigned long long)d->offset,
           (unsigned long long)span, (unsigned long long)arena_size);
    return OPD_EBOUNDS;
  }
  *numel = empty ? 0 : (int64_t)n;
  *extent = span;
  return 0;
}
