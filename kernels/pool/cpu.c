/* The pool family on the CPU (max_pool2d, adaptive_avg_pool2d): one body
 * over the planes of x, a window function per op (rows: ops.c).
 *
 * DESIGN
 * Each output element reduces its window of its plane (geom.h): the max
 * over the taps inside the plane (padding is -inf, so it never wins; a
 * NaN tap wins, as torch), or the mean over the adaptive window.
 * Variants (per op):
 *   cpu_ref   plane after plane, the average's sum in double (the truth)
 *   cpu_fast  the same windows in float, planes spread over call->exec
 * Test: build/tests/ops, suite pool (tests/ops/test_pool.c).
 */
#include <math.h>

#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/pool/geom.h"

typedef struct pool_job {
  opd_pool_geom_t g;               /* geometry */
  const float *x;                  /* (planes, H, W) */
  float *y;                        /* (planes, OH, OW) */
  int adaptive;                    /* 1: average, 0: max */
  int exact;                       /* 1: double sums (the reference) */
} pool_job_t;

static void max_plane(const pool_job_t *j, const float *x, float *y) {
  const opd_pool_geom_t *g = &j->g;
  for (int64_t oh = 0; oh < g->OH; oh++)
    for (int64_t ow = 0; ow < g->OW; ow++) {
      float m = -INFINITY;
      for (int64_t i = 0; i < g->kh; i++) {
        int64_t h = oh * g->sh - g->ph + i * g->dh;
        if (h < 0 || h >= g->H) continue;
        for (int64_t k = 0; k < g->kw; k++) {
          int64_t w = ow * g->sw - g->pw + k * g->dw;
          if (w < 0 || w >= g->W) continue;
          float v = x[h * g->W + w];
          if (v > m || isnan(v)) m = isnan(m) ? m : v;
        }
      }
      y[oh * g->OW + ow] = m;
    }
}

static void avg_plane(const pool_job_t *j, const float *x, float *y) {
  const opd_pool_geom_t *g = &j->g;
  for (int64_t oh = 0; oh < g->OH; oh++) {
    int64_t h0 = oh * g->H / g->OH, h1 = ((oh + 1) * g->H + g->OH - 1) / g->OH;
    for (int64_t ow = 0; ow < g->OW; ow++) {
      int64_t w0 = ow * g->W / g->OW, w1 = ((ow + 1) * g->W + g->OW - 1) / g->OW;
      double sd = 0;
      float sf = 0;
      for (int64_t h = h0; h < h1; h++)
        for (int64_t w = w0; w < w1; w++) {
          if (j->exact) sd += x[h * g->W + w];
          else sf += x[h * g->W + w];
        }
      double n = (double)((h1 - h0) * (w1 - w0));
      y[oh * g->OW + ow] = j->exact ? (float)(sd / n) : sf / (float)n;
    }
  }
}

static void planes(void *arg, int64_t b, int64_t e) {
  const pool_job_t *j = arg;
  int64_t in = j->g.H * j->g.W, on = j->g.OH * j->g.OW;
  for (int64_t p = b; p < e; p++) {
    if (j->adaptive) avg_plane(j, j->x + p * in, j->y + p * on);
    else max_plane(j, j->x + p * in, j->y + p * on);
  }
}

static int pool_run(opd_kcall_t *call, int adaptive, int fast) {
  pool_job_t j;
  int rc = opd__pool_geom(call, adaptive, &j.g);
  if (rc) return rc;
  j.x = call->in[0].data;
  j.y = call->out[0].data;
  j.adaptive = adaptive;
  j.exact = !fast;
  if (!fast) {
    planes(&j, 0, j.g.planes);
    return 0;
  }
  const opd_exec_t *ex = call->exec;
  int64_t work = j.g.OH * j.g.OW * (adaptive ? 1 : j.g.kh * j.g.kw);
  if (adaptive) work = j.g.H * j.g.W + j.g.OH * j.g.OW;
  ex->parallel_for(ex, j.g.planes, opd__row_grain(work), planes, &j);
  return 0;
}

OPD_OP_DECLARE(max_pool2d);
OPD_OP_DECLARE(adaptive_avg_pool2d);

int opd__max_pool2d_cpu_ref(opd_kcall_t *call) { return pool_run(call, 0, 0); }
int opd__max_pool2d_cpu_fast(opd_kcall_t *call) { return pool_run(call, 0, 1); }
int opd__adaptive_avg_pool2d_cpu_ref(opd_kcall_t *call) {
  return pool_run(call, 1, 0);
}
int opd__adaptive_avg_pool2d_cpu_fast(opd_kcall_t *call) {
  return pool_run(call, 1, 1);
}
