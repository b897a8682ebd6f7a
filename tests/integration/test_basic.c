/* Integration: a real daemon driven through libopd — hello, ops, stats,
 * runs checked against plain C, infer, pipelining, many clients, one
 * connection shared by threads. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/integration/harness.h"

TestSuite(basic, .init = th_start_default, .fini = th_stop_default,
          .timeout = 60);

Test(basic, hello_reports_version_backends_limits) {
  opd_client_t *c = th_connect();
  char *json;
  size_t len;
  cr_assert_eq(opd_server_info(c, &json, &len), 0);
  cr_expect(strstr(json, "\"version\":\"" OPD_VERSION "\"") != NULL, "%s", json);
  cr_expect(strstr(json, "\"backends\":[\"cpu\"]") != NULL, "%s", json);
  cr_expect(strstr(json, "\"max_frame\":") != NULL, "%s", json);
  cr_expect(strstr(json, "\"max_rank\":8") != NULL, "%s", json);
  opd_free(json);
  cr_assert_eq(opd_ping(c), 0);
  opd_close(c);
}

Test(basic, ops_lists_every_operator_with_schema) {
  opd_client_t *c = th_connect();
  char *json;
  size_t len;
  cr_assert_eq(opd_ops_json(c, &json, &len), 0, "%s", opd_last_error());
  /* the registry: the X(<op>) lines of OPD_OPS in kernels/runtime/registry.c */
  FILE *reg = fopen("kernels/runtime/registry.c", "r");
  cr_assert(reg, "kernels/runtime/registry.c: run the tests from the repository root");
  char line[256];
  int n_ops = 0, in_list = 0;
  while (fgets(line, sizeof line, reg)) {
    if (strncmp(line, "#define OPD_OPS(X)", 18) == 0) {
      in_list = 1;
      continue;
    }
    if (!in_list) continue;
    char name[OPD_MAX_NAME], pat[OPD_MAX_NAME + 16];
    if (sscanf(line, " X(%63[a-z0-9_])", name) == 1) {
      snprintf(pat, sizeof pat, "\"name\":\"%s\"", name);
      cr_expect(strstr(json, pat) != NULL, "ops lacks %s", name);
      n_ops++;
    }
    if (!strstr(line, "\\")) break; /* the macro's last line */
  }
  fclose(reg);
  cr_assert_geq(n_ops, 12, "OPD_OPS of kernels/runtime/registry.c: %d ops read",
                n_ops);
  cr_expect(strstr(json, "\"name\":\"iou_threshold\"") != NULL);
  cr_expect(strstr(json, "\"name\":\"eps\"") != NULL);
  opd_free(json);
  opd_close(c);
}

Test(basic, softmax_layernorm_match_plain_c) {
  opd_client_t *c = th_connect();
  void *base;
  enum { R = 37, C = 333 };
  uint64_t a = th_arena(c, 1 << 20, &base);
  float *x = base, *y = x + R * C, *w = y + R * C, *b = w + C, *z = b + C;
  srand(7);
  for (int i = 0; i < R * C; i++) x[i] = (float)rand() / RAND_MAX * 10 - 5;
  for (int i = 0; i < C; i++) w[i] = 1.0f + i * 0.01f, b[i] = i * 0.001f;
  opd_tensor_t tx = th_f32(a, 0, 2, (int64_t)R, (int64_t)C),
               ty = th_f32(a, R * C * 4, 2, (int64_t)R, (int64_t)C),
               tw = th_f32(a, 2 * R * C * 4, 1, (int64_t)C),
               tb = th_f32(a, (2 * R * C + C) * 4, 1, (int64_t)C),
               tz = th_f32(a, (2 * R * C + 2 * C) * 4, 2, (int64_t)R, (int64_t)C);
  cr_assert_eq(opd_run(c, "softmax", &tx, 1, &ty, 1, NULL, 0), 0, "%s",
               opd_last_error());
  opd_attr_t eps = {.name = "eps", .type = OPD_ATTR_FLOAT, .f = 1e-3};
  opd_tensor_t ln_in[3] = {tx, tw, tb};
  cr_assert_eq(opd_run(c, "layernorm", ln_in, 3, &tz, 1, &eps, 1), 0, "%s",
               opd_last_error());
  for (int r = 0; r < R; r++) {
    const float *xr = x + r * C;
    double m = -INFINITY, s = 0, mean = 0, var = 0;
    for (int j = 0; j < C; j++) m = fmax(m, xr[j]), mean += xr[j];
    mean /= C;
    for (int j = 0; j < C; j++) s += exp(xr[j] - m), var += (xr[j] - mean) * (xr[j] - mean);
    var /= C;
    for (int j = 0; j < C; j++) {
      double want = exp(xr[j] - m) / s;
      cr_assert(fabs(y[r * C + j] - want) <= 1e-6 + 1e-4 * want,
                "softmax[%d,%d] = %g, want %g", r, j, y[r * C + j], want);
      double ln = (xr[j] - mean) / sqrt(var + 1e-3) * w[j] + b[j];
      cr_assert(fabs(z[r * C + j] - ln) <= 1e-4 + 1e-4 * fabs(ln),
                "layernorm[%d,%d] = %g, want %g", r, j, z[r * C + j], ln);
    }
  }
  opd_close(c);
}

