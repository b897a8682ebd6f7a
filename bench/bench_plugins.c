/* bench_plugins: the fused conv3x3_bias_relu plugin (examples/plugins)
 * against opd's own conv2d (padding 1, bias) followed by relu (in place),
 * through a daemon that loaded the plugin.
 *
 * DESIGN
 * Both forms compute the same y for the same x, weight, bias; the bench
 * first checks that they agree (max |fused - unfused| against the
 * tolerance atol + rtol*|y|), then times each per call as a client sees
 * it: one RUN for the fused op, two (conv2d, then relu on its output) for
 * the pair, each waited for. The two forms take turns in BLOCKS blocks of
 * reps/BLOCKS calls so that drift on a shared machine lands on both; the
 * figure is the median of the per-call times and the line carries the
 * ratio unfused / fused (above 1: the plugin is faster) measured in the
 * same run.
 *
 * With -d cuda, odd shapes first run once each and are only checked
 * ("check conv3x3 ..." lines): they cover every path of the plugin's CUDA
 * kernel (direct, the implicit-GEMM tiles, im2col + cuBLASLt in one and
 * in two chunks) with partial tiles, which the four timed shapes do not.
 *
 * On the cpu the tensors live in one shared-memory arena. With -d cuda
 * they live in daemon-owned device memory (opd_alloc), filled once from
 * the host arena by the copy op, so each call times the kernels and the
 * round trip, no staging.
 *
 * Usage: bench_plugins [-d cpu|cuda] [-n REPS] [SOCKET]
 *   The daemon must run with --plugin .../conv3x3_bias_relu.so (make
 *   plugins builds it). Exits 1 with opd_last_error() on a failed call.
 */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opd/opd.h"

#define BENCH_NAME "bench_plugins"
#include "bench/harness.h"

#define BLOCKS 5

typedef struct shape {
  int64_t N, C, H, W, K;
} shape_t;

/* the four 3x3 shapes of docs/gpu.md's cuDNN baselines; on the cpu the
 * last is too slow for a quick run and a small one stands in */
static const shape_t gpu_shapes[] = {
    {1, 3, 224, 224, 64}, {1, 64, 56, 56, 64}, {8, 256, 14, 14, 256},
    {32, 64, 56, 56, 64}};
/* checked, not timed (-d cuda): the paths of conv3x3.cu's pick_path on a
 * 132-SM GPU, with partial tiles of pixels and output channels */
static const shape_t check_shapes[] = {
    {2, 3, 17, 33, 5},    /* direct */
    {2, 20, 13, 19, 37},  /* igemm, tile S */
    {1, 16, 7, 5, 3},     /* igemm, tile S, fewer pixels than a tile */
    {16, 24, 37, 37, 64}, /* igemm, tile M */
    {16, 32, 45, 47, 96}, /* igemm, tile L */
    {3, 130, 9, 11, 70},  /* im2col + cuBLASLt, one chunk */
    {8, 128, 32, 32, 32}, /* im2col + cuBLASLt, two chunks of columns */
};
static const shape_t cpu_shapes[] = {
    {1, 3, 224, 224, 64}, {1, 64, 56, 56, 64}, {8, 256, 14, 14, 256},
    {1, 16, 32, 32, 16}};

static opd_client_t *cl;

static void check(int rc, const char *what) {
  if (rc != 0) {
    fprintf(stderr, "%s: %s: %s\n", BENCH_NAME, what, opd_last_error());
    exit(1);
  }
}

static opd_tensor_t t4(uint64_t a, uint64_t off, int64_t d0, int64_t d1,
                       int64_t d2, int64_t d3) {
  opd_tensor_t t;
  int64_t s[4] = {d0, d1, d2, d3};
  opd_tensor_init(&t, a, off, OPD_DTYPE_FLOAT32, 4, s);
  return t;
}

static opd_tensor_t t1(uint64_t a, uint64_t off, int64_t d0) {
  opd_tensor_t t;
  opd_tensor_init(&t, a, off, OPD_DTYPE_FLOAT32, 1, &d0);
  return t;
}

static const opd_attr_t pad1 = {.name = "padding", .type = OPD_ATTR_INTS,
                                .n = 1, .ints = {1}};

typedef struct forms {
  const char *dev;
  opd_tensor_t in[3], y, z;        /* y: fused output; z: conv2d + relu */
} forms_t;

static void run_fused(const forms_t *f) {
  check(opd_run_on(cl, f->dev, "conv3x3_bias_relu", f->in, 3, &f->y, 1, NULL, 0),
        "conv3x3_bias_relu");
}

static void run_pair(const forms_t *f) {
  check(opd_run_on(cl, f->dev, "conv2d", f->in, 3, &f->z, 1, &pad1, 1), "conv2d");
  check(opd_run_on(cl, f->dev, "relu", &f->z, 1, &f->z, 1, NULL, 0), "relu");
}

static double median_us(uint64_t *v, size_t n) {
  qsort(v, n, sizeof *v, cmp_u64);
  return (double)pct(v, n, 0.5) / 1e3;
}

/* One shape: check that the fused op and conv2d + relu agree, then (reps
 * > 0) time both and print the line. Returns 1 on a mismatch. */
