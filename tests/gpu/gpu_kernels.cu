/* The CUDA kernels against the CPU reference, and their benchmark.
 *
 * DESIGN
 * A plain program (the GPU machine has no criterion). For every op and
 * dtype, random inputs on several shapes (awkward ones included: size 1,
 * odd sizes, long rows, batch dims, conv2d geometries, nms ties and
 * N = 0 / 1 / 5000) are rounded to the dtype; the op's cpu_ref runs on
 * float32 copies of them and its result is rounded to the dtype; the CUDA
 * kernel runs on the device copies (outputs poisoned with 0xff first); the
 * outputs must agree within atol + rtol*|ref| (int64 outputs exactly, NaN
 * matches NaN). Tolerances, chosen per dtype:
 *   float32   elementwise 1e-6 + 1e-5|ref|; row ops 1e-6 + 1e-4|ref|
 *             (float vs the reference's double); matmul / conv2d
 *             K * 2^-22 + 1e-5|ref| (K = reduction length: fp32
 *             accumulation in another order)
 *   float16   1e-4 + 2e-3|ref|  (one fp16 ulp is <= 2^-10 relative: the
 *             kernel and the rounded reference may round apart once)
 *   bfloat16  1e-3 + 1e-2|ref|  (one bf16 ulp is <= 2^-7 relative)
 * with matmul / conv2d atol scaled by sqrt(K) for the half types.
 * One line per case: "gpu op=... dtype=... shape=... max_abs_err=...
 * max_rel_err=... PASS|FAIL", then "N passed, N failed"; exit 1 on any
 * failure.
 *
 * --bench (style item 12): per kernel the median of 20 runs, each after
 * the L2 is flushed (a 2x-L2 memset), timed with CUDA events; effective
 * bandwidth = bytes read + written / time, next to a device-to-device
 * cudaMemcpyAsync moving the same bytes in the same run:
 * "bench op=... dtype=... shape=... us=... gbps=... copy_gbps=...
 * pct_copy=..." (gelu also in float16); matmul as TFLOP/s, conv2d (every
 * variant: direct3x3, im2col, igemm, winograd; float32 and bfloat16) and
 * nms as times.
 * conv2d is checked through every variant (AUTO, im2col, igemm with its
 * tile by size and with each tile forced, direct3x3 and winograd on 3x3
 * stride 1):
 * lines "gpu op=conv2d[variant]"; relu / gelu also on fixed edge values
 * and misaligned / in-place buffers ("[special]", "[misaligned]",
 * "[in-place]"). check_numerics: gelu (both forms), softmax, layernorm
 * and rmsnorm at the ends of each dtype's range (|x| up to its max, rows
 * of denormals, eps = 0, rows mixing both, a long row whose x[0] is an
 * outlier, two values one ulp apart) and on +-inf / NaN, whose reference
 * (cpu_ref) tests/ops/test_numerics.c holds to torch 1.13's values: lines
 * "[extreme...]" and "[inf/nan]"; `--op numerics` runs only those.
 *
 * Build and run (GPU machine):
 *   make CUDA=1 BLAS=0 build/tests/gpu_kernels
 *   build/tests/gpu_kernels            # check every op and dtype
 *   build/tests/gpu_kernels --bench    # timings
 *   build/tests/gpu_kernels --op softmax   # one op (either mode)
 *   build/tests/gpu_kernels --op numerics  # the extreme-value cases only
 */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "kernels/conv2d/igemm.h"
#include "kernels/cuda/cuda.h"

extern "C" {
#include "kernels/common/kutil.h"
#include "kernels/runtime/exec.h"
#include "kernels/runtime/registry.h"
}

#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,               \
              cudaGetErrorString(e_));                                         \
      exit(2);                                                                 \
    }                                                                          \
  } while (0)

static opd_cuda_ctx_t g_ctx;
static cudaStream_t g_stream;
static int g_pass, g_fail;
static const char *g_only; /* --op NAME */

