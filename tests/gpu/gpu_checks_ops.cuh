/* Part of tests/gpu/gpu_kernels.cu, included there at this point (one
 * translation unit: its helpers and counts): matmul, linear, gru_cell,
 * conv2d (every variant), nms, copy and noop against their CPU reference. */

static void check_matmul(void) {
  struct { in_spec_t a, b; } cases[] = {
      {{2, S(1, 1), -1, 1, NULL}, {2, S(1, 1), -1, 1, NULL}},
      {{2, S(37, 53), -1, 1, NULL}, {2, S(53, 29), -1, 1, NULL}},
      {{2, S(128, 256), -1, 1, NULL}, {2, S(256, 64), -1, 1, NULL}},
      {{1, S(53), -1, 1, NULL}, {2, S(53, 29), -1, 1, NULL}},
      {{2, S(37, 53), -1, 1, NULL}, {1, S(53), -1, 1, NULL}},
      {{1, S(300), -1, 1, NULL}, {1, S(300), -1, 1, NULL}},
      {{3, S(5, 17, 33), -1, 1, NULL}, {2, S(33, 9), -1, 1, NULL}},          /* fold */
      {{3, S(5, 17, 33), -1, 1, NULL}, {3, S(5, 33, 9), -1, 1, NULL}},       /* strided */
      {{2, S(17, 33), -1, 1, NULL}, {3, S(5, 33, 9), -1, 1, NULL}},          /* bcast-a */
      {{4, S(2, 1, 8, 16), -1, 1, NULL}, {3, S(3, 16, 8), -1, 1, NULL}},     /* items */
      {{3, S(1, 7, 64), -1, 1, NULL}, {3, S(4, 64, 5), -1, 1, NULL}},
      {{2, S(4, 0), -1, 1, NULL}, {2, S(0, 6), -1, 1, NULL}},                /* K = 0 */
      {{2, S(0, 8), -1, 1, NULL}, {2, S(8, 6), -1, 1, NULL}},
      {{2, S(64, 1000), -1, 1, NULL}, {2, S(1000, 96), -1, 1, NULL}},
      {{2, S(16, 4096), -1, 1, NULL}, {2, S(4096, 24), -1, 1, NULL}},    /* split-K */
  };
  for (int d = 0; d < 3; d++)
    for (auto &c : cases) {
      in_spec_t in[2] = {c.a, c.b};
      int64_t K = c.a.shape[c.a.rank - 1];
      double a, r;
      tol(DTS[d], &a, &r, 0, 1e-5);
      a = DTS[d] == OPD_DTYPE_FLOAT32 ? (double)K * ldexp(1.0, -22) : a * sqrt((double)K + 1);
      run_case("matmul", "", DTS[d], 2, in, no_attrs, a, r);
    }
}

/* linear (the table's kernel) with the inputs of `mask` (bit i: input i)
 * moved `off` bytes past 16-byte alignment, as arena offsets can put
 * them: the paths without 16-byte loads or cuBLASLt's bias epilogue. */
static int linear_moved(opd_kcall_t *c, const opd_cuda_ctx_t *x, unsigned mask, size_t off) {
  char *buf[3] = {NULL, NULL, NULL};
  void *keep[3];
  for (int i = 0; i < c->n_in; i++) {
    if (!(mask >> i & 1)) continue;
    size_t n = (size_t)c->in[i].numel * opd__dtype_size(c->in[i].dtype);
    CK(cudaMalloc(&buf[i], n + 16));
    CK(cudaMemcpyAsync(buf[i] + off, c->in[i].data, n, cudaMemcpyDeviceToDevice, g_stream));
    keep[i] = c->in[i].data;
    c->in[i].data = buf[i] + off;
  }
  int rc = opd__op_find("linear")->cuda(c, x);
  CK(cudaStreamSynchronize(g_stream));
  for (int i = 0; i < c->n_in; i++)
    if (buf[i]) {
      c->in[i].data = keep[i];
      CK(cudaFree(buf[i]));
    }
  return rc;
}
static int linear_misaligned_bias(opd_kcall_t *c, const opd_cuda_ctx_t *x) {
  return linear_moved(c, x, 1u << 2, 4);
}
static int linear_moved_all4(opd_kcall_t *c, const opd_cuda_ctx_t *x) {
  return linear_moved(c, x, 7u, 4);
}
static int linear_moved_w2(opd_kcall_t *c, const opd_cuda_ctx_t *x) {
  return linear_moved(c, x, 1u << 1, 2);
}
static int linear_gemv(opd_kcall_t *c, const opd_cuda_ctx_t *x) {
  return opd__linear_cuda_variant(c, x, OPD_LINEAR_GEMV);
}
static int linear_blaslt(opd_kcall_t *c, const opd_cuda_ctx_t *x) {
  return opd__linear_cuda_variant(c, x, OPD_LINEAR_BLASLT);
}

