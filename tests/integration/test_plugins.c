/* Integration: operator plugins in a real daemon — the example
 * plugins (examples/plugins: scale, conv3x3_bias_relu) loaded and checked
 * against plain C and against opd's own conv2d + relu; the refusals that
 * keep the daemon from starting; the run-time checks of a plugin's shape
 * rule and kernel results (tests/plugins/testplugin.c); opctl ops/plugins.
 * The .so files come from `make plugins`, next to the daemon under test
 * ($OPD_BIN's directory, plugins/).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/integration/harness.h"

static char hello_so[512], conv_so[512], testops_so[512];

static void plugin_path(const char *name, char *path, size_t cap) {
  char rel[128];
  snprintf(rel, sizeof rel, "plugins/%s.so", name);
  th_tool(rel, path, cap);
  cr_assert(access(path, R_OK) == 0, "%s is missing: run `make plugins`", path);
}

static void start_with_plugins(void) {
  plugin_path("hello", hello_so, sizeof hello_so);
  plugin_path("conv3x3_bias_relu", conv_so, sizeof conv_so);
  plugin_path("test/testops", testops_so, sizeof testops_so);
  const char *args[] = {"--plugin", hello_so, "--plugin", conv_so,
                        "--plugin", testops_so, NULL};
  th_start(args);
}

TestSuite(plugins, .init = start_with_plugins, .fini = th_stop_default,
          .timeout = 60);

Test(plugins, scale_matches_plain_c_and_runs_in_place) {
  opd_client_t *c = th_connect();
  void *base;
  enum { N = 100003 }; /* past one chunk of the parallel loop */
  uint64_t a = th_arena(c, 2 * N * 4 + 4096, &base);
  float *x = base, *y = x + N;
  for (int i = 0; i < N; i++) x[i] = (float)(i % 1000) * 0.5f - 100;
  opd_tensor_t tx = th_f32(a, 0, 2, (int64_t)1, (int64_t)N),
               ty = th_f32(a, N * 4, 2, (int64_t)1, (int64_t)N);
  opd_attr_t ab[2] = {{.name = "a", .type = OPD_ATTR_FLOAT, .f = 2.5},
                      {.name = "b", .type = OPD_ATTR_FLOAT, .f = -1}};
  cr_assert_eq(opd_run(c, "scale", &tx, 1, &ty, 1, ab, 2), 0, "%s",
               opd_last_error());
  for (int i = 0; i < N; i++)
    cr_assert_float_eq(y[i], 2.5f * x[i] - 1, 1e-4, "y[%d]", i);
  /* defaults a=1, b=0; then in place (the row sets OPD_OPF_INPLACE) */
  cr_assert_eq(opd_run(c, "scale", &tx, 1, &ty, 1, NULL, 0), 0);
  cr_assert_eq(memcmp(x, y, N * 4), 0);
  cr_assert_eq(opd_run(c, "scale", &ty, 1, &ty, 1, ab + 1, 1), 0, "%s",
               opd_last_error());
  cr_assert_float_eq(y[7], x[7] - 1, 1e-6);
  opd_close(c);
}