/* ---- helpers ------------------------------------------------------------ */
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float frand(float lo, float hi) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return lo + (hi - lo) * (float)((g_rng >> 40) * (1.0 / 16777216.0));
}

static float round_to(int dt, float v) {
  if (dt == OPD_DTYPE_FLOAT16) return __half2float(__float2half_rn(v));
  if (dt == OPD_DTYPE_BFLOAT16) return __bfloat162float(__float2bfloat16_rn(v));
  return v;
}

/* Device copy of n floats in dtype dt. */
static void *to_dev(int dt, const float *h, int64_t n) {
  size_t esz = opd__dtype_size(dt);
  std::vector<unsigned char> buf((size_t)(n > 0 ? n : 1) * esz);
  for (int64_t i = 0; i < n; i++) {
    if (dt == OPD_DTYPE_FLOAT16) {
      __half v = __float2half_rn(h[i]);
      memcpy(&buf[i * esz], &v, 2);
    } else if (dt == OPD_DTYPE_BFLOAT16) {
      __nv_bfloat16 v = __float2bfloat16_rn(h[i]);
      memcpy(&buf[i * esz], &v, 2);
    } else {
      memcpy(&buf[i * esz], &h[i], 4);
    }
  }
  void *d;
  CK(cudaMalloc(&d, buf.size()));
  CK(cudaMemcpy(d, buf.data(), (size_t)n * esz, cudaMemcpyHostToDevice));
  return d;
}

static std::vector<float> from_dev(int dt, const void *d, int64_t n) {
  size_t esz = opd__dtype_size(dt);
  std::vector<unsigned char> buf((size_t)(n > 0 ? n : 1) * esz);
  CK(cudaMemcpy(buf.data(), d, (size_t)n * esz, cudaMemcpyDeviceToHost));
  std::vector<float> o((size_t)n);
  for (int64_t i = 0; i < n; i++) {
    if (dt == OPD_DTYPE_FLOAT16) {
      __half v;
      memcpy(&v, &buf[i * esz], 2);
      o[i] = __half2float(v);
    } else if (dt == OPD_DTYPE_BFLOAT16) {
      __nv_bfloat16 v;
      memcpy(&v, &buf[i * esz], 2);
      o[i] = __bfloat162float(v);
    } else {
      memcpy(&o[i], &buf[i * esz], 4);
    }
  }
  return o;
}

/* The op scratch a call would like (its row's cuda_workspace; 0 if none). */
static size_t cuda_workspace(const opd_kcall_t *c) {
  return c->op->cuda_workspace ? c->op->cuda_workspace(c) : 0;
}

static void ensure_workspace(size_t need) {
  need += OPD_CUDA_LT_WORKSPACE;
  if (need <= g_ctx.workspace_bytes) return;
  CK(cudaStreamSynchronize(g_stream));
  if (g_ctx.workspace) CK(cudaFree(g_ctx.workspace));
  CK(cudaMalloc(&g_ctx.workspace, need));
  g_ctx.workspace_bytes = need;
}

static void call_init(opd_kcall_t *c, const char *op) {
  memset(c, 0, sizeof *c);
  c->op = opd__op_find(op);
  if (!c->op) {
    fprintf(stderr, "no op %s\n", op);
    exit(2);
  }
  c->exec = &opd__exec_serial;
  for (int i = 0; i < c->op->n_attrs; i++) {
    c->attr[i] = c->op->attrs[i].def;
    c->attr[i].type = c->op->attrs[i].type;
  }
}

static opd_attr_val_t *attr(opd_kcall_t *c, const char *name) {
  for (int i = 0; i < c->op->n_attrs; i++)
    if (strcmp(c->op->attrs[i].name, name) == 0) return &c->attr[i];
  fprintf(stderr, "no attr %s\n", name);
  exit(2);
}

