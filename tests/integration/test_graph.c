/* Integration: graphs (docs/graphs.md) on the CPU backend — a small MLP
 * defined once over published weights, run as one request, equal bit for
 * bit to the same ops run one by one; every bad definition and run
 * refused with a message naming what was wrong; handles reclaimed. */
#include <criterion/criterion.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/integration/harness.h"

TestSuite(graph, .init = th_start_default, .fini = th_stop_default, .timeout = 60);

/* The MLP: x (B, 8) @ w1 (8, 16) + b1, relu, @ w2 (16, 4) + b2. */
#define B 3
#define W1 0
#define B1 (W1 + 8 * 16 * 4)
#define W2 (B1 + 16 * 4)
#define B2 (W2 + 16 * 4 * 4)

static opd_client_t *publisher(void) {
  opd_client_t *a = th_connect();
  void *base;
  uint64_t arena = th_arena(a, 4096, &base);
  float *f = base;
  for (int i = 0; i < 4096 / 4; i++) f[i] = (float)((i * 37) % 23 - 11) / 16.0f;
  cr_assert_eq(opd_publish(a, arena, "mlp", NULL), 0, "%s", opd_last_error());
  return a;
}

/* The MLP's definition over the attached arena wa (value ids: x 0, the
 * constants 1..4, then the nodes' outputs). */
static opd_graph_def_t *mlp_def(uint64_t wa) {
  opd_graph_def_t *g = opd_graph_def_new();
  cr_assert_not_null(g);
  cr_assert_eq(opd_graph_input(g, "x", OPD_DTYPE_FLOAT32, 2, (int64_t[]){B, 8}), 0);
  opd_tensor_t w1 = th_f32(wa, W1, 2, (int64_t)8, (int64_t)16);
  opd_tensor_t b1 = th_f32(wa, B1, 1, (int64_t)16);
  opd_tensor_t w2 = th_f32(wa, W2, 2, (int64_t)16, (int64_t)4);
  opd_tensor_t b2 = th_f32(wa, B2, 1, (int64_t)4);
  cr_assert_eq(opd_graph_const(g, "w1", &w1), 1);
  cr_assert_eq(opd_graph_const(g, "b1", &b1), 2);
  cr_assert_eq(opd_graph_const(g, "w2", &w2), 3);
  cr_assert_eq(opd_graph_const(g, "b2", &b2), 4);
  int h = opd_graph_node(g, "matmul", (int[]){0, 1}, 2, NULL, 0, 1);
  h = opd_graph_node(g, "add", (int[]){h, 2}, 2, NULL, 0, 1);
  h = opd_graph_node(g, "relu", (int[]){h}, 1, NULL, 0, 1);
  h = opd_graph_node(g, "matmul", (int[]){h, 3}, 2, NULL, 0, 1);
  h = opd_graph_node(g, "add", (int[]){h, 4}, 2, NULL, 0, 1);
  cr_assert_eq(h, 9, "value ids follow the nodes");
  cr_assert_eq(opd_graph_output(g, h), 0);
  return g;
}

/* The same MLP op by op into y (scratch in xa from 2048). */
static void mlp_per_op(opd_client_t *c, uint64_t wa, uint64_t xa, uint64_t x_off,
                       uint64_t y_off) {
  opd_tensor_t x = th_f32(xa, x_off, 2, (int64_t)B, (int64_t)8);
  opd_tensor_t h = th_f32(xa, 2048, 2, (int64_t)B, (int64_t)16);
  opd_tensor_t y = th_f32(xa, y_off, 2, (int64_t)B, (int64_t)4);
  opd_tensor_t w1 = th_f32(wa, W1, 2, (int64_t)8, (int64_t)16);
  opd_tensor_t b1 = th_f32(wa, B1, 1, (int64_t)16);
  opd_tensor_t w2 = th_f32(wa, W2, 2, (int64_t)16, (int64_t)4);
  opd_tensor_t b2 = th_f32(wa, B2, 1, (int64_t)4);
  cr_assert_eq(opd_run(c, "matmul", (opd_tensor_t[]){x, w1}, 2, &h, 1, NULL, 0), 0);
  cr_assert_eq(opd_run(c, "add", (opd_tensor_t[]){h, b1}, 2, &h, 1, NULL, 0), 0);
  cr_assert_eq(opd_run(c, "relu", &h, 1, &h, 1, NULL, 0), 0);
  cr_assert_eq(opd_run(c, "matmul", (opd_tensor_t[]){h, w2}, 2, &y, 1, NULL, 0), 0);
  cr_assert_eq(opd_run(c, "add", (opd_tensor_t[]){y, b2}, 2, &y, 1, NULL, 0), 0);
}