Test(basic, nms_writes_indices_and_count) {
  opd_client_t *c = th_connect();
  void *base;
  uint64_t a = th_arena(c, 4096, &base);
  float *boxes = base, *scores = boxes + 16;
  /* box 0 and 1 overlap heavily; 2 is apart; 3 duplicates 2 */
  float bx[16] = {0, 0, 10, 10, 1, 1, 11, 11, 50, 50, 60, 60, 50, 50, 60, 60};
  float sc[4] = {0.9f, 0.8f, 0.7f, 0.95f};
  memcpy(boxes, bx, sizeof bx);
  memcpy(scores, sc, sizeof sc);
  opd_tensor_t in[2] = {th_f32(a, 0, 2, (int64_t)4, (int64_t)4),
                        th_f32(a, 64, 1, (int64_t)4)};
  int64_t n4 = 4, n1 = 1;
  opd_tensor_t out[2];
  opd_tensor_init(&out[0], a, 128, OPD_DTYPE_INT64, 1, &n4);
  opd_tensor_init(&out[1], a, 192, OPD_DTYPE_INT64, 1, &n1);
  opd_attr_t thr = {.name = "iou_threshold", .type = OPD_ATTR_FLOAT, .f = 0.5};
  cr_assert_eq(opd_run(c, "nms", in, 2, out, 2, &thr, 1), 0, "%s",
               opd_last_error());
  int64_t *keep = (int64_t *)((char *)base + 128);
  int64_t count = *(int64_t *)((char *)base + 192);
  cr_assert_eq(count, 2);
  cr_assert_eq(keep[0], 3);
  cr_assert_eq(keep[1], 0);
  cr_assert_eq(keep[2], -1);
  opd_close(c);
}

Test(basic, infer_reports_output_shapes) {
  opd_client_t *c = th_connect();
  opd_tensor_t in[2] = {th_f32(0, 0, 3, (int64_t)5, (int64_t)2, (int64_t)3),
                        th_f32(0, 0, 2, (int64_t)3, (int64_t)7)};
  opd_tensor_t out[2];
  uint32_t n = 0;
  cr_assert_eq(opd_infer(c, "matmul", in, 2, NULL, 0, out, 2, &n), 0, "%s",
               opd_last_error());
  cr_assert_eq(n, 1);
  cr_assert_eq(out[0].rank, 3);
  cr_assert_eq(out[0].shape[0], 5);
  cr_assert_eq(out[0].shape[1], 2);
  cr_assert_eq(out[0].shape[2], 7);
  cr_assert_eq(out[0].dtype, OPD_DTYPE_FLOAT32);
  opd_close(c);
}

/* Runs of one connection execute in order: a pipelined chain where each
 * step reads the previous step's output must give the chained result. */
Test(basic, pipelined_runs_execute_in_order) {
  opd_client_t *c = th_connect();
  void *base;
  enum { N = 4096, STEPS = 200 };
  uint64_t a = th_arena(c, 3 * N * 4, &base);
  float *x = base, *one = x + N;
  for (int i = 0; i < N; i++) x[i] = (float)i, one[i] = 1.0f;
  opd_tensor_t tx = th_f32(a, 0, 1, (int64_t)N),
               t1 = th_f32(a, N * 4, 1, (int64_t)N);
  opd_tensor_t in[2] = {tx, t1};
  uint64_t req[STEPS];
  for (int s = 0; s < STEPS; s++)
    cr_assert_eq(opd_submit(c, "add", in, 2, &tx, 1, NULL, 0, &req[s]), 0,
                 "%s", opd_last_error());
  /* wait in reverse order: replies are routed by id */
  for (int s = STEPS - 1; s >= 0; s--)
    cr_assert_eq(opd_wait(c, req[s], 10000), 0, "%s", opd_last_error());
  for (int i = 0; i < N; i++)
    cr_assert_float_eq(x[i], (float)(i + STEPS), 0, "x[%d] = %g", i, x[i]);
  opd_close(c);
}

typedef struct worker {
  opd_client_t *shared; /* NULL: connect its own */
  int seed;
  int failures;
} worker_t;

