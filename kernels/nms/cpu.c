/* nms on the CPU, torchvision.ops.nms's algorithm.
 *
 * Both variants first copy scores into private memory and sort there (the
 * client may change shared memory while the kernel runs; a sort over
 * values that change under it could read out of bounds). The order is a
 * total one, as torch's stable descending sort: NaN first, then by score
 * descending, equal scores by lower index first. Box coordinates are only
 * ever used as values, never as indices.
 *
 * Variants:
 *   cpu_ref   torchvision's loop: for each box in score order that is not
 *             suppressed, keep it and suppress every later box whose IoU
 *             with it is > iou_threshold; coordinates read in place
 *   cpu_fast  the same with a private copy of the boxes laid out in score
 *             order as separate x1/y1/x2/y2/area arrays, so the inner loop
 *             over later boxes is contiguous and branch-free (vectorized);
 *             O(N) extra memory, no N x N mask
 * Test: build/tests/ops, suite nms
 */
#include <math.h>
#include <stdlib.h>

#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"

OPD_OP_DECLARE(nms);

typedef struct ranked {
  float score;                     /* private copy of the score */
  int64_t idx;                     /* box index */
} ranked_t;

static int by_score(const void *pa, const void *pb) {
  const ranked_t *a = pa, *b = pb;
  int an = isnan(a->score), bn = isnan(b->score);
  if (an != bn) return an ? -1 : 1;
  if (!an && a->score != b->score) return a->score > b->score ? -1 : 1;
  return (a->idx > b->idx) - (a->idx < b->idx);
}

/* Returns the N indices in score order (caller frees), or NULL. */
static ranked_t *rank_boxes(const opd_kcall_t *call, int64_t n) {
  const volatile float *s = call->in[1].data;
  ranked_t *o = malloc((size_t)(n > 0 ? n : 1) * sizeof *o);
  if (!o) return NULL;
  for (int64_t i = 0; i < n; i++) {
    o[i].score = s[i]; /* read once */
    o[i].idx = i;
  }
  qsort(o, (size_t)n, sizeof *o, by_score);
  return o;
}

/* The largest float <= t: for float v, v > t exactly when v > that. */
static float thr_float(double t) {
  float f = (float)t;
  if ((double)f > t) f = nextafterf(f, -INFINITY);
  return f;
}

static void finish(opd_kcall_t *call, int64_t n, int64_t kept) {
  int64_t *keep = call->out[0].data;
  for (int64_t i = kept; i < n; i++) keep[i] = -1;
  ((int64_t *)call->out[1].data)[0] = kept;
}

static inline float fmax_t(float a, float b) { return a < b ? b : a; }
static inline float fmin_t(float a, float b) { return b < a ? b : a; }

int opd__nms_cpu_ref(opd_kcall_t *call) {
  int64_t n = call->in[0].shape[0], kept = 0;
  const float *bx = call->in[0].data;
  double thr = call->attr[0].f;
  int64_t *keep = call->out[0].data;
  ranked_t *ord = rank_boxes(call, n);
  unsigned char *sup = calloc((size_t)(n > 0 ? n : 1), 1);
  if (!ord || !sup) {
    free(ord);
    free(sup);
    return opd__kerr(call, OPD_ENOMEM, "cannot allocate for %lld boxes",
                     (long long)n);
  }
  for (int64_t a = 0; a < n; a++) {
    int64_t i = ord[a].idx;
    if (sup[i]) continue;
    keep[kept++] = i;
    const float *bi = bx + 4 * i;
    float iarea = (bi[2] - bi[0]) * (bi[3] - bi[1]);
    for (int64_t b = a + 1; b < n; b++) {
      int64_t j = ord[b].idx;
      if (sup[j]) continue;
      const float *bj = bx + 4 * j;
      float xx1 = fmax_t(bi[0], bj[0]), yy1 = fmax_t(bi[1], bj[1]);
      float xx2 = fmin_t(bi[2], bj[2]), yy2 = fmin_t(bi[3], bj[3]);
      float w = fmax_t(0.0f, xx2 - xx1), h = fmax_t(0.0f, yy2 - yy1);
      float inter = w * h;
      float jarea = (bj[2] - bj[0]) * (bj[3] - bj[1]);
      float ovr = inter / (iarea + jarea - inter);
      if ((double)ovr > thr) sup[j] = 1;
    }
  }
  free(ord);
  free(sup);
  finish(call, n, kept);
  return 0;
}

/* sup[b] |= IoU(box a, box b) > thr for b in (a, n): boxes in score order */
OPD_FAST static void suppress(const float *x1, const float *y1,
                              const float *x2, const float *y2,
                              const float *area, unsigned char *sup,
                              int64_t a, int64_t n, float thr) {
  float ix1 = x1[a], iy1 = y1[a], ix2 = x2[a], iy2 = y2[a], ia = area[a];
  for (int64_t b = a + 1; b < n; b++) {
    float xx1 = fmax_t(ix1, x1[b]), yy1 = fmax_t(iy1, y1[b]);
    float xx2 = fmin_t(ix2, x2[b]), yy2 = fmin_t(iy2, y2[b]);
    float w = fmax_t(0.0f, xx2 - xx1), h = fmax_t(0.0f, yy2 - yy1);
    float inter = w * h;
    float ovr = inter / (ia + area[b] - inter);
    sup[b] |= (unsigned char)(ovr > thr);
  }
}

int opd__nms_cpu_fast(opd_kcall_t *call) {
  int64_t n = call->in[0].shape[0], kept = 0;
  const volatile float *bx = call->in[0].data;
  int64_t *keep = call->out[0].data;
  float thr = thr_float(call->attr[0].f);
  size_t m = (size_t)(n > 0 ? n : 1);
  ranked_t *ord = rank_boxes(call, n);
  float *buf = malloc(m * 5 * sizeof(float));
  unsigned char *sup = calloc(m, 1);
  if (!ord || !buf || !sup) {
    free(ord);
    free(buf);
    free(sup);
    return opd__kerr(call, OPD_ENOMEM, "cannot allocate for %lld boxes",
                     (long long)n);
  }
  float *x1 = buf, *y1 = buf + m, *x2 = buf + 2 * m, *y2 = buf + 3 * m,
        *area = buf + 4 * m;
  for (int64_t a = 0; a < n; a++) {
    const volatile float *b = bx + 4 * ord[a].idx;
    x1[a] = b[0];
    y1[a] = b[1];
    x2[a] = b[2];
    y2[a] = b[3];
    area[a] = (x2[a] - x1[a]) * (y2[a] - y1[a]);
  }
  for (int64_t a = 0; a < n; a++) {
    if (sup[a]) continue;
    keep[kept++] = ord[a].idx;
    suppress(x1, y1, x2, y2, area, sup, a, n, thr);
  }
  free(ord);
  free(buf);
  free(sup);
  finish(call, n, kept);
  return 0;
}