/* Every act with and without bias (cuBLASLt's epilogues: BIAS, RELU_BIAS,
 * GELU_BIAS for gelu_tanh; act_kernel after BIAS for gelu and silu), a
 * misaligned bias, batch 1 (the trading MLP's shapes), ragged sizes, a
 * 3-d x, K = 0 (act of the bias). Tolerances: matmul's. */
static void check_linear(void) {
  static const char *acts[5] = {"none", "relu", "gelu", "gelu_tanh", "silu"};
  struct { int rank; int64_t x[3]; int64_t N; } cases[] = {
      {2, {1, 256}, 512}, {2, {1, 512}, 512}, {2, {1, 512}, 1}, {2, {1, 1}, 1},
      {2, {37, 53}, 29},  {3, {2, 5, 33}, 17}, {1, {64}, 7},     {2, {128, 1000}, 96},
      {2, {4, 0}, 6},     {2, {0, 8}, 6},
  };
  for (int d = 0; d < 3; d++)
    for (auto &k : cases)
      for (int act = 0; act < 5; act++)
        for (int bias = 0; bias < 3; bias++) { /* 2: misaligned bias */
          if (bias == 2 && act != 1 && act != 2) continue;
          int64_t K = k.x[k.rank - 1];
          in_spec_t in[3] = {{k.rank, {k.x[0], k.x[1], k.x[2]}, -1, 1, NULL},
                             {2, S(k.N, K), -0.5f, 0.5f, NULL},
                             {1, S(k.N), -1, 1, NULL}};
          double a, r;
          tol(DTS[d], &a, &r, 0, 1e-5);
          a = DTS[d] == OPD_DTYPE_FLOAT32 ? (double)(K + 1) * ldexp(1.0, -22)
                                          : a * sqrt((double)K + 1);
          char label[48];
          snprintf(label, sizeof label, "[%s%s]", acts[act],
                   bias == 2 ? ",misaligned-bias" : bias ? ",bias" : "");
          const char *an = acts[act];
          run_case("linear", label, DTS[d], 2 + (bias > 0), in,
                   [an](opd_kcall_t *c) { strcpy(attr(c, "act")->s, an); }, a, r,
                   bias == 2 ? linear_misaligned_bias : NULL);
        }
}

/* linear at M <= 8 (the gemv variant) and just past it: every case
 * through gemv and cuBLASLt forced (each act with bias, none and relu
 * without), and through the table's kernel with x, W and bias 4 bytes
 * off 16-byte alignment and (float16 / bfloat16) W one element off. M =
 * 1, 3, 5, 8 (2-d and 3-d x), K odd, not a multiple of 4 or 8, 0, or
 * long (x staged in several chunks: 8192 at M = 1, 4100 at M = 8; K
 * split over 4 warps for N = 3), N = 1 (the MLP's last layer), 7, 512.
 * M = 9 goes to cuBLASLt, and the gemv variant refuses it. Tolerances:
 * matmul's. */
