/* The strided-to-strided copy behind the daemon's gather and scatter of
 * strided tensors (kernels/copy/copy.h), against an element-by-element
 * reference: src and dst each transposed, stepped, sliced (src also
 * broadcast), every element size, serial and on the pool; the bytes of dst
 * between its elements stay as they were. */
#include <string.h>

#include "kernels/common/kutil.h"
#include "kernels/copy/copy.h"
#include "tests/ops/optest.h"

static void view(opd_tview_t *v, int32_t dt, int rank, const int64_t *shape,
                 const int64_t *strides, void *data) {
  memset(v, 0, sizeof *v);
  v->data = data, v->dtype = dt, v->rank = rank, v->numel = 1;
  for (int d = 0; d < rank; d++) {
    v->shape[d] = shape[d], v->strides[d] = strides[d];
    v->numel *= shape[d];
  }
}

/* dst = src element by element, by full multi-index. */
static void reference(const opd_tview_t *dst, const opd_tview_t *src) {
  size_t esz = opd__dtype_size(src->dtype);
  int64_t idx[OPD_MAX_RANK] = {0};
  for (int64_t e = 0; e < src->numel; e++) {
    int64_t so = 0, dof = 0;
    for (int d = 0; d < src->rank; d++)
      so += idx[d] * src->strides[d], dof += idx[d] * dst->strides[d];
    memcpy((char *)dst->data + dof * (int64_t)esz,
           (const char *)src->data + so * (int64_t)esz, esz);
    for (int d = src->rank - 1; d >= 0; d--) {
      if (++idx[d] < src->shape[d]) break;
      idx[d] = 0;
    }
  }
}

Test(copy_views, strided_to_strided) {
  static uint8_t src[1 << 18], want[1 << 17], got[1 << 17];
  for (size_t i = 0; i < sizeof src; i++) src[i] = (uint8_t)(i * 131 + 7);
  int32_t dts[] = {OPD_DTYPE_INT8, OPD_DTYPE_FLOAT16, OPD_DTYPE_FLOAT32,
                   OPD_DTYPE_INT64};
  struct {
    int rank;
    int64_t shape[3], ss[3], ds[3];
  } cases[] = {
      {2, {5, 7}, {1, 5}, {16, 2}},          /* transpose into a stepped slice */
      {2, {6, 9}, {9, 1}, {1, 6}},           /* contiguous into a transpose */
      {3, {3, 4, 5}, {0, 5, 1}, {60, 15, 3}}, /* broadcast into steps */
      {2, {8, 3}, {6, 2}, {3, 1}},           /* steps into contiguous */
      {2, {40, 30}, {30, 1}, {64, 1}},       /* rows into wider rows */
      {1, {1000}, {1}, {1}},                 /* one memcpy */
      {2, {300, 33}, {66, 2}, {1, 300}},     /* enough rows for the pool */
      {2, {0, 5}, {5, 1}, {5, 1}},           /* empty */
      {2, {40, 70}, {1, 40}, {70, 1}},       /* transpose gather: tiles */
      {2, {40, 70}, {70, 1}, {1, 40}},       /* transpose scatter: tiles */
      {3, {4, 50, 45}, {50, 1, 200}, {2250, 45, 1}}, /* permute: tiles */
      {2, {64, 48}, {1, 64}, {48, 1}},       /* gather, whole 8 x 8 blocks */
      {2, {48, 64}, {64, 1}, {1, 48}},       /* scatter, whole 8 x 8 blocks */
      {3, {2, 24, 40}, {960, 1, 24}, {960, 40, 1}}, /* blocks and a tail */
  };
  for (int pool = 0; pool < 2; pool++)
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
      for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        opd_tview_t s, w, g;
        for (size_t i = 0; i < sizeof want; i++) want[i] = got[i] = (uint8_t)(i * 7);
        view(&s, dts[d], cases[k].rank, cases[k].shape, cases[k].ss, src);
        view(&w, dts[d], cases[k].rank, cases[k].shape, cases[k].ds, want);
        view(&g, dts[d], cases[k].rank, cases[k].shape, cases[k].ds, got);
        reference(&w, &s);
        cr_assert_eq(opd__copy_views_cpu(pool ? ot_pool(2) : &opd__exec_serial, &g, &s), 0);
        cr_assert(memcmp(got, want, sizeof got) == 0, "case %zu dtype %d pool %d", k,
                  dts[d], pool);
      }
}

Test(copy_views, mismatch_refused) {
  float a[4] = {0}, b[4] = {0};
  opd_tview_t s, d;
  view(&s, OPD_DTYPE_FLOAT32, 1, (int64_t[]){4}, (int64_t[]){1}, a);
  view(&d, OPD_DTYPE_FLOAT32, 2, (int64_t[]){2, 2}, (int64_t[]){2, 1}, b);
  cr_assert_eq(opd__copy_views_cpu(&opd__exec_serial, &d, &s), OPD_EINVAL);
  view(&d, OPD_DTYPE_INT64, 1, (int64_t[]){4}, (int64_t[]){1}, b);
  cr_assert_eq(opd__copy_views_cpu(&opd__exec_serial, &d, &s), OPD_EINVAL);
}
