/* Part of tests/gpu/gpu_kernels.cu, included there at this point (one
 * translation unit: its helpers and counts): --bench: each kernel's median
 * time with the L2 flushed, against a device-to-device copy. */

/* ---- bench --------------------------------------------------------------- */
static void *g_flush;
static size_t g_flush_bytes;

__global__ void fill_rand(float *p, int64_t n, uint32_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = lo + (hi - lo) * (h >> 8) * (1.0f / 16777216.0f);
  }
}
__global__ void to_bf16(const float *s, __nv_bfloat16 *d, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    d[i] = __float2bfloat16_rn(s[i]);
}
__global__ void to_f16(const float *s, __half *d, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    d[i] = __float2half_rn(s[i]);
}

/* Device tensor of n elements of dt, random in [lo, hi). */
static void *dev_rand(int dt, int64_t n, float lo, float hi) {
  float *f;
  CK(cudaMalloc(&f, (size_t)n * 4));
  fill_rand<<<1024, 256>>>(f, n, (uint32_t)n * 7919u, lo, hi);
  if (dt == OPD_DTYPE_FLOAT32) return f;
  void *d;
  CK(cudaMalloc(&d, (size_t)n * 2));
  if (dt == OPD_DTYPE_BFLOAT16) to_bf16<<<1024, 256>>>(f, (__nv_bfloat16 *)d, n);
  if (dt == OPD_DTYPE_FLOAT16) to_f16<<<1024, 256>>>(f, (__half *)d, n);
  CK(cudaDeviceSynchronize());
  CK(cudaFree(f));
  return d;
}

/* Keeps the stream busy for ns nanoseconds (the global timer). */
__global__ void spin_ns(uint64_t ns) {
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  while (t - t0 < ns);
}

/* Median time (us) of fn() over reps runs, each after an L2 flush. With
 * flush false, a 50 us spin kernel instead: fn's inputs stay in L2 (as a
 * replayed graph finds its weights) and the stream is busy while fn() is
 * enqueued, so the time is the GPU's, without the host's launch cost. */
template <typename F>
static double time_us(F fn, int reps = 20, bool flush = true) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  fn(); /* warm up */
  std::vector<float> t;
  for (int i = 0; i < reps; i++) {
    if (flush) CK(cudaMemsetAsync(g_flush, i, g_flush_bytes, g_stream));
    else spin_ns<<<1, 1, 0, g_stream>>>(50000);
    CK(cudaEventRecord(a, g_stream));
    fn();
    CK(cudaEventRecord(b, g_stream));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1000.0f);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/* Copy bandwidth (GB/s, read + write) moving `bytes` in all. */
static double copy_gbps(size_t bytes) {
  size_t half = bytes / 2;
  void *s, *d;
  CK(cudaMalloc(&s, half));
  CK(cudaMalloc(&d, half));
  double us = time_us([&] { CK(cudaMemcpyAsync(d, s, half, cudaMemcpyDeviceToDevice, g_stream)); });
  CK(cudaFree(s));
  CK(cudaFree(d));
  return 2.0 * half / (us * 1e3);
}

static void run_or_die(opd_kcall_t *c, cuda_fn fn) {
  int rc = fn(c, &g_ctx);
  if (rc) {
    fprintf(stderr, "%s: %s\n", c->op->name, c->err);
    exit(2);
  }
}

