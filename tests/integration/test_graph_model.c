/* Integration: the ops a small model needs inside graphs on the CPU
 * backend — the trading MLP (linear 256 -> 512 relu -> 512 gelu -> 1) and
 * a GRU step with a linear head (gru_cell, linear, sigmoid, sub) defined
 * once over weights in the client's arena, each run as one request, equal
 * bit for bit to the same ops run one by one. */
#include <criterion/criterion.h>
#include <string.h>

#include "opd/graph.h"
#include "tests/integration/harness.h"

TestSuite(graph_model, .init = th_start_default, .fini = th_stop_default, .timeout = 60);

/* Offsets (bytes) in the arena: weights, then the input and outputs. */
#define W1 0                        /* (512, 256) */
#define B1 (W1 + 512 * 256 * 4)     /* (512) */
#define W2 (B1 + 512 * 4)           /* (512, 512) */
#define B2 (W2 + 512 * 512 * 4)     /* (512) */
#define W3 (B2 + 512 * 4)           /* (1, 512) */
#define B3 (W3 + 512 * 4)           /* (1) */
#define X (B3 + 256)                /* (1, 256) */
#define Y (X + 256 * 4)             /* (1, 1): the graph's output */
#define H1 (Y + 256)                /* (1, 512) per op */
#define H2 (H1 + 512 * 4)           /* (1, 512) per op */
#define Y2 (H2 + 512 * 4)           /* (1, 1) per op */
#define ARENA (Y2 + 4096)

static opd_attr_t act(const char *name) {
  opd_attr_t a = {.name = "act", .type = OPD_ATTR_STR, .s = name};
  return a;
}

static void fill(float *f, int64_t n, int seed) {
  for (int64_t i = 0; i < n; i++)
    f[i] = (float)(((i * 37 + seed * 11) % 41) - 20) / 320.0f;
}

Test(graph_model, trading_mlp_equals_per_op) {
  opd_client_t *c = th_connect();
  void *base;
  uint64_t a = th_arena(c, ARENA, &base);
  fill(base, (X + 256 * 4) / 4, 1);
  opd_tensor_t w1 = th_f32(a, W1, 2, (int64_t)512, (int64_t)256),
               b1 = th_f32(a, B1, 1, (int64_t)512),
               w2 = th_f32(a, W2, 2, (int64_t)512, (int64_t)512),
               b2 = th_f32(a, B2, 1, (int64_t)512),
               w3 = th_f32(a, W3, 2, (int64_t)1, (int64_t)512),
               b3 = th_f32(a, B3, 1, (int64_t)1);
  opd_tensor_t x = th_f32(a, X, 2, (int64_t)1, (int64_t)256),
               y = th_f32(a, Y, 2, (int64_t)1, (int64_t)1),
               h1 = th_f32(a, H1, 2, (int64_t)1, (int64_t)512),
               h2 = th_f32(a, H2, 2, (int64_t)1, (int64_t)512),
               y2 = th_f32(a, Y2, 2, (int64_t)1, (int64_t)1);
  opd_graph_def_t *g = opd_graph_def_new();
  cr_assert_not_null(g);
  cr_assert_eq(opd_graph_input(g, "x", OPD_DTYPE_FLOAT32, 2, (int64_t[]){1, 256}), 0);
  const opd_tensor_t *cs[6] = {&w1, &b1, &w2, &b2, &w3, &b3};
  const char *names[6] = {"w1", "b1", "w2", "b2", "w3", "b3"};
  for (int i = 0; i < 6; i++) cr_assert_eq(opd_graph_const(g, names[i], cs[i]), 1 + i);
  opd_attr_t relu = act("relu"), gelu = act("gelu");
  int h = opd_graph_node(g, "linear", (int[]){0, 1, 2}, 3, &relu, 1, 1);
  h = opd_graph_node(g, "linear", (int[]){h, 3, 4}, 3, &gelu, 1, 1);
  h = opd_graph_node(g, "linear", (int[]){h, 5, 6}, 3, NULL, 0, 1);
  cr_assert_eq(opd_graph_output(g, h), 0);
  uint64_t graph;
  cr_assert_eq(opd_graph_define(c, NULL, g, &graph), 0, "%s", opd_last_error());
  float *f = base;
  for (int r = 0; r < 3; r++) {
    fill(f + X / 4, 256, 5 + r);
    cr_assert_eq(opd_graph_run(c, graph, &x, 1, &y, 1), 0, "%s", opd_last_error());
    cr_assert_eq(opd_run(c, "linear", (opd_tensor_t[]){x, w1, b1}, 3, &h1, 1, &relu, 1), 0,
                 "%s", opd_last_error());
    cr_assert_eq(opd_run(c, "linear", (opd_tensor_t[]){h1, w2, b2}, 3, &h2, 1, &gelu, 1), 0);
    cr_assert_eq(opd_run(c, "linear", (opd_tensor_t[]){h2, w3, b3}, 3, &y2, 1, NULL, 0), 0);
    cr_assert(f[Y / 4] == f[Y2 / 4], "round %d: graph %.9g, per op %.9g", r, f[Y / 4],
              f[Y2 / 4]);
    cr_assert(f[Y / 4] != 0.0f);
  }
  cr_assert_eq(opd_graph_destroy(c, graph), 0, "%s", opd_last_error());
  opd_graph_def_free(g);
  opd_close(c);
}

