/* Small-batch C = A @ W^T (+ bias, relu) on the CPU: a register-blocked
 * AVX2/FMA micro-kernel over torch's (N, K) weight, the rows of W spread
 * over the caller's exec. Contract: gemm.h (opd__sgemm_wt).
 *
 * DESIGN
 * The transposed product C^T (N, M) = W (N, K) @ A^T (K, M) is an ordinary
 * GEMM whose left operand is W as given: a tile of R rows of W times a
 * panel of A^T two vectors wide keeps R x 2 vector accumulators in
 * registers; each step of k loads the panel's two vectors once and
 * broadcasts one element of each of the R rows (6 rows x 16 columns: 12
 * of the 16 ymm registers). A 12 x 32 AVX-512 tile ran no faster on the
 * VM's AVX-512 CPU and wastes more on padding (2026-12-07,
 * bench/results/2026-12-07-vm-cpu-gemm.txt, A), so there is none.
 * Only A is packed (A^T in panels of that width, zero padded: M x K
 * floats, small at these batches); W, the large operand, is read once per
 * panel in its own layout, so nothing is cached between calls and a
 * weight that changes is always read afresh. Each finished tile is added
 * to the bias, relu'd if asked, and written transposed into C's rows.
 * The row tiles are split over ex->parallel_for (the daemon's pool) as the
 * GEMV splits its rows, not over OpenBLAS's own threads, whose spinning
 * competes with the client on a small machine. Tail rows take tiles of 4
 * and 1 rows. AVX2+FMA is checked once from cpuid
 * (__builtin_cpu_supports); a CPU without it, another compiler, or a batch outside
 * [OPD_GEMM_WT_MMIN, OPD_GEMM_WT_MMAX] declines (returns 0) and the caller
 * takes the general GEMM.
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

typedef float v8f __attribute__((vector_size(32), aligned(4)));

#define T256 \
  __attribute__((target("avx2,fma"), \
                 optimize("O3", "no-trapping-math", "fp-contract=fast")))

/* NAME(K, W, ldw, P, out): out (R, 2L) = W[0..R) (R rows, stride ldw) @
 * P, P the (K, 2L) panel of A^T; L = lanes of VT. */
#define DEF_TILE(NAME, TGT, VT, R)                                         \
  TGT static void NAME(int64_t K, const float *W, int64_t ldw,             \
                       const float *P, float *out) {                       \
    enum { L = sizeof(VT) / sizeof(float) };                              \
    VT acc[R][2];                                                          \
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = (VT){0};           \
    for (int64_t k = 0; k < K; k++) {                                      \
      VT b0 = *(const VT *)(P + k * 2 * L);                                \
      VT b1 = *(const VT *)(P + k * 2 * L + L);                            \
      for (int r = 0; r < R; r++) {                                        \
        float a = W[r * ldw + k];                                          \
        acc[r][0] += a * b0;                                               \
        acc[r][1] += a * b1;                                               \
      }                                                                    \
    }                                                                      \
    for (int r = 0; r < R; r++) {                                          \
      *(VT *)(out + r * 2 * L) = acc[r][0];                                \
      *(VT *)(out + r * 2 * L + L) = acc[r][1];                            \
    }                                                                      \
  }

DEF_TILE(tile256_6, T256, v8f, 6)
DEF_TILE(tile256_4, T256, v8f, 4)
DEF_TILE(tile256_1, T256, v8f, 1)

typedef void (*tile_fn)(int64_t K, const float *W, int64_t ldw,
                        const float *P, float *out);

typedef struct isa_kern {
  int rmax;                        /* rows of the big tile */
  int width;                       /* panel columns: 2 vectors */
  tile_fn big, four, one;          /* tiles of rmax, 4 and 1 rows */
} isa_kern_t;

static const isa_kern_t KERNS[] = {
    [OPD_GEMM_ISA_AVX2] = {6, 16, tile256_6, tile256_4, tile256_1},
};

int opd__gemm_wt_isa(void) {
  static int isa = -1; /* a benign race: every thread computes the same */
  if (isa < 0) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      isa = OPD_GEMM_ISA_AVX2;
    else
      isa = OPD_GEMM_ISA_NONE;
  }
  return isa;
}

typedef struct wt_job {
  const isa_kern_t *kn;
  int64_t M, N, K;
  const float *W, *P, *bias;       /* P: npanel panels of (K, width) */
  int relu;
  float *C;                        /* (M, N) */
} wt_job_t;

