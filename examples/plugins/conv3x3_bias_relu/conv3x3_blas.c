/* conv3x3_bias_relu on the CPU through BLAS: im2col + one sgemm per tile
 * of output rows, then bias and ReLU on the tile while it is in cache.
 * Built into the plugin when OpenBLAS is found (Makefile, BLAS=auto);
 * conv3x3.c's cpu_fast calls it for the shapes where it beats the direct
 * kernel there.
 *
 *   x (N, C, H, W), weight (K, C, 3, 3) = A (K, 9C), bias (K) -> y (N, K, H, W)
 *
 * DESIGN
 * A tile is rows [h0, h0 + nh) of one image, or ni whole images where an
 * image is small: T output pixels. Its columns col (9C, T) hold, in row
 * c*9 + r*3 + s, x[n, c, h+r-1, w+s-1] (0 outside the image), so that
 * out (K, T) = weight (K, 9C) @ col is one sgemm; then y = max(out +
 * bias, 0) is written once from out. T is picked so that col and out fit
 * in about 1 MiB (col is written, read back by the sgemm's packing and
 * out by the epilogue, all from cache, where opd's conv2d im2cols each
 * whole image through memory, prefills y with the bias, and relu is a
 * second request and pass over y), but at least 1024 pixels: each sgemm
 * packs all of the weights again, so a tile of few pixels (a 14x14 image
 * of 256 channels) would spend its time there.
 *
 * Tiles are spread over the daemon's threads (call->exec), each chunk of
 * tiles with its own col and out. OpenBLAS keeps one thread count for the
 * whole process (the daemon's; the pthread build has no per-call setting,
 * and setting it here would change it for opd's own ops), so a plugin
 * leaves it alone: chunks call sgemm concurrently (the pthread OpenBLAS
 * is thread-safe), and one chunk's im2col and epilogue overlap another's
 * sgemm. Measured on a 2-core VM: bench/results/README.md.
 */
#include <opd/op.h>
#include <cblas.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

int conv3x3_bias_relu_blas(opd_kcall_t *call);

enum {
  TILE_BYTES = 1024 * 1024,        /* a tile's col and out, at most ... */
  TILE_MIN = 1024,                 /* ... unless that is fewer pixels */
};

typedef struct job {
  const float *x, *wt, *bias;      /* the inputs */
  float *y;                        /* the output (N, K, H, W) */
  int64_t N, C, H, W, K;           /* geometry */
  int64_t ni, nh;                  /* a tile: ni whole images, or nh rows of
                                      one (then ni = 1) */
  int64_t tiles_n, tiles_h;        /* tiles over the images; per image */
  int nomem;                       /* a chunk found no memory */
} job_t;

typedef struct tile {
  int64_t n0, ni, h0, nh;          /* images [n0, n0+ni) x rows [h0, h0+nh) */
  int64_t T;                       /* its pixels: ni*nh*W */
} tile_t;

/* col (9C, T): row c*9 + r*3 + s, column (i*nh + h-h0)*W + w holds
 * x[n0+i, c, h+r-1, w+s-1], zero where that is outside the image. */
