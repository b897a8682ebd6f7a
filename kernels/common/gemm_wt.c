/* Small-batch C = A @ W^T (+ bias, relu) on the CPU: register-blocked
 * AVX-512 and AVX2/FMA micro-kernels over torch's (N, K) weight, the rows
 * of W spread over the caller's exec. Contract: gemm.h (opd__sgemm_wt).
 *
 * DESIGN
 * The transposed product C^T (N, M) = W (N, K) @ A^T (K, M) is an ordinary
 * GEMM whose left operand is W as given: a tile of R rows of W times a
 * 16-column panel of A^T keeps R x 16 accumulators in registers; each step
 * of k loads the panel's row once and broadcasts one element of each of
 * the R rows of W (AVX-512: 12 rows, one zmm each, the broadcast folded
 * into the FMA; AVX2: 6 rows of two ymm, 12 of the 16 registers). On the
 * VM's AVX-512 CPU, one core, batches 16..64 of the trading MLP's layers:
 * 104-112 GFLOP/s (AVX-512; AVX2 90-109) against 60-92 for OpenBLAS's
 * one-thread sgemm, 151 against 215 us at 32 x 512 x 512 (2026-12-07,
 * bench/results/2026-12-07-vm-cpu-gemm.txt, A).
 * Only A is packed (A^T in 16-column panels, zero padded: M x K floats,
 * small at these batches); W, the large operand, is read once per panel
 * in its own layout, so nothing is cached between calls and a weight that
 * changes is always read afresh. The tiles of GROUP rows are added to the
 * bias, relu'd if asked, and written transposed into C's rows. Matmul's
 * C = A @ B with few columns (opd__sgemm_nn_small) is the same product
 * with A as W and B's columns as the panels (copied, not transposed), its
 * tiles stored as they come: 79 and 154 us against OpenBLAS's 88 and 180 for
 * the MLP's matmul layers at batch 32 (2026-12-07,
 * bench/results/2026-12-07-vm-cpu-gemm.txt, J). The row
 * tiles are split over ex->parallel_for (the daemon's pool) as the GEMV
 * splits its rows, not over OpenBLAS's own threads, whose spinning
 * competes with the client on a small machine. Tail rows take tiles of 4
 * and 1 rows. The ISA is picked once from cpuid (__builtin_cpu_supports);
 * a CPU without AVX2+FMA, another compiler, or a shape outside the bounds
 * of gemm.h declines (returns 0) and the caller takes the general GEMM.
 * Test: build/tests/ops, suites gemm_wt and linear.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/common/gemm.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(OPD_NO_CLONES)
#define HAVE_TILES 1
#endif

/* Multiply-adds per parallel chunk: the size of GEMV_GRAIN in gemm.c,
 * ~10-20 us of this kernel on one core. */
#define WT_GRAIN (1 << 19)

#ifdef HAVE_TILES

typedef float v16f __attribute__((vector_size(64), aligned(4)));
typedef float v8f __attribute__((vector_size(32), aligned(4)));

#define T512 \
  __attribute__((target("avx512f,avx2,fma"), \
                 optimize("O3", "no-trapping-math", "fp-contract=fast")))
#define T256 \
  __attribute__((target("avx2,fma"), \
                 optimize("O3", "no-trapping-math", "fp-contract=fast")))

/* NAME(K, W, ldw, P, out): out (R, 16) = W[0..R) (R rows, stride ldw) @
 * P, P the (K, 16) panel of A^T, as V vectors of VT per row. */
#define DEF_TILE(NAME, TGT, VT, R, V)                                      \
  TGT static void NAME(int64_t K, const float *W, int64_t ldw,             \
                       const float *P, float *out) {                       \
    enum { L = sizeof(VT) / sizeof(float) };                              \
    VT acc[R][V];                                                          \
    for (int r = 0; r < R; r++)                                            \
      for (int v = 0; v < V; v++) acc[r][v] = (VT){0};                     \
    for (int64_t k = 0; k < K; k++) {                                      \
      VT b[V];                                                             \
      for (int v = 0; v < V; v++) b[v] = *(const VT *)(P + (k * V + v) * L); \
      for (int r = 0; r < R; r++) {                                        \
        float a = W[r * ldw + k];                                          \
        for (int v = 0; v < V; v++) acc[r][v] += a * b[v];                 \
      }                                                                    \
    }                                                                      \
    for (int r = 0; r < R; r++)                                            \
      for (int v = 0; v < V; v++) *(VT *)(out + (r * V + v) * L) = acc[r][v]; \
  }

