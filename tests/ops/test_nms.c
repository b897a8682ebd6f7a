/* nms: torchvision's semantics by hand (ties, threshold strictness, NaN),
 * fast vs ref on random boxes, N = 0, errors. */
#include <math.h>
#include <stdlib.h>

#include "tests/ops/optest.h"

static opd_kcall_t *nms_call(int64_t n, const float *boxes,
                             const float *scores, double thr) {
  opd_kcall_t *c = ot_new("nms");
  ot_in_vals(c, 0, 2, OT_SHAPE(n, 4), boxes);
  ot_in_vals(c, 1, 1, OT_SHAPE(n), scores);
  ot_set_float(c, "iou_threshold", thr);
  ot_ready(c);
  return c;
}

static void expect_keep(opd_kcall_t *c, int fast, int64_t n,
                        const int64_t *want, int64_t count) {
  cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
  const int64_t *keep = c->out[0].data, *cnt = c->out[1].data;
  cr_assert_eq(cnt[0], count, "fast=%d: count %lld, expected %lld", fast,
               (long long)cnt[0], (long long)count);
  for (int64_t i = 0; i < n; i++)
    cr_assert_eq(keep[i], i < count ? want[i] : -1,
                 "fast=%d: keep[%lld] = %lld", fast, (long long)i,
                 (long long)keep[i]);
}

Test(nms, by_hand_with_tie) {
  /* box 0 and 1 overlap: inter 1x... [0,0,2,2] vs [1,0,3,2]: inter 1*2=2,
   * union 4+4-2 = 6, IoU 1/3. box 2 is far away. Scores 0.9, 0.9, 0.8:
   * the tie keeps box 0 first (lower index). */
  float boxes[12] = {0, 0, 2, 2, 1, 0, 3, 2, 10, 10, 11, 11};
  float scores[3] = {0.9f, 0.9f, 0.8f};
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = nms_call(3, boxes, scores, 0.3); /* 1/3 > 0.3 */
    expect_keep(c, fast, 3, (int64_t[]){0, 2}, 2);
    ot_free(c);
    c = nms_call(3, boxes, scores, 0.5); /* nothing suppressed */
    expect_keep(c, fast, 3, (int64_t[]){0, 1, 2}, 3);
    ot_free(c);
  }
}

Test(nms, strictly_greater_and_order) {
  /* identical boxes: IoU exactly 1; threshold 1.0 keeps both (not >) */
  float boxes[8] = {0, 0, 1, 1, 0, 0, 1, 1};
  float scores[2] = {0.1f, 0.7f};
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = nms_call(2, boxes, scores, 1.0);
    expect_keep(c, fast, 2, (int64_t[]){1, 0}, 2);
    ot_free(c);
    c = nms_call(2, boxes, scores, 0.99);
    expect_keep(c, fast, 2, (int64_t[]){1}, 1);
    ot_free(c);
  }
}

Test(nms, nan_scores_sort_first_and_safely) {
  /* torch's descending sort puts NaN first */
  float boxes[12] = {0, 0, 1, 1, 5, 5, 6, 6, 9, 9, 10, 10};
  float scores[3] = {0.5f, NAN, 0.9f};
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = nms_call(3, boxes, scores, 0.5);
    expect_keep(c, fast, 3, (int64_t[]){1, 2, 0}, 3);
    ot_free(c);
  }
}

Test(nms, empty) {
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = nms_call(0, NULL, NULL, 0.5);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    cr_assert_eq(((int64_t *)c->out[1].data)[0], 0);
    ot_free(c);
  }
}

Test(nms, fast_matches_ref) {
  int64_t ns[] = {1, 7, 100, 1000, 3000};
  double thrs[] = {0.0, 0.3, 0.7};
  for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
    for (size_t t = 0; t < 3; t++) {
      int64_t n = ns[k];
      opd_kcall_t *c = ot_new("nms");
      float *b = ot_in_rand(c, 0, 2, OT_SHAPE(n, 4), 600 + k, 0, 100);
      for (int64_t i = 0; i < n; i++) { /* x2 = x1 + w, y2 = y1 + h */
        b[4 * i + 2] = b[4 * i] + 1 + fmodf(b[4 * i + 2], 30);
        b[4 * i + 3] = b[4 * i + 1] + 1 + fmodf(b[4 * i + 3], 30);
      }
      float *s = ot_in_rand(c, 1, 1, OT_SHAPE(n), 700 + k, 0, 1);
      for (int64_t i = 0; i < n; i += 5) s[i] = 0.5f; /* ties */
      ot_set_float(c, "iou_threshold", thrs[t]);
      ot_ready(c);
      ot_check_fast(c, 0, 0);
      ot_free(c);
    }
}

Test(nms, shape_errors) {
  opd_kcall_t *c = ot_new("nms");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(5, 5), NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(5), NULL);
  ot_set_float(c, "iou_threshold", 0.5);
  ot_expect_err(c, OPD_ESHAPE, "boxes", "[5,5]", "(N, 4)", NULL);
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(6, 4), NULL);
  ot_expect_err(c, OPD_ESHAPE, "scores", "[5]", "[6]", NULL);
}