static void *worker_main(void *arg) {
  worker_t *w = arg;
  opd_client_t *c = w->shared;
  if (c == NULL && opd_connect(th_d.sock, &c) != 0) {
    w->failures = 1000;
    return NULL;
  }
  enum { R = 64, C = 257 };
  void *base;
  uint64_t a;
  if (opd_arena_create(c, 2 * R * C * 4, &a, &base) != 0) {
    w->failures = 1000;
    return NULL;
  }
  float *x = base, *y = x + R * C;
  opd_tensor_t tx, ty;
  int64_t sh[2] = {R, C};
  opd_tensor_init(&tx, a, 0, OPD_DTYPE_FLOAT32, 2, sh);
  opd_tensor_init(&ty, a, R * C * 4, OPD_DTYPE_FLOAT32, 2, sh);
  for (int it = 0; it < 50; it++) {
    for (int i = 0; i < R * C; i++) x[i] = (float)((i * 31 + w->seed + it) % 97) - 48;
    if (opd_run(c, "relu", &tx, 1, &ty, 1, NULL, 0) != 0) {
      w->failures++;
      continue;
    }
    for (int i = 0; i < R * C; i++)
      if (y[i] != (x[i] > 0 ? x[i] : 0)) {
        w->failures++;
        break;
      }
  }
  opd_arena_release(c, a);
  if (w->shared == NULL) opd_close(c);
  return NULL;
}

static void run_workers(int n, opd_client_t *shared) {
  pthread_t t[16];
  worker_t w[16];
  for (int i = 0; i < n; i++) {
    w[i] = (worker_t){.shared = shared, .seed = i};
    pthread_create(&t[i], NULL, worker_main, &w[i]);
  }
  for (int i = 0; i < n; i++) {
    pthread_join(t[i], NULL);
    cr_expect_eq(w[i].failures, 0, "worker %d: %d failures (%s)", i,
                 w[i].failures, opd_last_error());
  }
}

Test(basic, eight_clients_at_once) { run_workers(8, NULL); }

Test(basic, one_connection_shared_by_threads) {
  opd_client_t *c = th_connect();
  run_workers(6, c);
  cr_assert_eq(opd_ping(c), 0);
  opd_close(c);
}

Test(basic, arena_release_unmaps_and_stats_count) {
  opd_client_t *c = th_connect();
  void *base;
  uint64_t a = th_arena(c, 1 << 20, &base);
  cr_assert_eq(th_stat("arenas"), 1);
  cr_assert_geq(th_stat("bytes_mapped"), 1 << 20);
  cr_assert_eq(opd_arena_release(c, a), 0, "%s", opd_last_error());
  cr_assert_eq(th_stat("arenas"), 0);
  cr_assert_eq(th_stat("bytes_mapped"), 0);
  /* releasing again is an error naming the arena */
  cr_assert_eq(opd_arena_release(c, a), OPD_EARENA);
  cr_assert(strstr(opd_last_error(), "unknown arena") != NULL, "%s",
            opd_last_error());
  opd_close(c);
}

Test(basic, strided_input_through_copy) {
  opd_client_t *c = th_connect();
  void *base;
  uint64_t a = th_arena(c, 4096, &base);
  float *x = base;
  for (int i = 0; i < 12; i++) x[i] = (float)i; /* (3, 4) */
  /* the transpose (4, 3) as a strided view */
  opd_tensor_t xt = th_f32(a, 0, 2, (int64_t)4, (int64_t)3);
  xt.strided = 1;
  xt.strides[0] = 1;
  xt.strides[1] = 4;
  opd_tensor_t y = th_f32(a, 256, 2, (int64_t)4, (int64_t)3);
  cr_assert_eq(opd_run(c, "copy", &xt, 1, &y, 1, NULL, 0), 0, "%s",
               opd_last_error());
  float *yy = (float *)((char *)base + 256);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 3; j++) cr_assert_eq(yy[i * 3 + j], x[j * 4 + i]);
  opd_close(c);
}

Test(basic, arena_fd_of_own_arenas_only) {
  opd_client_t *c = th_connect();
  void *base;
  uint64_t a = th_arena(c, 4096, &base);
  int fd = -1;
  EXPECT_ERR(opd_arena_fd(c, a + 1000, &fd), OPD_EARENA,
             "was not created by this connection");
  cr_assert_eq(fd, -1);
  EXPECT_ERR(opd_arena_fd(c, a, NULL), OPD_EINVAL, "fd is NULL");
  cr_assert_eq(opd_arena_fd(c, a, &fd), 0);
  cr_assert_geq(fd, 0);
  /* success leaves the last error alone */
  cr_assert(strstr(opd_last_error(), "fd is NULL") != NULL, "%s",
            opd_last_error());
  opd_close(c);
}
