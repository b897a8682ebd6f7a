/* conv3x3_bias_relu: y = relu(conv2d(x, weight, stride 1, padding 1) +
 * bias), one op instead of conv2d followed by relu (float32, NCHW).
 *
 *   x (N, C, H, W), weight (K, C, 3, 3), bias (K) -> y (N, K, H, W)
 *
 * Variants:
 *   cpu_ref   the plain 7-deep loop: the truth the others are checked
 *             against (tests/integration/test_plugins.c, bench)
 *   cpu_fast  direct convolution, 4 output channels per pass (each x row
 *             loaded once for 4 accumulating y rows), bias as the
 *             accumulator's start and ReLU on the plane still in cache;
 *             planes spread over the daemon's threads (call->exec)
 *   cuda      conv3x3.cu: shared-memory tiles of 16x16 pixels x 8 channels
 * Bench: build/bench/bench_plugins (against opd conv2d + relu).
 */
#include <opd/op.h>
#include <string.h>

enum { KB = 4 }; /* output channels per pass of cpu_fast */

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

typedef struct job {
  const float *x, *wt, *bias;
  float *y;
  int64_t C, H, W, K, kblocks;
} job_t;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FAST __attribute__((target_clones("arch=haswell", "default")))
#else
#define FAST
#endif

/* y[k0..k0+kb) of image n: rows of x times 3 taps, accumulated. */
FAST static void planes(const job_t *j, int64_t n, int64_t k0, int kb) {
  const int64_t C = j->C, H = j->H, W = j->W, HW = H * W;
  float *y[KB];
  for (int q = 0; q < kb; q++) {
    y[q] = j->y + (n * j->K + k0 + q) * HW;
    for (int64_t i = 0; i < HW; i++) y[q][i] = j->bias[k0 + q];
  }
  for (int64_t c = 0; c < C; c++) {
    const float *xp = j->x + (n * C + c) * HW;
    float wk[KB][9];
    for (int q = 0; q < kb; q++)
      memcpy(wk[q], j->wt + ((k0 + q) * C + c) * 9, sizeof wk[q]);
    for (int64_t h = 0; h < H; h++)
      for (int r = 0; r < 3; r++) {
        int64_t ih = h + r - 1;
        if (ih < 0 || ih >= H) continue;
        const float *xr = xp + ih * W;
        for (int q = 0; q < kb; q++) {
          float *yr = y[q] + h * W;
          const float w0 = wk[q][r * 3], w1 = wk[q][r * 3 + 1],
                      w2 = wk[q][r * 3 + 2];
          yr[0] += w1 * xr[0] + (W > 1 ? w2 * xr[1] : 0.0f);
          for (int64_t w = 1; w < W - 1; w++)
            yr[w] += w0 * xr[w - 1] + w1 * xr[w] + w2 * xr[w + 1];
          if (W > 1) yr[W - 1] += w0 * xr[W - 2] + w1 * xr[W - 1];
        }
      }
  }
  for (int q = 0; q < kb; q++)
    for (int64_t i = 0; i < HW; i++) y[q][i] = y[q][i] > 0 ? y[q][i] : 0.0f;
}

static void range(void *arg, int64_t lo, int64_t hi) {
  const job_t *j = arg;
  for (int64_t t = lo; t < hi; t++) {
    int64_t n = t / j->kblocks, k0 = (t % j->kblocks) * KB;
    planes(j, n, k0, (int)(j->K - k0 < KB ? j->K - k0 : KB));
  }
}

static int conv_fast(opd_kcall_t *call) {
  job_t j = {call->in[0].data, call->in[1].data, call->in[2].data,
             call->out[0].data, call->in[0].shape[1], call->in[0].shape[2],
             call->in[0].shape[3], call->in[1].shape[0], 0};
  j.kblocks = (j.K + KB - 1) / KB;
  call->exec->parallel_for(call->exec, call->in[0].shape[0] * j.kblocks, 1,
                           range, &j);
  return 0;
}

__attribute__((weak)) int conv3x3_bias_relu_cuda(opd_kcall_t *call,
                                                 const opd_cuda_ctx_t *ctx);

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
    .cuda = conv3x3_bias_relu_cuda,
    .cuda_dtypes = OPD_DT(FLOAT32),
};

OPD_PLUGIN("conv3x3_bias_relu", "1.0", &conv_op)