Test(plugins, plugin_ops_get_the_checks_of_a_builtin) {
  opd_client_t *c = th_connect();
  void *base;
  uint64_t a = th_arena(c, 1 << 16, &base);
  int64_t shape[1] = {16};
  opd_tensor_t xi, ty = th_f32(a, 4096, 1, (int64_t)16);
  opd_tensor_init(&xi, a, 0, OPD_DTYPE_INT32, 1, shape);
  EXPECT_ERR(opd_run(c, "scale", &xi, 1, &ty, 1, NULL, 0), OPD_EDTYPE,
             "scale: input 0 (x) has dtype int32, expected float32");
  opd_tensor_t tx = th_f32(a, 0, 1, (int64_t)16),
               bad = th_f32(a, 4096, 1, (int64_t)15);
  EXPECT_ERR(opd_run(c, "scale", &tx, 1, &bad, 1, NULL, 0), OPD_ESHAPE,
             "scale: output 0 (y) has shape [15], expected [16]");
  opd_attr_t unknown = {.name = "c", .type = OPD_ATTR_FLOAT, .f = 1};
  EXPECT_ERR(opd_run(c, "scale", &tx, 1, &ty, 1, &unknown, 1), OPD_EATTR,
             "scale: unknown attribute \"c\" (takes a, b)");
  opd_tensor_t ins[2] = {tx, tx};
  EXPECT_ERR(opd_run(c, "scale", ins, 2, &ty, 1, NULL, 0), OPD_EARITY,
             "scale: expects 1 input");
  opd_tensor_t wx = th_f32(a, 0, 4, (int64_t)1, (int64_t)2, (int64_t)2,
                           (int64_t)2),
               ww = th_f32(a, 64, 4, (int64_t)4, (int64_t)3, (int64_t)3,
                           (int64_t)3),
               wb = th_f32(a, 1024, 1, (int64_t)4);
  opd_tensor_t cin[3] = {wx, ww, wb};
  opd_tensor_t shp[1];
  uint32_t n_out = 0;
  EXPECT_ERR(opd_infer(c, "conv3x3_bias_relu", cin, 3, NULL, 0, shp, 1, &n_out),
             OPD_ESHAPE, "conv3x3_bias_relu: weight must be (K, 2, 3, 3)");
  /* INFER runs the plugin's shape rule */
  cr_assert_eq(opd_infer(c, "scale", &tx, 1, NULL, 0, shp, 1, &n_out), 0);
  cr_assert_eq(n_out, 1);
  cr_assert_eq(shp[0].rank, 1);
  cr_assert_eq(shp[0].shape[0], 16);
  opd_close(c);
}

/* y = relu(conv(x, w, pad 1) + b) in plain C */
static void conv_ref(const float *x, const float *w, const float *b, float *y,
                     int N, int C, int H, int W, int K) {
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++)
      for (int h = 0; h < H; h++)
        for (int q = 0; q < W; q++) {
          double acc = b[k];
          for (int c = 0; c < C; c++)
            for (int r = 0; r < 3; r++)
              for (int s = 0; s < 3; s++) {
                int ih = h + r - 1, iw = q + s - 1;
                if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                  acc += (double)x[((n * C + c) * H + ih) * W + iw] *
                         w[((k * C + c) * 3 + r) * 3 + s];
              }
          y[((n * K + k) * H + h) * W + q] = acc > 0 ? (float)acc : 0;
        }
}

