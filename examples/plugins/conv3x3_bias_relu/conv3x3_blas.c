/* conv3x3_bias_relu on the CPU through BLAS: im2col + one sgemm per tile
 * of output rows, then bias and ReLU on the tile while it is in cache.
 * Built into the plugin when OpenBLAS is found (Makefile, BLAS=auto);
 * conv3x3.c's cpu_fast calls it for the shapes where it beats the direct
 * kernel there.
 *
 *   x (N, C, H, W), weight (K, C, 3, 3) = A (K, 9C), bias (K) -> y (N, K, H, W)
 *
 * DESIGN
 * A tile is rows [h0, h0 + nh) of one image n: T = nh*W output pixels.
 * Its columns col (9C, T) hold, in row c*9 + r*3 + s, x[n, c, h+r-1,
 * w+s-1] (0 outside the image), so y[n, :, tile] (K, T, row stride H*W)
 * = A @ col is one sgemm straight into y. nh is picked so that col and
 * the tile of y fit in about 1 MiB: col is written, read back by the
 * sgemm's packing and y's tile gets bias + ReLU, all from cache, where
 * opd's conv2d im2cols the whole image through memory, prefills y with
 * the bias and relu then makes a second request and pass over y.
 *
 * Tiles are spread over the daemon's threads (call->exec), each chunk of
 * tiles with its own col. OpenBLAS keeps one thread count for the whole
 * process (the daemon's; the pthread build has no per-call setting, and
 * setting it here would change it for opd's own ops), so a plugin leaves
 * it alone: chunks call sgemm concurrently (the pthread OpenBLAS is
 * thread-safe), and one chunk's im2col and epilogue overlap another's
 * sgemm. Measured on a 2-core VM: bench/results/README.md.
 */
#include <opd/op.h>
#include <cblas.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

int conv3x3_bias_relu_blas(opd_kcall_t *call);

enum { TILE_BYTES = 1024 * 1024 }; /* a tile's col and y, at most */

typedef struct tile {
  const float *x;                  /* image n: (C, H, W) */
  const float *bias;               /* (K) */
  float *y;                        /* image n's first output row of the tile:
                                      (K, T), row stride H*W */
  float *col;                      /* (9C, T) */
  int64_t C, H, W, K, h0, nh;      /* geometry; the tile is rows [h0, h0+nh) */
} tile_t;

/* col: row c*9 + r*3 + s holds x[c, h+r-1, w+s-1] for
 * h in [h0, h0+nh), w in [0, W), zero where that is outside the image. */
static void im2col(const tile_t *t) {
  const int64_t W = t->W, T = t->nh * W;
  for (int64_t row = 0; row < 9 * t->C; row++) {
    int64_t c = row / 9, r = row / 3 % 3, s = row % 3;
    float *dst = t->col + row * T;
    for (int64_t h = t->h0; h < t->h0 + t->nh; h++, dst += W) {
      int64_t ih = h + r - 1;
      if (ih < 0 || ih >= t->H) {
        memset(dst, 0, sizeof(float) * (size_t)W);
        continue;
      }
      const float *src = t->x + (c * t->H + ih) * W;
      /* s = 0 reads w-1 (dst[0] is the left pad), s = 2 reads w+1 */
      if (s == 0) {
        dst[0] = 0;
        memcpy(dst + 1, src, sizeof(float) * (size_t)(W - 1));
      } else if (s == 1) {
        memcpy(dst, src, sizeof(float) * (size_t)W);
      } else {
        memcpy(dst, src + 1, sizeof(float) * (size_t)(W - 1));
        dst[W - 1] = 0;
      }
    }
  }
}

/* The tile of y: y = max(y + bias, 0); NaN gives
 * 0, as cpu_ref's acc > 0 test. */
static void bias_relu(const tile_t *t) {
  const int64_t T = t->nh * t->W, HW = t->H * t->W;
  for (int64_t k = 0; k < t->K; k++) {
    float *yk = t->y + k * HW, b = t->bias[k];
    for (int64_t i = 0; i < T; i++) {
      float v = yk[i] + b;
      yk[i] = v > 0 ? v : 0.0f;
    }
  }
}

typedef struct job {
  const float *x, *wt, *bias;      /* the inputs */
  float *y;                        /* the output (N, K, H, W) */
  int64_t N, C, H, W, K;           /* geometry */
  int64_t nh, tiles;               /* rows per tile; tiles per image */
  int nomem;                       /* a chunk found no memory for col */
} job_t;

/* Tiles [lo, hi), tile i = n*tiles + rows [i%tiles * nh, + nh), with one
 * col buffer for the chunk. */
static void tile_range(void *arg, int64_t lo, int64_t hi) {
  job_t *j = arg;
  const int64_t C9 = 9 * j->C, HW = j->H * j->W;
  float *col = malloc(sizeof(float) * (size_t)(C9 * j->nh * j->W));
  if (col == NULL) {
    __atomic_store_n(&j->nomem, 1, __ATOMIC_RELAXED);
    return;
  }
  for (int64_t i = lo; i < hi; i++) {
    int64_t n = i / j->tiles, h0 = i % j->tiles * j->nh;
    tile_t t = {.x = j->x + n * j->C * HW, .bias = j->bias, .col = col,
                .C = j->C, .H = j->H, .W = j->W, .K = j->K, .h0 = h0,
                .nh = j->H - h0 < j->nh ? j->H - h0 : j->nh};
    const int64_t T = t.nh * t.W;
    t.y = j->y + (n * t.K * t.H + t.h0) * t.W;
    im2col(&t);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)t.K, (int)T,
                (int)C9, 1.0f, j->wt, (int)C9, col, (int)T, 0.0f, t.y,
                (int)HW);
    bias_relu(&t);
  }
  free(col);
}

/* Returns 0, or OPD_ENOMEM (y partly written) when a col buffer cannot be
 * allocated. Sizes must fit BLAS's int: the caller checks (conv3x3.c). */
int conv3x3_bias_relu_blas(opd_kcall_t *call) {
  job_t j = {.x = call->in[0].data, .wt = call->in[1].data,
             .bias = call->in[2].data, .y = call->out[0].data,
             .N = call->in[0].shape[0], .C = call->in[0].shape[1],
             .H = call->in[0].shape[2], .W = call->in[0].shape[3],
             .K = call->in[1].shape[0]};
  /* rows per tile: a tile's col (9C, T) and its part of y (K, T) fit in
     TILE_BYTES; then evened out over the tiles of an image */
  int64_t nh = TILE_BYTES / (int64_t)sizeof(float) / ((9 * j.C + j.K) * j.W);
  if (nh < 1) nh = 1;
  j.tiles = (j.H + nh - 1) / nh;
  j.nh = (j.H + j.tiles - 1) / j.tiles;
  call->exec->parallel_for(call->exec, j.N * j.tiles, 1, tile_range, &j);
  if (j.nomem)
    return opd_kerr(call, OPD_ENOMEM, "no memory for a %lld-byte im2col tile",
                    (long long)(sizeof(float) * 9 * j.C * j.nh * j.W));
  return 0;
}