static void bench_rows(void) {
  const char *ops[] = {"softmax", "layernorm", "rmsnorm", "gelu"};
  struct { int dt; int64_t R, C; } shapes[] = {{OPD_DTYPE_FLOAT32, 8192, 8192},
                                               {OPD_DTYPE_FLOAT32, 1024, 65536},
                                               {OPD_DTYPE_FLOAT32, 256, 262144},
                                               {OPD_DTYPE_BFLOAT16, 8192, 8192},
                                               {OPD_DTYPE_FLOAT16, 8192, 8192}};
  for (auto &s : shapes)
    for (const char *op : ops) {
      if (!wanted(op)) continue;
      if (s.dt == OPD_DTYPE_FLOAT16 && strcmp(op, "gelu") != 0) continue; /* gelu only */
      opd_kcall_t c;
      call_init(&c, op);
      int64_t shp[2] = {s.R, s.C}, cs[1] = {s.C};
      size_t esz = opd__dtype_size(s.dt);
      c.n_in = 1;
      set_view(&c.in[0], s.dt, 2, shp, dev_rand(s.dt, s.R * s.C, -4, 4));
      size_t bytes = 2 * (size_t)(s.R * s.C) * esz;
      int extra = strcmp(op, "layernorm") == 0 ? 2 : strcmp(op, "rmsnorm") == 0 ? 1 : 0;
      for (int i = 0; i < extra; i++) {
        set_view(&c.in[1 + i], s.dt, 1, cs, dev_rand(s.dt, s.C, 0.5f, 1.5f));
        bytes += (size_t)s.C * esz;
      }
      c.n_in = 1 + extra;
      shape_outs(&c);
      CK(cudaMalloc(&c.out[0].data, (size_t)(s.R * s.C) * esz));
      cuda_fn fn = opd__op_find(op)->cuda;
      double us = time_us([&] { run_or_die(&c, fn); });
      double gb = bytes / (us * 1e3), cg = copy_gbps(bytes);
      printf("bench op=%s dtype=%s shape=[%lld,%lld] us=%.1f gbps=%.0f copy_gbps=%.0f pct_copy=%.0f\n",
             op, opd__kdtype_name(s.dt), (long long)s.R, (long long)s.C, us, gb, cg,
             100.0 * gb / cg);
      fflush(stdout);
      for (int i = 0; i < c.n_in; i++) CK(cudaFree(c.in[i].data));
      CK(cudaFree(c.out[0].data));
    }
}

static void bench_matmul(void) {
  if (!wanted("matmul")) return;
  int64_t Ms[] = {1, 64, 4096};
  for (int64_t M : Ms) {
    opd_kcall_t c;
    call_init(&c, "matmul");
    int64_t sa[2] = {M, 4096}, sb[2] = {4096, 4096};
    c.n_in = 2;
    set_view(&c.in[0], OPD_DTYPE_BFLOAT16, 2, sa, dev_rand(OPD_DTYPE_BFLOAT16, M * 4096, -1, 1));
    set_view(&c.in[1], OPD_DTYPE_BFLOAT16, 2, sb, dev_rand(OPD_DTYPE_BFLOAT16, 4096 * 4096, -1, 1));
    shape_outs(&c);
    CK(cudaMalloc(&c.out[0].data, (size_t)(M * 4096) * 2));
    double us = time_us([&] { run_or_die(&c, opd__op_find("matmul")->cuda); });
    printf("bench op=matmul dtype=bfloat16 shape=[%lld,4096]x[4096,4096] us=%.1f tflops=%.1f\n",
           (long long)M, us, 2.0 * M * 4096 * 4096 / (us * 1e6));
    fflush(stdout);
    for (int i = 0; i < 2; i++) CK(cudaFree(c.in[i].data));
    CK(cudaFree(c.out[0].data));
  }
}

/* linear (M, K) @ (N, K)^T + bias, act, on random device tensors (x
 * given, or random when NULL); the output allocated. */
static void linear_call(opd_kcall_t *c, int dt, int64_t M, int64_t K, int64_t N, const char *act,
                        void *x) {
  call_init(c, "linear");
  strcpy(attr(c, "act")->s, act);
  int64_t sx[2] = {M, K}, sw[2] = {N, K}, sb[1] = {N};
  c->n_in = 3;
  set_view(&c->in[0], dt, 2, sx, x ? x : dev_rand(dt, M * K, -1, 1));
  set_view(&c->in[1], dt, 2, sw, dev_rand(dt, N * K, -0.5f, 0.5f));
  set_view(&c->in[2], dt, 1, sb, dev_rand(dt, N, -1, 1));
  shape_outs(c);
  CK(cudaMalloc(&c->out[0].data, (size_t)(M * N) * opd__dtype_size(dt)));
}

/* linear through the gemv variant and cuBLASLt in the same run, float32
 * and bfloat16: the trading MLP's layers at M = 1 (256 -> 512, 512 -> 512,
 * 512 -> 1, relu) and 4096 -> 4096 at M = 1 and 8; cold (the L2 flushed)
 * and warm (W in L2, the host's launch cost hidden: time_us), medians of
 * 20 runs:
 * "bench op=linear variant=gemv|blaslt dtype=... shape=... us_cold=...
 * us_warm=... gbps_cold=..."; then the 3-layer MLP captured into one CUDA
 * graph with each variant: one replay (median of 50, warm) and replays
 * back to back (mean of 200; the host's launches count where they are
 * slower than the GPU): "bench op=linear_mlp3 variant=... us_replay=...
 * us_back_to_back=...". The card is the run's "device:" line. */