static void set_view(opd_tview_t *v, int dt, int rank, const int64_t *shape, void *data) {
  v->data = data;
  v->dtype = dt;
  v->rank = rank;
  v->numel = 1;
  for (int d = rank - 1; d >= 0; d--) {
    v->shape[d] = shape[d];
    v->strides[d] = v->numel;
    v->numel *= shape[d];
  }
}

/* Runs the shape rule (data hidden) and sets the outputs' views (data
 * NULL). Returns the rule's code. */
static int shape_outs(opd_kcall_t *c) {
  void *keep[OPD_MAX_TENSORS];
  for (int i = 0; i < c->n_in; i++) {
    keep[i] = c->in[i].data;
    c->in[i].data = NULL;
  }
  opd_tshape_t out[OPD_MAX_TENSORS];
  memset(out, 0, sizeof out);
  int rc = c->op->shape(c, out);
  for (int i = 0; i < c->n_in; i++) c->in[i].data = keep[i];
  c->n_out = c->op->n_out;
  for (int i = 0; i < c->n_out; i++) set_view(&c->out[i], out[i].dtype, out[i].rank, out[i].shape, NULL);
  return rc;
}

static const char *shapes_str(const opd_kcall_t *c, char *buf, size_t n) {
  size_t u = 0;
  buf[0] = 0;
  for (int i = 0; i < c->n_in && u < n; i++) {
    char s[160];
    opd__shape_str(s, sizeof s, c->in[i].shape, c->in[i].rank);
    u += (size_t)snprintf(buf + u, n - u, "%s%s", i ? "x" : "", s);
  }
  return buf;
}

static bool g_numerics; /* --op numerics: check_numerics only */
static bool wanted(const char *op) { return !g_only || strcmp(g_only, op) == 0 || g_numerics; }

typedef struct in_spec {
  int rank;
  int64_t shape[OPD_MAX_RANK];
  float lo, hi;
  const float *vals;               /* fixed values, or NULL for random */
} in_spec_t;

typedef int (*cuda_fn)(opd_kcall_t *, const opd_cuda_ctx_t *);

/* One case: inputs from `ins`, attrs set by `attrs`, CPU reference on
 * float32 copies vs the CUDA kernel `fn` (NULL: the table's) in dtype dt
 * (nms: float32 inputs, int64 outputs). */
