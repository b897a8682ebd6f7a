/* The attention family on the CPU: sdpa, rope and swiglu by hand, fast
 * vs ref (rank 3 and 4, causal with Tq <, = and > Tk, bool and float
 * masks broadcast from several shapes, Dv != D, Tk = 0, fully masked
 * rows, GPT-2's D = 64 at T = 256, ragged sizes), causal equal to its
 * triangular bool mask, and shape / dtype / attribute errors naming what
 * was wrong. */
#include <math.h>
#include <stdlib.h>

#include "tests/ops/optest.h"

/* A bool mask of n elements, True where (i * 7 + 3) % 5 != 0 (and every
 * element of row `dead` False when dead >= 0, rows of length tk). */
static uint8_t *bool_mask(int64_t n, int64_t tk, int64_t dead) {
  uint8_t *m = malloc((size_t)(n > 0 ? n : 1));
  cr_assert(m);
  for (int64_t i = 0; i < n; i++)
    m[i] = (i * 7 + 3) % 5 != 0 && !(dead >= 0 && tk > 0 && (i / tk) == dead);
  return m;
}

Test(sdpa, by_hand) {
  /* one query, two keys, D = 1: scores (1*0, 1*ln2) -> weights 1/3, 2/3 */
  float q[1] = {1}, k[2] = {0, 0.69314718056f}, v[2] = {3, 6}, want[1] = {5};
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = ot_new("sdpa");
    ot_in_vals(c, 0, 3, OT_SHAPE(1, 1, 1), q);
    ot_in_vals(c, 1, 3, OT_SHAPE(1, 2, 1), k);
    ot_in_vals(c, 2, 3, OT_SHAPE(1, 2, 1), v);
    ot_ready(c);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    ot_assert_close(ot_out(c, 0), want, 1, 1e-6, 1e-6, "sdpa");
    ot_set_float(c, "scale", 2.0); /* scores (0, 2 ln2): weights 1/5, 4/5 */
    float want2[1] = {3.0f / 5 + 24.0f / 5};
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    ot_assert_close(ot_out(c, 0), want2, 1, 1e-6, 1e-6, "sdpa scale");
    ot_free(c);
  }
}

typedef struct sdpa_case {
  int rank;
  int64_t B, H, Tq, Tk, D, Dv;
  int causal;
  int mask;                        /* 0 none, 1 bool, 2 float */
  int mrank;                       /* mask rank; its shape: see mask_shape */
  int bcast;                       /* mask dims of extent 1: bit i = dim i */
  double scale;
} sdpa_case_t;

/* Builds the call of case k; returns it ready (outputs allocated). */
static opd_kcall_t *sdpa_call(const sdpa_case_t *k, uint64_t seed, uint8_t **own) {
  opd_kcall_t *c = ot_new("sdpa");
  int r = k->rank;
  int64_t qs[4] = {k->B, k->H, k->Tq, k->D}, ks[4] = {k->B, k->H, k->Tk, k->D},
          vs[4] = {k->B, k->H, k->Tk, k->Dv};
  ot_in_rand(c, 0, r, qs + 4 - r, seed, -2, 2);
  ot_in_rand(c, 1, r, ks + 4 - r, seed + 1, -2, 2);
  ot_in_rand(c, 2, r, vs + 4 - r, seed + 2, -1, 1);
  *own = NULL;
  if (k->mask) {
    int64_t full[4] = {k->B, k->H, k->Tq, k->Tk}, ms[4];
    const int64_t *f = full + 4 - r;
    for (int i = 0; i < k->mrank; i++) {
      int d = r - k->mrank + i; /* the scores' dim this mask dim meets */
      ms[i] = (k->bcast >> i & 1) ? 1 : f[d];
    }
    int64_t n = 1;
    for (int i = 0; i < k->mrank; i++) n *= ms[i];
    if (k->mask == 1) {
      *own = bool_mask(n, ms[k->mrank - 1], 1);
      ot_in(c, 3, OPD_DTYPE_BOOL, k->mrank, ms, *own);
    } else {
      float *m = ot_in_rand(c, 3, k->mrank, ms, seed + 3, -3, 1);
      for (int64_t i = 0; i < n; i += 5) m[i] = -INFINITY;
    }
  }
  if (k->causal) ot_set_int(c, "causal", 1);
  if (k->scale != 0) ot_set_float(c, "scale", k->scale);
  ot_ready(c);
  return c;
}