Test(graph, mlp_equals_per_op_and_reuses_tensors) {
  opd_client_t *a = publisher(), *c = th_connect();
  uint64_t wa, size, graph;
  cr_assert_eq(opd_attach(c, "mlp", &wa, &size, NULL, 0, NULL, 0), 0, "%s",
               opd_last_error());
  opd_graph_def_t *g = mlp_def(wa);
  cr_assert_eq(opd_graph_define(c, NULL, g, &graph), 0, "%s", opd_last_error());
  opd_tensor_t shape;
  uint32_t n_out;
  cr_assert_eq(opd_graph_def_outputs(g, &shape, 1, &n_out), 0);
  cr_assert_eq(n_out, 1);
  cr_assert_eq(shape.rank, 2);
  cr_assert_eq(shape.shape[0], B);
  cr_assert_eq(shape.shape[1], 4);
  void *base;
  uint64_t xa = th_arena(c, 8192, &base);
  float *f = base;
  for (int r = 0; r < 3; r++) { /* three inputs, the same tensors each time */
    for (int i = 0; i < B * 8; i++) f[i] = (float)((i + 5 * r) % 7) - 3.0f;
    opd_tensor_t x = th_f32(xa, 0, 2, (int64_t)B, (int64_t)8);
    opd_tensor_t y = th_f32(xa, 1024, 2, (int64_t)B, (int64_t)4);
    cr_assert_eq(opd_graph_run(c, graph, &x, 1, &y, 1), 0, "%s", opd_last_error());
    mlp_per_op(c, wa, xa, 0, 1536);
    cr_assert_eq(memcmp((char *)base + 1024, (char *)base + 1536, B * 4 * 4), 0,
                 "round %d: graph and per-op results differ", r);
  }
  /* other tensors of the same shapes (another offset): rebound, same math */
  memcpy((char *)base + 4096, base, B * 8 * 4);
  opd_tensor_t x2 = th_f32(xa, 4096, 2, (int64_t)B, (int64_t)8);
  opd_tensor_t y2 = th_f32(xa, 6144, 2, (int64_t)B, (int64_t)4);
  cr_assert_eq(opd_graph_run(c, graph, &x2, 1, &y2, 1), 0, "%s", opd_last_error());
  cr_assert_eq(memcmp((char *)base + 6144, (char *)base + 1536, B * 4 * 4), 0);
  /* a prepared run: the frame encoded once */
  opd_prepared_t *p;
  cr_assert_eq(opd_graph_prepare(c, graph, &x2, 1, &y2, 1, 0, &p), 0, "%s",
               opd_last_error());
  memset((char *)base + 6144, 0, B * 4 * 4);
  for (int i = 0; i < 5; i++) cr_assert_eq(opd_run_prepared(c, p), 0, "%s", opd_last_error());
  cr_assert_eq(memcmp((char *)base + 6144, (char *)base + 1536, B * 4 * 4), 0);
  opd_prepared_free(p);
  cr_assert_geq(th_stat("runs"), 9);
  cr_assert_eq(opd_graph_destroy(c, graph), 0, "%s", opd_last_error());
  opd_tensor_t x = th_f32(xa, 0, 2, (int64_t)B, (int64_t)8);
  EXPECT_ERR(opd_graph_run(c, graph, &x, 1, &y2, 1), OPD_ENOENT, "no graph");
  opd_graph_def_free(g);
  opd_close(c);
  opd_close(a);
}