Test(plugins, conv3x3_bias_relu_matches_reference_and_conv2d_relu) {
  opd_client_t *c = th_connect();
  /* odd sizes: partial channel blocks (K % 4), rows of 1 and of 13; the
     last two take cpu_fast's BLAS path where the plugin has it (C, K >=
     32): tiles of 17 and 16 rows, then of 3 and 2 whole images */
  static const int sizes[][5] = {{2, 3, 13, 11, 6}, {1, 5, 1, 1, 3},
                                 {1, 16, 9, 17, 9}, {2, 32, 33, 35, 40},
                                 {5, 40, 7, 9, 36}};
  for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
    int N = sizes[t][0], C = sizes[t][1], H = sizes[t][2], W = sizes[t][3],
        K = sizes[t][4];
    size_t nx = (size_t)N * C * H * W, nw = (size_t)K * C * 9,
           ny = (size_t)N * K * H * W;
    void *base;
    uint64_t a = th_arena(c, (nx + nw + K + 3 * ny) * 4 + 4096, &base);
    float *x = base, *w = x + nx, *b = w + nw, *y = b + K, *z = y + ny,
          *ref = z + ny;
    srand(11 + (unsigned)t);
    for (size_t i = 0; i < nx; i++) x[i] = (float)rand() / RAND_MAX * 2 - 1;
    for (size_t i = 0; i < nw; i++) w[i] = (float)rand() / RAND_MAX - 0.5f;
    for (int i = 0; i < K; i++) b[i] = (float)i * 0.05f - 0.1f;
    conv_ref(x, w, b, ref, N, C, H, W, K);
    opd_tensor_t tx = th_f32(a, 0, 4, (int64_t)N, (int64_t)C, (int64_t)H,
                             (int64_t)W),
                 tw = th_f32(a, nx * 4, 4, (int64_t)K, (int64_t)C, (int64_t)3,
                             (int64_t)3),
                 tb = th_f32(a, (nx + nw) * 4, 1, (int64_t)K),
                 ty = th_f32(a, (nx + nw + K) * 4, 4, (int64_t)N, (int64_t)K,
                             (int64_t)H, (int64_t)W),
                 tz = th_f32(a, (nx + nw + K + ny) * 4, 4, (int64_t)N,
                             (int64_t)K, (int64_t)H, (int64_t)W);
    opd_tensor_t in[3] = {tx, tw, tb};
    cr_assert_eq(opd_run(c, "conv3x3_bias_relu", in, 3, &ty, 1, NULL, 0), 0,
                 "%s", opd_last_error());
    opd_attr_t pad = {.name = "padding", .type = OPD_ATTR_INTS, .n = 1,
                      .ints = {1}};
    cr_assert_eq(opd_run(c, "conv2d", in, 3, &tz, 1, &pad, 1), 0, "%s",
                 opd_last_error());
    cr_assert_eq(opd_run(c, "relu", &tz, 1, &tz, 1, NULL, 0), 0);
    for (size_t i = 0; i < ny; i++) {
      float tol = 1e-4f + 1e-4f * fabsf(ref[i]);
      cr_assert(fabsf(y[i] - ref[i]) <= tol, "case %zu: y[%zu] = %g, ref %g",
                t, i, y[i], ref[i]);
      cr_assert(fabsf(z[i] - ref[i]) <= tol + 1e-4f,
                "case %zu: conv2d+relu[%zu] = %g, ref %g", t, i, z[i], ref[i]);
    }
    opd_arena_release(c, a);
  }
  opd_close(c);
}

Test(plugins, bad_shape_rules_and_kernel_errors_are_error_replies) {
  opd_client_t *c = th_connect();
  void *base;
  uint64_t a = th_arena(c, 4096, &base);
  ((float *)base)[0] = 1.5f;
  opd_tensor_t x = th_f32(a, 0, 1, (int64_t)4), y = th_f32(a, 64, 1, (int64_t)4);
  EXPECT_ERR(opd_run(c, "t_negshape", &x, 1, &y, 1, NULL, 0), OPD_EINTERNAL,
             "t_negshape: its shape rule gave output 0 (y) the negative "
             "extent -3 in dim 0; refused");
  opd_tensor_t shp[1];
  uint32_t n_out;
  EXPECT_ERR(opd_infer(c, "t_negshape", &x, 1, NULL, 0, shp, 1, &n_out),
             OPD_EINTERNAL, "negative extent -3");
  EXPECT_ERR(opd_run(c, "t_overflow", &x, 1, &y, 1, NULL, 0), OPD_EOVERFLOW,
             "t_overflow: its shape rule gave output 0 (y) a size that "
             "overflows 64 bits");
  EXPECT_ERR(opd_infer(c, "t_badrank", &x, 1, NULL, 0, shp, 1, &n_out),
             OPD_EINTERNAL, "t_badrank: its shape rule gave output 0 (y) "
             "rank 99, outside 0..8");
  EXPECT_ERR(opd_run(c, "t_fail", &x, 1, &y, 1, NULL, 0), OPD_EINVAL,
             "t_fail: the kernel said no (x[0] = 1.5)");
  EXPECT_ERR(opd_run(c, "t_badrc", &x, 1, &y, 1, NULL, 0), OPD_EBACKEND,
             "t_badrc: returned 7, which is not an OPD_E* code");
  /* the session and the daemon go on */
  cr_assert_eq(opd_run(c, "scale", &x, 1, &y, 1, NULL, 0), 0, "%s",
               opd_last_error());
  opd_close(c);
  th_assert_alive();
  cr_assert_geq(th_stat("errors"), 5);
}

