/* softmax_conv: a small opd client to copy from.
 *
 * Connects to the daemon, creates one shared-memory arena, lays out the
 * tensors in it, runs softmax over a (rows, cols) batch and a 3x3 conv2d
 * with bias over an NCHW image batch, checks both against plain C loops,
 * and prints what it measured.
 *
 *   opd --socket /tmp/opd.sock &
 *   ./softmax_conv /tmp/opd.sock        (or set OPD_SOCKET)
 *
 * Build: cc -std=c11 softmax_conv.c -lopd -lmsgpackc -lm
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "opd/opd.h"

/* Carves tensors out of one arena, each 64-byte aligned. */
typedef struct layout {
  uint64_t arena;
  char *base;
  uint64_t used, size;
} layout_t;

static float *place(layout_t *l, opd_tensor_t *t, int rank,
                    const int64_t *shape) {
  uint64_t n = 1;
  for (int i = 0; i < rank; i++) n *= (uint64_t)shape[i];
  uint64_t off = (l->used + 63) & ~(uint64_t)63;
  if (off + n * sizeof(float) > l->size) return NULL;
  opd_tensor_init(t, l->arena, off, OPD_DTYPE_FLOAT32, rank, shape);
  l->used = off + n * sizeof(float);
  return (float *)(l->base + off);
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int fail(const char *what) {
  fprintf(stderr, "softmax_conv: %s: %s\n", what, opd_last_error());
  return 1;
}

int main(int argc, char **argv) {
  const char *sock = argc > 1 ? argv[1] : NULL;
  opd_client_t *c;
  layout_t l = {.size = 64u << 20};
  int bad = 0;

  if (opd_connect(sock, &c) != 0) return fail("connect");
  void *base;
  if (opd_arena_create(c, l.size, &l.arena, &base) != 0)
    return fail("arena");
  l.base = base;

  /* ---- softmax over 512 rows of 1000 logits ---------------------------- */
  enum { ROWS = 512, COLS = 1000 };
  int64_t sm_shape[2] = {ROWS, COLS};
  opd_tensor_t x, y;
  float *xs = place(&l, &x, 2, sm_shape), *ys = place(&l, &y, 2, sm_shape);
  srand(42);
  for (int i = 0; i < ROWS * COLS; i++) xs[i] = (float)rand() / RAND_MAX * 8 - 4;
  double t0 = now_us();
  if (opd_run(c, "softmax", &x, 1, &y, 1, NULL, 0) != 0)
    return fail("softmax");
  double t_sm = now_us() - t0;
  double worst = 0;
  for (int r = 0; r < ROWS; r++) {
    const float *xr = xs + r * COLS;
    float m = xr[0];
    double sum = 0;
    for (int j = 1; j < COLS; j++) m = xr[j] > m ? xr[j] : m;
    for (int j = 0; j < COLS; j++) sum += exp((double)xr[j] - m);
    for (int j = 0; j < COLS; j++) {
      double want = exp((double)xr[j] - m) / sum;
      double err = fabs(ys[r * COLS + j] - want) / (1e-7 + want);
      if (err > worst) worst = err;
    }
  }
  bad |= worst > 1e-4;
  printf("softmax  %dx%d: %.1f us round trip, max rel err %.2e %s\n", ROWS,
         COLS, t_sm, worst, worst > 1e-4 ? "FAIL" : "ok");

  /* ---- conv2d 3x3, stride 1, no padding, with bias --------------------- */
  enum { N = 2, C = 3, H = 32, W = 32, K = 8, R = 3, S = 3 };
  enum { P = H - R + 1, Q = W - S + 1 };
  int64_t xsh[4] = {N, C, H, W}, wsh[4] = {K, C, R, S}, bsh[1] = {K};
  opd_tensor_t img, wt, bias, out[4];
  float *xi = place(&l, &img, 4, xsh), *wi = place(&l, &wt, 4, wsh);
  float *bi = place(&l, &bias, 1, bsh);
  for (int i = 0; i < N * C * H * W; i++) xi[i] = (float)rand() / RAND_MAX - 0.5f;
  for (int i = 0; i < K * C * R * S; i++) wi[i] = (float)rand() / RAND_MAX - 0.5f;
  for (int i = 0; i < K; i++) bi[i] = (float)i / K;

  /* ask the daemon for the output shape instead of computing it here */
  opd_tensor_t ins[3] = {img, wt, bias};
  uint32_t n_out;
  if (opd_infer(c, "conv2d", ins, 3, NULL, 0, out, 4, &n_out) != 0)
    return fail("infer conv2d");
  opd_tensor_t yc;
  float *yo = place(&l, &yc, out[0].rank, out[0].shape);
  t0 = now_us();
  if (opd_run(c, "conv2d", ins, 3, &yc, 1, NULL, 0) != 0)
    return fail("conv2d");
  double t_cv = now_us() - t0;
  worst = 0;
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++)
      for (int p = 0; p < P; p++)
        for (int q = 0; q < Q; q++) {
          double acc = bi[k];
          for (int ch = 0; ch < C; ch++)
            for (int r = 0; r < R; r++)
              for (int s = 0; s < S; s++)
                acc += (double)xi[((n * C + ch) * H + p + r) * W + q + s] *
                       wi[((k * C + ch) * R + r) * S + s];
          double err = fabs(yo[((n * K + k) * P + p) * Q + q] - acc);
          if (err > worst) worst = err;
        }
  bad |= worst > 1e-4;
  printf("conv2d   x[%d,%d,%d,%d] * w[%d,%d,%d,%d] + b -> y[%lld,%lld,%lld,%lld]: "
         "%.1f us round trip, max abs err %.2e %s\n",
         N, C, H, W, K, C, R, S, (long long)yc.shape[0], (long long)yc.shape[1],
         (long long)yc.shape[2], (long long)yc.shape[3], t_cv, worst,
         worst > 1e-4 ? "FAIL" : "ok");

  /* ---- a mistake, on purpose: the daemon names it and carries on ------- */
  opd_tensor_t wrong = y;
  wrong.shape[1] = 999;
  int rc = opd_run(c, "softmax", &x, 1, &wrong, 1, NULL, 0);
  printf("bad request rejected as expected: %s (%s)\n", opd_errname(rc),
         opd_last_error());
  bad |= rc != OPD_ESHAPE;

  opd_arena_release(c, l.arena);
  opd_close(c);
  printf("%s\n", bad ? "softmax_conv: FAILED" : "softmax_conv: all results match");
  return bad;
}