Test(graph, bad_definitions_name_the_node) {
  opd_client_t *a = publisher(), *c = th_connect();
  uint64_t wa, graph;
  cr_assert_eq(opd_attach(c, "mlp", &wa, NULL, NULL, 0, NULL, 0), 0);
  /* an unknown op */
  opd_graph_def_t *g = opd_graph_def_new();
  opd_graph_input(g, "x", OPD_DTYPE_FLOAT32, 2, (int64_t[]){B, 8});
  int h = opd_graph_node(g, "relu", (int[]){0}, 1, NULL, 0, 1);
  h = opd_graph_node(g, "frobnicate", (int[]){h}, 1, NULL, 0, 1);
  opd_graph_output(g, h);
  EXPECT_ERR(opd_graph_define(c, NULL, g, &graph), OPD_ENOOP,
             "node 1: unknown operator \"frobnicate\"");
  opd_graph_def_free(g);
  /* a shape mismatch at node 2: both shapes named */
  g = opd_graph_def_new();
  opd_graph_input(g, "x", OPD_DTYPE_FLOAT32, 2, (int64_t[]){B, 8});
  opd_tensor_t w2 = th_f32(wa, W2, 2, (int64_t)16, (int64_t)4);
  opd_graph_const(g, "w2", &w2);
  h = opd_graph_node(g, "relu", (int[]){0}, 1, NULL, 0, 1);
  h = opd_graph_node(g, "relu", (int[]){h}, 1, NULL, 0, 1);
  h = opd_graph_node(g, "matmul", (int[]){h, 1}, 2, NULL, 0, 1);
  opd_graph_output(g, h);
  EXPECT_ERR(opd_graph_define(c, NULL, g, &graph), OPD_ESHAPE, "node 2 (matmul)");
  cr_assert(strstr(opd_last_error(), "[3,8]") && strstr(opd_last_error(), "[16,4]"),
            "the message names both shapes: %s", opd_last_error());
  opd_graph_def_free(g);
  /* a bad attribute, an output that is an input, a wrong n_out */
  g = opd_graph_def_new();
  opd_graph_input(g, "x", OPD_DTYPE_FLOAT32, 2, (int64_t[]){B, 8});
  opd_attr_t axis = {.name = "nonsense", .type = OPD_ATTR_INT, .i = 1};
  h = opd_graph_node(g, "softmax", (int[]){0}, 1, &axis, 1, 1);
  opd_graph_output(g, h);
  EXPECT_ERR(opd_graph_define(c, NULL, g, &graph), OPD_EATTR, "node 0 (softmax)");
  opd_graph_def_free(g);
  g = opd_graph_def_new();
  opd_graph_input(g, "x", OPD_DTYPE_FLOAT32, 2, (int64_t[]){B, 8});
  opd_graph_node(g, "relu", (int[]){0}, 1, NULL, 0, 1);
  opd_graph_output(g, 0);
  EXPECT_ERR(opd_graph_define(c, NULL, g, &graph), OPD_EINVAL,
             "output 0 is the graph's input 0");
  opd_graph_def_free(g);
  g = opd_graph_def_new();
  opd_graph_input(g, "x", OPD_DTYPE_FLOAT32, 2, (int64_t[]){B, 8});
  h = opd_graph_node(g, "relu", (int[]){0}, 1, NULL, 0, 2);
  opd_graph_output(g, h);
  EXPECT_ERR(opd_graph_define(c, NULL, g, &graph), OPD_EARITY, "\"n_out\" must be 1");
  opd_graph_def_free(g);
  /* a constant in an arena this session does not have */
  g = opd_graph_def_new();
  opd_graph_input(g, "x", OPD_DTYPE_FLOAT32, 2, (int64_t[]){B, 8});
  opd_tensor_t ghost = th_f32(999999, 0, 1, (int64_t)8);
  opd_graph_const(g, "ghost", &ghost);
  h = opd_graph_node(g, "add", (int[]){0, 1}, 2, NULL, 0, 1);
  opd_graph_output(g, h);
  EXPECT_ERR(opd_graph_define(c, NULL, g, &graph), OPD_EARENA,
             "constant 0 (ghost): unknown arena 999999");
  opd_graph_def_free(g);
  /* a device this daemon does not have */
  g = mlp_def(wa);
  EXPECT_ERR(opd_graph_define(c, "cuda:0", g, &graph), OPD_EDEVICE, "cuda");
  opd_graph_def_free(g);
  th_assert_alive();
  opd_close(c);
  opd_close(a);
}