static void check_linear_small(void) {
  if (!wanted("linear")) return;
  static const char *acts[5] = {"none", "relu", "gelu", "gelu_tanh", "silu"};
  struct { int rank; int64_t x[3]; int64_t N; } cases[] = {
      {2, {1, 256}, 512}, {2, {1, 512}, 1},   {1, {64}, 7},        {2, {3, 53}, 29},
      {2, {8, 1000}, 17}, {3, {2, 4, 37}, 9}, {2, {5, 130}, 33},   {2, {1, 8192}, 3},
      {2, {8, 4100}, 5},  {2, {4, 2048}, 1},  {2, {2, 6}, 1},      {2, {1, 0}, 6},
      {2, {9, 64}, 7},
  };
  struct { const char *name; cuda_fn fn; } paths[4] = {{"gemv", linear_gemv},
      {"blaslt", linear_blaslt}, {"moved4", linear_moved_all4}, {"moved-w2", linear_moved_w2}};
  for (int d = 0; d < 3; d++)
    for (auto &k : cases) {
      int64_t K = k.x[k.rank - 1], M = k.rank == 1 ? 1 : k.x[0] * (k.rank == 3 ? k.x[1] : 1);
      in_spec_t in[3] = {{k.rank, {k.x[0], k.x[1], k.x[2]}, -1, 1, NULL},
                         {2, S(k.N, K), -0.5f, 0.5f, NULL},
                         {1, S(k.N), -1, 1, NULL}};
      double a, r;
      tol(DTS[d], &a, &r, 0, 1e-5);
      a = DTS[d] == OPD_DTYPE_FLOAT32 ? (double)(K + 1) * ldexp(1.0, -22)
                                      : a * sqrt((double)K + 1);
      for (auto &pa : paths)
        for (int act = 0; act < 5; act++)
          for (int bias = 0; bias < 2; bias++) {
            bool moved = pa.fn == linear_moved_all4 || pa.fn == linear_moved_w2;
            if (!bias && act > 1) continue;
            if (moved && (!bias || (act != 1 && act != 3))) continue;
            if (pa.fn == linear_moved_w2 && DTS[d] == OPD_DTYPE_FLOAT32) continue;
            if (pa.fn == linear_gemv && M > 8) continue;
            char label[64];
            snprintf(label, sizeof label, "[%s,%s%s]", pa.name, acts[act], bias ? ",bias" : "");
            const char *an = acts[act];
            run_case("linear", label, DTS[d], 2 + bias, in,
                     [an](opd_kcall_t *c) { strcpy(attr(c, "act")->s, an); }, a, r, pa.fn);
          }
    }
  /* the gemv variant on M = 9: OPD_EINVAL, nothing written */
  opd_kcall_t c;
  call_init(&c, "linear");
  int64_t sx[2] = {9, 4}, sw[2] = {3, 4};
  c.n_in = 2;
  set_view(&c.in[0], OPD_DTYPE_FLOAT32, 2, sx, NULL);
  set_view(&c.in[1], OPD_DTYPE_FLOAT32, 2, sw, NULL);
  shape_outs(&c);
  int rc = opd__linear_cuda_variant(&c, &g_ctx, OPD_LINEAR_GEMV);
  bool ok = rc == OPD_EINVAL && strstr(c.err, "at most 8 rows") != NULL;
  printf("gpu op=linear[gemv,M=9 refused] dtype=float32 shape=[9,4]x[3,4] max_abs_err=0 "
         "max_rel_err=0 %s (%s)\n", ok ? "PASS" : "FAIL", c.err);
  ok ? g_pass++ : g_fail++;
}

/* gru_cell with 0, 1 or 2 biases, batch 1 to 33, unbatched. gi and gh
 * stay in float between the GEMMs and the gate kernel; the half types'
 * atol is matmul's (sqrt of the reduction length), as for linear. */
static void check_gru_cell(void) {
  struct { int64_t B, I, H; int unbatched; } cases[] = {
      {1, 256, 128, 0}, {1, 32, 512, 0}, {1, 1, 1, 0}, {3, 7, 5, 0},
      {33, 40, 65, 0},  {1, 9, 11, 1},   {2, 0, 3, 0},
  };
  for (int d = 0; d < 3; d++)
    for (auto &k : cases)
      for (int nb = 0; nb <= 2; nb++) {
        int rk = k.unbatched ? 1 : 2;
        in_spec_t in[6] = {{rk, {0}, -1, 1, NULL},
                           {rk, {0}, -1, 1, NULL},
                           {2, S(3 * k.H, k.I), -0.3f, 0.3f, NULL},
                           {2, S(3 * k.H, k.H), -0.3f, 0.3f, NULL},
                           {1, S(3 * k.H), -0.5f, 0.5f, NULL},
                           {1, S(3 * k.H), -0.5f, 0.5f, NULL}};
        const int64_t xs[2] = {k.B, k.I}, hs[2] = {k.B, k.H};
        for (int i = 0; i < rk; i++) {
          in[0].shape[i] = xs[2 - rk + i];
          in[1].shape[i] = hs[2 - rk + i];
        }
        double a, r;
        tol(DTS[d], &a, &r, 0, 1e-5);
        a = DTS[d] == OPD_DTYPE_FLOAT32 ? (double)(k.I + k.H + 1) * ldexp(1.0, -22)
                                        : a * sqrt((double)(k.I + k.H) + 1);
        const char *labels[3] = {"", "[b_ih]", "[b_ih,b_hh]"};
        run_case("gru_cell", labels[nb], DTS[d], 4 + nb, in, no_attrs, a, r);
      }
}