static void bench_linear(void) {
  if (!wanted("linear")) return;
  struct { int64_t M, K, N; } shapes[] = {
      {1, 256, 512}, {1, 512, 512}, {1, 512, 1}, {1, 4096, 4096}, {8, 512, 512}, {8, 4096, 4096}};
  struct { const char *name; cuda_fn fn; } vs[2] = {{"gemv", linear_gemv},
                                                     {"blaslt", linear_blaslt}};
  const int dts[2] = {OPD_DTYPE_FLOAT32, OPD_DTYPE_BFLOAT16};
  for (int dt : dts) {
    for (auto &k : shapes) {
      opd_kcall_t c;
      linear_call(&c, dt, k.M, k.K, k.N, "relu", NULL);
      size_t bytes = (size_t)(k.M * k.K + k.N * k.K + k.N + k.M * k.N) * opd__dtype_size(dt);
      for (auto &v : vs) {
        double cold = time_us([&] { run_or_die(&c, v.fn); });
        double warm = time_us([&] { run_or_die(&c, v.fn); }, 20, false);
        printf("bench op=linear variant=%s dtype=%s shape=[%lld,%lld]x[%lld,%lld] act=relu "
               "us_cold=%.2f us_warm=%.2f gbps_cold=%.0f\n",
               v.name, opd__kdtype_name(dt), (long long)k.M, (long long)k.K, (long long)k.N,
               (long long)k.K, cold, warm, bytes / (cold * 1e3));
        fflush(stdout);
      }
      for (int i = 0; i < 3; i++) CK(cudaFree(c.in[i].data));
      CK(cudaFree(c.out[0].data));
    }
    opd_kcall_t l[3];
    linear_call(&l[0], dt, 1, 256, 512, "relu", NULL);
    linear_call(&l[1], dt, 1, 512, 512, "relu", l[0].out[0].data);
    linear_call(&l[2], dt, 1, 512, 1, "none", l[1].out[0].data);
    for (auto &v : vs) {
      for (int i = 0; i < 3; i++) run_or_die(&l[i], v.fn); /* kernels loaded before capture */
      CK(cudaStreamSynchronize(g_stream));
      cudaGraph_t g;
      cudaGraphExec_t ge;
      CK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal));
      int rc = 0, layer = 0;
      for (; layer < 3 && !rc; layer++) rc = v.fn(&l[layer], &g_ctx);
      CK(cudaStreamEndCapture(g_stream, &g));
      if (rc) {
        fprintf(stderr, "linear %s, layer %d, under capture: %s\n", v.name, layer,
                l[layer - 1].err);
        exit(2);
      }
      CK(cudaGraphInstantiate(&ge, g, 0));
      double one = time_us([&] { CK(cudaGraphLaunch(ge, g_stream)); }, 50, false);
      cudaEvent_t a, b;
      CK(cudaEventCreate(&a));
      CK(cudaEventCreate(&b));
      spin_ns<<<1, 1, 0, g_stream>>>(50000); /* the first launches queue meanwhile */
      CK(cudaEventRecord(a, g_stream));
      for (int i = 0; i < 200; i++) CK(cudaGraphLaunch(ge, g_stream));
      CK(cudaEventRecord(b, g_stream));
      CK(cudaEventSynchronize(b));
      float ms;
      CK(cudaEventElapsedTime(&ms, a, b));
      printf("bench op=linear_mlp3 variant=%s dtype=%s shape=[1,256]>512>512>1 us_replay=%.2f "
             "us_back_to_back=%.2f\n",
             v.name, opd__kdtype_name(dt), one, ms * 1000.0 / 200);
      fflush(stdout);
      CK(cudaEventDestroy(a));
      CK(cudaEventDestroy(b));
      CK(cudaGraphExecDestroy(ge));
      CK(cudaGraphDestroy(g));
    }
    for (int i = 0; i < 3; i++) {
      for (int j = i ? 1 : 0; j < 3; j++) CK(cudaFree(l[i].in[j].data));
      CK(cudaFree(l[i].out[0].data));
    }
  }
}