/* A hand-written definition whose nodes read each other's outputs. */
Test(graph, cycle_is_refused_naming_its_nodes) {
  int fd = th_raw_connect();
  th_raw_hello(fd);
  th_pack_t p;
  th_pack_init(&p);
  msgpack_pack_map(&p.pk, 3);
  th_pack_str(&p, "inputs");
  msgpack_pack_array(&p.pk, 1);
  msgpack_pack_map(&p.pk, 3);
  th_pack_str(&p, "name");
  th_pack_str(&p, "x");
  th_pack_str(&p, "dtype");
  msgpack_pack_uint32(&p.pk, OPD_DTYPE_FLOAT32);
  th_pack_str(&p, "shape");
  msgpack_pack_array(&p.pk, 1);
  msgpack_pack_int64(&p.pk, 4);
  th_pack_str(&p, "nodes"); /* values: x 0; node 0's output 1, node 1's 2, node 2's 3 */
  msgpack_pack_array(&p.pk, 3);
  const char *ops[3] = {"relu", "add", "relu"};
  const int ins[3][2] = {{0, -1}, {1, 3}, {2, -1}};
  for (int i = 0; i < 3; i++) {
    msgpack_pack_map(&p.pk, 2);
    th_pack_str(&p, "op");
    th_pack_str(&p, ops[i]);
    th_pack_str(&p, "in");
    int n = ins[i][1] < 0 ? 1 : 2;
    msgpack_pack_array(&p.pk, (size_t)n);
    for (int k = 0; k < n; k++) msgpack_pack_uint32(&p.pk, (uint32_t)ins[i][k]);
  }
  th_pack_str(&p, "outputs");
  msgpack_pack_array(&p.pk, 1);
  msgpack_pack_uint32(&p.pk, 3);
  th_raw_request(fd, OPD_MSG_GRAPH_DEFINE, 7, p.sb.data, p.sb.size, -1);
  th_reply_t r;
  cr_assert_eq(th_raw_reply(fd, &r, 5000), 0);
  cr_assert_eq(r.code, OPD_EINVAL, "%s", r.message);
  cr_assert(strstr(r.message, "cycle") && strstr(r.message, "node 1 (add)") &&
                strstr(r.message, "node 2 (relu)"),
            "%s", r.message);
  th_pack_free(&p);
  close(fd);
  th_assert_alive();
}

Test(graph, runs_checked_against_the_graph) {
  opd_client_t *a = publisher(), *c = th_connect(), *other = th_connect();
  uint64_t wa, graph;
  cr_assert_eq(opd_attach(c, "mlp", &wa, NULL, NULL, 0, NULL, 0), 0);
  opd_graph_def_t *g = mlp_def(wa);
  cr_assert_eq(opd_graph_define(c, NULL, g, &graph), 0, "%s", opd_last_error());
  void *base;
  uint64_t xa = th_arena(c, 8192, &base);
  opd_tensor_t x = th_f32(xa, 0, 2, (int64_t)B, (int64_t)8);
  opd_tensor_t y = th_f32(xa, 1024, 2, (int64_t)B, (int64_t)4);
  opd_tensor_t bad = th_f32(xa, 0, 2, (int64_t)B, (int64_t)9);
  EXPECT_ERR(opd_graph_run(c, graph, &bad, 1, &y, 1), OPD_ESHAPE,
             "input 0 has shape [3,9], the graph's is [3,8]");
  EXPECT_ERR(opd_graph_run(c, graph, &x, 1, NULL, 0), OPD_EARITY,
             "takes 1 inputs and gives 1 outputs");
  opd_tensor_t over = th_f32(xa, 0, 2, (int64_t)B, (int64_t)4);
  EXPECT_ERR(opd_graph_run(c, graph, &x, 1, &over, 1), OPD_EALIAS,
             "output 0 overlaps input 0");
  opd_tensor_t ro = th_f32(wa, 0, 2, (int64_t)B, (int64_t)4);
  EXPECT_ERR(opd_graph_run(c, graph, &x, 1, &ro, 1), OPD_EREADONLY, "read-only");
  /* another session cannot use the handle */
  void *ob;
  uint64_t oa = th_arena(other, 8192, &ob);
  opd_tensor_t ox = th_f32(oa, 0, 2, (int64_t)B, (int64_t)8);
  opd_tensor_t oy = th_f32(oa, 1024, 2, (int64_t)B, (int64_t)4);
  EXPECT_ERR(opd_graph_run(other, graph, &ox, 1, &oy, 1), OPD_ENOENT,
             "is not one of this session's");
  EXPECT_ERR(opd_graph_destroy(other, graph), OPD_ENOENT, "not one of this session's");
  cr_assert_eq(opd_graph_run(c, graph, &x, 1, &y, 1), 0, "%s", opd_last_error());
  opd_graph_def_free(g);
  opd_close(other);
  opd_close(c);
  opd_close(a);
}

