/* Part of tests/gpu/gpu_kernels.cu, included there at this point (one
 * translation unit: its helpers and counts): the attention family (sdpa,
 * rope, swiglu) against its CPU reference.
 *
 * sdpa: through the table's kernel (for float16 / bfloat16 with D and
 * Dv multiples of 16 up to 64: sdpa_wmma, on tensor cores) and, for the
 * half types, the CUDA-core kernel forced ("[cores]"); rank 4 and 3,
 * GPT-2's shapes (D = 64, B = 1..4, T = 16..256, causal), causal with
 * Tq < Tk and Tq > Tk, Dv != D, odd sizes, D = 128, Tk = 0 (zeros), a float mask broadcast from (Tq, Tk) and (B, 1, 1, Tk)
 * with -inf entries and a fully masked row, the same through a bool mask
 * ("[bool]": the float mask's 0 / -inf turned into True / False on the
 * device, the reference keeping the float form, which means the same),
 * D = 129 refused with OPD_ELIMIT, and the kernel captured into a CUDA
 * graph ("[graph]": replayed, bit-equal to the plain launch); --bench: each
 * variant at GPT-2's shapes (bench_sdpa, below).
 * Tolerances: float32 2e-5 + 1e-4|ref| (float accumulation against the
 * reference's double); the half types tol()'s with atol raised to 1e-3
 * (float16) and 8e-3 (bfloat16): sdpa_wmma rounds the weights p to the
 * dtype before p v, an error of at most 2^-11 (2^-8) of the output's
 * scale, which is 1 here (a weighted mean of v's values in [-1, 1]).
 */

extern "C" {
#include "kernels/attn/attn.h"
}

/* Marks every 5th element and row 1 (of rows of `tk`) with -inf, the rest
 * random in [-2, 1) (zero: 0). */
static std::vector<float> sdpa_mask_vals(int64_t n, int64_t tk, bool zero) {
  std::vector<float> m((size_t)(n > 0 ? n : 1));
  for (int64_t i = 0; i < n; i++)
    m[i] = (i % 5 == 0 || (tk > 0 && i / tk == 1)) ? -INFINITY : zero ? 0.0f : frand(-2, 1);
  return m;
}

/* The table's sdpa kernel with its float mask (0 / -inf) replaced by the
 * bool mask it means. */
static int sdpa_as_bool(opd_kcall_t *c, const opd_cuda_ctx_t *x) {
  opd_tview_t keep = c->in[3];
  std::vector<float> f = from_dev(keep.dtype, keep.data, keep.numel);
  std::vector<unsigned char> b(f.size());
  for (size_t i = 0; i < f.size(); i++) b[i] = f[i] == 0.0f;
  void *d;
  CK(cudaMalloc(&d, b.size()));
  CK(cudaMemcpy(d, b.data(), b.size(), cudaMemcpyHostToDevice));
  CK(cudaDeviceSynchronize()); /* the copy is done before g_stream reads it */
  set_view(&c->in[3], OPD_DTYPE_BOOL, keep.rank, keep.shape, d);
  int rc = opd__op_find("sdpa")->cuda(c, x);
  CK(cudaStreamSynchronize(g_stream));
  CK(cudaFree(d));
  c->in[3] = keep;
  return rc;
}

/* The table's sdpa kernel captured into a CUDA graph and replayed twice;
 * the replay must equal a plain launch bit for bit. */
static int sdpa_in_graph(opd_kcall_t *c, const opd_cuda_ctx_t *x) {
  const opd_op_def_t *op = opd__op_find("sdpa");
  size_t bytes = (size_t)c->out[0].numel * opd__dtype_size(c->out[0].dtype);
  int rc = op->cuda(c, x);
  CK(cudaStreamSynchronize(g_stream));
  if (rc) return rc;
  std::vector<unsigned char> plain(bytes), replay(bytes);
  CK(cudaMemcpy(plain.data(), c->out[0].data, bytes, cudaMemcpyDeviceToHost));
  CK(cudaMemsetAsync(c->out[0].data, 0xff, bytes, g_stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal));
  rc = op->cuda(c, x);
  CK(cudaStreamEndCapture(g_stream, &graph));
  if (rc) return rc;
  CK(cudaGraphInstantiate(&exec, graph, 0));
  for (int k = 0; k < 2; k++) CK(cudaGraphLaunch(exec, g_stream));
  CK(cudaStreamSynchronize(g_stream));
  CK(cudaMemcpy(replay.data(), c->out[0].data, bytes, cudaMemcpyDeviceToHost));
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  if (plain != replay) {
    printf("  sdpa: the graph's replay differs from the plain launch\n");
    return OPD_EBACKEND;
  }
  return 0;
}