static int conv_auto(opd_kcall_t *c, const opd_cuda_ctx_t *x) {
  return opd__conv2d_cuda_variant(c, x, OPD_CONV_AUTO);
}

/* conv2d depthwise 3x3 padding 1 (groups = C, MobileNet's layers at
 * batch 8 from 112x112 down, stride 1 and 2), float32 and bfloat16,
 * through AUTO (the grouped kernel): time and the GB/s of reading x and
 * writing y once (a depthwise conv is memory-bound). */
static void bench_conv2d_dw(void) {
  struct { int64_t N, C, HW, st; } cases[] = {
      {8, 32, 112, 1}, {8, 64, 112, 2}, {8, 128, 56, 1}, {8, 256, 28, 1},
      {8, 512, 14, 1}, {8, 1024, 7, 1}};
  const int dts[2] = {OPD_DTYPE_FLOAT32, OPD_DTYPE_BFLOAT16};
  for (int dt : dts)
    for (auto &k : cases) {
      opd_kcall_t c;
      call_init(&c, "conv2d");
      attr(&c, "padding")->ints[0] = 1;
      attr(&c, "stride")->ints[0] = k.st;
      attr(&c, "groups")->i = k.C;
      int64_t sx[4] = {k.N, k.C, k.HW, k.HW}, sw[4] = {k.C, 1, 3, 3}, sbias[1] = {k.C};
      c.n_in = 3;
      set_view(&c.in[0], dt, 4, sx, dev_rand(dt, k.N * k.C * k.HW * k.HW, -1, 1));
      set_view(&c.in[1], dt, 4, sw, dev_rand(dt, k.C * 9, -1, 1));
      set_view(&c.in[2], dt, 1, sbias, dev_rand(dt, k.C, -1, 1));
      shape_outs(&c);
      CK(cudaMalloc(&c.out[0].data, (size_t)c.out[0].numel * opd__dtype_size(dt)));
      ensure_workspace(cuda_workspace(&c));
      double us = time_us([&] { run_or_die(&c, conv_auto); });
      double bytes = (double)(c.in[0].numel + c.out[0].numel) * opd__dtype_size(dt);
      printf("bench op=conv2d variant=depthwise dtype=%s shape=N%lld_C%lld_%lldx%lld%s us=%.1f "
             "gbps=%.1f\n",
             opd__kdtype_name(dt), (long long)k.N, (long long)k.C, (long long)k.HW,
             (long long)k.HW, k.st == 2 ? "_s2" : "", us, bytes / (us * 1e3));
      fflush(stdout);
      for (int i = 0; i < 3; i++) CK(cudaFree(c.in[i].data));
      CK(cudaFree(c.out[0].data));
    }
}

/* conv2d 3x3 padding 1: four shapes at stride 1 in float32 and bfloat16,
 * and the 3x3 convolutions of ResNet-18 at batch 8 (224x224 input;
 * bench/bench_models.py's resnet18conv) in float32, stride 1 and 2; every
 * variant that takes the shape (igemm with its tile chosen by size, as
 * AUTO runs it, and with each tile forced), and AUTO itself. */