static int conv_im2col(opd_kcall_t *c, const opd_cuda_ctx_t *x) {
  return opd__conv2d_cuda_variant(c, x, OPD_CONV_IM2COL);
}
static int conv_direct(opd_kcall_t *c, const opd_cuda_ctx_t *x) {
  return opd__conv2d_cuda_variant(c, x, OPD_CONV_DIRECT3X3);
}
static int conv_igemm(opd_kcall_t *c, const opd_cuda_ctx_t *x) {
  return opd__conv2d_cuda_variant(c, x, OPD_CONV_IGEMM);
}
static int conv_winograd(opd_kcall_t *c, const opd_cuda_ctx_t *x) {
  return opd__conv2d_cuda_variant(c, x, OPD_CONV_WINOGRAD);
}
static int conv_grouped(opd_kcall_t *c, const opd_cuda_ctx_t *x) {
  return opd__conv2d_cuda_variant(c, x, OPD_CONV_GROUPED);
}
static int conv_igemm_l(opd_kcall_t *c, const opd_cuda_ctx_t *x) {
  return opd__conv2d_cuda_igemm(c, x, OPD_IGEMM_TILE_L);
}
static int conv_igemm_m(opd_kcall_t *c, const opd_cuda_ctx_t *x) {
  return opd__conv2d_cuda_igemm(c, x, OPD_IGEMM_TILE_M);
}
static int conv_igemm_s(opd_kcall_t *c, const opd_cuda_ctx_t *x) {
  return opd__conv2d_cuda_igemm(c, x, OPD_IGEMM_TILE_S);
}

/* Every case through AUTO (""), im2col and igemm (its tile by size), every
 * igemm tile forced (L / M / S), and direct3x3 where it applies, in each
 * dtype: odd C (not a multiple of the 8 / 32 channel stages), K past one
 * or two 64-channel tiles, pixel counts that end mid-tile, tiles that
 * span images (P*Q < tile), padding 0 / 1 / 2, bias or not, stride,
 * dilation, 1 x N and 5 x 5 kernels, and long reductions onto few outputs
 * (C*R*S >= 1170 onto <= 100 pixels, where cuBLASLt's heuristic splits K
 * in im2col; the parts must be summed in float: C130 10x10 failed in
 * float16 / bfloat16 on the GPU machine (2026-12-01) while cuBLASLt was free to sum them in
 * the output type, kernels/cuda/gemm.cuh). */
/* conv2d as F.conv2d beyond groups=1: grouped and depthwise (AUTO runs
 * the grouped kernel), unbatched (C, H, W) input (groups 1: through every
 * variant; the plan makes it N = 1), padding [top, bottom, left, right]
 * and padding_mode "same" with an even kernel (asymmetric pads). */