Test(sdpa, fast_matches_ref) {
  sdpa_case_t cases[] = {
      {4, 1, 12, 16, 16, 64, 64, 1, 0, 0, 0, 0},    /* GPT-2, T = 16 */
      {4, 2, 12, 256, 256, 64, 64, 1, 0, 0, 0, 0},  /* GPT-2, T = 256 */
      {4, 4, 2, 100, 100, 64, 64, 1, 0, 0, 0, 0},   /* B = 4 */
      {4, 1, 2, 7, 19, 8, 8, 1, 0, 0, 0, 0},        /* causal, Tq < Tk */
      {4, 1, 2, 70, 19, 8, 8, 1, 0, 0, 0, 0},       /* causal, Tq > Tk */
      {4, 2, 3, 33, 65, 24, 40, 0, 0, 0, 0, 0},     /* Dv != D */
      {3, 5, 1, 17, 130, 5, 3, 0, 0, 0, 0, 0.3},    /* rank 3, scale */
      {3, 3, 1, 20, 20, 16, 16, 1, 0, 0, 0, 0},     /* rank 3 causal */
      {4, 2, 3, 9, 70, 16, 16, 0, 1, 4, 0, 0},      /* bool, full shape */
      {4, 2, 3, 9, 70, 16, 16, 0, 1, 2, 0, 0},      /* bool (Tq, Tk) */
      {4, 2, 3, 9, 70, 16, 16, 0, 1, 4, 0x3, 0},    /* bool (1, 1, Tq, Tk) */
      {4, 2, 3, 9, 70, 16, 16, 0, 1, 4, 0x6, 0},    /* bool (B, 1, 1, Tk) */
      {4, 2, 3, 9, 70, 16, 16, 0, 1, 1, 0, 0},      /* bool (Tk) */
      {3, 4, 1, 9, 70, 16, 16, 0, 1, 3, 0x2, 0},    /* rank 3, (N, 1, Tk) */
      {4, 2, 3, 9, 70, 16, 16, 0, 2, 4, 0, 0},      /* float, full, -inf */
      {4, 2, 3, 9, 70, 16, 16, 0, 2, 3, 0x1, 0},    /* float (1, Tq, Tk) */
      {3, 2, 1, 9, 70, 16, 16, 0, 2, 2, 0, 0},      /* rank 3 float (Tq, Tk) */
      {4, 1, 2, 5, 0, 8, 8, 0, 0, 0, 0, 0},         /* Tk = 0: zeros */
      {4, 1, 2, 5, 0, 8, 8, 1, 0, 0, 0, 0},
      {4, 0, 2, 5, 5, 8, 8, 0, 0, 0, 0, 0},         /* B = 0 */
      {4, 1, 1, 3, 3, 0, 4, 0, 0, 0, 0, 0},         /* D = 0: uniform */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint8_t *m;
    opd_kcall_t *c = sdpa_call(&cases[i], 100 + 10 * i, &m);
    ot_check_fast(c, 1e-6, 1e-5);
    if (cases[i].mask == 1 && cases[i].mrank >= 2 && /* query 1 all False */
        !(cases[i].bcast >> (cases[i].mrank - 2) & 1)) {
      const float *o = ot_out(c, 0);
      int64_t Dv = cases[i].Dv;
      for (int64_t e = 0; e < Dv; e++) cr_assert_eq(o[Dv + e], 0.0f, "case %zu", i);
    }
    if (cases[i].Tk == 0) {
      const float *o = ot_out(c, 0);
      for (int64_t e = 0; e < c->out[0].numel; e++) cr_assert_eq(o[e], 0.0f);
    }
    ot_free(c);
    free(m);
  }
}

Test(sdpa, large_scores) {
  /* scores up to ~1e3 (scale 30): the running max grows by hundreds from
   * block to block; a float score carries ~|s| 2^-24 of rounding, which
   * moves a weight by as much: tolerance 1e-5 + 1e-4|ref| */
  for (int causal = 0; causal < 2; causal++) {
    sdpa_case_t k = {4, 1, 2, 40, 150, 16, 16, causal, 0, 0, 0, 30};
    uint8_t *unused;
    opd_kcall_t *c = sdpa_call(&k, 11 + causal, &unused);
    ot_check_fast(c, 1e-5, 1e-4);
    ot_free(c);
  }
}

Test(sdpa, nan_makes_its_row_nan) {
  sdpa_case_t k = {4, 1, 1, 20, 100, 8, 8, 0, 0, 0, 0, 0};
  uint8_t *unused;
  opd_kcall_t *c = sdpa_call(&k, 9, &unused);
  ((float *)c->in[0].data)[3 * 8 + 2] = NAN; /* q row 3 */
  for (int fast = 0; fast < 2; fast++) {
    cr_assert_eq(ot_run(c, fast, ot_pool(2)), 0, "%s", c->err);
    const float *o = ot_out(c, 0);
    for (int64_t i = 0; i < 20; i++)
      for (int e = 0; e < 8; e++)
        cr_assert_eq(isnan(o[i * 8 + e]) != 0, i == 3, "fast %d row %lld", fast, (long long)i);
  }
}