template <typename A>
static void run_case(const char *op, const char *label, int dt, int nin, const in_spec_t *ins,
                     A attrs, double atol, double rtol, cuda_fn fn = NULL) {
  if (!wanted(op)) return;
  opd_kcall_t ref, gpu;
  call_init(&ref, op);
  call_init(&gpu, op);
  attrs(&ref);
  attrs(&gpu);
  std::vector<std::vector<float>> hin(nin);
  std::vector<void *> din(nin);
  for (int i = 0; i < nin; i++) {
    int64_t n = 1;
    for (int d = 0; d < ins[i].rank; d++) n *= ins[i].shape[d];
    hin[i].resize((size_t)(n > 0 ? n : 1));
    for (int64_t k = 0; k < n; k++)
      hin[i][k] = round_to(dt, ins[i].vals ? ins[i].vals[k] : frand(ins[i].lo, ins[i].hi));
    din[i] = to_dev(dt, hin[i].data(), n);
    set_view(&ref.in[i], OPD_DTYPE_FLOAT32, ins[i].rank, ins[i].shape, hin[i].data());
    set_view(&gpu.in[i], dt, ins[i].rank, ins[i].shape, din[i]);
  }
  ref.n_in = gpu.n_in = nin;
  char shp[512];
  shapes_str(&gpu, shp, sizeof shp);
  const char *dts = opd__kdtype_name(dt);
  int rc1 = shape_outs(&ref), rc2 = shape_outs(&gpu);
  if (rc1 || rc2) {
    printf("gpu op=%s%s dtype=%s shape=%s shape rule failed: %s%s FAIL\n", op, label, dts, shp,
           ref.err, gpu.err);
    g_fail++;
    return;
  }
  bool dtype_ok = true;
  std::vector<std::vector<unsigned char>> hout(ref.n_out);
  for (int j = 0; j < ref.n_out; j++) {
    int odt = ref.out[j].dtype == OPD_DTYPE_FLOAT32 ? dt : ref.out[j].dtype;
    if (gpu.out[j].dtype != odt) dtype_ok = false;
    size_t eb = opd__dtype_size(ref.out[j].dtype), gb = opd__dtype_size(gpu.out[j].dtype);
    hout[j].resize((size_t)(ref.out[j].numel > 0 ? ref.out[j].numel : 1) * eb);
    ref.out[j].data = hout[j].data();
    void *d;
    CK(cudaMalloc(&d, (size_t)(gpu.out[j].numel > 0 ? gpu.out[j].numel : 1) * gb));
    CK(cudaMemset(d, 0xff, (size_t)gpu.out[j].numel * gb));
    gpu.out[j].data = d;
  }
  int rr = ref.op->cpu_ref(&ref);
  ensure_workspace(cuda_workspace(&gpu));
  if (!fn) fn = opd__op_find(op)->cuda;
  int rg = fn(&gpu, &g_ctx);
  CK(cudaStreamSynchronize(g_stream));
  CK(cudaGetLastError());
  double maxa = 0, maxr = 0;
  bool ok = rr == 0 && rg == 0 && dtype_ok;
  for (int j = 0; j < ref.n_out && ok; j++) {
    int64_t n = ref.out[j].numel;
    if (ref.out[j].dtype == OPD_DTYPE_INT64) {
      std::vector<int64_t> g((size_t)(n > 0 ? n : 1));
      CK(cudaMemcpy(g.data(), gpu.out[j].data, (size_t)n * 8, cudaMemcpyDeviceToHost));
      const int64_t *r = (const int64_t *)hout[j].data();
      for (int64_t i = 0; i < n; i++)
        if (g[i] != r[i]) {
          if (ok)
            printf("  %s out %d [%lld]: got %lld want %lld\n", op, j, (long long)i,
                   (long long)g[i], (long long)r[i]);
          ok = false;
          maxa = std::max(maxa, fabs((double)(g[i] - r[i])));
        }
      continue;
    }
    std::vector<float> g = from_dev(gpu.out[j].dtype, gpu.out[j].data, n);
    const float *r = (const float *)hout[j].data();
    for (int64_t i = 0; i < n; i++) {
      float want = round_to(dt, r[i]), got = g[i];
      if (isnan(want) || isnan(got)) {
        if (isnan(want) != isnan(got)) ok = false;
        continue;
      }
      if (got == want) continue; /* also +-inf */
      double e = fabs((double)got - want);
      maxa = std::max(maxa, e);
      if (want != 0) maxr = std::max(maxr, e / fabs(want));
      if (!(e <= atol + rtol * fabs(want))) {
        if (ok)
          printf("  %s out %d [%lld]: got %.9g want %.9g\n", op, j, (long long)i, got, want);
        ok = false;
      }
    }
  }
  printf("gpu op=%s%s dtype=%s shape=%s max_abs_err=%.3g max_rel_err=%.3g %s%s%s\n", op, label,
         dts, shp, maxa, maxr, ok ? "PASS" : "FAIL", rg ? " kernel: " : "", rg ? gpu.err : "");
  if (!dtype_ok) printf("  output dtype does not follow the input dtype\n");
  ok ? g_pass++ : g_fail++;
  for (int i = 0; i < nin; i++) CK(cudaFree(din[i]));
  for (int j = 0; j < gpu.n_out; j++) CK(cudaFree(gpu.out[j].data));
}

static const int DTS[3] = {OPD_DTYPE_FLOAT32, OPD_DTYPE_FLOAT16, OPD_DTYPE_BFLOAT16};
static void tol(int dt, double *atol, double *rtol, double f32_atol, double f32_rtol) {
  if (dt == OPD_DTYPE_FLOAT16) {
    *atol = 1e-4;
    *rtol = 2e-3;
  } else if (dt == OPD_DTYPE_BFLOAT16) {
    *atol = 1e-3;
    *rtol = 1e-2;
  } else {
    *atol = f32_atol;
    *rtol = f32_rtol;
  }
}
static auto no_attrs = [](opd_kcall_t *) {};

