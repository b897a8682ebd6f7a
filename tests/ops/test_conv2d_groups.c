/* conv2d as F.conv2d: groups (depthwise included), unbatched input,
 * padding_mode "same" / "valid", asymmetric padding, each against a naive
 * reference written here (not the kernels' cpu_ref), and their errors. */
#include <math.h>
#include <stdlib.h>

#include "tests/ops/optest.h"

typedef struct geo {
  int64_t N, C, H, W, K, R, S, G;
  int64_t sh, sw, dh, dw;
  int64_t pt, pb, pl, pr;          /* padding top, bottom, left, right */
} geo_t;

/* y (N, K, P, Q) of a grouped convolution, straight from the definition:
 * output channel k sees input channels [g*C/G, (g+1)*C/G), g = k/(K/G). */
static float *naive(const geo_t *g, const float *x, const float *w,
                    const float *b, int64_t *P, int64_t *Q) {
  *P = (g->H + g->pt + g->pb - g->dh * (g->R - 1) - 1) / g->sh + 1;
  *Q = (g->W + g->pl + g->pr - g->dw * (g->S - 1) - 1) / g->sw + 1;
  int64_t Cg = g->C / g->G, Kg = g->K / g->G;
  float *y = calloc((size_t)(g->N * g->K * *P * *Q) + 1, sizeof(float));
  for (int64_t n = 0; n < g->N; n++)
    for (int64_t k = 0; k < g->K; k++)
      for (int64_t p = 0; p < *P; p++)
        for (int64_t q = 0; q < *Q; q++) {
          double acc = b ? b[k] : 0;
          for (int64_t c = 0; c < Cg; c++)
            for (int64_t r = 0; r < g->R; r++)
              for (int64_t s = 0; s < g->S; s++) {
                int64_t ih = p * g->sh - g->pt + r * g->dh;
                int64_t iw = q * g->sw - g->pl + s * g->dw;
                if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W) continue;
                int64_t ci = k / Kg * Cg + c;
                acc += (double)x[((n * g->C + ci) * g->H + ih) * g->W + iw] *
                       w[((k * Cg + c) * g->R + r) * g->S + s];
              }
          y[((n * g->K + k) * *P + p) * *Q + q] = (float)acc;
        }
  return y;
}

/* Runs case g (mode: padding_mode, or NULL for the explicit 4 pads; 
 * unbatched: x given as (C, H, W), N must be 1) through ref and fast,
 * each against the naive result. */
static void check(const geo_t *g, const char *mode, int unbatched, int bias,
                  uint64_t seed) {
  opd_kcall_t *c = ot_new("conv2d");
  float *x, *w, *b = NULL;
  if (unbatched)
    x = ot_in_rand(c, 0, 3, OT_SHAPE(g->C, g->H, g->W), seed, -1, 1);
  else
    x = ot_in_rand(c, 0, 4, OT_SHAPE(g->N, g->C, g->H, g->W), seed, -1, 1);
  w = ot_in_rand(c, 1, 4, OT_SHAPE(g->K, g->C / g->G, g->R, g->S), seed + 1,
                 -1, 1);
  if (bias) b = ot_in_rand(c, 2, 1, &g->K, seed + 2, -1, 1);
  ot_set_int(c, "groups", g->G);
  ot_set_ints(c, "stride", 2, OT_SHAPE(g->sh, g->sw));
  ot_set_ints(c, "dilation", 2, OT_SHAPE(g->dh, g->dw));
  if (mode)
    ot_set_str(c, "padding_mode", mode);
  else
    ot_set_ints(c, "padding", 4, OT_SHAPE(g->pt, g->pb, g->pl, g->pr));
  ot_ready(c);
  int64_t P, Q;
  float *want = naive(g, x, w, b, &P, &Q);
  int o = unbatched ? 0 : 1;
  cr_assert_eq(c->out[0].rank, 3 + o);
  if (!unbatched) cr_assert_eq(c->out[0].shape[0], g->N);
  cr_assert_eq(c->out[0].shape[o], g->K);
  cr_assert_eq(c->out[0].shape[o + 1], P, "P %lld, want %lld",
               (long long)c->out[0].shape[o + 1], (long long)P);
  cr_assert_eq(c->out[0].shape[o + 2], Q);
  int64_t n = g->N * g->K * P * Q;
  for (int fast = 0; fast < 2; fast++) {
    cr_assert_eq(ot_run(c, fast, ot_pool(fast ? 4 : 1)), 0, "%s", c->err);
    ot_assert_close(ot_out(c, 0), want, n, 1e-5, 1e-4,
                    fast ? "fast vs naive" : "ref vs naive");
  }
  ot_check_fast(c, 1e-5, 1e-4); /* serial and pools too */
  free(want);
  ot_free(c);
}

