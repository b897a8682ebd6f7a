/* conv3x3_bias_relu: y = relu(conv2d(x, weight, stride 1, padding 1) +
 * bias), one op instead of conv2d followed by relu (float32, NCHW).
 *
 *   x (N, C, H, W), weight (K, C, 3, 3), bias (K) -> y (N, K, H, W)
 *
 * Variants:
 *   cpu_ref   the plain 7-deep loop: the truth the others are checked
 *             against (tests/integration/test_plugins.c, bench)
 *   cpu_fast  one of two kernels by shape (conv_fast says which and why):
 *             a register-blocked direct convolution on a zero-padded copy
 *             of x: tiles of 6 output channels x 16 pixels held in
 *             vector registers across all 9*C taps, bias as the start of
 *             the sums, ReLU before the one store; tiles spread over the
 *             daemon's threads (call->exec). Or, when the plugin is built
 *             with OpenBLAS (Makefile: BLAS=auto finds it), conv3x3_blas.c:
 *             im2col + one sgemm per tile of output pixels, bias + ReLU
 *             on the tile while it is in cache
 *   cuda      conv3x3.cu, one of three kernels by shape: a direct
 *             convolution for few input channels (C < 16), else an
 *             implicit GEMM (FFMA) with bias + ReLU as its epilogue, or
 *             im2col + a cuBLASLt GEMM with a ReLU epilogue where the grid
 *             is small and the reduction long (split-K); float32 throughout
 * Bench: build/bench/bench_plugins (against opd conv2d + relu).
 */
#include <opd/op.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum { KB = 6 }; /* output channels per tile of cpu_fast */

static int shape_rule(opd_kcall_t *call, opd_tshape_t *out) {
  const opd_tview_t *x = &call->in[0], *w = &call->in[1], *b = &call->in[2];
  if (x->rank != 4)
    return opd_kerr(call, OPD_ESHAPE, "x has rank %d; expected (N, C, H, W)",
                    x->rank);
  if (w->rank != 4 || w->shape[2] != 3 || w->shape[3] != 3 ||
      w->shape[1] != x->shape[1])
    return opd_kerr(call, OPD_ESHAPE,
                    "weight must be (K, %lld, 3, 3) for x's %lld channels",
                    (long long)x->shape[1], (long long)x->shape[1]);
  if (b->rank != 1 || b->shape[0] != w->shape[0])
    return opd_kerr(call, OPD_ESHAPE, "bias must be (%lld): one per output "
                    "channel", (long long)w->shape[0]);
  out[0].dtype = OPD_DTYPE_FLOAT32;
  out[0].rank = 4;
  out[0].shape[0] = x->shape[0];
  out[0].shape[1] = w->shape[0];
  out[0].shape[2] = x->shape[2];
  out[0].shape[3] = x->shape[3];
  return 0;
}

static int conv_ref(opd_kcall_t *call) {
  const float *x = call->in[0].data, *wt = call->in[1].data,
              *bias = call->in[2].data;
  float *y = call->out[0].data;
  int64_t N = call->in[0].shape[0], C = call->in[0].shape[1],
          H = call->in[0].shape[2], W = call->in[0].shape[3],
          K = call->in[1].shape[0];
  for (int64_t n = 0; n < N; n++)
    for (int64_t k = 0; k < K; k++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t w = 0; w < W; w++) {
          double acc = bias[k];
          for (int64_t c = 0; c < C; c++)
            for (int r = 0; r < 3; r++)
              for (int s = 0; s < 3; s++) {
                int64_t ih = h + r - 1, iw = w + s - 1;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += (double)x[((n * C + c) * H + ih) * W + iw] *
                       wt[((k * C + c) * 3 + r) * 3 + s];
              }
          y[((n * K + k) * H + h) * W + w] = acc > 0 ? (float)acc : 0.0f;
        }
  return 0;
}

/* cpu_fast: register-blocked direct convolution. x is first copied into
 * a zero-padded buffer xp (N, C, H+2, Wp), Wp = W rounded up to 16, + 2,
 * so that the inner loop has no borders; the weights of each block of KB
 * output channels are laid out wb[kb][c][tap][KB] so one load brings a
 * tap's KB weights. An output tile is KB channels x 16 pixels of one row:
 * 2*KB vector accumulators that start at the bias, take 9*C taps of two
 * 8-float x vectors each, get ReLU and are stored once. Tiles are spread
 * over the daemon's threads by (n, channel block, row). */
