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
 * variant: direct3x3, im2col, igemm, winograd; float32 and bfloat16;
 * depthwise 3x3 through AUTO, "variant=depthwise", with GB/s) and nms as
 * times.
 * conv2d is checked through every variant (AUTO, im2col, igemm with its
 * tile by size and with each tile forced, direct3x3 and winograd on 3x3
 * stride 1, grouped), and its grouped / depthwise / unbatched / 'same'
 * cases through AUTO and grouped (groups 1 ones through every variant):
 * lines "gpu op=conv2d[variant]"; relu / gelu also on fixed edge values
 * and misaligned / in-place buffers ("[special]", "[misaligned]",
 * "[in-place]"). check_numerics: gelu (both forms), softmax, layernorm
 * and rmsnorm at the ends of each dtype's range (|x| up to its max, rows
 * of denormals, eps = 0, rows mixing both, a long row whose x[0] is an
 * outlier, two values one ulp apart) and on +-inf / NaN, whose reference
 * (cpu_ref) tests/ops/test_numerics.c holds to torch 1.13's values: lines
 * "[extreme...]" and "[inf/nan]"; `--op numerics` runs only those.
 *
 * linear: every act with and without bias, and a bias 4 bytes off
 * 16-byte alignment ("[misaligned-bias]": the path without cuBLASLt's
 * bias epilogue); at M <= 8 through the gemv variant and cuBLASLt forced,
 * and with x / W / bias moved off alignment ("[gemv,...]", "[blaslt,...]",
 * "[moved4,...]", "[moved-w2,...]"); --bench: both variants per layer and
 * as the 3-layer MLP in a CUDA graph. gru_cell: 0, 1 or 2 biases, batch
 * 1 to 33. The data movement ops (permute, reshape, slice, cat, expand,
 * embedding, where; tests/gpu/gpu_checks_shape.cuh) byte for byte over
 * element sizes 1 to 8.
 * 1 to 33. gpu_checks_f64.cuh: float64 against the CPU's float64 kernels
 * (`--op f64`). gpu_checks_reduce.cuh: sum / mean / amax over dims ("[split]":
 * the two-kernel path, with and without a workspace; "[int]" sums),
 * softmax / log_softmax on every dim and with dtype=float32, the norms
 * over several dims, add / sub with alpha, the pools and batch_norm.
 *
 * Build and run (GPU machine):
 *   make CUDA=1 BLAS=0 build/tests/gpu_kernels
 *   build/tests/gpu_kernels            # check every op and dtype
 *   build/tests/gpu_kernels --bench    # timings
 *   build/tests/gpu_kernels --op softmax   # one op (either mode)
 *   build/tests/gpu_kernels --op numerics  # the extreme-value cases only
 *   build/tests/gpu_kernels --op f64   # the float64 cases only
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
#include "kernels/linear/linear.h"
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
      for (const char *op : {"silu", "sigmoid", "tanh", "hardsigmoid", "hardswish", "neg",
                             "abs", "exp", "sin", "cos"})
        run_case(op, "", DTS[d], 1, &s, no_attrs, a, r);
      in_spec_t pos = s; /* log, sqrt, rsqrt of positive x */
      pos.lo = 0.01;
      for (const char *op : {"log", "sqrt", "rsqrt"}) run_case(op, "", DTS[d], 1, &pos, no_attrs, a, r);
      run_case("hardtanh", "[0,6]", DTS[d], 1, &s,
               [](opd_kcall_t *c) { attr(c, "min_val")->f = 0, attr(c, "max_val")->f = 6; }, a, r);
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
      for (const char *op : {"add", "mul", "sub", "div"}) run_case(op, "", DTS[d], 2, in, no_attrs, a, r);
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

#include "tests/gpu/gpu_numerics.cuh"
#include "tests/gpu/gpu_checks_ops.cuh"
#include "tests/gpu/gpu_checks_shape.cuh"
#include "tests/gpu/gpu_checks_strided.cuh"
#include "tests/gpu/gpu_checks_reduce.cuh"
#include "tests/gpu/gpu_bench.cuh"
#include "tests/gpu/gpu_checks_attn.cuh"
#include "tests/gpu/gpu_checks_f64.cuh"

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
    bench_linear();
    bench_conv2d();
    bench_nms();
    bench_sdpa();
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
  check_copy_views();
  check_unary();
  check_unary_edges();
  check_binary();
  check_rows();
  check_numerics();
  check_matmul();
  check_linear();
  check_linear_small();
  check_gru_cell();
  check_conv2d();
  check_nms();
  check_shape_ops();
  check_reduce();
  check_reduce_split();
  check_reduce_int();
  check_softmax_dims();
  check_softmax_dtype();
  check_norm_dims();
  check_alpha();
  check_pool_bn();
  check_sdpa();
  check_rope_swiglu();
  check_f64();
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