Test(conv2d_groups, grouped_and_depthwise) {
  geo_t cases[] = {
      /* N  C  H   W  K  R  S  G  sh sw dh dw  pt pb pl pr */
      {2, 4, 7, 9, 6, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1},    /* 2 groups */
      {1, 6, 8, 8, 9, 1, 1, 3, 1, 1, 1, 1, 0, 0, 0, 0},    /* 1x1 direct */
      {2, 8, 11, 10, 8, 3, 3, 8, 1, 1, 1, 1, 1, 1, 1, 1},  /* depthwise 3x3 */
      {1, 4, 9, 13, 8, 3, 3, 4, 2, 2, 1, 1, 1, 1, 1, 1},   /* x2, stride 2 */
      {1, 3, 12, 12, 3, 5, 3, 3, 1, 2, 2, 1, 2, 3, 0, 1},  /* dilated, asym */
      {3, 5, 6, 7, 15, 2, 4, 5, 2, 1, 1, 2, 0, 1, 3, 0},   /* x3 multiplier */
      {1, 32, 14, 14, 32, 3, 3, 32, 1, 1, 1, 1, 1, 1, 1, 1}, /* MobileNet */
      {2, 12, 5, 6, 6, 3, 3, 3, 1, 1, 1, 1, 0, 0, 2, 2},   /* Kg < Cg */
      {1, 4, 1, 1, 4, 3, 3, 4, 1, 1, 1, 1, 1, 1, 1, 1},    /* 1x1 image */
      {1, 6, 10, 11, 6, 3, 3, 6, 2, 1, 2, 2, 1, 3, 2, 0},  /* dw 3x3 dilated */
      {1, 2, 5, 2, 2, 3, 3, 2, 1, 1, 1, 2, 1, 1, 2, 2},    /* no interior */
      {2, 3, 16, 40, 6, 3, 3, 3, 1, 1, 1, 1, 0, 2, 1, 1},  /* long rows */
      {1, 4, 5, 6, 6, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 2},    /* 1x1, pad b/r */
      {2, 4, 5, 6, 4, 1, 1, 2, 1, 1, 1, 1, 0, 0, 0, 1},    /* grouped ditto */
      {1, 2, 100, 95, 2, 3, 3, 2, 2, 2, 1, 1, 1, 1, 1, 1}, /* dw s2, large */
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    check(&cases[k], NULL, 0, (int)(k % 2 == 0), 700 + 10 * k);
}

Test(conv2d_groups, padding_modes) {
  /* same: odd and even kernels, dilation, groups; valid */
  geo_t cases[] = {
      {2, 3, 7, 8, 4, 3, 3, 1, 1, 1, 1, 1, 0, 0, 0, 0},
      {1, 2, 6, 5, 3, 2, 2, 1, 1, 1, 1, 1, 0, 0, 0, 0},    /* even: asym */
      {1, 4, 9, 7, 4, 4, 3, 4, 1, 1, 2, 1, 0, 0, 0, 0},    /* even, dilated */
      {1, 6, 5, 5, 6, 5, 2, 2, 1, 1, 1, 3, 0, 0, 0, 0},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    geo_t g = cases[k];
    int64_t th = g.dh * (g.R - 1), tw = g.dw * (g.S - 1);
    g.pt = th / 2, g.pb = th - th / 2, g.pl = tw / 2, g.pr = tw - tw / 2;
    check(&g, "same", 0, 1, 800 + 10 * k);
    g.pt = g.pb = g.pl = g.pr = 0;
    check(&g, "valid", 0, 0, 900 + 10 * k);
  }
}

Test(conv2d_groups, same_even_kernel_by_hand) {
  /* x = 1..9 as 3x3, 2x2 of ones, 'same': the extra row and column go
   * bottom / right (torch), so y[p][q] = x[p..p+1][q..q+1] summed */
  float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w[4] = {1, 1, 1, 1};
  float want[9] = {12, 16, 9, 24, 28, 15, 15, 17, 9};
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = ot_new("conv2d");
    ot_in_vals(c, 0, 4, OT_SHAPE(1, 1, 3, 3), x);
    ot_in_vals(c, 1, 4, OT_SHAPE(1, 1, 2, 2), w);
    ot_set_str(c, "padding_mode", "same");
    ot_ready(c);
    cr_assert_eq(c->out[0].shape[2], 3);
    cr_assert_eq(c->out[0].shape[3], 3);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    ot_assert_close(ot_out(c, 0), want, 9, 0, 0, "same 2x2 by hand");
    ot_free(c);
  }
}