Test(graph, unpublished_constant_stays_while_the_graph_uses_it) {
  opd_client_t *a = publisher(), *c = th_connect();
  uint64_t wa, graph;
  cr_assert_eq(opd_attach(c, "mlp", &wa, NULL, NULL, 0, NULL, 0), 0);
  opd_graph_def_t *g = mlp_def(wa);
  cr_assert_eq(opd_graph_define(c, NULL, g, &graph), 0, "%s", opd_last_error());
  void *base;
  uint64_t xa = th_arena(c, 8192, &base);
  float *f = base;
  for (int i = 0; i < B * 8; i++) f[i] = (float)i / 8.0f;
  mlp_per_op(c, wa, xa, 0, 1536); /* the expected answer, before */
  /* the publisher goes, and the attachment is released: the graph holds it */
  cr_assert_eq(opd_unpublish(a, "mlp"), 0);
  opd_close(a);
  cr_assert_eq(opd_arena_release(c, wa), 0);
  opd_tensor_t x = th_f32(xa, 0, 2, (int64_t)B, (int64_t)8);
  opd_tensor_t y = th_f32(xa, 1024, 2, (int64_t)B, (int64_t)4);
  cr_assert_eq(opd_graph_run(c, graph, &x, 1, &y, 1), 0, "%s", opd_last_error());
  cr_assert_eq(memcmp((char *)base + 1024, (char *)base + 1536, B * 4 * 4), 0);
  int64_t mapped = th_stat("mappings");
  cr_assert_eq(opd_graph_destroy(c, graph), 0);
  cr_assert_eq(th_wait_stat("mappings", mapped - 1, 2000), mapped - 1,
               "the weights' mapping goes with the graph");
  opd_graph_def_free(g);
  opd_close(c);
}

Test(graph, limits_and_reclaim_after_sigkill) {
  opd_client_t *c = th_connect();
  opd_graph_def_t *g = opd_graph_def_new();
  opd_graph_input(g, "x", OPD_DTYPE_FLOAT32, 1, (int64_t[]){16});
  opd_graph_output(g, opd_graph_node(g, "relu", (int[]){0}, 1, NULL, 0, 1));
  uint64_t id;
  for (int i = 0; i < OPD_MAX_GRAPHS; i++)
    cr_assert_eq(opd_graph_define(c, NULL, g, &id), 0, "%d: %s", i, opd_last_error());
  EXPECT_ERR(opd_graph_define(c, NULL, g, &id), OPD_ELIMIT, "graphs, the limit");
  cr_assert_eq(th_stat("live"), OPD_MAX_GRAPHS);
  opd_close(c);
  cr_assert_eq(th_wait_stat("live", 0, 3000), 0, "a closed session's graphs go");
  pid_t pid = fork();
  if (pid == 0) { /* a client that defines graphs and is killed */
    opd_client_t *k = th_connect();
    for (int i = 0; i < 10; i++)
      if (opd_graph_define(k, NULL, g, &id) != 0) _exit(3);
    raise(SIGKILL);
  }
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFSIGNALED(st), "the child was killed (status %d)", st);
  cr_assert_eq(th_wait_stat("live", 0, 3000), 0, "a killed client's graphs go");
  cr_assert_geq(th_stat("defined"), OPD_MAX_GRAPHS + 10);
  opd_graph_def_free(g);
  th_assert_alive();
}