static void im2col(const job_t *j, const tile_t *t, float *col) {
  const int64_t C = j->C, H = j->H, W = j->W;
  for (int64_t row = 0; row < 9 * C; row++) {
    int64_t c = row / 9, r = row / 3 % 3, s = row % 3;
    float *dst = col + row * t->T;
    for (int64_t n = t->n0; n < t->n0 + t->ni; n++)
      for (int64_t h = t->h0; h < t->h0 + t->nh; h++, dst += W) {
        int64_t ih = h + r - 1;
        if (ih < 0 || ih >= H) {
          memset(dst, 0, sizeof(float) * (size_t)W);
          continue;
        }
        const float *src = j->x + ((n * C + c) * H + ih) * W;
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

/* y[n0+i, k, h0.., :] = max(out[k, (i*nh..)*W..] + bias[k], 0), the one
 * write of y; NaN gives 0, as cpu_ref's acc > 0 test. */
static void bias_relu(const job_t *j, const tile_t *t, const float *out) {
  const int64_t S = t->nh * j->W; /* one image's part of the tile */
  for (int64_t k = 0; k < j->K; k++)
    for (int64_t i = 0; i < t->ni; i++) {
      const float *src = out + k * t->T + i * S, b = j->bias[k];
      float *dst = j->y + (((t->n0 + i) * j->K + k) * j->H + t->h0) * j->W;
      for (int64_t p = 0; p < S; p++) {
        float v = src[p] + b;
        dst[p] = v > 0 ? v : 0.0f;
      }
    }
}

/* Tiles [lo, hi), tile i = images i / tiles_h, rows i % tiles_h; one col
 * (9C, T) and one out (K, T) for the chunk. */
static void tile_range(void *arg, int64_t lo, int64_t hi) {
  job_t *j = arg;
  const int64_t C9 = 9 * j->C, Tmax = j->ni * j->nh * j->W;
  float *col = malloc(sizeof(float) * (size_t)((C9 + j->K) * Tmax));
  if (col == NULL) {
    __atomic_store_n(&j->nomem, 1, __ATOMIC_RELAXED);
    return;
  }
  float *out = col + C9 * Tmax;
  for (int64_t i = lo; i < hi; i++) {
    tile_t t = {.n0 = i / j->tiles_h * j->ni, .h0 = i % j->tiles_h * j->nh};
    t.ni = j->N - t.n0 < j->ni ? j->N - t.n0 : j->ni;
    t.nh = j->H - t.h0 < j->nh ? j->H - t.h0 : j->nh;
    t.T = t.ni * t.nh * j->W;
    im2col(j, &t, col);
    /* out (K, T) = weight (K, 9C) @ col (9C, T) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)j->K,
                (int)t.T, (int)C9, 1.0f, j->wt, (int)C9, col, (int)t.T, 0.0f,
                out, (int)t.T);
    bias_relu(j, &t, out);
  }
  free(col);
}

/* Returns 0, or OPD_ENOMEM (y partly written) when a chunk's buffers
 * cannot be allocated. Sizes must fit BLAS's int: the caller checks
 * (conv3x3.c). */
int conv3x3_bias_relu_blas(opd_kcall_t *call) {
  job_t j = {.x = call->in[0].data, .wt = call->in[1].data,
             .bias = call->in[2].data, .y = call->out[0].data,
             .N = call->in[0].shape[0], .C = call->in[0].shape[1],
             .H = call->in[0].shape[2], .W = call->in[0].shape[3],
             .K = call->in[1].shape[0]};
  const int64_t HW = j.H * j.W, nt = call->exec->nthreads;
  /* pixels per tile: col (9C, P) and out (K, P) in TILE_BYTES, but at
     least TILE_MIN, so that each sgemm's packing of the weights (all of
     them, every call) is spread over enough pixels */
  int64_t P = TILE_BYTES / (int64_t)sizeof(float) / (9 * j.C + j.K);
  if (P < TILE_MIN) P = TILE_MIN;
  /* then, when there are few tiles, as many for each thread */
  if (P >= HW) { /* whole images */
    int64_t ni = P / HW < j.N ? P / HW : j.N;
    int64_t tiles = (j.N + ni - 1) / ni;
    if (tiles < 4 * nt) tiles = (tiles + nt - 1) / nt * nt;
    j.ni = (j.N + tiles - 1) / tiles;
    j.nh = j.H;
  } else { /* rows of one image */
    int64_t nh = P / j.W > 1 ? P / j.W : 1;
    int64_t tiles = (j.H + nh - 1) / nh;
    while (j.N * tiles < 4 * nt && j.N * tiles % nt != 0) tiles++;
    j.ni = 1;
    j.nh = (j.H + tiles - 1) / tiles;
  }
  j.tiles_n = (j.N + j.ni - 1) / j.ni;
  j.tiles_h = (j.H + j.nh - 1) / j.nh;
  call->exec->parallel_for(call->exec, j.tiles_n * j.tiles_h, 1, tile_range,
                           &j);
  if (j.nomem)
    return opd_kerr(call, OPD_ENOMEM, "no memory for a %lld-byte im2col tile",
                    (long long)(sizeof(float) * (9 * j.C + j.K) * j.ni *
                                j.nh * j.W));
  return 0;
}
