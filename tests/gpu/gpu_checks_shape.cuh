/* Part of tests/gpu/gpu_kernels.cu, included there (one translation unit:
 * its helpers and counts): the data movement ops (permute, reshape, slice,
 * cat, expand, embedding, gather, where) against their CPU reference, byte for
 * byte, over element sizes 1, 2, 4 and 8 (bool, int8, float16, bfloat16,
 * float32, int64, float64), awkward shapes (empty, a dim of 1, odd
 * widths, 15 cat inputs), pointers moved off 16-byte alignment
 * ("[moved]": the narrower units of kernels/shape/move.cuh), add / sub /
 * mul of integers and the compare ops (checked byte for byte the same
 * way) and, for
 * embedding, out-of-range indices, which the CUDA kernel turns into rows
 * of zeros ("[bad-index]"). */

typedef struct mv_in {
  int dt;                          /* dtype */
  int rank;                        /* rank */
  int64_t shape[OPD_MAX_RANK];     /* extents */
  std::vector<unsigned char> bytes; /* host values */
} mv_in_t;

static int64_t mv_numel(const mv_in_t &t) {
  int64_t n = 1;
  for (int d = 0; d < t.rank; d++) n *= t.shape[d];
  return n;
}

/* Random bytes of dtype dt (bool: 0 or 1). */
static mv_in_t mv_rand(int dt, std::initializer_list<int64_t> shape) {
  mv_in_t t;
  t.dt = dt;
  t.rank = (int)shape.size();
  int d = 0;
  for (int64_t s : shape) t.shape[d++] = s;
  t.bytes.resize((size_t)mv_numel(t) * opd__dtype_size(dt) + 1);
  for (auto &b : t.bytes) b = dt == OPD_DTYPE_BOOL ? (frand(0, 1) < 0.5f) : (unsigned char)frand(0, 256);
  return t;
}

/* Indices of dtype dt (int32 / int64) in [0, V). */
static mv_in_t mv_index(int dt, std::initializer_list<int64_t> shape, int64_t V) {
  mv_in_t t = mv_rand(dt, shape);
  for (int64_t i = 0; i < mv_numel(t); i++) {
    int64_t v = (int64_t)frand(0, (float)V) % V;
    if (dt == OPD_DTYPE_INT32) ((int32_t *)t.bytes.data())[i] = (int32_t)v;
    else ((int64_t *)t.bytes.data())[i] = v;
  }
  return t;
}

/* One case: cpu_ref on host copies, the CUDA kernel on device copies
 * (device pointers `shift` bytes past a 256-byte boundary, output
 * poisoned), outputs equal byte for byte; with in_place, output 0 is
 * input 0's device memory (reshape). */
template <typename A>
static void move_case(const char *op, const char *label, std::vector<mv_in_t> ins, A attrs,
                      size_t shift = 0, bool in_place = false) {
  if (!wanted(op)) return;
  opd_kcall_t ref, gpu;
  call_init(&ref, op);
  call_init(&gpu, op);
  attrs(&ref);
  attrs(&gpu);
  int nin = (int)ins.size();
  std::vector<char *> dbuf(nin);
  for (int i = 0; i < nin; i++) {
    size_t n = ins[i].bytes.size();
    CK(cudaMalloc(&dbuf[i], n + shift));
    CK(cudaMemcpy(dbuf[i] + shift, ins[i].bytes.data(), n, cudaMemcpyHostToDevice));
    set_view(&ref.in[i], ins[i].dt, ins[i].rank, ins[i].shape, ins[i].bytes.data());
    set_view(&gpu.in[i], ins[i].dt, ins[i].rank, ins[i].shape, dbuf[i] + shift);
  }
  ref.n_in = gpu.n_in = nin;
  char shp[512];
  shapes_str(&gpu, shp, sizeof shp);
  const char *dts = opd__kdtype_name(strcmp(op, "where") == 0 ? ins[1].dt : ins[0].dt);
  if (shape_outs(&ref) || shape_outs(&gpu)) {
    printf("gpu op=%s%s dtype=%s shape=%s shape rule failed: %s FAIL\n", op, label, dts, shp,
           ref.err);
    g_fail++;
    return;
  }
  size_t bytes = (size_t)ref.out[0].numel * opd__dtype_size(ref.out[0].dtype);
  std::vector<unsigned char> want(bytes + 1), got(bytes + 1);
  ref.out[0].data = want.data();
  char *dout = NULL;
  if (in_place) {
    gpu.out[0].data = gpu.in[0].data;
  } else {
    CK(cudaMalloc(&dout, bytes + shift + 1));
    CK(cudaMemset(dout, 0xff, bytes + shift + 1));
    gpu.out[0].data = dout + shift;
  }
  int rr = ref.op->cpu_ref(&ref);
  int rg = opd__op_find(op)->cuda(&gpu, &g_ctx);
  CK(cudaStreamSynchronize(g_stream));
  CK(cudaGetLastError());
  CK(cudaMemcpy(got.data(), gpu.out[0].data, bytes, cudaMemcpyDeviceToHost));
  bool ok = rr == 0 && rg == 0 && memcmp(got.data(), want.data(), bytes) == 0;
  printf("gpu op=%s%s dtype=%s shape=%s max_abs_err=%d max_rel_err=0 %s%s%s\n", op, label, dts,
         shp, ok ? 0 : 1, ok ? "PASS" : "FAIL", rg ? " kernel: " : "", rg ? gpu.err : "");
  ok ? g_pass++ : g_fail++;
  for (int i = 0; i < nin; i++) CK(cudaFree(dbuf[i]));
  if (dout) CK(cudaFree(dout));
}

