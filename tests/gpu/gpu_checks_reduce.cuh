/* Part of tests/gpu/gpu_kernels.cu, included there at this point (one
 * translation unit: its helpers and counts): the reduce family (sum,
 * mean, amax over dims) and the attributes of torch's semantics (softmax
 * and log_softmax over any dim, layernorm over several dims, add and sub
 * with alpha) against their CPU reference. */

/* attrs setter: dims = the n ints of d (n == 0: the default, all dims),
 * keepdim = keep. */
static auto dims_attrs(int n, const int64_t *d, int keep) {
  std::vector<int64_t> v(d, d + n);
  return [v, keep](opd_kcall_t *c) {
    opd_attr_val_t *a = attr(c, "dims");
    if (!v.empty()) {
      a->n = (int32_t)v.size();
      for (size_t i = 0; i < v.size(); i++) a->ints[i] = v[i];
    }
    attr(c, "keepdim")->i = keep;
  };
}

static void check_reduce(void) {
  struct {
    in_spec_t x;
    int n;
    int64_t dims[3];
  } cases[] = {
      {{2, S(37, 1000), -2, 2, NULL}, 1, S(1)},        /* rows: warps */
      {{2, S(3, 5000), -2, 2, NULL}, 1, S(-1)},        /* rows: blocks */
      {{2, S(1000, 37), -2, 2, NULL}, 1, S(0)},        /* columns */
      {{2, S(5000, 3), -2, 2, NULL}, 1, S(0)},         /* few columns */
      {{4, S(2, 3, 4, 5), -2, 2, NULL}, 2, S(1, 3)},   /* general */
      {{3, S(64, 33, 30), -2, 2, NULL}, 2, S(0, 2)},
      {{1, S(100003), -2, 2, NULL}, 0, S(0)},          /* everything */
      {{3, S(3, 0, 5), -2, 2, NULL}, 1, S(2)},         /* no outputs */
      {{3, S(4, 1, 6), -2, 2, NULL}, 1, S(1)},         /* extent 1 */
  };
  for (int d = 0; d < 3; d++)
    for (auto &c : cases) {
      double a, r;
      tol(DTS[d], &a, &r, 1e-4, 1e-4);
      int64_t n = 1;
      for (int k = 0; k < c.x.rank; k++) n *= c.x.shape[k];
      a *= sqrt((double)n); /* sums of many rounded terms */
      for (const char *op : {"sum", "mean", "amax"})
        for (int keep = 0; keep < 2; keep++)
          run_case(op, keep ? "[keepdim]" : "", DTS[d], 1, &c.x, dims_attrs(c.n, c.dims, keep),
                   a, r);
    }
  static const float nanv[6] = {1, NAN, 3, 4, 5, 6};
  for (int d = 0; d < 3; d++) {
    in_spec_t x = {2, S(2, 3), 0, 0, nanv};
    for (int64_t dim = 0; dim < 2; dim++)
      run_case("amax", "[nan]", DTS[d], 1, &x, dims_attrs(1, &dim, 0), 0, 0);
  }
}

/* softmax and log_softmax along every dim of 3-d inputs (the row kernels
 * for the last dim, softmax_cols for the others). */
static void check_softmax_dims(void) {
  in_spec_t xs[] = {{3, S(4, 7, 33), -5, 5, NULL}, {3, S(3, 300, 70), -5, 5, NULL},
                    {3, S(2, 2000, 3), -5, 5, NULL}};
  static const float sp[8] = {-INFINITY, 0, 1, -INFINITY, NAN, 2, INFINITY, 1};
  in_spec_t s = {3, S(2, 2, 2), 0, 0, sp};
  for (int d = 0; d < 3; d++)
    for (const char *op : {"softmax", "log_softmax"}) {
      double a, r;
      tol(DTS[d], &a, &r, 1e-6, 1e-4);
      for (int64_t dim = -3; dim < 3; dim++) {
        auto set = [dim](opd_kcall_t *c) { attr(c, "dim")->i = dim; };
        for (auto &x : xs) run_case(op, "[dim]", DTS[d], 1, &x, set, a, r);
        run_case(op, "[dim,inf/nan]", DTS[d], 1, &s, set, a, r);
      }
    }
}

