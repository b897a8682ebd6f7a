/* Part of tests/gpu/gpu_kernels.cu, included there at this point (one
 * translation unit: its helpers and counts): float64 on the GPU against
 * the CPU's float64 kernels (cpu_ref on host copies of the same double
 * inputs): the unary and binary families, softmax / log_softmax on every
 * dim and with dtype= converting to or from float64, layernorm and
 * rmsnorm, sum / mean / amax, matmul (batched, broadcast) and linear
 * (every act, bias or not). Both sides compute in double, in other
 * orders: within 1e-12 + 1e-12|ref| (matmul / linear: K * 2^-50 + 1e-12
 * |ref|). `--op f64` runs only these; lines "gpu op=... dtype=float64".
 */

/* One float64 case: inputs of dtype in_dt (FLOAT64, or FLOAT32 for
 * softmax's dtype="float64"), doubles uniform in [lo, hi) per spec. */
template <typename A>
static void run_case64(const char *op, const char *label, int in_dt, int nin,
                       const in_spec_t *ins, A attrs, double atol, double rtol) {
  if (g_only && strcmp(g_only, "f64") != 0 && strcmp(g_only, op) != 0) return;
  opd_kcall_t ref, gpu;
  call_init(&ref, op);
  call_init(&gpu, op);
  attrs(&ref);
  attrs(&gpu);
  size_t esz = opd__dtype_size(in_dt);
  std::vector<std::vector<double>> hin(nin);
  std::vector<std::vector<float>> hinf(nin);
  std::vector<void *> din(nin);
  for (int i = 0; i < nin; i++) {
    int64_t n = 1;
    for (int d = 0; d < ins[i].rank; d++) n *= ins[i].shape[d];
    hin[i].resize((size_t)(n > 0 ? n : 1));
    hinf[i].resize(hin[i].size());
    for (int64_t k = 0; k < n; k++) {
      float a = frand(ins[i].lo, ins[i].hi), b = frand(0, 1);
      hin[i][k] = (double)a + (double)b * (ins[i].hi - ins[i].lo) * 0x1p-24;
      hinf[i][k] = (float)hin[i][k];
    }
    void *h = in_dt == OPD_DTYPE_FLOAT64 ? (void *)hin[i].data() : (void *)hinf[i].data();
    CK(cudaMalloc(&din[i], hin[i].size() * esz));
    CK(cudaMemcpy(din[i], h, (size_t)n * esz, cudaMemcpyHostToDevice));
    set_view(&ref.in[i], in_dt, ins[i].rank, ins[i].shape, h);
    set_view(&gpu.in[i], in_dt, ins[i].rank, ins[i].shape, din[i]);
  }
  ref.n_in = gpu.n_in = nin;
  char shp[512];
  shapes_str(&gpu, shp, sizeof shp);
  if (shape_outs(&ref) || shape_outs(&gpu)) {
    printf("gpu op=%s%s dtype=float64 shape=%s shape rule failed: %s FAIL\n", op, label, shp,
           ref.err);
    g_fail++;
    return;
  }
  int odt = ref.out[0].dtype;
  int64_t n = ref.out[0].numel;
  size_t ob = opd__dtype_size(odt);
  std::vector<unsigned char> want((size_t)(n > 0 ? n : 1) * ob), got(want.size());
  ref.out[0].data = want.data();
  CK(cudaMalloc(&gpu.out[0].data, want.size()));
  CK(cudaMemset(gpu.out[0].data, 0xff, want.size()));
  int rr = ref.op->cpu_ref(&ref);
  ensure_workspace(cuda_workspace(&gpu));
  int rg = gpu.op->cuda(&gpu, &g_ctx);
  CK(cudaStreamSynchronize(g_stream));
  CK(cudaGetLastError());
  CK(cudaMemcpy(got.data(), gpu.out[0].data, (size_t)n * ob, cudaMemcpyDeviceToHost));
  bool ok = rr == 0 && rg == 0 && (odt == OPD_DTYPE_FLOAT64 || odt == OPD_DTYPE_FLOAT32);
  double maxa = 0, maxr = 0;
  for (int64_t i = 0; i < n && ok; i++) {
    double w, g;
    if (odt == OPD_DTYPE_FLOAT64) {
      w = ((const double *)want.data())[i];
      g = ((const double *)got.data())[i];
    } else {
      w = ((const float *)want.data())[i];
      g = ((const float *)got.data())[i];
    }
    if (isnan(w) || isnan(g)) {
      ok = isnan(w) && isnan(g);
      continue;
    }
    double e = fabs(g - w);
    maxa = std::max(maxa, e);
    if (w != 0) maxr = std::max(maxr, e / fabs(w));
    double rt = odt == OPD_DTYPE_FLOAT64 ? rtol : 1e-6;
    if (!(e <= atol + rt * fabs(w))) {
      printf("  %s [%lld]: got %.17g want %.17g\n", op, (long long)i, g, w);
      ok = false;
    }
  }
  printf("gpu op=%s%s dtype=float64 shape=%s max_abs_err=%.3g max_rel_err=%.3g %s%s%s\n", op,
         label, shp, maxa, maxr, ok ? "PASS" : "FAIL", rr || rg ? " error: " : "",
         rr ? ref.err : rg ? gpu.err : "");
  ok ? g_pass++ : g_fail++;
  for (int i = 0; i < nin; i++) CK(cudaFree(din[i]));
  CK(cudaFree(gpu.out[0].data));
}