static void set_ints(opd_kcall_t *c, const char *name, std::initializer_list<int64_t> v) {
  opd_attr_val_t *a = attr(c, name);
  a->type = OPD_ATTR_INTS;
  a->n = 0;
  for (int64_t x : v) a->ints[a->n++] = x;
}
static void set_int(opd_kcall_t *c, const char *name, int64_t v) {
  opd_attr_val_t *a = attr(c, name);
  a->type = OPD_ATTR_INT;
  a->i = v;
}

static const int MV_DTS[] = {OPD_DTYPE_BOOL, OPD_DTYPE_INT8, OPD_DTYPE_FLOAT16,
                             OPD_DTYPE_BFLOAT16, OPD_DTYPE_FLOAT32, OPD_DTYPE_INT64,
                             OPD_DTYPE_FLOAT64};

static void check_shape_ops(void) {
  for (int dt : MV_DTS) {
    size_t esz = opd__dtype_size(dt);
    move_case("permute", "", {mv_rand(dt, {2, 5, 16, 8})},
              [](opd_kcall_t *c) { set_ints(c, "dims", {0, 2, 1, 3}); });
    move_case("permute", "", {mv_rand(dt, {33, 65})},
              [](opd_kcall_t *c) { set_ints(c, "dims", {1, 0}); });
    move_case("permute", "", {mv_rand(dt, {4, 1, 3, 2})},
              [](opd_kcall_t *c) { set_ints(c, "dims", {-1, 2, 1, 0}); });
    move_case("permute", "", {mv_rand(dt, {0, 3})},
              [](opd_kcall_t *c) { set_ints(c, "dims", {1, 0}); });
    move_case("reshape", "", {mv_rand(dt, {2, 3, 4})},
              [](opd_kcall_t *c) { set_ints(c, "shape", {4, -1}); });
    move_case("reshape", "[in-place]", {mv_rand(dt, {6, 7})},
              [](opd_kcall_t *c) { set_ints(c, "shape", {6, 7}); }, 0, true);
    move_case("slice", "", {mv_rand(dt, {3, 10, 2})}, [](opd_kcall_t *c) {
      set_int(c, "dim", 1), set_int(c, "start", 1), set_int(c, "end", 9), set_int(c, "step", 3);
    });
    move_case("slice", "", {mv_rand(dt, {7, 129})}, [](opd_kcall_t *c) {
      set_int(c, "dim", -1), set_int(c, "start", -64);
    });
    move_case("slice", "[empty]", {mv_rand(dt, {7, 5})}, [](opd_kcall_t *c) {
      set_int(c, "dim", 0), set_int(c, "start", 5), set_int(c, "end", 2);
    });
    move_case("expand", "", {mv_rand(dt, {3, 1})},
              [](opd_kcall_t *c) { set_ints(c, "shape", {2, 3, 4}); });
    move_case("expand", "", {mv_rand(dt, {1, 768})},
              [](opd_kcall_t *c) { set_ints(c, "shape", {64, -1}); });
    move_case("cat", "", {mv_rand(dt, {2, 3, 4}), mv_rand(dt, {2, 0, 4}), mv_rand(dt, {2, 5, 4})},
              [](opd_kcall_t *c) { set_int(c, "dim", 1); });
    move_case("cat", "", {mv_rand(dt, {100, 64}), mv_rand(dt, {7, 64})}, no_attrs);
    move_case("cat", "", {mv_rand(dt, {9, 1}), mv_rand(dt, {9, 13}), mv_rand(dt, {9, 8})},
              [](opd_kcall_t *c) { set_int(c, "dim", -1); });
    move_case("cat", "[moved]", {mv_rand(dt, {4, 16}), mv_rand(dt, {4, 32})},
              [](opd_kcall_t *c) { set_int(c, "dim", 1); }, esz);
    std::vector<mv_in_t> many;
    for (int k = 0; k < OPD_MAX_TENSORS - 1; k++) many.push_back(mv_rand(dt, {3, k + 1}));
    move_case("cat", "[15 inputs]", many, [](opd_kcall_t *c) { set_int(c, "dim", 1); });
    move_case("where", "", {mv_rand(OPD_DTYPE_BOOL, {3, 5}), mv_rand(dt, {2, 1, 5}),
                            mv_rand(dt, {3, 1})}, no_attrs);
    move_case("where", "[uint8]", {mv_rand(OPD_DTYPE_UINT8, {64, 1}), mv_rand(dt, {64, 513}),
                                   mv_rand(dt, {})}, no_attrs);
    if (dt == OPD_DTYPE_BOOL || dt == OPD_DTYPE_INT8) continue;
    for (int it : {OPD_DTYPE_INT32, OPD_DTYPE_INT64}) {
      move_case("embedding", "", {mv_rand(dt, {50, 8}), mv_index(it, {2, 7}, 50)}, no_attrs);
      move_case("embedding", "", {mv_rand(dt, {50, 3}), mv_index(it, {11}, 50)}, no_attrs);
      move_case("embedding", "", {mv_rand(dt, {1000, 768}), mv_index(it, {4, 64}, 1000)},
                no_attrs);
      move_case("embedding", "[moved]", {mv_rand(dt, {20, 16}), mv_index(it, {9}, 20)},
                no_attrs, esz);
    }
    move_case("gather", "", {mv_rand(dt, {4, 5, 6}), mv_index(OPD_DTYPE_INT64, {4, 9, 6}, 5)},
              [](opd_kcall_t *c) { set_int(c, "dim", 1); });
    move_case("gather", "[narrow]", {mv_rand(dt, {2, 12}), mv_index(OPD_DTYPE_INT64, {1, 30}, 12)},
              [](opd_kcall_t *c) { set_int(c, "dim", -1); });
    move_case("gather", "", {mv_rand(dt, {64, 33}), mv_index(OPD_DTYPE_INT64, {7, 33}, 64)},
              [](opd_kcall_t *c) { set_int(c, "dim", 0); });
  }
  /* eq ... ge (kernels/compare/cuda.cu): bool results byte for byte as
   * the CPU's, every element size, NaN patterns included (random bytes) */
  for (int dt : MV_DTS)
    for (const char *op : {"eq", "ne", "lt", "le", "gt", "ge"}) {
      move_case(op, "[compare]", {mv_rand(dt, {64, 1, 33}), mv_rand(dt, {5, 33})}, no_attrs);
      move_case(op, "[compare]", {mv_rand(dt, {1000}), mv_rand(dt, {})}, no_attrs);
    }
  /* add, sub, mul of integers (kernels/binary/int.cu): wrapping
   * arithmetic, byte for byte as the CPU's, broadcast, with alpha */
  for (int it : {OPD_DTYPE_INT8, OPD_DTYPE_UINT8, OPD_DTYPE_INT32, OPD_DTYPE_INT64})
    for (const char *op : {"add", "sub", "mul"}) {
      move_case(op, "[int]", {mv_rand(it, {64, 1, 33}), mv_rand(it, {5, 33})}, no_attrs);
      move_case(op, "[int]", {mv_rand(it, {}), mv_rand(it, {1000})}, no_attrs);
      if (strcmp(op, "mul") != 0)
        move_case(op, "[int alpha]", {mv_rand(it, {7, 9}), mv_rand(it, {7, 9})},
                  [](opd_kcall_t *c) {
                    opd_attr_val_t *a = attr(c, "alpha");
                    a->type = OPD_ATTR_FLOAT;
                    a->f = -3.0;
                  });
    }
  /* embedding: an index out of [0, V) gives a row of zeros on CUDA */
  if (!wanted("embedding")) return;
  const int64_t V = 6, D = 5, n = 4;
  std::vector<float> w((size_t)(V * D));
  for (auto &v : w) v = frand(1, 2);
  int64_t idx[n] = {2, -1, 6, 5};
  void *dw = to_dev(OPD_DTYPE_FLOAT32, w.data(), V * D), *di, *dy;
  CK(cudaMalloc(&di, sizeof idx));
  CK(cudaMemcpy(di, idx, sizeof idx, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&dy, (size_t)(n * D) * 4));
  CK(cudaMemset(dy, 0xff, (size_t)(n * D) * 4));
  opd_kcall_t c;
  call_init(&c, "embedding");
  c.n_in = 2;
  int64_t ws[2] = {V, D}, is[1] = {n};
  set_view(&c.in[0], OPD_DTYPE_FLOAT32, 2, ws, dw);
  set_view(&c.in[1], OPD_DTYPE_INT64, 1, is, di);
  shape_outs(&c);
  c.out[0].data = dy;
  int rg = opd__op_find("embedding")->cuda(&c, &g_ctx);
  CK(cudaStreamSynchronize(g_stream));
  std::vector<float> y = from_dev(OPD_DTYPE_FLOAT32, dy, n * D);
  bool ok = rg == 0;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < D; j++) {
      float want = idx[i] >= 0 && idx[i] < V ? w[(size_t)(idx[i] * D + j)] : 0.0f;
      if (y[(size_t)(i * D + j)] != want) ok = false;
    }
  printf("gpu op=embedding[bad-index] dtype=float32 shape=[6,5]x[4] max_abs_err=%d "
         "max_rel_err=0 %s\n", ok ? 0 : 1, ok ? "PASS" : "FAIL");
  ok ? g_pass++ : g_fail++;
  CK(cudaFree(dw));
  CK(cudaFree(di));
  CK(cudaFree(dy));
}