static void check_conv2d_groups(void) {
  struct cg {
    int64_t N, C, H, W, K, R, S, G, sh, sw, pt, pb, pl, pr, dh, dw;
    int bias, unbatched;
    const char *mode;              /* padding_mode, NULL: the 4 pads */
  } cases[] = {
      {2, 4, 9, 11, 6, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, NULL},   /* 2 groups */
      {2, 32, 28, 28, 32, 3, 3, 32, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, NULL}, /* depthwise */
      {1, 16, 29, 30, 16, 3, 3, 16, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0, NULL}, /* dw stride 2 */
      {1, 8, 12, 12, 24, 5, 5, 8, 1, 1, 2, 2, 2, 2, 1, 1, 1, 0, NULL},  /* multiplier 3 */
      {1, 12, 10, 10, 6, 1, 1, 3, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, NULL},  /* grouped 1x1 */
      {1, 6, 13, 9, 6, 3, 3, 3, 1, 1, 0, 2, 1, 0, 2, 1, 0, 0, NULL},    /* asym, dilated */
      {2, 8, 6, 7, 12, 1, 1, 1, 1, 1, 0, 1, 0, 2, 1, 1, 1, 0, NULL},    /* 1x1, pad b/r */
      {2, 8, 10, 7, 8, 4, 2, 8, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, "same"},  /* even: asym */
      {1, 3, 17, 19, 8, 2, 2, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, "same"}, /* groups 1 */
      {1, 16, 12, 12, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, NULL}, /* unbatched */
      {1, 12, 9, 9, 12, 3, 3, 12, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, "same"},
      {1, 5, 8, 6, 10, 3, 3, 5, 1, 1, 0, 0, 0, 0, 1, 1, 0, 1, "valid"},
  };
  struct { const char *label; cuda_fn fn; } variants[] = {
      {"", NULL},                    {"[im2col]", conv_im2col},   {"[igemm]", conv_igemm},
      {"[direct3x3]", conv_direct},  {"[winograd]", conv_winograd}, {"[grouped]", conv_grouped},
  };
  for (int d = 0; d < 3; d++)
    for (auto &k : cases) {
      in_spec_t in[3] = {{4, S(k.N, k.C, k.H, k.W), -1, 1, NULL},
                         {4, S(k.K, k.C / k.G, k.R, k.S), -1, 1, NULL},
                         {1, S(k.K), -1, 1, NULL}};
      if (k.unbatched) in[0] = {3, S(k.C, k.H, k.W), -1, 1, NULL};
      auto at = [k](opd_kcall_t *c) {
        attr(c, "groups")->i = k.G;
        opd_attr_val_t *v = attr(c, "stride");
        v->n = 2; v->ints[0] = k.sh; v->ints[1] = k.sw;
        v = attr(c, "dilation");
        v->n = 2; v->ints[0] = k.dh; v->ints[1] = k.dw;
        if (k.mode) {
          snprintf(attr(c, "padding_mode")->s, OPD_MAX_NAME, "%s", k.mode);
        } else {
          v = attr(c, "padding");
          v->n = 4; v->ints[0] = k.pt; v->ints[1] = k.pb; v->ints[2] = k.pl; v->ints[3] = k.pr;
        }
      };
      int64_t red = k.C / k.G * k.R * k.S;
      double a, r;
      tol(DTS[d], &a, &r, 0, 1e-5);
      a = DTS[d] == OPD_DTYPE_FLOAT32 ? (double)red * ldexp(1.0, -22) : a * sqrt((double)red + 1);
      bool direct = k.R == 3 && k.S == 3 && k.sh == 1 && k.sw == 1 && k.dh == 1 && k.dw == 1;
      for (auto &v : variants) {
        if (k.G > 1 && v.fn != NULL && v.fn != conv_grouped) continue; /* groups = 1 only */
        if ((v.fn == conv_direct || v.fn == conv_winograd) && !direct) continue;
        run_case("conv2d", v.label, DTS[d], 2 + k.bias, in, at, a, r, v.fn);
      }
    }
}