enum { VW = 8, TW = 2 * VW };
typedef float v8 __attribute__((vector_size(VW * sizeof(float))));
typedef int32_t v8i __attribute__((vector_size(VW * sizeof(int32_t))));

typedef struct job {
  const float *x, *wt, *bias;
  float *y, *xp, *wb;
  int64_t N, C, H, W, K, Wp, kblocks;
  int avx2;                        /* the CPU has AVX2 and FMA */
} job_t;

/* The tile loop is compiled twice: for AVX2 + FMA (picked at run time
 * when the CPU has them) and for the baseline the plugin is built for. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HAVE_AVX2_CLONE 1
#define AVX2 __attribute__((target("avx2,fma"), optimize("fp-contract=fast")))
#else
#define HAVE_AVX2_CLONE 0
#endif

static void pad_range(void *arg, int64_t lo, int64_t hi) {
  const job_t *j = arg;
  for (int64_t p = lo; p < hi; p++) { /* plane p = n*C + c */
    float *dst = j->xp + p * (j->H + 2) * j->Wp;
    memset(dst, 0, sizeof(float) * (size_t)((j->H + 2) * j->Wp));
    for (int64_t h = 0; h < j->H; h++)
      memcpy(dst + (h + 1) * j->Wp + 1, j->x + (p * j->H + h) * j->W,
             sizeof(float) * (size_t)j->W);
  }
}

/* an unaligned load of 8 floats (a macro: no v8 crosses a call, whose
 * ABI would differ between the clones) */
#define LOAD8(v, p) memcpy(&(v), (p), sizeof(v8))

/* One row h of KB output channels (block kb) of image n. Inlined into
 * each clone below, so it is compiled for that clone's instructions. */
static inline __attribute__((always_inline)) void tile_rows(
    const job_t *j, int64_t n, int64_t kb, int64_t h) {
  const int64_t C = j->C, W = j->W, Wp = j->Wp, plane = (j->H + 2) * Wp;
  const int64_t k0 = kb * KB;
  const int nk = (int)(j->K - k0 < KB ? j->K - k0 : KB);
  const float *wb = j->wb + kb * C * 9 * KB;
  for (int64_t w0 = 0; w0 < W; w0 += TW) {
    v8 acc[KB][2];
    for (int q = 0; q < KB; q++) {
      const v8 zero = {0};
      acc[q][0] = acc[q][1] = zero + (q < nk ? j->bias[k0 + q] : 0.0f);
    }
    const float *xc = j->xp + n * C * plane + h * Wp + w0;
    for (int64_t c = 0; c < C; c++, xc += plane) {
      const float *wc = wb + c * 9 * KB;
      for (int r = 0; r < 3; r++)
        for (int s = 0; s < 3; s++) {
          v8 a, b;
          LOAD8(a, xc + r * Wp + s);
          LOAD8(b, xc + r * Wp + s + VW);
          const float *wt = wc + (r * 3 + s) * KB;
          for (int q = 0; q < KB; q++) {
            acc[q][0] += a * wt[q];
            acc[q][1] += b * wt[q];
          }
        }
    }
    int64_t nw = W - w0 < TW ? W - w0 : TW;
    for (int q = 0; q < nk; q++) {
      /* ReLU as a mask (x > 0 keeps x; NaN and negatives give 0, as
         cpu_ref), then one store of the 16 pixels, or of the nw left */
      const v8 zero = {0};
      v8 out[2];
      for (int v = 0; v < 2; v++)
        out[v] = (v8)((v8i)acc[q][v] & (acc[q][v] > zero));
      float *dst = j->y + ((n * j->K + k0 + q) * j->H + h) * W + w0;
      if (nw == TW) /* a constant size: two vector stores, no call */
        memcpy(dst, out, sizeof out);
      else
        memcpy(dst, out, sizeof(float) * (size_t)nw);
    }
  }
}

#if HAVE_AVX2_CLONE
AVX2 static void tile_rows_avx2(const job_t *j, int64_t n, int64_t kb,
                                int64_t h) {
  tile_rows(j, n, kb, h);
}
#endif
static void tile_rows_base(const job_t *j, int64_t n, int64_t kb, int64_t h) {
  tile_rows(j, n, kb, h);
}

static void tile_range(void *arg, int64_t lo, int64_t hi) {
  const job_t *j = arg;
  for (int64_t t = lo; t < hi; t++) { /* t = (n*kblocks + kb)*H + h */
    int64_t h = t % j->H, nk = t / j->H;
#if HAVE_AVX2_CLONE
    if (j->avx2) {
      tile_rows_avx2(j, nk / j->kblocks, nk % j->kblocks, h);
      continue;
    }
#endif
    tile_rows_base(j, nk / j->kblocks, nk % j->kblocks, h);
  }
}