/* Rows [n0, n0 + R) of C^T from tile fn: out is each panel's (R, width)
 * result, written transposed into C with the bias and relu. */
static void tile_rows(const wt_job_t *j, tile_fn fn, int R, int64_t n0,
                      float *out) {
  int w = j->kn->width;
  for (int64_t m0 = 0; m0 < j->M; m0 += w) {
    fn(j->K, j->W + n0 * j->K, j->K, j->P + m0 * j->K, out);
    int64_t mc = j->M - m0 < w ? j->M - m0 : w;
    for (int64_t c = 0; c < mc; c++) {
      float *y = j->C + (m0 + c) * j->N + n0;
      for (int r = 0; r < R; r++) {
        float v = out[r * w + c] + (j->bias ? j->bias[n0 + r] : 0.0f);
        y[r] = j->relu && v < 0 ? 0.0f : v; /* NaN passes, as relu */
      }
    }
  }
}

/* Row tiles [t0, t1) of the big tile (the last ones partial). */
static void wt_range(void *arg, int64_t t0, int64_t t1) {
  const wt_job_t *j = arg;
  const isa_kern_t *kn = j->kn;
  float out[6 * 16] __attribute__((aligned(64)));
  int64_t n1 = t1 * kn->rmax < j->N ? t1 * kn->rmax : j->N;
  int64_t n = t0 * kn->rmax;
  for (; n + kn->rmax <= n1; n += kn->rmax) tile_rows(j, kn->big, kn->rmax, n, out);
  for (; n + 4 <= n1; n += 4) tile_rows(j, kn->four, 4, n, out);
  for (; n < n1; n++) tile_rows(j, kn->one, 1, n, out);
}

/* P (panels of A^T, zero padded to whole panels of width w), copied in
 * blocks of 16 k: a cache line of each row of A at a time (row by row
 * whole, the rows' K-float stride aliases in L1 and costs twice as much). */
static void pack_at(int64_t M, int64_t K, const float *A, int w, float *P) {
  int64_t npanel = (M + w - 1) / w;
  memset(P, 0, (size_t)(npanel * w * K) * sizeof(float));
  for (int64_t m0 = 0; m0 < M; m0 += w) {
    int64_t mc = M - m0 < w ? M - m0 : w;
    for (int64_t k0 = 0; k0 < K; k0 += 16) {
      int64_t kc = K - k0 < 16 ? K - k0 : 16;
      float *p = P + m0 * K + k0 * w;
      for (int64_t c = 0; c < mc; c++) {
        const float *a = A + (m0 + c) * K + k0;
        for (int64_t kk = 0; kk < kc; kk++) p[kk * w + c] = a[kk];
      }
    }
  }
}

int opd__sgemm_wt_isa(int isa, const opd_exec_t *ex, int64_t M, int64_t N,
                      int64_t K, const float *A, const float *W,
                      const float *bias, int relu, float *C) {
  if (isa != OPD_GEMM_ISA_AVX2) return 0;
  if (M < OPD_GEMM_WT_MMIN || M > OPD_GEMM_WT_MMAX || N < OPD_GEMM_WT_NMIN || K < 1)
    return 0;
  const isa_kern_t *kn = &KERNS[isa];
  int64_t npanel = (M + kn->width - 1) / kn->width;
  float *P = aligned_alloc(64, (size_t)(npanel * kn->width * K) * sizeof(float));
  if (!P) return 0;
  pack_at(M, K, A, kn->width, P);
  wt_job_t j = {kn, M, N, K, W, P, bias, relu, C};
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

#else /* no tiles: every call declines */

int opd__gemm_wt_isa(void) { return OPD_GEMM_ISA_NONE; }

int opd__sgemm_wt_isa(int isa, const opd_exec_t *ex, int64_t M, int64_t N,
                      int64_t K, const float *A, const float *W,
                      const float *bias, int relu, float *C) {
  (void)isa, (void)ex, (void)M, (void)N, (void)K, (void)A, (void)W;
  (void)bias, (void)relu, (void)C;
  return 0;
}

#endif /* HAVE_TILES */

int opd__sgemm_wt(const opd_exec_t *ex, int64_t M, int64_t N, int64_t K,
                  const float *A, const float *W, const float *bias, int relu,
                  float *C) {
  return opd__sgemm_wt_isa(opd__gemm_wt_isa(), ex, M, N, K, A, W, bias, relu,
                           C);
}