#define S(...) {__VA_ARGS__}

/* ---- the checks --------------------------------------------------------- */
static void check_unary(void) {
  in_spec_t shapes[] = {{1, S(1), -4, 4, NULL},        {1, S(7), -4, 4, NULL},
                        {2, S(33, 65), -4, 4, NULL},   {2, S(1, 65537), -6, 6, NULL},
                        {3, S(4, 128, 1024), -4, 4, NULL}, {0, S(0), -4, 4, NULL},
                        {2, S(0, 5), -4, 4, NULL}};
  for (int d = 0; d < 3; d++)
    for (auto &s : shapes) {
      double a, r;
      tol(DTS[d], &a, &r, 1e-6, 1e-5);
      run_case("relu", "", DTS[d], 1, &s, no_attrs, a, r);
      run_case("gelu", "", DTS[d], 1, &s, no_attrs, a, r);
      run_case("gelu", "[tanh]", DTS[d], 1, &s,
               [](opd_kcall_t *c) { strcpy(attr(c, "approximate")->s, "tanh"); }, a, r);
    }
}

/* relu / gelu on fixed values (signed zeros, a float32 denormal, the
 * far tails, NaN), and through the other layouts of unary.cuh: x and y
 * misaligned by one element (the scalar kernel) and in place (y == x,
 * aligned: the pack kernel with a 3-element tail). */
static void check_unary_edges(void) {
  static const float sp[16] = {0.0f, -0.0f, 1e-40f, -1e-40f, 5.5f,   -5.5f,   10.0f,  -10.0f,
                               20.0f, -20.0f, 300.0f, -300.0f, 60000.0f, -60000.0f, NAN, 0.5f};
  const char *ops[2] = {"relu", "gelu"};
  for (int d = 0; d < 3; d++) {
    double a, r;
    tol(DTS[d], &a, &r, 1e-6, 1e-5);
    in_spec_t s = {1, S(16), 0, 0, sp};
    run_case("relu", "[special]", DTS[d], 1, &s, no_attrs, a, r);
    run_case("gelu", "[special]", DTS[d], 1, &s, no_attrs, a, r);
    run_case("gelu", "[tanh,special]", DTS[d], 1, &s,
             [](opd_kcall_t *c) { strcpy(attr(c, "approximate")->s, "tanh"); }, a, r);
    for (const char *op : ops)
      for (int layout = 0; layout < 2; layout++) { /* 0: misaligned by 1 element, 1: in place */
        if (!wanted(op)) continue;
        const int64_t n = 4099;
        size_t esz = opd__dtype_size(DTS[d]);
        std::vector<float> h((size_t)n), want((size_t)n);
        for (auto &v : h) v = round_to(DTS[d], frand(-6, 6));
        opd_kcall_t ref, gpu;
        call_init(&ref, op);
        call_init(&gpu, op);
        ref.n_in = gpu.n_in = 1;
        int64_t shp[1] = {n};
        set_view(&ref.in[0], OPD_DTYPE_FLOAT32, 1, shp, h.data());
        shape_outs(&ref);
        ref.out[0].data = want.data();
        ref.op->cpu_ref(&ref);
        std::vector<float> hx((size_t)n + 2, 0.0f); /* misaligned: x at element 1 */
        std::copy(h.begin(), h.end(), hx.begin() + (layout == 0));
        char *dx = (char *)to_dev(DTS[d], hx.data(), n + 2), *dy = NULL;
        void *xin = dx + (layout == 0 ? esz : 0), *yout = xin;
        if (layout == 0) {
          CK(cudaMalloc(&dy, (size_t)(n + 2) * esz));
          CK(cudaMemset(dy, 0xff, (size_t)(n + 2) * esz));
          yout = dy + esz;
        }
        set_view(&gpu.in[0], DTS[d], 1, shp, xin);
        shape_outs(&gpu);
        gpu.out[0].data = yout;
        int rg = opd__op_find(op)->cuda(&gpu, &g_ctx);
        CK(cudaStreamSynchronize(g_stream));
        std::vector<float> got = from_dev(DTS[d], yout, n);
        double maxa = 0, maxr = 0;
        bool ok = rg == 0;
        for (int64_t i = 0; i < n; i++) {
          float w = round_to(DTS[d], want[i]);
          double e = fabs((double)got[i] - w);
          maxa = std::max(maxa, e);
          if (w != 0) maxr = std::max(maxr, e / fabs(w));
          if (!(e <= a + r * fabs(w))) ok = false;
        }
        printf("gpu op=%s%s dtype=%s shape=[%lld] max_abs_err=%.3g max_rel_err=%.3g %s\n", op,
               layout == 0 ? "[misaligned]" : "[in-place]", opd__kdtype_name(DTS[d]),
               (long long)n, maxa, maxr, ok ? "PASS" : "FAIL");
        ok ? g_pass++ : g_fail++;
        CK(cudaFree(dx));
        if (dy) CK(cudaFree(dy));
      }
  }
}