DEF_TILE(tile512_12, T512, v16f, 12, 1)
DEF_TILE(tile512_4, T512, v16f, 4, 1)
DEF_TILE(tile512_1, T512, v16f, 1, 1)
DEF_TILE(tile256_6, T256, v8f, 6, 2)
DEF_TILE(tile256_4, T256, v8f, 4, 2)
DEF_TILE(tile256_1, T256, v8f, 1, 2)

typedef void (*tile_fn)(int64_t K, const float *W, int64_t ldw,
                        const float *P, float *out);

typedef struct isa_kern {
  int rmax;                        /* rows of the big tile */
  int width;                       /* panel columns (16: pack_at's) */
  tile_fn big, four, one;          /* tiles of rmax, 4 and 1 rows */
} isa_kern_t;

static const isa_kern_t KERNS[] = {
    [OPD_GEMM_ISA_AVX2] = {6, 16, tile256_6, tile256_4, tile256_1},
    [OPD_GEMM_ISA_AVX512] = {12, 16, tile512_12, tile512_4, tile512_1},
};

int opd__gemm_wt_isa(void) {
  static int isa = -1; /* a benign race: every thread computes the same */
  if (isa < 0) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
      isa = OPD_GEMM_ISA_AVX512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      isa = OPD_GEMM_ISA_AVX2;
    else
      isa = OPD_GEMM_ISA_NONE;
  }
  return isa;
}

typedef struct wt_job {
  const isa_kern_t *kn;
  int64_t M, N, K;                 /* panel columns, rows of W, row length */
  const float *W, *P, *bias;       /* P: npanel panels of (K, width) */
  int relu;
  int straight;                    /* C (N, M) = W @ P, else C (M, N) = (W @ P)^T */
  float *C;
} wt_job_t;

/* Rows of C^T per store: 4 or 8 big tiles. Storing each tile as it
 * finishes wrote 6 floats into each of 16..64 rows of C, N floats apart,
 * lines that evict each other from L1; a group's (GROUP, 16) block is
 * written as runs of GROUP floats. */
#define GROUP 48

typedef int32_t v8i __attribute__((vector_size(32)));

/* y[0..8) = act(v + b[0..8)) (b NULL: no bias). */
T256 static inline void put8(float *y, v8f v, const float *b, int relu) {
  if (b) v += *(const v8f *)b;
  if (relu) v = (v8f)((v8i)v & ~(v8i)(v < 0.0f)); /* NaN < 0 is false: kept */
  *(v8f *)y = v;
}

/* col[q] = column q of the 8 x 8 block at src (rows ld floats apart):
 * unpack, shuffle, lane swap in registers. */
T256 static inline void tr8(const float *src, int64_t ld, v8f col[8]) {
  v8f x[8], t[8], u[8];
  for (int i = 0; i < 8; i++) x[i] = *(const v8f *)(src + i * ld);
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shuffle(x[i], x[i + 1], (v8i){0, 8, 1, 9, 4, 12, 5, 13});
    t[i + 1] = __builtin_shuffle(x[i], x[i + 1], (v8i){2, 10, 3, 11, 6, 14, 7, 15});
  }
  for (int i = 0; i < 8; i += 4)
    for (int h = 0; h < 2; h++) {
      u[i + 2 * h] = __builtin_shuffle(t[i + h], t[i + h + 2], (v8i){0, 1, 8, 9, 4, 5, 12, 13});
      u[i + 2 * h + 1] =
          __builtin_shuffle(t[i + h], t[i + h + 2], (v8i){2, 3, 10, 11, 6, 7, 14, 15});
    }
  /* u[0..4) hold columns {0,4}, {1,5}, {2,6}, {3,7} of rows 0..3; u[4..8) of rows 4..7 */
  for (int q = 0; q < 4; q++) {
    col[q] = __builtin_shuffle(u[q], u[q + 4], (v8i){0, 1, 2, 3, 8, 9, 10, 11});
    col[q + 4] = __builtin_shuffle(u[q], u[q + 4], (v8i){4, 5, 6, 7, 12, 13, 14, 15});
  }
}