/* dtype=float32 on float16 / bfloat16 x: y in float32, equal to the CPU
 * reference on the same (rounded) values within float rounding. */
static void check_softmax_dtype(void) {
  for (const char *op : {"softmax", "log_softmax"})
    for (int d = 1; d < 3; d++)
      for (int64_t dim : {-1, 0}) {
        if (!wanted(op)) return;
        const int64_t shape[2] = {37, 300};
        int64_t n = 37 * 300;
        std::vector<float> h((size_t)n);
        for (auto &v : h) v = round_to(DTS[d], frand(-8, 8));
        opd_kcall_t ref, gpu;
        call_init(&ref, op);
        call_init(&gpu, op);
        for (opd_kcall_t *c : {&ref, &gpu}) {
          attr(c, "dim")->i = dim;
          strcpy(attr(c, "dtype")->s, "float32");
          c->n_in = 1;
        }
        void *dx = to_dev(DTS[d], h.data(), n);
        set_view(&ref.in[0], OPD_DTYPE_FLOAT32, 2, shape, h.data());
        set_view(&gpu.in[0], DTS[d], 2, shape, dx);
        bool ok = shape_outs(&ref) == 0 && shape_outs(&gpu) == 0 &&
                  gpu.out[0].dtype == OPD_DTYPE_FLOAT32;
        std::vector<float> want((size_t)n);
        void *dy;
        CK(cudaMalloc(&dy, (size_t)n * 4));
        ref.out[0].data = want.data();
        gpu.out[0].data = dy;
        ok = ok && ref.op->cpu_ref(&ref) == 0 && gpu.op->cuda(&gpu, &g_ctx) == 0;
        CK(cudaStreamSynchronize(g_stream));
        std::vector<float> got = from_dev(OPD_DTYPE_FLOAT32, dy, n);
        double maxa = 0;
        for (int64_t i = 0; ok && i < n; i++) {
          double e = fabs((double)got[i] - want[i]);
          maxa = std::max(maxa, e);
          if (!(e <= 1e-6 + 1e-5 * fabs(want[i]))) ok = false;
        }
        printf("gpu op=%s[dtype=float32] dtype=%s dim=%lld max_abs_err=%.3g %s\n", op,
               opd__kdtype_name(DTS[d]), (long long)dim, maxa, ok ? "PASS" : "FAIL");
        ok ? g_pass++ : g_fail++;
        CK(cudaFree(dx));
        CK(cudaFree(dy));
      }
}

/* layernorm and rmsnorm over 2 and 3 trailing dims (weight's shape, or
 * ndims without a weight). */
static void check_norm_dims(void) {
  for (int d = 0; d < 3; d++) {
    double a, r;
    tol(DTS[d], &a, &r, 1e-5, 1e-4);
    in_spec_t x = {3, S(6, 40, 70), -2, 3, NULL};
    in_spec_t w = {2, S(40, 70), 0.5f, 1.5f, NULL}, b = {2, S(40, 70), -1, 1, NULL};
    in_spec_t ln[3] = {x, w, b};
    run_case("layernorm", "[2 dims,w,b]", DTS[d], 3, ln, no_attrs, a, r);
    run_case("rmsnorm", "[2 dims,w]", DTS[d], 2, ln, no_attrs, a, r);
    auto nd3 = [](opd_kcall_t *c) { attr(c, "ndims")->i = 3; };
    run_case("layernorm", "[ndims=3]", DTS[d], 1, &x, nd3, a, r);
    run_case("rmsnorm", "[ndims=3]", DTS[d], 1, &x, nd3, a, r);
  }
}