/* conv3x3_blas.c: linked in when the plugin is built with OpenBLAS */
__attribute__((weak)) int conv3x3_bias_relu_blas(opd_kcall_t *call);

static int conv_fast(opd_kcall_t *call) {
  /* Which kernel: the direct one has no im2col and keeps its sums in
     registers; it wins where the reduction (9C) is short or there are
     few output channels (a sgemm with few rows or a short inner loop
     runs below its speed). Elsewhere OpenBLAS's sgemm is the faster
     inner loop, im2col included (bench/results/README.md). */
  const int64_t C = call->in[0].shape[1], K = call->in[1].shape[0],
                NHW = call->in[0].shape[0] * call->in[0].shape[2] *
                      call->in[0].shape[3];
  if (conv3x3_bias_relu_blas && C >= 32 && K >= 32 && 9 * C <= INT_MAX &&
      NHW <= INT_MAX && K <= INT_MAX) /* BLAS's int */
    return conv3x3_bias_relu_blas(call);
  job_t j = {.x = call->in[0].data, .wt = call->in[1].data,
             .bias = call->in[2].data, .y = call->out[0].data,
             .N = call->in[0].shape[0], .C = call->in[0].shape[1],
             .H = call->in[0].shape[2], .W = call->in[0].shape[3],
             .K = call->in[1].shape[0]};
  if (j.N * j.K * j.H * j.W == 0) return 0;
  j.Wp = (j.W + TW - 1) / TW * TW + 2;
#if HAVE_AVX2_CLONE
  j.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  j.kblocks = (j.K + KB - 1) / KB;
  size_t nxp = (size_t)(j.N * j.C * (j.H + 2) * j.Wp),
         nwb = (size_t)(j.kblocks * j.C * 9 * KB);
  j.xp = malloc(sizeof(float) * nxp);
  j.wb = calloc(nwb, sizeof(float));
  if (j.xp == NULL || j.wb == NULL) {
    free(j.xp);
    free(j.wb);
    return opd_kerr(call, OPD_ENOMEM, "no memory for the %zu-byte padded copy "
                    "of x", sizeof(float) * nxp);
  }
  for (int64_t k = 0; k < j.K; k++) /* wb[kb][c][tap][q], k = kb*KB + q */
    for (int64_t c = 0; c < j.C; c++)
      for (int t = 0; t < 9; t++)
        j.wb[((k / KB * j.C + c) * 9 + t) * KB + k % KB] = j.wt[(k * j.C + c) * 9 + t];
  call->exec->parallel_for(call->exec, j.N * j.C, 1, pad_range, &j);
  call->exec->parallel_for(call->exec, j.N * j.kblocks * j.H, 1, tile_range, &j);
  free(j.xp);
  free(j.wb);
  return 0;
}

__attribute__((weak)) int conv3x3_bias_relu_cuda(opd_kcall_t *call,
                                                 const opd_cuda_ctx_t *ctx);
__attribute__((weak)) size_t conv3x3_bias_relu_cuda_workspace(const opd_kcall_t *call);

static const opd_op_def_t conv_op = {
    .name = "conv3x3_bias_relu",
    .summary = "relu(conv2d(x, weight, stride 1, padding 1) + bias), fused "
               "(example plugin)",
    .n_in_min = 3, .n_in_max = 3, .n_out = 1,
    .in = {{"x", OPD_DT(FLOAT32), "(N, C, H, W)"},
           {"weight", OPD_DT(FLOAT32), "(K, C, 3, 3)"},
           {"bias", OPD_DT(FLOAT32), "(K)"}},
    .out = {{"y", OPD_DT(FLOAT32), "(N, K, H, W)"}},
    .shape_doc = "x (N, C, H, W), weight (K, C, 3, 3), bias (K) -> y (N, K, H, W)",
    .shape = shape_rule,
    .cpu_ref = conv_ref,
    .cpu_fast = conv_fast,
    .flags = OPD_OPF_CUDA_BLASLT, /* one CUDA path runs cuBLASLt */
    .cuda = conv3x3_bias_relu_cuda,
    .cuda_dtypes = OPD_DT(FLOAT32),
    .cuda_workspace = conv3x3_bias_relu_cuda_workspace, /* im2col's columns */
};

OPD_PLUGIN("conv3x3_bias_relu", "1.0", &conv_op)