static void check_conv2d(void) {
  struct cc { int64_t N, C, H, W, K, R, S, sh, sw, ph, pw, dh, dw; int bias; } cases[] = {
      {1, 3, 17, 19, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1},
      {2, 5, 16, 16, 17, 3, 3, 1, 1, 0, 0, 1, 1, 0},
      {1, 20, 33, 9, 20, 3, 3, 1, 1, 2, 1, 1, 1, 1},
      {1, 1, 1, 1, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1},
      {2, 4, 15, 13, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1},  /* stride */
      {1, 3, 20, 20, 5, 3, 3, 1, 1, 2, 2, 2, 2, 0},  /* dilation */
      {1, 3, 11, 12, 4, 5, 3, 2, 1, 0, 3, 1, 2, 1},  /* mixed */
      {2, 8, 9, 9, 12, 1, 1, 1, 1, 0, 0, 1, 1, 1},   /* pointwise */
      {1, 6, 10, 10, 3, 1, 1, 2, 2, 1, 1, 1, 1, 0},
      {1, 64, 28, 28, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1},
      {2, 37, 23, 29, 70, 3, 3, 1, 1, 1, 1, 1, 1, 1}, /* odd C, 2 K tiles, odd pixels */
      {1, 16, 12, 20, 64, 3, 3, 1, 1, 0, 0, 1, 1, 0}, /* padding 0, K = one tile */
      {3, 9, 5, 7, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1},    /* tiles span images */
      {1, 130, 10, 10, 24, 3, 3, 1, 1, 1, 1, 1, 1, 0}, /* 5 channel chunks, last partial */
      {1, 3, 40, 40, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1},  /* first layer */
      {1, 8, 15, 11, 9, 5, 5, 1, 1, 2, 2, 1, 1, 1},   /* 5x5 */
      {2, 33, 7, 40, 65, 1, 3, 1, 1, 0, 1, 1, 1, 0},  /* 1x3, K = 65 */
      {1, 48, 9, 9, 130, 3, 3, 1, 1, 2, 2, 1, 1, 1},  /* padding 2, 3 K tiles */
      {1, 256, 7, 7, 16, 3, 3, 1, 1, 1, 1, 1, 1, 0},  /* C*R*S 2304 onto 16 x 49: split-K */
      {2, 160, 6, 6, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1},  /* split-K, batched, bias + beta 1 */
  };
  struct { const char *label; cuda_fn fn; } variants[] = {
      {"", NULL},                    {"[im2col]", conv_im2col},   {"[igemm]", conv_igemm},
      {"[igemm:L]", conv_igemm_l},   {"[igemm:M]", conv_igemm_m}, {"[igemm:S]", conv_igemm_s},
      {"[direct3x3]", conv_direct},  {"[winograd]", conv_winograd},
      {"[grouped]", conv_grouped},
  };
  for (int d = 0; d < 3; d++)
    for (auto &k : cases) {
      in_spec_t in[3] = {{4, S(k.N, k.C, k.H, k.W), -1, 1, NULL},
                         {4, S(k.K, k.C, k.R, k.S), -1, 1, NULL},
                         {1, S(k.K), -1, 1, NULL}};
      auto at = [k](opd_kcall_t *c) {
        opd_attr_val_t *v = attr(c, "stride");
        v->n = 2; v->ints[0] = k.sh; v->ints[1] = k.sw;
        v = attr(c, "padding");
        v->n = 2; v->ints[0] = k.ph; v->ints[1] = k.pw;
        v = attr(c, "dilation");
        v->n = 2; v->ints[0] = k.dh; v->ints[1] = k.dw;
      };
      int64_t red = k.C * k.R * k.S;
      double a, r;
      tol(DTS[d], &a, &r, 0, 1e-5);
      a = DTS[d] == OPD_DTYPE_FLOAT32 ? (double)red * ldexp(1.0, -22) : a * sqrt((double)red + 1);
      bool direct = k.R == 3 && k.S == 3 && k.sh == 1 && k.sw == 1 && k.dh == 1 && k.dw == 1;
      for (auto &v : variants)
        if ((v.fn != conv_direct && v.fn != conv_winograd) || direct)
          run_case("conv2d", v.label, DTS[d], 2 + k.bias, in, at, a, r, v.fn);
    }
  check_conv2d_groups();
}

static void check_nms(void) {
  int64_t Ns[] = {0, 1, 5, 64, 65, 300, 1000, 5000};
  for (int64_t n : Ns)
    for (int ties = 0; ties < 2; ties++) {
      std::vector<float> boxes((size_t)(4 * n + 4)), scores((size_t)(n + 1));
      for (int64_t i = 0; i < n; i++) {
        float x = frand(0, 100), y = frand(0, 100), w = frand(1, 30), h = frand(1, 30);
        boxes[4 * i] = x;
        boxes[4 * i + 1] = y;
        boxes[4 * i + 2] = x + w;
        boxes[4 * i + 3] = y + h;
        scores[i] = ties ? (float)(int)frand(0, 4) * 0.25f : frand(0, 1);
      }
      if (ties && n >= 5) { /* duplicate boxes: IoU exactly 1 */
        for (int k = 0; k < 4; k++) boxes[4 + k] = boxes[k];
        scores[1] = scores[0];
      }
      in_spec_t in[2] = {{2, S(n, 4), 0, 0, boxes.data()}, {1, S(n), 0, 0, scores.data()}};
      run_case("nms", ties ? "[ties]" : "", OPD_DTYPE_FLOAT32, 2, in,
               [](opd_kcall_t *c) {
                 opd_attr_val_t *v = attr(c, "iou_threshold");
                 v->type = OPD_ATTR_FLOAT;
                 v->f = 0.5;
               },
               0, 0);
    }
}