/* add and sub with alpha, in each layout of the kernel. */
static void check_alpha(void) {
  struct { in_spec_t a, b; } cases[] = {
      {{2, S(37, 129), -2, 2, NULL}, {2, S(37, 129), -2, 2, NULL}},
      {{2, S(300, 257), -2, 2, NULL}, {1, S(257), -2, 2, NULL}},
      {{1, S(257), -2, 2, NULL}, {2, S(300, 257), -2, 2, NULL}},
      {{3, S(4, 1, 6), -2, 2, NULL}, {3, S(1, 5, 1), -2, 2, NULL}},
  };
  for (int d = 0; d < 3; d++)
    for (auto &c : cases)
      for (double al : {2.5, -0.5}) {
        in_spec_t in[2] = {c.a, c.b};
        double a, r;
        tol(DTS[d], &a, &r, 1e-6, 1e-6);
        auto set = [al](opd_kcall_t *k) { attr(k, "alpha")->f = al; };
        for (const char *op : {"add", "sub"}) run_case(op, "[alpha]", DTS[d], 2, in, set, a, r);
      }
}

/* max_pool2d, adaptive_avg_pool2d and batch_norm. */
static void check_pool_bn(void) {
  struct {
    int64_t shape[4], k[2], s[2], p[2], d[2];
    int ceil;
  } mp[] = {
      {{2, 3, 9, 11}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, 0},
      {{1, 2, 10, 7}, {2, 3}, {1, 2}, {0, 1}, {2, 1}, 1},
      {{2, 64, 56, 56}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, 0},  /* ResNet's */
  };
  int64_t sizes[][2] = {{1, 1}, {3, 3}, {4, 5}, {20, 13}};
  for (int d = 0; d < 3; d++) {
    double a, r;
    tol(DTS[d], &a, &r, 1e-6, 1e-5);
    for (auto &c : mp) {
      in_spec_t x = {4, S(c.shape[0], c.shape[1], c.shape[2], c.shape[3]), -3, 3, NULL};
      auto set = [&c](opd_kcall_t *k) {
        const char *names[4] = {"kernel", "stride", "padding", "dilation"};
        const int64_t *v[4] = {c.k, c.s, c.p, c.d};
        for (int i = 0; i < 4; i++) {
          opd_attr_val_t *at = attr(k, names[i]);
          at->type = OPD_ATTR_INTS;
          at->n = 2;
          at->ints[0] = v[i][0];
          at->ints[1] = v[i][1];
        }
        attr(k, "ceil_mode")->i = c.ceil;
      };
      run_case("max_pool2d", "", DTS[d], 1, &x, set, 0, 0);
    }
    in_spec_t x = {4, S(2, 3, 14, 13), -3, 3, NULL};
    for (auto &sz : sizes) {
      auto set = [&sz](opd_kcall_t *k) {
        opd_attr_val_t *at = attr(k, "size");
        at->type = OPD_ATTR_INTS;
        at->n = 2;
        at->ints[0] = sz[0];
        at->ints[1] = sz[1];
      };
      run_case("adaptive_avg_pool2d", "", DTS[d], 1, &x, set, a, r);
    }
    in_spec_t bn[5] = {{4, S(3, 7, 9, 11), -3, 3, NULL}, {1, S(7), -1, 1, NULL},
                       {1, S(7), 0.1f, 2, NULL}, {1, S(7), 0.5f, 2, NULL},
                       {1, S(7), -1, 1, NULL}};
    run_case("batch_norm", "[w,b]", DTS[d], 5, bn, no_attrs, a * 4, r * 4);
    run_case("batch_norm", "", DTS[d], 3, bn, no_attrs, a * 4, r * 4);
    in_spec_t bn2[3] = {{2, S(8, 7), -3, 3, NULL}, bn[1], bn[2]};
    run_case("batch_norm", "[N,C]", DTS[d], 3, bn2, no_attrs, a * 4, r * 4);
  }
}

/* The table's CUDA kernel run without a workspace (its cudaMallocAsync
 * path). */
static int without_workspace(opd_kcall_t *c, const opd_cuda_ctx_t *ctx) {
  opd_cuda_ctx_t bare = *ctx;
  bare.workspace = NULL;
  bare.workspace_bytes = 0;
  return c->op->cuda(c, &bare);
}

/* The split path (few outputs, long reductions), with the workspace and
 * without it. */