static void check_binary(void) {
  struct { in_spec_t a, b; } cases[] = {
      {{2, S(37, 129), -2, 2, NULL}, {2, S(37, 129), -2, 2, NULL}},
      {{2, S(300, 257), -2, 2, NULL}, {1, S(257), -2, 2, NULL}},
      {{1, S(257), -2, 2, NULL}, {2, S(300, 257), -2, 2, NULL}},
      {{4, S(2, 3, 17, 19), -2, 2, NULL}, {2, S(17, 19), -2, 2, NULL}},
      {{3, S(5, 7, 9), -2, 2, NULL}, {0, S(0), -2, 2, NULL}},
      {{2, S(64, 1), -2, 2, NULL}, {2, S(1, 333), -2, 2, NULL}},
      {{3, S(4, 1, 6), -2, 2, NULL}, {3, S(1, 5, 1), -2, 2, NULL}},
      {{4, S(3, 1, 4, 1), -2, 2, NULL}, {3, S(2, 1, 7), -2, 2, NULL}},
      {{2, S(0, 5), -2, 2, NULL}, {1, S(5), -2, 2, NULL}},
      {{1, S(1000001), -2, 2, NULL}, {1, S(1000001), -2, 2, NULL}},
      {{0, S(0), -2, 2, NULL}, {0, S(0), -2, 2, NULL}},
  };
  for (int d = 0; d < 3; d++)
    for (auto &c : cases) {
      in_spec_t in[2] = {c.a, c.b};
      double a, r;
      tol(DTS[d], &a, &r, 0, 1e-7);
      run_case("add", "", DTS[d], 2, in, no_attrs, a, r);
      run_case("mul", "", DTS[d], 2, in, no_attrs, a, r);
    }
}