static void bench_conv2d(void) {
  if (!wanted("conv2d")) return;
  struct { int64_t N, C, HW, K, st; bool half; } cases[] = {
      {1, 3, 224, 64, 1, true},   {1, 64, 56, 64, 1, true},  {8, 256, 14, 256, 1, true},
      {32, 64, 56, 64, 1, true},  {8, 64, 56, 64, 1, false}, {8, 64, 56, 128, 2, false},
      {8, 128, 28, 128, 1, false}, {8, 128, 28, 256, 2, false}, {8, 256, 14, 512, 2, false},
      {8, 512, 7, 512, 1, false}};
  struct { const char *name; cuda_fn fn; } variants[] = {
      {"direct3x3", conv_direct}, {"im2col", conv_im2col}, {"igemm", conv_igemm},
      {"igemm:L", conv_igemm_l}, {"igemm:M", conv_igemm_m}, {"igemm:S", conv_igemm_s},
      {"winograd", conv_winograd}, {"auto", conv_auto}};
  const int dts[2] = {OPD_DTYPE_FLOAT32, OPD_DTYPE_BFLOAT16};
  for (int dt : dts)
    for (auto &k : cases)
      for (auto &v : variants) {
        if (dt != OPD_DTYPE_FLOAT32 && !k.half) continue;
        if ((v.fn == conv_direct || v.fn == conv_winograd) && k.st != 1) continue;
        opd_kcall_t c;
        call_init(&c, "conv2d");
        attr(&c, "padding")->ints[0] = 1;
        attr(&c, "stride")->ints[0] = k.st;
        int64_t sx[4] = {k.N, k.C, k.HW, k.HW}, sw[4] = {k.K, k.C, 3, 3}, sbias[1] = {k.K};
        c.n_in = 3;
        set_view(&c.in[0], dt, 4, sx, dev_rand(dt, k.N * k.C * k.HW * k.HW, -1, 1));
        set_view(&c.in[1], dt, 4, sw, dev_rand(dt, k.K * k.C * 9, -1, 1));
        set_view(&c.in[2], dt, 1, sbias, dev_rand(dt, k.K, -1, 1));
        shape_outs(&c);
        CK(cudaMalloc(&c.out[0].data, (size_t)c.out[0].numel * opd__dtype_size(dt)));
        ensure_workspace(cuda_workspace(&c));
        double us = time_us([&] { run_or_die(&c, v.fn); });
        int64_t PQ = c.out[0].shape[2] * c.out[0].shape[3];
        double fl = 2.0 * k.N * k.K * PQ * k.C * 9;
        printf("bench op=conv2d variant=%s dtype=%s shape=N%lld_C%lld_%lldx%lld_K%lld%s us=%.1f "
               "tflops=%.2f\n",
               v.name, opd__kdtype_name(dt), (long long)k.N, (long long)k.C, (long long)k.HW,
               (long long)k.HW, (long long)k.K, k.st == 2 ? "_s2" : "", us, fl / (us * 1e6));
        fflush(stdout);
        for (int i = 0; i < 3; i++) CK(cudaFree(c.in[i].data));
        CK(cudaFree(c.out[0].data));
      }
  bench_conv2d_dw();
}

static void bench_nms(void) {
  if (!wanted("nms")) return;
  int64_t Ns[] = {1000, 5000, 20000};
  for (int64_t n : Ns) {
    std::vector<float> boxes((size_t)n * 4), scores((size_t)n);
    for (int64_t i = 0; i < n; i++) { /* torchvision bench style: random boxes in 0..1000 */
      float x = frand(0, 1000), y = frand(0, 1000), w = frand(1, 100), h = frand(1, 100);
      boxes[4 * i] = x;
      boxes[4 * i + 1] = y;
      boxes[4 * i + 2] = x + w;
      boxes[4 * i + 3] = y + h;
      scores[i] = frand(0, 1);
    }
    opd_kcall_t c;
    call_init(&c, "nms");
    attr(&c, "iou_threshold")->f = 0.5;
    attr(&c, "iou_threshold")->type = OPD_ATTR_FLOAT;
    int64_t sb[2] = {n, 4}, ss[1] = {n};
    c.n_in = 2;
    set_view(&c.in[0], OPD_DTYPE_FLOAT32, 2, sb, to_dev(OPD_DTYPE_FLOAT32, boxes.data(), n * 4));
    set_view(&c.in[1], OPD_DTYPE_FLOAT32, 1, ss, to_dev(OPD_DTYPE_FLOAT32, scores.data(), n));
    shape_outs(&c);
    CK(cudaMalloc(&c.out[0].data, (size_t)n * 8));
    CK(cudaMalloc(&c.out[1].data, 8));
    ensure_workspace(cuda_workspace(&c));
    double us = time_us([&] { run_or_die(&c, opd__op_find("nms")->cuda); });
    int64_t kept;
    CK(cudaMemcpy(&kept, c.out[1].data, 8, cudaMemcpyDeviceToHost));
    printf("bench op=nms dtype=float32 shape=[%lld,4] iou=0.5 kept=%lld us=%.1f\n", (long long)n,
           (long long)kept, us);
    fflush(stdout);
    for (int i = 0; i < 2; i++) {
      CK(cudaFree(c.in[i].data));
      CK(cudaFree(c.out[i].data));
    }
  }
}