static void check_f64(void) {
  const int F64 = OPD_DTYPE_FLOAT64;
  const double A = 1e-12, R = 1e-12;
  in_spec_t x = {2, S(37, 1001), -6, 6, NULL}, row = {1, S(1001), -2, 2, NULL},
            col = {2, S(37, 1), 0.5, 2, NULL};
  for (const char *op : {"relu", "gelu", "silu", "sigmoid", "tanh"})
    run_case64(op, "", F64, 1, &x, no_attrs, A, R);
  run_case64("gelu", "[tanh]", F64, 1, &x,
             [](opd_kcall_t *c) { strcpy(attr(c, "approximate")->s, "tanh"); }, A, R);
  for (const char *op : {"add", "mul", "sub", "div"}) {
    in_spec_t same[2] = {x, x}, bias[2] = {x, row}, bc[2] = {x, col};
    run_case64(op, "", F64, 2, same, no_attrs, A, R);
    run_case64(op, "[rowbias]", F64, 2, bias, no_attrs, A, R);
    run_case64(op, "[general]", F64, 2, bc, no_attrs, A, R);
  }
  in_spec_t ab[2] = {x, row};
  run_case64("sub", "[alpha]", F64, 2, ab, [](opd_kcall_t *c) { attr(c, "alpha")->f = 0.1; },
             A, R);
  in_spec_t x3 = {3, S(6, 50, 7), -20, 20, NULL};
  for (const char *op : {"softmax", "log_softmax"}) {
    for (int64_t dim : {-1, 0, 1})
      run_case64(op, "[dim]", F64, 1, &x3, [dim](opd_kcall_t *c) { attr(c, "dim")->i = dim; },
                 A, R);
    run_case64(op, "[dtype=float64 of float32 x]", OPD_DTYPE_FLOAT32, 1, &x3,
               [](opd_kcall_t *c) { strcpy(attr(c, "dtype")->s, "float64"); }, A, R);
    run_case64(op, "[dtype=float32 of float64 x]", F64, 1, &x3,
               [](opd_kcall_t *c) { strcpy(attr(c, "dtype")->s, "float32"); }, 1e-6, R);
  }
  in_spec_t ln[3] = {{2, S(37, 1001), 100, 101, NULL}, row, row};
  run_case64("layernorm", "[w,b]", F64, 3, ln, no_attrs, 1e-10, 1e-10);
  run_case64("layernorm", "", F64, 1, ln, no_attrs, 1e-10, 1e-10);
  run_case64("rmsnorm", "[w]", F64, 2, ln, no_attrs, A, R);
  in_spec_t r3 = {3, S(20, 300, 9), -2, 2, NULL};
  int64_t d1[1] = {1}, d02[2] = {0, 2};
  for (const char *op : {"sum", "mean", "amax"}) {
    run_case64(op, "[dim 1]", F64, 1, &r3, dims_attrs(1, d1, 0), 1e-11, R);
    run_case64(op, "[dims 0,2]", F64, 1, &r3, dims_attrs(2, d02, 1), 1e-11, R);
    run_case64(op, "[all]", F64, 1, &r3, dims_attrs(0, d1, 0), 1e-9, R);
  }
  in_spec_t mm[2] = {{3, S(4, 33, 70), -1, 1, NULL}, {2, S(70, 21), -1, 1, NULL}};
  in_spec_t mmb[2] = {{4, S(2, 1, 9, 70), -1, 1, NULL}, {3, S(3, 70, 5), -1, 1, NULL}};
  run_case64("matmul", "[fold]", F64, 2, mm, no_attrs, 70 * 0x1p-50, R);
  run_case64("matmul", "[items]", F64, 2, mmb, no_attrs, 70 * 0x1p-50, R);
  in_spec_t lin[3] = {{2, S(5, 70), -1, 1, NULL}, {2, S(33, 70), -1, 1, NULL},
                      {1, S(33), -1, 1, NULL}};
  for (const char *act : {"none", "relu", "gelu", "gelu_tanh", "silu"})
    for (int nb = 2; nb <= 3; nb++)
      run_case64("linear", nb == 3 ? "[bias]" : "", F64, nb, lin,
                 [act](opd_kcall_t *c) { strcpy(attr(c, "act")->s, act); }, 70 * 0x1p-50, R);
}