static char out[65536];

static int opctl(const char *a1, const char *a2) {
  char path[512];
  th_tool("opctl", path, sizeof path);
  const char *argv[] = {"opctl", "--socket", th_d.sock, a1, a2, NULL};
  return th_run(path, argv, out, sizeof out);
}

Test(plugins, opctl_shows_origins_and_plugins) {
  char want[5000];
  cr_assert_eq(opctl("ops", NULL), 0, "%s", out);
  cr_assert(strstr(out, "origin  built-in") != NULL, "%s", out);
  char real[4096];
  cr_assert_not_null(realpath(hello_so, real));
  snprintf(want, sizeof want, "scale      y = a*x + b, elementwise (example "
           "plugin)\n    shape   x (...) -> y (...)   (in-place allowed)\n"
           "    origin  %s\n", real);
  cr_assert(strstr(out, want) != NULL, "%s\nlacks\n%s", out, want);
  cr_assert_eq(opctl("plugins", NULL), 0, "%s", out);
  cr_assert(strstr(out, "3 plugins") != NULL, "%s", out);
  cr_assert(strstr(out, "hello      version 1.0 (operator ABI 1)") != NULL,
            "%s", out);
  snprintf(want, sizeof want, "    file    %s\n    ops     scale\n", real);
  cr_assert(strstr(out, want) != NULL, "%s", out);
  cr_assert(strstr(out, "ops     t_negshape, t_overflow, t_badrank, t_fail, "
                        "t_badrc") != NULL, "%s", out);
  cr_assert_eq(opctl("--json", "plugins"), 0, "%s", out);
  cr_assert(strstr(out, "\"origins\":{\"noop\":\"built-in\"") != NULL, "%s",
            out);
}

/* ---- refusals at start -------------------------------------------------- */

/* Runs the daemon with args (after --socket); returns its exit status,
 * its output in out. */
static int opd_with(const char *const *args) {
  const char *bin = getenv("OPD_BIN") ? getenv("OPD_BIN") : "build/opd";
  const char *argv[16] = {bin, "--socket", "/tmp/opd-test-refused.sock"};
  int n = 3;
  for (int i = 0; args[i] && n < 15; i++) argv[n++] = args[i];
  argv[n] = NULL;
  return th_run(bin, argv, out, sizeof out);
}

static void expect_refused(const char *file, const char *needle) {
  const char *args[] = {"--plugin", hello_so, "--plugin", file, NULL};
  cr_assert_eq(opd_with(args), 1, "opd started with %s: %s", file, out);
  cr_assert(strstr(out, file) != NULL, "the message does not name %s: %s",
            file, out);
  cr_assert(strstr(out, needle) != NULL, "\"%s\" not in: %s", needle, out);
  cr_assert(strstr(out, "could not start") != NULL, "%s", out);
  cr_assert(strstr(out, "listening") == NULL, "%s", out);
}