static void check_rows(void) {
  int64_t Cs[] = {1, 7, 32, 100, 1024, 1025, 4096, 5000, 32768, 65537};
  int64_t Rs[] = {1, 3, 67};
  for (int d = 0; d < 3; d++)
    for (int64_t C : Cs)
      for (int64_t R : Rs) {
        if (R * C > 4000000) continue;
        double a, r;
        tol(DTS[d], &a, &r, 1e-6, 1e-4);
        in_spec_t x = {2, S(R, C), -5, 5, NULL};
        in_spec_t w = {1, S(C), 0.5f, 1.5f, NULL}, b = {1, S(C), -1, 1, NULL};
        run_case("softmax", "", DTS[d], 1, &x, no_attrs, a, r);
        in_spec_t ln[3] = {x, w, b};
        in_spec_t xs = {2, S(R, C), 3, 5, NULL}; /* mean far from 0 */
        in_spec_t ln2[3] = {xs, w, b};
        double la = DTS[d] == OPD_DTYPE_FLOAT32 ? 1e-5 : a;
        run_case("layernorm", "", DTS[d], 1, ln, no_attrs, la, r);
        run_case("layernorm", "[w,b]", DTS[d], 3, ln, no_attrs, la, r);
        run_case("layernorm", "[w,b,offset]", DTS[d], 3, ln2, no_attrs, DTS[d] == OPD_DTYPE_FLOAT32 ? 1e-4 : a * 4, r);
        run_case("rmsnorm", "", DTS[d], 1, ln, no_attrs, a, r);
        run_case("rmsnorm", "[w]", DTS[d], 2, ln, no_attrs, a, r);
      }
  /* 3-d input, and special values in softmax rows */
  static const float sp[8] = {-INFINITY, 0, 1, -INFINITY, -INFINITY, -INFINITY, -INFINITY,
                              -INFINITY};
  static const float nanrow[4] = {1, NAN, 2, 3};
  for (int d = 0; d < 3; d++) {
    double a, r;
    tol(DTS[d], &a, &r, 1e-6, 1e-4);
    in_spec_t x3 = {3, S(2, 3, 77), -3, 3, NULL};
    run_case("softmax", "", DTS[d], 1, &x3, no_attrs, a, r);
    in_spec_t s1 = {2, S(2, 4), 0, 0, sp};
    run_case("softmax", "[-inf rows]", DTS[d], 1, &s1, no_attrs, a, r);
    in_spec_t s2 = {2, S(1, 4), 0, 0, nanrow};
    run_case("softmax", "[nan]", DTS[d], 1, &s2, no_attrs, a, r);
  }
}

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
 * float16 / bfloat16 on the H200 while cuBLASLt was free to sum them in
 * the output type, kernels/cuda/gemm.cuh). */
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

/* Median time (us) of fn() over reps runs, each after an L2 flush. */
template <typename F>
static double time_us(F fn, int reps = 20) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  fn(); /* warm up */
  std::vector<float> t;
  for (int i = 0; i < reps; i++) {
    CK(cudaMemsetAsync(g_flush, i, g_flush_bytes, g_stream));
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

static int conv_auto(opd_kcall_t *c, const opd_cuda_ctx_t *x) {
  return opd__conv2d_cuda_variant(c, x, OPD_CONV_AUTO);
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

int main(int argc, char **argv) {
  bool bench = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--bench") == 0) bench = true;
    else if (strcmp(argv[i], "--op") == 0 && i + 1 < argc) g_only = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--bench] [--op NAME]\n", argv[0]);
      return 2;
    }
  }
  int dev = 0;
  cudaDeviceProp prop;
  CK(cudaSetDevice(dev));
  CK(cudaGetDeviceProperties(&prop, dev));
  printf("device: %s (sm_%d%d), %d SMs, L2 %d MiB\n", prop.name, prop.major, prop.minor,
         prop.multiProcessorCount, prop.l2CacheSize >> 20);
  CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  cublasLtHandle_t lt;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "cublasLtCreate failed\n");
    return 2;
  }
  g_ctx.stream = g_stream;
  g_ctx.cublaslt = lt;
  g_ctx.device = dev;
  ensure_workspace(OPD_CUDA_WORKSPACE_DEFAULT - OPD_CUDA_LT_WORKSPACE);
  if (bench) {
    g_flush_bytes = (size_t)prop.l2CacheSize * 2;
    CK(cudaMalloc(&g_flush, g_flush_bytes));
    bench_rows();
    bench_matmul();
    bench_conv2d();
    bench_nms();
    return 0;
  }
  if (g_only && strcmp(g_only, "numerics") == 0) {
    g_numerics = true;
    check_numerics();
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
  }
  check_noop();
  check_copy();
  check_unary();
  check_unary_edges();
  check_binary();
  check_rows();
  check_numerics();
  check_matmul();
  check_conv2d();
  check_nms();
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