Test(sdpa, causal_equals_its_triangular_mask) {
  for (int t = 0; t < 3; t++) {
    int64_t Tq = (int64_t[]){40, 7, 90}[t], Tk = (int64_t[]){40, 61, 33}[t];
    sdpa_case_t k = {4, 2, 2, Tq, Tk, 16, 16, 1, 0, 0, 0, 0};
    uint8_t *unused, *tri = malloc((size_t)(Tq * Tk));
    cr_assert(tri);
    for (int64_t i = 0; i < Tq; i++)
      for (int64_t j = 0; j < Tk; j++) tri[i * Tk + j] = j <= i; /* top-left */
    opd_kcall_t *a = sdpa_call(&k, 7, &unused);
    k.causal = 0;
    opd_kcall_t *b = sdpa_call(&k, 7, &unused);
    ot_in(b, 3, OPD_DTYPE_BOOL, 2, OT_SHAPE(Tq, Tk), tri);
    ot_ready(b);
    for (int fast = 0; fast < 2; fast++) {
      cr_assert_eq(ot_run(a, fast, ot_pool(2)), 0, "%s", a->err);
      cr_assert_eq(ot_run(b, fast, ot_pool(2)), 0, "%s", b->err);
      ot_assert_close(ot_out(a, 0), ot_out(b, 0), a->out[0].numel, 0, 0, "causal");
    }
    ot_free(a);
    ot_free(b);
    free(tri);
  }
}

Test(sdpa, shape_errors) {
  opd_kcall_t *c = ot_new("sdpa");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 4, OT_SHAPE(2, 3, 5, 8), NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 4, OT_SHAPE(2, 3, 7, 8), NULL);
  ot_in(c, 2, OPD_DTYPE_FLOAT32, 4, OT_SHAPE(2, 3, 7, 4), NULL);
  cr_assert_eq(ot_shape(c), 0, "%s", c->err);
  cr_assert_eq(c->out[0].shape[3], 4);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 4, OT_SHAPE(2, 3, 7, 6), NULL);
  ot_expect_err(c, OPD_ESHAPE, "[2,3,5,8]", "[2,3,7,6]", "head dims", NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 4, OT_SHAPE(2, 4, 7, 8), NULL);
  ot_expect_err(c, OPD_ESHAPE, "[2,4,7,8]", "batch dims", NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 3, OT_SHAPE(6, 7, 8), NULL);
  ot_expect_err(c, OPD_ESHAPE, "[6,7,8]", "rank", NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 4, OT_SHAPE(2, 3, 6, 8), NULL);
  ot_expect_err(c, OPD_ESHAPE, "key lengths", "[2,3,7,4]", NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT16, 4, OT_SHAPE(2, 3, 7, 8), NULL);
  ot_expect_err(c, OPD_EDTYPE, "k is float16", NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 4, OT_SHAPE(2, 3, 7, 8), NULL);
  ot_in(c, 3, OPD_DTYPE_BOOL, 2, OT_SHAPE(5, 6), NULL);
  ot_expect_err(c, OPD_ESHAPE, "mask", "[5,6]", "[2,3,5,7]", NULL);
  ot_in(c, 3, OPD_DTYPE_BOOL, 5, OT_SHAPE(1, 2, 3, 5, 7), NULL);
  ot_expect_err(c, OPD_ESHAPE, "mask", "[1,2,3,5,7]", NULL);
  ot_in(c, 3, OPD_DTYPE_FLOAT16, 2, OT_SHAPE(5, 7), NULL);
  ot_expect_err(c, OPD_EDTYPE, "mask is float16", "bool", NULL);
  ot_in(c, 3, OPD_DTYPE_BOOL, 3, OT_SHAPE(3, 1, 7), NULL);
  cr_assert_eq(ot_shape(c), 0, "%s", c->err);
  ot_set_int(c, "causal", 1);
  ot_expect_err(c, OPD_EATTR, "causal", "mask", NULL);
  ot_free(c);
  c = ot_new("sdpa");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(5, 8), NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(5, 8), NULL);
  ot_in(c, 2, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(5, 8), NULL);
  ot_expect_err(c, OPD_ESHAPE, "[5,8]", "rank 4", NULL);
}

/* ---- rope ---------------------------------------------------------------- */