Test(plugins, refusals_name_the_file_and_stop_the_start) {
  char p[512];
  plugin_path("test/bad_abi", p, sizeof p);
  expect_refused(p, "built for operator ABI version 999; this daemon speaks "
                    "version 1");
  plugin_path("test/no_init", p, sizeof p);
  expect_refused(p, "no opd_plugin_init symbol");
  plugin_path("test/dup", p, sizeof p);
  expect_refused(p, "op \"relu\" already exists (built-in)");
  plugin_path("test/bad_schema", p, sizeof p);
  expect_refused(p, "invalid schema: op name \"Bad-Name\" is invalid");
  plugin_path("test/bad_attr", p, sizeof p);
  expect_refused(p, "invalid schema: t_attr: attribute \"mode\": its default "
                    "\"sloppy\" is not one of fast|exact");
  /* the same op name twice: another copy of hello */
  expect_refused(hello_so, "already loaded");
  expect_refused("/nonexistent/x.so", "No such file or directory");
  const char *bad_opt[] = {"--plugin", "", NULL};
  cr_assert_eq(opd_with(bad_opt), 1);
  cr_assert(strstr(out, "--plugin expects a path") != NULL, "%s", out);
}

static void copy_file(const char *from, const char *to) {
  FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
  cr_assert(a && b, "copy %s -> %s", from, to);
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, n, b);
  fclose(a);
  fclose(b);
}

Test(plugins, files_or_directories_others_can_write_are_refused) {
  char dir[64], file[128];
  snprintf(dir, sizeof dir, "/tmp/opd-plugtest.XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  snprintf(file, sizeof file, "%s/hello.so", dir);
  copy_file(hello_so, file);
  chmod(file, 0755);
  chmod(dir, 0755);

  chmod(file, 0666);
  expect_refused(file, "is writable by anyone (mode 0666); chmod go-w it");
  chmod(file, 0775);
  expect_refused(file, "is writable by its group (mode 0775)");
  chmod(file, 0755);
  chmod(dir, 0777);
  expect_refused(file, "its directory");
  cr_assert(strstr(out, "is writable by anyone (mode 0777)") != NULL, "%s", out);
  const char *args[] = {"--plugin-dir", dir, NULL};
  cr_assert_eq(opd_with(args), 1, "%s", out);
  cr_assert(strstr(out, dir) != NULL, "%s", out);
  cr_assert(strstr(out, "is writable by anyone (mode 0777)") != NULL, "%s", out);
  unlink(file);
  rmdir(dir);
}

Test(plugins, plugin_dir_loads_every_so_in_name_order) {
  char dir[64], a[128], b[128], note[128];
  snprintf(dir, sizeof dir, "/tmp/opd-plugdir.XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  chmod(dir, 0755);
  snprintf(a, sizeof a, "%s/b_conv.so", dir);
  snprintf(b, sizeof b, "%s/a_hello.so", dir);
  snprintf(note, sizeof note, "%s/README", dir);
  copy_file(conv_so, a);
  copy_file(hello_so, b);
  copy_file(hello_so, note); /* not *.so: skipped */
  const char *args[] = {"--plugin-dir", dir, NULL};
  th_start(args);
  cr_assert_eq(opctl("plugins", NULL), 0, "%s", out);
  cr_assert(strstr(out, "2 plugins") != NULL, "%s", out);
  char *h = strstr(out, "hello "), *cv = strstr(out, "conv3x3_bias_relu ");
  cr_assert(h && cv && h < cv, "not in name order: %s", out);
  opd_client_t *c = th_connect();
  void *base;
  uint64_t ar = th_arena(c, 4096, &base);
  ((float *)base)[0] = 3;
  opd_tensor_t x = th_f32(ar, 0, 1, (int64_t)1), y = th_f32(ar, 64, 1, (int64_t)1);
  opd_attr_t k = {.name = "a", .type = OPD_ATTR_FLOAT, .f = -2};
  cr_assert_eq(opd_run(c, "scale", &x, 1, &y, 1, &k, 1), 0, "%s", opd_last_error());
  cr_assert_float_eq(((float *)base)[16], -6.0f, 1e-6);
  opd_close(c);
  th_stop();
  /* a sticky world-writable directory (as /tmp) is accepted */
  chmod(dir, 01777);
  th_start(args);
  th_assert_alive();
  th_stop();
  unlink(a);
  unlink(b);
  unlink(note);
  rmdir(dir);
}