static void check_reduce_split(void) {
  struct {
    in_spec_t x;
    int n;
    int64_t dims[2];
  } cases[] = {
      {{1, S(3000017), -2, 2, NULL}, 0, S(0)},        /* everything */
      {{2, S(4, 1000003), -2, 2, NULL}, 1, S(1)},     /* 4 long rows */
      {{2, S(200000, 3), -2, 2, NULL}, 1, S(0)},      /* 3 long columns */
      {{3, S(64, 1000, 2), -2, 2, NULL}, 2, S(0, 1)}, /* general */
  };
  for (int d = 0; d < 3; d++)
    for (auto &c : cases) {
      double a, r;
      tol(DTS[d], &a, &r, 1e-4, 1e-4);
      int64_t n = 1;
      for (int k = 0; k < c.x.rank; k++) n *= c.x.shape[k];
      a *= sqrt((double)n);
      for (const char *op : {"sum", "mean", "amax"}) {
        run_case(op, "[split]", DTS[d], 1, &c.x, dims_attrs(c.n, c.dims, 0), a, r);
        run_case(op, "[split,no workspace]", DTS[d], 1, &c.x, dims_attrs(c.n, c.dims, 0), a,
                 r, without_workspace);
      }
    }
}

/* sum of int32 / uint8 / int64 x into int64, against the CPU reference. */
static void check_reduce_int(void) {
  if (!wanted("sum")) return;
  struct {
    int rank;
    int64_t shape[3];
    int n;
    int64_t dims[2];
  } cases[] = {{2, {37, 1000}, 1, {1}}, {2, {1000, 37}, 1, {0}}, {3, {4, 5, 6}, 2, {0, 2}},
               {1, {100003}, 0, {0}}};
  const int dts[3] = {OPD_DTYPE_INT32, OPD_DTYPE_UINT8, OPD_DTYPE_INT64};
  for (int dt : dts)
    for (auto &c : cases) {
      int64_t n = 1;
      for (int k = 0; k < c.rank; k++) n *= c.shape[k];
      size_t esz = opd__dtype_size(dt);
      std::vector<unsigned char> h((size_t)n * esz);
      for (int64_t i = 0; i < n; i++) {
        int64_t v = (int64_t)frand(-1000, 1000);
        if (dt == OPD_DTYPE_INT32) { int32_t w = (int32_t)v; memcpy(&h[i * esz], &w, 4); }
        else if (dt == OPD_DTYPE_UINT8) h[i] = (unsigned char)(v & 0xff);
        else { v *= 1000000007LL; memcpy(&h[i * esz], &v, 8); }
      }
      void *dx;
      CK(cudaMalloc(&dx, h.size()));
      CK(cudaMemcpy(dx, h.data(), h.size(), cudaMemcpyHostToDevice));
      opd_kcall_t ref, gpu;
      call_init(&ref, "sum");
      call_init(&gpu, "sum");
      auto set = dims_attrs(c.n, c.dims, 0);
      set(&ref);
      set(&gpu);
      ref.n_in = gpu.n_in = 1;
      set_view(&ref.in[0], dt, c.rank, c.shape, h.data());
      set_view(&gpu.in[0], dt, c.rank, c.shape, dx);
      bool ok = shape_outs(&ref) == 0 && shape_outs(&gpu) == 0 &&
                gpu.out[0].dtype == OPD_DTYPE_INT64;
      int64_t m = ref.out[0].numel;
      std::vector<int64_t> want((size_t)m), got((size_t)m);
      void *dy;
      CK(cudaMalloc(&dy, (size_t)m * 8));
      ref.out[0].data = want.data();
      gpu.out[0].data = dy;
      ok = ok && ref.op->cpu_ref(&ref) == 0 && gpu.op->cuda(&gpu, &g_ctx) == 0;
      CK(cudaStreamSynchronize(g_stream));
      CK(cudaMemcpy(got.data(), dy, (size_t)m * 8, cudaMemcpyDeviceToHost));
      for (int64_t i = 0; ok && i < m; i++) ok = got[i] == want[i];
      printf("gpu op=sum[int] dtype=%s numel=%lld outputs=%lld %s\n", opd__kdtype_name(dt),
             (long long)n, (long long)m, ok ? "PASS" : "FAIL");
      ok ? g_pass++ : g_fail++;
      CK(cudaFree(dx));
      CK(cudaFree(dy));
    }
}