/* The CUDA-core kernel forced (the table's picks sdpa_wmma for the half
 * types where it fits). */
static int sdpa_cores(opd_kcall_t *c, const opd_cuda_ctx_t *x) {
  return opd__sdpa_cuda_variant(c, x, OPD_SDPA_CORES);
}

static void sdpa_tol(int dt, double *a, double *r) {
  tol(dt, a, r, 2e-5, 1e-4);
  if (dt == OPD_DTYPE_FLOAT16) *a = 1e-3;
  if (dt == OPD_DTYPE_BFLOAT16) *a = 8e-3;
}

static void check_sdpa(void) {
  if (!wanted("sdpa")) return;
  /* rank 3 cases: B = 1, H = N */
  struct { int rank; int64_t B, H, Tq, Tk, D, Dv; int causal; } cases[] = {
      {4, 1, 12, 16, 16, 64, 64, 1},  {4, 2, 12, 64, 64, 64, 64, 1},
      {4, 4, 4, 256, 256, 64, 64, 1}, {4, 1, 2, 256, 256, 64, 64, 0},
      {4, 1, 3, 7, 45, 32, 32, 1},    {4, 1, 3, 45, 7, 32, 32, 1},
      {4, 2, 2, 33, 65, 24, 40, 0},   {3, 1, 5, 17, 130, 5, 3, 0},
      {3, 1, 3, 40, 40, 16, 16, 1},   {4, 1, 2, 19, 23, 128, 128, 0},
      {4, 1, 2, 5, 0, 64, 64, 0},
  };
  for (int d = 0; d < 3; d++)
    for (auto &k : cases) {
      int r = k.rank;
      int64_t qs[4] = {k.B, k.H, k.Tq, k.D}, ks[4] = {k.B, k.H, k.Tk, k.D},
              vs[4] = {k.B, k.H, k.Tk, k.Dv};
      in_spec_t in[4] = {{r, {0}, -2, 2, NULL}, {r, {0}, -2, 2, NULL}, {r, {0}, -1, 1, NULL}};
      for (int i = 0; i < r; i++) {
        in[0].shape[i] = qs[4 - r + i];
        in[1].shape[i] = ks[4 - r + i];
        in[2].shape[i] = vs[4 - r + i];
      }
      double a, rt;
      sdpa_tol(DTS[d], &a, &rt);
      int causal = k.causal;
      auto set = [causal](opd_kcall_t *c) { attr(c, "causal")->i = causal; };
      run_case("sdpa", causal ? "[causal]" : "", DTS[d], 3, in, set, a, rt);
      if (d > 0)
        run_case("sdpa", causal ? "[cores,causal]" : "[cores]", DTS[d], 3, in, set, a, rt,
                 sdpa_cores);
      if (k.Tk == 0) continue;
      /* masks over (Tq, Tk) and (B, 1, 1, Tk) (rank 4) / (N, 1, Tk) */
      for (int mk = 0; mk < 2; mk++) {
        in_spec_t &m = in[3];
        m = {mk ? r : 2, {0}, 0, 0, NULL};
        if (mk == 0) {
          m.shape[0] = k.Tq, m.shape[1] = k.Tk;
        } else {
          for (int i = 0; i < r; i++) m.shape[i] = 1;
          m.shape[0] = in[0].shape[0], m.shape[r - 1] = k.Tk;
        }
        int64_t n = 1;
        for (int i = 0; i < m.rank; i++) n *= m.shape[i];
        std::vector<float> vals = sdpa_mask_vals(n, k.Tk, false),
                           zeros = sdpa_mask_vals(n, k.Tk, true);
        m.vals = vals.data();
        auto none = [](opd_kcall_t *c) { attr(c, "causal")->i = 0; };
        run_case("sdpa", mk ? "[mask-b11k]" : "[mask-qk]", DTS[d], 4, in, none, a, rt);
        m.vals = zeros.data();
        run_case("sdpa", mk ? "[bool-b11k]" : "[bool-qk]", DTS[d], 4, in, none, a, rt,
                 sdpa_as_bool);
      }
      if (k.Tq == 64 || k.Tq == 7)
        run_case("sdpa", "[graph]", DTS[d], 3, in, set, a, rt, sdpa_in_graph);
      if (k.Tq == 64) {
        /* scores up to ~150: the running max's rescaling; a float32 score
         * carries ~1e-5 of rounding, which moves a weight by as much */
        auto big = [causal](opd_kcall_t *c) {
          attr(c, "causal")->i = causal;
          attr(c, "scale")->f = 4.0;
        };
        run_case("sdpa", "[scale=4]", DTS[d], 3, in, big, d ? a : 5e-5, rt);
      }
    }
  /* D = 129: refused, naming the limit */
  opd_kcall_t c;
  call_init(&c, "sdpa");
  int64_t s[4] = {1, 1, 4, 129};
  for (int i = 0; i < 3; i++) set_view(&c.in[i], OPD_DTYPE_FLOAT32, 4, s, NULL);
  c.n_in = 3;
  bool ok = shape_outs(&c) == 0 && c.op->cuda(&c, &g_ctx) == OPD_ELIMIT &&
            strstr(c.err, "129") != NULL;
  printf("gpu op=sdpa[D=129] dtype=float32 refused: %s %s\n", c.err, ok ? "PASS" : "FAIL");
  ok ? g_pass++ : g_fail++;
}