/* A run's tensor that is a strided view, and a run asking for stream
 * order (only ASYNC is a graph run's): refused, the session goes on. */
Test(graph, strided_tensors_and_stream_flags_refused) {
  opd_client_t *c = th_connect();
  opd_graph_def_t *g = opd_graph_def_new();
  opd_graph_input(g, "x", OPD_DTYPE_FLOAT32, 2, (int64_t[]){4, 8});
  opd_graph_output(g, opd_graph_node(g, "relu", (int[]){0}, 1, NULL, 0, 1));
  uint64_t id;
  cr_assert_eq(opd_graph_define(c, NULL, g, &id), 0, "%s", opd_last_error());
  void *base;
  uint64_t a = th_arena(c, 4096, &base);
  opd_tensor_t x = th_f32(a, 0, 2, (int64_t)4, (int64_t)8);
  opd_tensor_t y = th_f32(a, 1024, 2, (int64_t)4, (int64_t)8);
  opd_tensor_t xt = x; /* the transpose's strides over the same bytes */
  xt.strided = 1;
  xt.strides[0] = 1;
  xt.strides[1] = 4;
  EXPECT_ERR(opd_graph_run(c, id, &xt, 1, &y, 1), OPD_ELAYOUT,
             "input 0: is not contiguous; a graph takes C-contiguous tensors");
  /* WAIT (2) on the wire: libopd offers only ASYNC, so a raw request */
  int fd = th_raw_connect();
  th_raw_hello(fd);
  th_pack_t p;
  th_pack_init(&p);
  msgpack_pack_map(&p.pk, 2);
  th_pack_str(&p, "graph");
  msgpack_pack_uint64(&p.pk, id);
  th_pack_str(&p, "async");
  msgpack_pack_uint32(&p.pk, OPD_RUN_F_WAIT);
  th_raw_request(fd, OPD_MSG_RUN, 3, p.sb.data, p.sb.size, -1);
  th_reply_t r;
  cr_assert_eq(th_raw_reply(fd, &r, 5000), 0);
  cr_assert_eq(r.code, OPD_EPROTO, "%s", r.message);
  cr_assert(strstr(r.message, "takes ASYNC (1) only"), "%s", r.message);
  th_pack_free(&p);
  close(fd);
  cr_assert_eq(opd_graph_run(c, id, &x, 1, &y, 1), 0, "%s", opd_last_error());
  opd_graph_def_free(g);
  opd_close(c);
}

/* A graph's intermediates count against the session's bytes. */
Test(graph, intermediates_over_the_session_bytes_refused, .init = NULL) {
  const char *args[] = {"--max-session-bytes", "1000000", NULL};
  th_start(args);
  opd_client_t *c = th_connect();
  opd_graph_def_t *g = opd_graph_def_new();
  opd_graph_input(g, "x", OPD_DTYPE_FLOAT32, 2, (int64_t[]){512, 512});
  int h = opd_graph_node(g, "relu", (int[]){0}, 1, NULL, 0, 1);
  opd_graph_output(g, opd_graph_node(g, "relu", &h, 1, NULL, 0, 1));
  uint64_t id;
  EXPECT_ERR(opd_graph_define(c, NULL, g, &id), OPD_ELIMIT, "max_session_bytes (1000000)");
  cr_assert(strstr(opd_last_error(), "1048576 of intermediates"), "%s", opd_last_error());
  cr_assert_eq(th_stat("live"), 0);
  opd_graph_def_free(g);
  opd_close(c);
  th_assert_alive();
}
