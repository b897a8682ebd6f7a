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