Test(rope, by_hand) {
  /* D = 2: (a, b) -> (a cos0 - b sin0, b cos1 + a sin1) */
  float x[2] = {1, 2}, cs[2] = {0.5f, 0.25f}, sn[2] = {3, 4}, want[2] = {0.5f - 6, 0.5f + 4};
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = ot_new("rope");
    ot_in_vals(c, 0, 2, OT_SHAPE(1, 2), x);
    ot_in_vals(c, 1, 2, OT_SHAPE(1, 2), cs);
    ot_in_vals(c, 2, 2, OT_SHAPE(1, 2), sn);
    ot_ready(c);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    ot_assert_close(ot_out(c, 0), want, 2, 0, 1e-7, "rope");
    ot_free(c);
  }
}

Test(rope, fast_matches_ref) {
  struct { int rx; int64_t x[4]; int rc; int64_t c[4]; } cases[] = {
      {4, {2, 4, 16, 64}, 2, {16, 64}},       /* (T, D) */
      {4, {2, 4, 16, 64}, 4, {2, 1, 16, 64}}, /* (B, 1, T, D) */
      {3, {3, 9, 10}, 2, {9, 10}},            /* D = 10: no 8-lane multiple */
      {2, {5, 128}, 2, {5, 1}},               /* a broadcast last dim */
      {3, {0, 4, 8}, 2, {4, 8}},              /* empty */
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    opd_kcall_t *c = ot_new("rope");
    ot_in_rand(c, 0, cases[k].rx, cases[k].x, 300 + k, -3, 3);
    ot_in_rand(c, 1, cases[k].rc, cases[k].c, 310 + k, -1, 1);
    ot_in_rand(c, 2, cases[k].rc, cases[k].c, 320 + k, -1, 1);
    ot_ready(c);
    ot_check_fast(c, 1e-6, 1e-5);
    ot_free(c);
  }
}

Test(rope, shape_errors) {
  opd_kcall_t *c = ot_new("rope");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 3, OT_SHAPE(2, 5, 7), NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(5, 7), NULL);
  ot_in(c, 2, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(5, 7), NULL);
  ot_expect_err(c, OPD_ESHAPE, "[2,5,7]", "D even", NULL);
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 3, OT_SHAPE(2, 5, 8), NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(5, 8), NULL);
  ot_in(c, 2, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(6, 8), NULL);
  ot_expect_err(c, OPD_ESHAPE, "cos [5,8]", "sin [6,8]", NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(6, 8), NULL);
  ot_expect_err(c, OPD_ESHAPE, "[6,8]", "[2,5,8]", NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT32, 4, OT_SHAPE(1, 2, 5, 8), NULL);
  ot_in(c, 2, OPD_DTYPE_FLOAT32, 4, OT_SHAPE(1, 2, 5, 8), NULL);
  ot_expect_err(c, OPD_ESHAPE, "[1,2,5,8]", "[2,5,8]", NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT16, 2, OT_SHAPE(5, 8), NULL);
  ot_expect_err(c, OPD_EDTYPE, "float16", NULL);
}

/* ---- swiglu -------------------------------------------------------------- */

Test(swiglu, by_hand) {
  /* silu(0) * 5 = 0, silu(1) * 2 = 2 / (1 + e^-1) */
  float x[4] = {0, 1, 5, 2}, want[2] = {0, 1.46211715726f};
  for (int fast = 0; fast < 2; fast++) {
    opd_kcall_t *c = ot_new("swiglu");
    ot_in_vals(c, 0, 2, OT_SHAPE(1, 4), x);
    ot_ready(c);
    cr_assert_eq(c->out[0].shape[1], 2);
    cr_assert_eq(ot_run(c, fast, &opd__exec_serial), 0);
    ot_assert_close(ot_out(c, 0), want, 2, 1e-7, 1e-6, "swiglu");
    ot_free(c);
  }
}

Test(swiglu, fast_matches_ref) {
  struct { int r; int64_t x[3]; } cases[] = {
      {2, {4, 6144}}, {3, {2, 3, 22}}, {1, {2}}, {2, {1000, 18}}, {2, {0, 8}}, {2, {3, 0}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    opd_kcall_t *c = ot_new("swiglu");
    ot_in_rand(c, 0, cases[k].r, cases[k].x, 400 + k, -8, 8);
    ot_ready(c);
    ot_check_fast(c, 1e-6, 1e-5);
    ot_free(c);
  }
}

Test(swiglu, shape_errors) {
  opd_kcall_t *c = ot_new("swiglu");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(3, 7), NULL);
  ot_expect_err(c, OPD_ESHAPE, "[3,7]", "even", NULL);
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 0, OT_SHAPE(0), NULL);
  ot_expect_err(c, OPD_ESHAPE, "[]", NULL);
}