Test(conv2d_groups, unbatched) {
  geo_t cases[] = {
      {1, 3, 8, 9, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},
      {1, 6, 7, 7, 6, 3, 3, 6, 2, 2, 1, 1, 1, 1, 1, 1},    /* depthwise */
      {1, 4, 6, 6, 2, 1, 1, 2, 1, 1, 1, 1, 0, 0, 0, 0},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    check(&cases[k], NULL, 1, 1, 1000 + 10 * k);
  geo_t g = {1, 4, 5, 6, 4, 2, 2, 4, 1, 1, 1, 1, 0, 1, 0, 1};
  check(&g, "same", 1, 0, 1100);
}

Test(conv2d_groups, errors) {
  opd_kcall_t *c = ot_new("conv2d");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 4, OT_SHAPE(1, 6, 8, 8), NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 4, OT_SHAPE(4, 3, 3, 3), NULL);
  ot_set_int(c, "groups", 2);
  cr_assert_eq(ot_shape(c), 0, "%s", c->err);
  ot_set_int(c, "groups", 4); /* 6 % 4 */
  ot_expect_err(c, OPD_ESHAPE, "6 channels", "divisible", "groups=4", NULL);
  ot_set_int(c, "groups", 3); /* K 4 % 3 */
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 4, OT_SHAPE(4, 2, 3, 3), NULL);
  ot_expect_err(c, OPD_ESHAPE, "4 output channels", "groups=3", NULL);
  ot_set_int(c, "groups", 2); /* weight's dim 1 must be 6 / 2 */
  ot_expect_err(c, OPD_ESHAPE, "[4,2,3,3]", "6 / 2 = 3", NULL);
  ot_set_int(c, "groups", 0);
  ot_expect_err(c, OPD_EATTR, "groups=0", NULL);
  ot_set_int(c, "groups", 1);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 4, OT_SHAPE(4, 6, 3, 3), NULL);
  ot_set_str(c, "padding_mode", "same");
  cr_assert_eq(ot_shape(c), 0, "%s", c->err);
  cr_assert_eq(c->out[0].shape[2], 8);
  ot_set_ints(c, "stride", 1, OT_SHAPE(2));
  ot_expect_err(c, OPD_EATTR, "same", "stride 1", "[2, 2]", NULL);
  ot_set_ints(c, "stride", 1, OT_SHAPE(1));
  ot_set_ints(c, "padding", 1, OT_SHAPE(1));
  ot_expect_err(c, OPD_EATTR, "padding must be 0", NULL);
  ot_set_str(c, "padding_mode", "explicit");
  ot_set_ints(c, "padding", 4, OT_SHAPE(0, 1, 2, -1));
  ot_expect_err(c, OPD_EATTR, "padding=-1", "negative", NULL);
  ot_set_ints(c, "padding", 4, OT_SHAPE(0, 1, 2, 3));
  cr_assert_eq(ot_shape(c), 0, "%s", c->err);
  cr_assert_eq(c->out[0].shape[2], 7);  /* 8 + 1 - 2 */
  cr_assert_eq(c->out[0].shape[3], 11); /* 8 + 5 - 2 */
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 5, OT_SHAPE(1, 1, 6, 8, 8), NULL);
  ot_expect_err(c, OPD_ESHAPE, "(C, H, W)", NULL);
  ot_free(c);
}