static void check_rope_swiglu(void) {
  struct { int rx; int64_t x[4]; int rc; int64_t c[4]; } rc[] = {
      {4, {2, 12, 64, 64}, 2, {64, 64}},
      {4, {2, 4, 16, 128}, 4, {2, 1, 16, 128}},
      {3, {3, 9, 10}, 2, {9, 10}},
      {2, {5, 128}, 2, {5, 1}},
  };
  for (int d = 0; d < 3; d++) {
    double a, r;
    tol(DTS[d], &a, &r, 2e-6, 1e-5);
    for (auto &k : rc) {
      in_spec_t in[3] = {{k.rx, {0}, -3, 3, NULL}, {k.rc, {0}, -1, 1, NULL},
                         {k.rc, {0}, -1, 1, NULL}};
      for (int i = 0; i < k.rx; i++) in[0].shape[i] = k.x[i];
      for (int i = 0; i < k.rc; i++) in[1].shape[i] = in[2].shape[i] = k.c[i];
      run_case("rope", "", DTS[d], 3, in, no_attrs, a, r);
    }
    in_spec_t sw[] = {{2, S(4, 6144), -8, 8, NULL}, {3, S(2, 3, 22), -8, 8, NULL},
                      {1, S(2), -8, 8, NULL}, {2, S(1000, 18), -8, 8, NULL}};
    for (auto &s : sw) run_case("swiglu", "", DTS[d], 1, &s, no_attrs, a, r);
  }
}

/* --bench: sdpa at GPT-2's shapes (H = 12, D = 64, causal; T up to its
 * 1024 context) through each variant that takes the dtype, as times and
 * TFLOP/s (4 B H T^2 D / 2 for causal), L2 flushed before each run:
 * "bench op=sdpa[variant] dtype=... shape=[B,H,T,D] us=... tflops=...". */
static void bench_sdpa(void) {
  if (!wanted("sdpa")) return;
  static const int64_t shapes[][2] = {{1, 256}, {4, 256}, {1, 1024}, {8, 1024}};
  for (int d = 0; d < 3; d++)
    for (auto &sh : shapes) {
      int64_t B = sh[0], T = sh[1], s[4] = {B, 12, T, 64}, n = B * 12 * T * 64;
      opd_kcall_t c;
      call_init(&c, "sdpa");
      attr(&c, "causal")->i = 1;
      c.n_in = 3;
      for (int i = 0; i < 3; i++) set_view(&c.in[i], DTS[d], 4, s, dev_rand(DTS[d], n, -2, 2));
      shape_outs(&c);
      CK(cudaMalloc(&c.out[0].data, (size_t)n * opd__dtype_size(DTS[d])));
      for (int v = OPD_SDPA_CORES; v <= OPD_SDPA_WMMA; v++) {
        if (v == OPD_SDPA_WMMA && d == 0) continue; /* float32 has no wmma variant */
        double us = time_us([&] {
          if (opd__sdpa_cuda_variant(&c, &g_ctx, v)) {
            fprintf(stderr, "sdpa: %s\n", c.err);
            exit(2);
          }
        });
        printf("bench op=sdpa[%s] dtype=%s shape=[%lld,12,%lld,64] us=%.1f tflops=%.2f\n",
               v == OPD_SDPA_WMMA ? "wmma" : "cores", opd__kdtype_name(DTS[d]), (long long)B,
               (long long)T, us, 2.0 * B * 12 * T * T * 64 / (us * 1e6));
        fflush(stdout);
      }
      for (int i = 0; i < 3; i++) CK(cudaFree(c.in[i].data));
      CK(cudaFree(c.out[0].data));
    }
}
