/* gru_cell on the CPU: one torch.nn.GRUCell step, float32 (formulas and
 * shapes: op.c, gru.h).
 *
 * Variants:
 *   cpu_ref   per output element the six dot products it needs (rows j,
 *             H+j, 2H+j of w_ih with x and of w_hh with h) in double,
 *             the gates in double, rounded once (the truth); no scratch
 *   cpu_fast  gi = x @ w_ih^T and gh = h @ w_hh^T (B, 3H) through the
 *             shared GEMM (kernels/common/gemm.h: its GEMV on call->exec
 *             for batch 1),
 *             then one gate pass (biases, sigmoid, tanh, blend; 8 lanes,
 *             the activations of kernels/common/act.h) over the batch
 *             rows, spread over call->exec
 * Scratch (cpu_fast): gi and gh, 6BH floats, on the stack up to
 * STACK_FLOATS (32 KiB: B = 1 up to H = 1365, the trading shapes), else
 * malloc'd for the call and freed before it returns (OPD_ENOMEM when that
 * fails). I == 0 gives gi = 0 (the biases only).
 * Test: build/tests/ops, suite gru_cell (tests/ops/test_gru.c).
 */
#include <math.h>
#include <stdlib.h>

#include "kernels/common/act.h"
#include "kernels/common/cpu.h"
#include "kernels/common/gemm.h"
#include "kernels/common/kutil.h"
#include "kernels/gru_cell/gru.h"

OPD_OP_DECLARE(gru_cell);

#define STACK_FLOATS 8192

static double dotd(const float *a, const float *b, int64_t n) {
  double s = 0;
  for (int64_t k = 0; k < n; k++) s += (double)a[k] * b[k];
  return s;
}

int opd__gru_cell_cpu_ref(opd_kcall_t *call) {
  gru_dims_t d = opd__gru_dims(call);
  const float *x = call->in[0].data, *h = call->in[1].data;
  const float *wi = call->in[2].data, *wh = call->in[3].data;
  const float *bi = d.has_bih ? call->in[4].data : NULL;
  const float *bh = d.has_bhh ? call->in[5].data : NULL;
  float *y = call->out[0].data;
  int64_t H = d.H, I = d.I;
  for (int64_t b = 0; b < d.B; b++) {
    const float *xb = x + b * I, *hb = h + b * H;
    for (int64_t j = 0; j < H; j++) {
      double gi[3], gh[3];
      for (int g = 0; g < 3; g++) {
        int64_t row = g * H + j;
        gi[g] = dotd(wi + row * I, xb, I) + (bi ? bi[row] : 0.0);
        gh[g] = dotd(wh + row * H, hb, H) + (bh ? bh[row] : 0.0);
      }
      double r = 1.0 / (1.0 + exp(-(gi[0] + gh[0])));
      double z = 1.0 / (1.0 + exp(-(gi[1] + gh[1])));
      double n = tanh(gi[2] + r * gh[2]);
      y[b * H + j] = (float)((1.0 - z) * n + z * hb[j]);
    }
  }
  return 0;
}

typedef struct gru_job {
  const gru_dims_t *d;             /* sizes */
  float *gi, *gh;                  /* (B, 3H) products, no bias: scratch */
  const float *bi, *bh;            /* (3H) biases or NULL */
  const float *h;                  /* (B, H) */
  float *y;                        /* (B, H) */
} gru_job_t;

/* One gate step on 8 lanes (V = opd_v8f, with opd__v8_*) or one (V =
 * float, with opd__*1): r, z from the summed products, n, the blend. */
#define GRU_GATES(V, SIG, TANH, ir, iz, in, hr, hz, hn, h)                 \
  ({                                                                       \
    V r_ = SIG((ir) + (hr)), z_ = SIG((iz) + (hz));                        \
    V n_ = TANH((in) + r_ * (hn));                                         \
    (1.0f - z_) * n_ + z_ * (h);                                           \
  })

/* The gates of batch rows [b0, b1): the biases added to gi and gh in
 * place (they are scratch), then 8 lanes of the gate step, the tail one by
 * one (the activations of kernels/common/act.h). */
__attribute__((optimize("fp-contract=fast")))
OPD_FAST static void gates(void *arg, int64_t b0, int64_t b1) {
  const gru_job_t *j = arg;
  int64_t H = j->d->H;
  for (int64_t b = b0; b < b1; b++) {
    float *gi = j->gi + b * 3 * H, *gh = j->gh + b * 3 * H;
    const float *h = j->h + b * H;
    float *y = j->y + b * H;
    for (int64_t k = 0; j->bi && k < 3 * H; k++) gi[k] += j->bi[k];
    for (int64_t k = 0; j->bh && k < 3 * H; k++) gh[k] += j->bh[k];
    int64_t k = 0;
    for (; k + 8 <= H; k += 8) {
      opd_v8f v = GRU_GATES(opd_v8f, opd__v8_sigmoid, opd__v8_tanh, opd__v8_load(gi + k),
                            opd__v8_load(gi + H + k), opd__v8_load(gi + 2 * H + k),
                            opd__v8_load(gh + k), opd__v8_load(gh + H + k),
                            opd__v8_load(gh + 2 * H + k), opd__v8_load(h + k));
      opd__v8_store(y + k, v);
    }
    for (; k < H; k++)
      y[k] = GRU_GATES(float, opd__sigmoid1, opd__tanh1, gi[k], gi[H + k], gi[2 * H + k],
                       gh[k], gh[H + k], gh[2 * H + k], h[k]);
  }
}

int opd__gru_cell_cpu_fast(opd_kcall_t *call) {
  gru_dims_t d = opd__gru_dims(call);
  if (d.B == 0 || d.H == 0) return 0;
  if (!opd__gemm_fits(d.B, 3 * d.H, d.I > d.H ? d.I : d.H))
    return opd__gru_cell_cpu_ref(call);
  size_t n = (size_t)(6 * d.B * d.H);
  float stack[STACK_FLOATS], *scratch = stack;
  if (n > STACK_FLOATS && !(scratch = malloc(n * sizeof(float))))
    return opd__kerr(call, OPD_ENOMEM, "no memory for %zu bytes of scratch",
                     n * sizeof(float));
  float *gi = scratch, *gh = scratch + 3 * d.B * d.H;
  if (d.B == 1) { /* batch 1: the GEMVs on call->exec's threads */
    opd__sgemv_t(call->exec, 3 * d.H, d.I, call->in[0].data, call->in[2].data, 0.0f, gi);
    opd__sgemv_t(call->exec, 3 * d.H, d.H, call->in[1].data, call->in[3].data, 0.0f, gh);
  } else {
    if (d.I == 0)
      memset(gi, 0, (size_t)(3 * d.B * d.H) * sizeof(float));
    else
      opd__sgemm_ex(call->exec, 1, d.B, 3 * d.H, d.I, call->in[0].data, call->in[2].data,
                    0.0f, gi);
    opd__sgemm_ex(call->exec, 1, d.B, 3 * d.H, d.H, call->in[1].data, call->in[3].data, 0.0f,
                  gh);
  }
  gru_job_t j = {&d, gi, gh, d.has_bih ? call->in[4].data : NULL,
                 d.has_bhh ? call->in[5].data : NULL, call->in[1].data,
                 call->out[0].data};
  call->exec->parallel_for(call->exec, d.B, opd__row_grain(4 * d.H), gates, &j);
  if (scratch != stack) free(scratch);
  return 0;
}