/* copy: strided views (transposed, sliced) of every element size. */
static void check_copy(void) {
  if (!wanted("copy")) return;
  int dts[] = {OPD_DTYPE_INT8, OPD_DTYPE_FLOAT16, OPD_DTYPE_BFLOAT16, OPD_DTYPE_FLOAT32,
               OPD_DTYPE_INT64};
  struct { int rank; int64_t shape[4], strides[4], span; } views[] = {
      {2, {5, 7}, {1, 5}, 35},              /* transpose of (7, 5) */
      {3, {4, 3, 6}, {36, 1, 6}, 144},      /* permuted */
      {2, {10, 8}, {32, 2}, 320},           /* every other column */
      {1, {1000}, {1}, 1000},               /* contiguous: memcpy */
      {3, {2, 1, 9}, {20, 99, 2}, 40},      /* a dim of 1 */
      {0, {0}, {0}, 1},                     /* 0-d */
      {2, {0, 4}, {4, 1}, 1},               /* empty */
  };
  for (int dt : dts)
    for (auto &v : views) {
      size_t esz = opd__dtype_size(dt), bytes = (size_t)v.span * esz;
      std::vector<unsigned char> src(bytes);
      for (auto &b : src) b = (unsigned char)(frand(0, 256));
      void *dsrc;
      CK(cudaMalloc(&dsrc, bytes));
      CK(cudaMemcpy(dsrc, src.data(), bytes, cudaMemcpyHostToDevice));
      opd_kcall_t ref, gpu;
      call_init(&ref, "copy");
      call_init(&gpu, "copy");
      ref.n_in = gpu.n_in = 1;
      set_view(&ref.in[0], dt, v.rank, v.shape, src.data());
      set_view(&gpu.in[0], dt, v.rank, v.shape, dsrc);
      for (int d = 0; d < v.rank; d++) ref.in[0].strides[d] = gpu.in[0].strides[d] = v.strides[d];
      shape_outs(&ref);
      shape_outs(&gpu);
      int64_t n = ref.out[0].numel;
      std::vector<unsigned char> want((size_t)(n + 1) * esz), got((size_t)(n + 1) * esz);
      ref.out[0].data = want.data();
      void *dout;
      CK(cudaMalloc(&dout, (size_t)(n + 1) * esz));
      gpu.out[0].data = dout;
      ref.op->cpu_ref(&ref);
      int rg = opd__op_find("copy")->cuda(&gpu, &g_ctx);
      CK(cudaStreamSynchronize(g_stream));
      CK(cudaMemcpy(got.data(), dout, (size_t)n * esz, cudaMemcpyDeviceToHost));
      bool ok = rg == 0 && memcmp(got.data(), want.data(), (size_t)n * esz) == 0;
      char shp[160];
      opd__shape_str(shp, sizeof shp, v.shape, v.rank);
      if (wanted("copy"))
        printf("gpu op=copy dtype=%s shape=%s max_abs_err=%d max_rel_err=0 %s\n",
               opd__kdtype_name(dt), shp, ok ? 0 : 1, ok ? "PASS" : "FAIL");
      ok ? g_pass++ : g_fail++;
      CK(cudaFree(dsrc));
      CK(cudaFree(dout));
    }
}

static void check_noop(void) {
  if (!wanted("noop")) return;
  opd_kcall_t c;
  call_init(&c, "noop");
  int rc = opd__op_find("noop")->cuda(&c, &g_ctx);
  printf("gpu op=noop dtype=any shape=[] max_abs_err=0 max_rel_err=0 %s\n", rc ? "FAIL" : "PASS");
  rc ? g_fail++ : g_pass++;
}