static int run_shape(const shape_t *sp, const char *dev, size_t reps) {
  shape_t s = *sp;
  int cuda = strncmp(dev, "cuda", 4) == 0;
  uint64_t nx = (uint64_t)(s.N * s.C * s.H * s.W), nw = (uint64_t)(s.K * s.C * 9),
           ny = (uint64_t)(s.N * s.K * s.H * s.W);
  uint64_t ox = 0, ow = nx * 4, ob = ow + nw * 4, oy = (ob + (uint64_t)s.K * 4 + 255) & ~255ull,
           oz = oy + ny * 4, total = oz + ny * 4;
  uint64_t host;
  void *base;
  check(opd_arena_create(cl, total, &host, &base), "arena");
  float *x = (float *)((char *)base + ox), *w = (float *)((char *)base + ow),
        *b = (float *)((char *)base + ob);
  srand(5);
  for (uint64_t i = 0; i < nx; i++) x[i] = (float)rand() / RAND_MAX * 2 - 1;
  for (uint64_t i = 0; i < nw; i++) w[i] = ((float)rand() / RAND_MAX - 0.5f) * 0.2f;
  for (int64_t i = 0; i < s.K; i++) b[i] = (float)i * 0.01f - 0.2f;
  forms_t f = {.dev = dev};
  uint64_t a = host;
  if (cuda) {
    check(opd_alloc(cl, dev, total, &a), "alloc");
    opd_tensor_t whole = t1(host, 0, (int64_t)(total / 4)),
                 dwhole = t1(a, 0, (int64_t)(total / 4));
    check(opd_run_on(cl, dev, "copy", &whole, 1, &dwhole, 1, NULL, 0), "copy");
  }
  f.in[0] = t4(a, ox, s.N, s.C, s.H, s.W);
  f.in[1] = t4(a, ow, s.K, s.C, 3, 3);
  f.in[2] = t1(a, ob, s.K);
  f.y = t4(a, oy, s.N, s.K, s.H, s.W);
  f.z = t4(a, oz, s.N, s.K, s.H, s.W);
  run_fused(&f);
  run_pair(&f);
  if (cuda) { /* both outputs back to the host arena */
    opd_tensor_t dy = t1(a, oy, (int64_t)(2 * ny)), hy = t1(host, oy, (int64_t)(2 * ny));
    check(opd_run_on(cl, dev, "copy", &dy, 1, &hy, 1, NULL, 0), "copy back");
  }
  const float *y = (const float *)((char *)base + oy),
              *z = (const float *)((char *)base + oz);
  double maxdiff = 0;
  int bad = 0;
  for (uint64_t i = 0; i < ny; i++) {
    double d = fabs((double)y[i] - z[i]);
    if (d > maxdiff) maxdiff = d;
    /* TF32-free float32 on both sides; sums of up to 9*C products */
    if (d > 1e-3 + 1e-3 * fabs(z[i])) bad = 1;
  }
  if (reps == 0) {
    printf("check conv3x3 N=%" PRId64 " C=%" PRId64 " H=%" PRId64 " W=%" PRId64 " K=%" PRId64
           " device=%s max_abs_diff=%.2e %s\n", s.N, s.C, s.H, s.W, s.K, dev, maxdiff,
           bad ? "MISMATCH" : "ok");
    fflush(stdout);
    goto release;
  }
  size_t per = reps / BLOCKS;
  uint64_t *tf = malloc(sizeof(uint64_t) * per * BLOCKS),
           *tp = malloc(sizeof(uint64_t) * per * BLOCKS);
  size_t nf = 0, np = 0;
  for (int blk = 0; blk < BLOCKS; blk++) {
    for (size_t i = 0; i < per; i++) {
      uint64_t t0 = now_ns();
      run_fused(&f);
      tf[nf++] = now_ns() - t0;
    }
    for (size_t i = 0; i < per; i++) {
      uint64_t t0 = now_ns();
      run_pair(&f);
      tp[np++] = now_ns() - t0;
    }
  }
  double uf = median_us(tf, nf), up = median_us(tp, np);
  double gflop = 2.0 * (double)ny * (double)s.C * 9 / 1e9;
  printf("conv3x3 N=%" PRId64 " C=%" PRId64 " H=W=%" PRId64 " K=%" PRId64
         " device=%s fused_us=%.1f conv2d_relu_us=%.1f ratio=%.2f "
         "fused_gflops=%.1f max_abs_diff=%.2e%s\n",
         s.N, s.C, s.H, s.K, dev, uf, up, up / uf, gflop / (uf / 1e6), maxdiff,
         bad ? " MISMATCH" : "");
  fflush(stdout);
  free(tf);
  free(tp);
release:
  if (cuda) check(opd_arena_release(cl, a), "release");
  check(opd_arena_release(cl, host), "release");
  return bad;
}

int main(int argc, char **argv) {
  const char *dev = "cpu";
  size_t reps = 50;
  int c;
  while ((c = getopt(argc, argv, "d:n:")) != -1) {
    if (c == 'd') dev = optarg;
    else if (c == 'n') reps = parse_count(BENCH_NAME, "-n", optarg, BLOCKS);
    else {
      fprintf(stderr, "usage: %s [-d cpu|cuda] [-n REPS] [SOCKET]\n", BENCH_NAME);
      return 2;
    }
  }
  int cuda = strncmp(dev, "cuda", 4) == 0;
  check(opd_connect(optind < argc ? argv[optind] : NULL, &cl), "connect");
  print_machine();
  printf("# bench_plugins: fused conv3x3_bias_relu plugin vs opd conv2d + relu, "
         "device %s, %zu calls each, median per call\n", dev, reps);
  if (cuda)
    for (size_t si = 0; si < sizeof check_shapes / sizeof *check_shapes; si++)
      if (run_shape(&check_shapes[si], dev, 0)) return 1;
  const shape_t *shapes = cuda ? gpu_shapes : cpu_shapes;
  for (int si = 0; si < 4; si++)
    if (run_shape(&shapes[si], dev, reps)) return 1;
  opd_close(cl);
  return 0;
}
