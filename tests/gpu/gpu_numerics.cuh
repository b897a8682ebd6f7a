/* Part of tests/gpu/gpu_kernels.cu, included there at this point (one
 * translation unit: its helpers and counts): the ends of each dtype's float
 * range and +-inf / NaN (check_numerics). */

/* ---- the ends of the float range ---------------------------------------- */
/* The value one ulp above v (> 0) in dtype dt. */
static float next_up(int dt, float v) {
  if (dt == OPD_DTYPE_FLOAT16) {
    __half_raw h = __half_raw(__float2half_rn(v));
    h.x++;
    return __half2float(__half(h));
  }
  uint32_t u;
  memcpy(&u, &v, 4);
  u += dt == OPD_DTYPE_BFLOAT16 ? 0x10000u : 1u;
  memcpy(&v, &u, 4);
  return v;
}

static double drand(double lo, double hi) { /* in double: hi - lo may pass FLT_MAX */
  return lo + (hi - lo) * (double)frand(0, 1);
}

static void set_eps0(opd_kcall_t *c) { attr(c, "eps")->f = 0; }

/* gelu on fixed extreme values; softmax, layernorm and rmsnorm on rows of
 * extreme values (in each dtype's own range: float16's max is 65504, its
 * smallest denormal 6e-8) for every row layout of rows_tpr, with and
 * without eps = 0 and weight / bias; all of them on rows holding +-inf and
 * NaN. */
static void check_numerics(void) {
  static const float gx[] = {
      FLT_MAX, -FLT_MAX, 3.4e38f, -3.4e38f, 1e38f, -1e38f, 1e20f, -1e20f, 1.8e19f, -1.8e19f,
      1e13f, -1e13f, 65504.0f, -65504.0f, 300.0f, -300.0f, 20.0f, -20.0f, 12.0f, -12.0f,
      10.5f, -10.5f, 9.0f, -9.0f, 5.5f, -5.5f, 1.0f, -1.0f, FLT_MIN, -FLT_MIN,
      1e-40f, -1e-40f, 1.4e-45f, -1.4e-45f, 6e-8f, -6e-8f, 0.0f, -0.0f,
      INFINITY, -INFINITY, NAN, -NAN};
  const int64_t gn = sizeof gx / sizeof gx[0];
  static const float nf[5 * 4] = {INFINITY, 0, 1, 2,  -INFINITY, 2, 3, 4,  NAN, 1, 2, 3,
                                  INFINITY, -INFINITY, 1, 2,  -INFINITY, -INFINITY, -INFINITY, -INFINITY};
  auto tanh_attr = [](opd_kcall_t *c) { strcpy(attr(c, "approximate")->s, "tanh"); };
  for (int d = 0; d < 3; d++) {
    int dt = DTS[d];
    double a, r;
    tol(dt, &a, &r, 1e-6, 1e-5);
    in_spec_t g = {1, S(gn), 0, 0, gx};
    run_case("gelu", "[extreme]", dt, 1, &g, no_attrs, a, r);
    run_case("gelu", "[tanh,extreme]", dt, 1, &g, tanh_attr, a, r);
    tol(dt, &a, &r, 1e-6, 1e-4);
    in_spec_t nx = {2, S(5, 4), 0, 0, nf}, nw = {1, S(4), 0.5f, 1.5f, NULL},
              nb = {1, S(4), -1, 1, NULL};
    in_spec_t nin[3] = {nx, nw, nb};
    run_case("softmax", "[inf/nan]", dt, 1, &nx, no_attrs, a, r);
    run_case("layernorm", "[inf/nan]", dt, 3, nin, no_attrs, a, r);
    run_case("rmsnorm", "[inf/nan]", dt, 2, nin, no_attrs, a, r);
    static const float zeros[4] = {0, 0, 0, 0};
    in_spec_t z = {2, S(1, 4), 0, 0, zeros};
    run_case("rmsnorm", "[zeros,eps=0]", dt, 1, &z, set_eps0, a, r);

    bool f16 = dt == OPD_DTYPE_FLOAT16;
    /* big: the dtype's max, below which a value rounds to a finite one
     * (bfloat16's max is 3.3895e38); tiny: denormal below it */
    double big = f16 ? 65504.0 : dt == OPD_DTYPE_BFLOAT16 ? 3.38e38 : FLT_MAX;
    double tiny = f16 ? 6e-5 : 1e-38;
    double mid = f16 ? 3e4 : 3e20, sq = f16 ? 3e4 : 3e19;          /* squares past max */
    float v0 = round_to(dt, f16 ? 1000.0f : 1e30f), v1 = next_up(dt, v0);
    int64_t Cs[] = {1, 2, 7, 37, 100, 1024, 1025, 4096, 5000, 32768, 65537};
    const int R = 9;
    for (int64_t C : Cs) {
      std::vector<float> x((size_t)(R * C));
      for (int64_t i = 0; i < C; i++) {
        x[0 * C + i] = (float)drand(-big, big);                   /* whole range */
        x[1 * C + i] = (float)drand(-mid, mid);                   /* ~1e20: 0 before */
        x[2 * C + i] = (float)drand(0.97 * big, big);             /* near max, one sign */
        x[3 * C + i] = (float)drand(-tiny, tiny);                 /* denormals */
        x[4 * C + i] = i % 2 ? v0 : v1;                           /* one ulp apart */
        x[5 * C + i] = i % 4 == 0 ? (float)drand(-0.9 * big, 0.9 * big) /* mixed */
                       : i % 4 == 1 ? (float)drand(-tiny / 100, tiny / 100)
                                    : (float)drand(-2, 2);
        x[6 * C + i] = (float)drand(sq, 2 * sq);                  /* x^2 C past max */
        x[7 * C + i] = i == 0 ? (f16 ? 1e3f : 1e4f) : (float)drand(-1, 1); /* x[0] outlier */
        x[8 * C + i] = (float)drand(-3, 5);                       /* ordinary */
      }
      std::vector<float> w((size_t)C), b((size_t)C);
      for (int64_t i = 0; i < C; i++) w[i] = frand(0.5f, 2.0f), b[i] = frand(-1, 1);
      in_spec_t xs = {2, S(R, C), 0, 0, x.data()}, ws = {1, S(C), 0, 0, w.data()},
                bs = {1, S(C), 0, 0, b.data()};
      in_spec_t in[3] = {xs, ws, bs};
      tol(dt, &a, &r, 1e-6, 1e-4);
      double la = dt == OPD_DTYPE_FLOAT32 ? 1e-5 : a;
      run_case("softmax", "[extreme]", dt, 1, &xs, no_attrs, a, r);
      run_case("layernorm", "[extreme]", dt, 1, in, no_attrs, la, r);
      run_case("layernorm", "[extreme,w,b]", dt, 3, in, no_attrs, la, r);
      run_case("layernorm", "[extreme,eps=0]", dt, 1, in, set_eps0, la, r);
      run_case("rmsnorm", "[extreme]", dt, 1, in, no_attrs, a, r);
      run_case("rmsnorm", "[extreme,w]", dt, 2, in, no_attrs, a, r);
      run_case("rmsnorm", "[extreme,eps=0]", dt, 1, in, set_eps0, a, r);
    }
  }
}