/* C rows [m0, m0 + mc), columns [n0, n0 + nr) = act(out^T + bias), out
 * (nr, 16) row-major: full 8 x 8 blocks by tr8, the edges one float at a
 * time. Both ISAs have AVX2. */
T256 static void store_group(const wt_job_t *j, const float *out, int64_t m0,
                             int64_t mc, int64_t n0, int64_t nr) {
  if (j->straight) { /* matmul: out's rows are C's (no bias, no relu) */
    for (int64_t r = 0; r < nr; r++)
      memcpy(j->C + (n0 + r) * j->M + m0, out + r * 16, (size_t)mc * sizeof(float));
    return;
  }
  const float *b = j->bias ? j->bias + n0 : NULL;
  int64_t r8 = nr & ~(int64_t)7, c8 = mc & ~(int64_t)7;
  for (int64_t r = 0; r < r8; r += 8)
    for (int64_t c = 0; c < c8; c += 8) {
      v8f col[8];
      tr8(out + r * 16 + c, 16, col);
      for (int q = 0; q < 8; q++)
        put8(j->C + (m0 + c + q) * j->N + n0 + r, col[q], b ? b + r : NULL, j->relu);
    }
  for (int64_t c = 0; c < mc; c++) {
    float *y = j->C + (m0 + c) * j->N + n0;
    for (int64_t r = c < c8 ? r8 : 0; r < nr; r++) {
      float v = out[r * 16 + c] + (b ? b[r] : 0.0f);
      y[r] = j->relu && v < 0 ? 0.0f : v; /* NaN passes, as relu */
    }
  }
}

/* Row tiles [t0, t1) of the big tile (the last ones partial), GROUP rows
 * at a time: each panel's tiles into `out`, then stored. */
static void wt_range(void *arg, int64_t t0, int64_t t1) {
  const wt_job_t *j = arg;
  const isa_kern_t *kn = j->kn;
  int w = kn->width, R = kn->rmax;
  float out[GROUP * 16] __attribute__((aligned(64)));
  int64_t n1 = t1 * R < j->N ? t1 * R : j->N;
  for (int64_t g0 = t0 * R; g0 < n1; g0 += GROUP) {
    int64_t g1 = g0 + GROUP < n1 ? g0 + GROUP : n1;
    for (int64_t m0 = 0; m0 < j->M; m0 += w) {
      const float *P = j->P + m0 * j->K;
      int64_t n = g0;
      for (; n + R <= g1; n += R) kn->big(j->K, j->W + n * j->K, j->K, P, out + (n - g0) * w);
      for (; n + 4 <= g1; n += 4) kn->four(j->K, j->W + n * j->K, j->K, P, out + (n - g0) * w);
      for (; n < g1; n++) kn->one(j->K, j->W + n * j->K, j->K, P, out + (n - g0) * w);
      store_group(j, out, m0, j->M - m0 < w ? j->M - m0 : w, g0, g1 - g0);
    }
  }
}

/* P (16-column panels of A^T, zero padded): 8 x 8 blocks of A by tr8,
 * the edges one float at a time. */
T256 static void pack_at(int64_t M, int64_t K, const float *A, float *P) {
  if (M % 16) /* the last panel's padding columns */
    memset(P + (M / 16) * 16 * K, 0, (size_t)(16 * K) * sizeof(float));
  int64_t k8 = K & ~(int64_t)7;
  for (int64_t m0 = 0; m0 < M; m0 += 16) {
    int64_t mc = M - m0 < 16 ? M - m0 : 16, c8 = mc & ~(int64_t)7;
    float *p = P + m0 * K;
    for (int64_t c = 0; c < c8; c += 8)
      for (int64_t k = 0; k < k8; k += 8) {
        v8f col[8];
        tr8(A + (m0 + c) * K + k, K, col);
        for (int q = 0; q < 8; q++) *(v8f *)(p + (k + q) * 16 + c) = col[q];
      }
    for (int64_t c = 0; c < mc; c++)
      for (int64_t k = c < c8 ? k8 : 0; k < K; k++) p[k * 16 + c] = A[(m0 + c) * K + k];
  }
}