/* A GRU step and a head: h' = gru_cell(x, h, ...), p = sigmoid(linear(h')),
 * q = 1 - p through sub (a constant 1 broadcast): outputs h' and q. */
Test(graph_model, gru_step_equals_per_op) {
  enum { I = 12, H = 20 };
  opd_client_t *c = th_connect();
  void *base;
  uint64_t a = th_arena(c, 65536, &base);
  float *f = base;
  fill(f, 65536 / 4, 3);
  uint64_t o = 0;
  opd_tensor_t wi = th_f32(a, o, 2, (int64_t)(3 * H), (int64_t)I);
  o += 3 * H * I * 4;
  opd_tensor_t wh = th_f32(a, o, 2, (int64_t)(3 * H), (int64_t)H);
  o += 3 * H * H * 4;
  opd_tensor_t bi = th_f32(a, o, 1, (int64_t)(3 * H)), bh = th_f32(a, o + 3 * H * 4, 1,
                                                                    (int64_t)(3 * H));
  o += 6 * H * 4;
  opd_tensor_t wo = th_f32(a, o, 2, (int64_t)1, (int64_t)H), one = th_f32(a, o + H * 4, 0);
  f[(o + H * 4) / 4] = 1.0f;
  o += 4096;
  opd_tensor_t x = th_f32(a, o, 2, (int64_t)2, (int64_t)I), h = th_f32(a, o + 1024, 2,
                                                                        (int64_t)2, (int64_t)H);
  opd_tensor_t outs[2] = {th_f32(a, o + 2048, 2, (int64_t)2, (int64_t)H),
                          th_f32(a, o + 3072, 2, (int64_t)2, (int64_t)1)};
  opd_tensor_t hn = th_f32(a, o + 4096, 2, (int64_t)2, (int64_t)H),
               p = th_f32(a, o + 5120, 2, (int64_t)2, (int64_t)1),
               q = th_f32(a, o + 6144, 2, (int64_t)2, (int64_t)1);
  opd_graph_def_t *g = opd_graph_def_new();
  opd_graph_input(g, "x", OPD_DTYPE_FLOAT32, 2, (int64_t[]){2, I});
  opd_graph_input(g, "h", OPD_DTYPE_FLOAT32, 2, (int64_t[]){2, H});
  const opd_tensor_t *cs[6] = {&wi, &wh, &bi, &bh, &wo, &one};
  const char *names[6] = {"w_ih", "w_hh", "b_ih", "b_hh", "w_out", "one"};
  for (int i = 0; i < 6; i++) cr_assert_eq(opd_graph_const(g, names[i], cs[i]), 2 + i);
  int hv = opd_graph_node(g, "gru_cell", (int[]){0, 1, 2, 3, 4, 5}, 6, NULL, 0, 1);
  int pv = opd_graph_node(g, "linear", (int[]){hv, 6}, 2, NULL, 0, 1);
  pv = opd_graph_node(g, "sigmoid", (int[]){pv}, 1, NULL, 0, 1);
  int qv = opd_graph_node(g, "sub", (int[]){7, pv}, 2, NULL, 0, 1);
  cr_assert_eq(opd_graph_output(g, hv), 0);
  cr_assert_eq(opd_graph_output(g, qv), 0);
  uint64_t graph;
  cr_assert_eq(opd_graph_define(c, NULL, g, &graph), 0, "%s", opd_last_error());
  cr_assert_eq(opd_graph_run(c, graph, (opd_tensor_t[]){x, h}, 2, outs, 2), 0, "%s",
               opd_last_error());
  cr_assert_eq(opd_run(c, "gru_cell", (opd_tensor_t[]){x, h, wi, wh, bi, bh}, 6, &hn, 1, NULL,
                       0), 0, "%s", opd_last_error());
  cr_assert_eq(opd_run(c, "linear", (opd_tensor_t[]){hn, wo}, 2, &p, 1, NULL, 0), 0);
  cr_assert_eq(opd_run(c, "sigmoid", &p, 1, &p, 1, NULL, 0), 0);
  cr_assert_eq(opd_run(c, "sub", (opd_tensor_t[]){one, p}, 2, &q, 1, NULL, 0), 0);
  cr_assert_eq(memcmp(f + (o + 2048) / 4, f + (o + 4096) / 4, 2 * H * 4), 0,
               "h' differs between the graph and per op");
  cr_assert_eq(memcmp(f + (o + 3072) / 4, f + (o + 6144) / 4, 2 * 4), 0,
               "q differs between the graph and per op");
  cr_assert(f[(o + 6144) / 4] > 0.0f && f[(o + 6144) / 4] < 1.0f);
  cr_assert_eq(opd_graph_destroy(c, graph), 0);
  opd_graph_def_free(g);
  opd_close(c);
}