/* P (16-column panels of B (K, M), zero padded): row by row. */
static void pack_b(int64_t M, int64_t K, const float *B, float *P) {
  if (M % 16)
    memset(P + (M / 16) * 16 * K, 0, (size_t)(16 * K) * sizeof(float));
  for (int64_t m0 = 0; m0 < M; m0 += 16) {
    size_t mc = (size_t)(M - m0 < 16 ? M - m0 : 16);
    for (int64_t k = 0; k < K; k++)
      memcpy(P + m0 * K + k * 16, B + k * M + m0, mc * sizeof(float));
  }
}

/* The tiles over the N rows of W against the M panel columns of X: X is
 * A (M, K), packed transposed (straight 0), or B (K, M) (straight 1). */
static int run_tiles(int isa, const opd_exec_t *ex, int64_t M, int64_t N,
                     int64_t K, const float *X, const float *W,
                     const float *bias, int relu, int straight, float *C) {
  if (isa != OPD_GEMM_ISA_AVX2 && isa != OPD_GEMM_ISA_AVX512) return 0;
  if (M < OPD_GEMM_WT_MMIN || M > OPD_GEMM_WT_MMAX || N < OPD_GEMM_WT_NMIN || K < 1)
    return 0;
  const isa_kern_t *kn = &KERNS[isa];
  int64_t npanel = (M + kn->width - 1) / kn->width;
  float *P = aligned_alloc(64, (size_t)(npanel * kn->width * K) * sizeof(float));
  if (!P) return 0;
  if (straight)
    pack_b(M, K, X, P);
  else
    pack_at(M, K, X, P);
  wt_job_t j = {kn, M, N, K, W, P, bias, relu, straight, C};
  int64_t tiles = (N + kn->rmax - 1) / kn->rmax;
  int64_t per_tile = (int64_t)kn->rmax * npanel * kn->width * K;
  int64_t grain = WT_GRAIN / per_tile;
  if (!ex || tiles * per_tile <= WT_GRAIN)
    wt_range(&j, 0, tiles);
  else
    ex->parallel_for(ex, tiles, grain < 1 ? 1 : grain, wt_range, &j);
  free(P);
  return 1;
}

int opd__sgemm_wt_isa(int isa, const opd_exec_t *ex, int64_t M, int64_t N,
                      int64_t K, const float *A, const float *W,
                      const float *bias, int relu, float *C) {
  return run_tiles(isa, ex, M, N, K, A, W, bias, relu, 0, C);
}

int opd__sgemm_nn_small(const opd_exec_t *ex, int64_t M, int64_t N, int64_t K,
                        const float *A, const float *B, float *C) {
  return run_tiles(opd__gemm_wt_isa(), ex, N, M, K, B, A, NULL, 0, 1, C);
}

#else /* no tiles: every call declines */

int opd__gemm_wt_isa(void) { return OPD_GEMM_ISA_NONE; }

int opd__sgemm_wt_isa(int isa, const opd_exec_t *ex, int64_t M, int64_t N,
                      int64_t K, const float *A, const float *W,
                      const float *bias, int relu, float *C) {
  (void)isa, (void)ex, (void)M, (void)N, (void)K, (void)A, (void)W;
  (void)bias, (void)relu, (void)C;
  return 0;
}

int opd__sgemm_nn_small(const opd_exec_t *ex, int64_t M, int64_t N, int64_t K,
                        const float *A, const float *B, float *C) {
  (void)ex, (void)M, (void)N, (void)K, (void)A, (void)B, (void)C;
  return 0;
}

#endif /* HAVE_TILES */

int opd__sgemm_wt(const opd_exec_t *ex, int64_t M, int64_t N, int64_t K,
                  const float *A, const float *W, const float *bias, int relu,
                  float *C) {
  return opd__sgemm_wt_isa(opd__gemm_wt_isa(), ex, M, N, K, A, W, bias, relu,
                           C);
}
