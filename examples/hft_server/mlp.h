/* mlp.h: the trading model of examples/hft_server, shared by publisher.c,
 * client.c and bench/bench_graph.c: a 3-layer MLP 256 -> 512 -> 512 -> 1
 * (float32, relu between the layers), its deterministic weights, their
 * layout in one arena, the node list that is the model, the one function
 * that defines it as an opd graph, and a plain C reference.
 *
 * DESIGN
 * Everything here is a pure function of (seed, index), so that every
 * process (the C publisher, C and Python clients: mlp.py is the same
 * arithmetic in numpy) computes the same weights bit for bit without
 * reading the published memory: a client checks the daemon's answers
 * against a reference built from the seed the publisher put in the meta.
 * A value is splitmix64 of (seed, parameter, element), its top 24 bits as
 * u in [0, 1), scaled to [-1/sqrt(fan_in), 1/sqrt(fan_in)) in double and
 * rounded once to float (torch's nn.Linear bound).
 *
 * The parameters are laid out in torch's order and layout (w1 (512, 256),
 * b1 (512), w2 (512, 512), b2 (512), w3 (1, 512), b3 (1)), each at a
 * 64-byte aligned offset of one arena. The model is a list of nodes over
 * value ids numbered as a graph definition numbers them (docs/graphs.md):
 * 0 the input, 1..6 the parameters, 7.. the nodes' outputs in node order.
 * Two forms, chosen by what the daemon offers:
 *   linear: x (B, 256) -> 3 linear nodes (act relu, relu, none) -> (B, 1);
 *   matmul: the same model without `linear`, on the transposed problem so
 *     that torch's (N, K) weights serve as matmul's left operand with no
 *     transpose: xT (256, B) -> matmul(w1, xT) + b1 (512, 1) -> relu -> ...
 *     -> (1, B). At B = 1 xT and x are the same bytes.
 * The graph builder and the op-by-op runner of the benchmark both walk
 * this one list, so they cannot run different models.
 */
#ifndef HFT_MLP_H
#define HFT_MLP_H

#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "opd/opd.h"

enum { MLP_IN = 256, MLP_HID = 512, MLP_OUT = 1 };
enum { MLP_W1, MLP_B1, MLP_W2, MLP_B2, MLP_W3, MLP_B3, MLP_NPARAMS };
enum { MLP_MAX_NODES = 8, MLP_X = 0, MLP_FIRST_NODE = 1 + MLP_NPARAMS };

typedef struct mlp_param {
  const char *name;                /* "w1", "b1", ... */
  int64_t rows, cols;              /* torch layout; a bias has cols 0 */
  int64_t fan_in;                  /* its layer's inputs: the init bound */
  uint64_t offset;                 /* bytes from the arena's start */
  uint64_t count;                  /* elements */
} mlp_param_t;

typedef struct mlp_node {
  const char *op;                  /* "linear", "matmul", "add", "relu" */
  int in[3];                       /* value ids */
  int n_in;
  const char *act;                 /* linear's act attr; NULL: none */
  int64_t shape[2];                /* its output's shape */
} mlp_node_t;

/* Fills p[MLP_NPARAMS] and returns the bytes the arena needs. */
static inline uint64_t mlp_layout(mlp_param_t *p) {
  static const struct { const char *name; int64_t rows, cols, fan_in; } d[] = {
      {"w1", MLP_HID, MLP_IN, MLP_IN},  {"b1", MLP_HID, 0, MLP_IN},
      {"w2", MLP_HID, MLP_HID, MLP_HID}, {"b2", MLP_HID, 0, MLP_HID},
      {"w3", MLP_OUT, MLP_HID, MLP_HID}, {"b3", MLP_OUT, 0, MLP_HID}};
  uint64_t off = 0;
  for (int k = 0; k < MLP_NPARAMS; k++) {
    p[k].name = d[k].name;
    p[k].rows = d[k].rows;
    p[k].cols = d[k].cols;
    p[k].fan_in = d[k].fan_in;
    p[k].count = (uint64_t)d[k].rows * (uint64_t)(d[k].cols ? d[k].cols : 1);
    p[k].offset = off;
    off = (off + p[k].count * sizeof(float) + 63) & ~(uint64_t)63;
  }
  return off;
}

static inline uint64_t mlp_mix(uint64_t z) { /* splitmix64's finalizer */
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* u in [0, 1) from the top 24 bits of splitmix64(key) */
static inline double mlp_unit(uint64_t key) {
  return (double)(mlp_mix(key) >> 40) / 16777216.0;
}

/* Writes every parameter of `seed` at its offset in base (mlp_layout). */
static inline void mlp_fill(void *base, const mlp_param_t *p, uint32_t seed) {
  for (int k = 0; k < MLP_NPARAMS; k++) {
    float *w = (float *)((char *)base + p[k].offset);
    double bound = 1.0 / sqrt((double)p[k].fan_in);
    uint64_t key = ((uint64_t)seed << 40) ^ ((uint64_t)k << 32);
    for (uint64_t i = 0; i < p[k].count; i++)
      w[i] = (float)((2.0 * mlp_unit(key ^ i) - 1.0) * bound);
  }
}

/* Market event `r` of stream `stream`: 256 floats in [-1, 1). */
static inline float mlp_event_value(uint32_t stream, uint64_t r, int j) {
  uint64_t key = ((uint64_t)(0x80000000u | stream) << 32) ^ (r << 8) ^ (uint64_t)j;
  return (float)(2.0 * mlp_unit(key) - 1.0);
}

/* Where element j of batch row b of the input sits in the input tensor
 * the graph declared (x (B, 256), or xT (256, B) in the matmul form). */
static inline int64_t mlp_x_index(int linear, int64_t batch, int64_t b, int j) {
  return linear ? b * MLP_IN + j : (int64_t)j * batch + b;
}

/* The model as nodes (see DESIGN); returns how many (n[] has room for
 * MLP_MAX_NODES). The input's declared shape goes to xshape, the output
 * is the last node's. */
static inline int mlp_nodes(int linear, int64_t batch, mlp_node_t *n,
                            int64_t xshape[2]) {
  int k = 0, v = MLP_FIRST_NODE, h = MLP_X;
  if (linear) {
    xshape[0] = batch, xshape[1] = MLP_IN;
    for (int l = 0; l < 3; l++, v++, k++) {
      n[k] = (mlp_node_t){"linear", {h, 1 + 2 * l, 2 + 2 * l}, 3,
                          l < 2 ? "relu" : NULL,
                          {batch, l < 2 ? MLP_HID : MLP_OUT}};
      h = v;
    }
    return k;
  }
  xshape[0] = MLP_IN, xshape[1] = batch;
  for (int l = 0; l < 3; l++) {
    int64_t rows = l < 2 ? MLP_HID : MLP_OUT;
    n[k++] = (mlp_node_t){"matmul", {1 + 2 * l, h}, 2, NULL, {rows, batch}};
    n[k++] = (mlp_node_t){"add", {v, 2 + 2 * l}, 2, NULL, {rows, batch}};
    h = v + 1, v += 2;
    if (l < 2) {
      n[k++] = (mlp_node_t){"relu", {h}, 1, NULL, {rows, batch}};
      h = v++;
    }
  }
  return k;
}

/* The descriptor of parameter k in `arena` for the chosen form: a bias is
 * (N) for linear, (N, 1) for the matmul form (the same bytes). */
static inline void mlp_param_tensor(uint64_t arena, const mlp_param_t *p,
                                    int k, int linear, opd_tensor_t *t) {
  int64_t shape[2] = {p[k].rows, p[k].cols ? p[k].cols : 1};
  int rank = p[k].cols || !linear ? 2 : 1;
  opd_tensor_init(t, arena, p[k].offset, OPD_DTYPE_FLOAT32, rank, shape);
}

/* Creates an arena of this connection holding the weights of `seed` on
 * `device`: NULL or "cpu" a host arena (*base its address here), else
 * device memory the daemon owns ("cuda", "cuda:N"; *base NULL), filled
 * by one copy from a host arena that is released again. Returns 0 or a
 * negative OPD_E* code; nothing is left allocated on failure. */
static inline int mlp_weights_create(opd_client_t *c, const char *device,
                                     uint32_t seed, uint64_t *arena,
                                     void **base) {
  mlp_param_t p[MLP_NPARAMS];
  uint64_t bytes = mlp_layout(p), host, dev;
  void *hb;
  int rc = opd_arena_create(c, bytes, &host, &hb);
  if (rc) return rc;
  mlp_fill(hb, p, seed);
  if (!device || strcmp(device, "cpu") == 0) {
    *arena = host, *base = hb;
    return 0;
  }
  if ((rc = opd_alloc(c, device, bytes, &dev)) == 0) {
    int64_t n = (int64_t)(bytes / sizeof(float));
    opd_tensor_t src, dst;
    opd_tensor_init(&src, host, 0, OPD_DTYPE_FLOAT32, 1, &n);
    opd_tensor_init(&dst, dev, 0, OPD_DTYPE_FLOAT32, 1, &n);
    rc = opd_run_on(c, device, "copy", &src, 1, &dst, 1, NULL, 0);
    if (rc) opd_arena_release(c, dev);
  }
  opd_arena_release(c, host);
  if (rc == 0) *arena = dev, *base = NULL;
  return rc;
}

/* 1 when the daemon lists op `name` (opd_ops_json), 0 when not, or a
 * negative OPD_E* code. */
static inline int mlp_has_op(opd_client_t *c, const char *name) {
  char *json, pat[96];
  size_t len;
  int rc = opd_ops_json(c, &json, &len);
  if (rc) return rc;
  snprintf(pat, sizeof pat, "\"name\":\"%s\"", name);
  int found = strstr(json, pat) != NULL;
  snprintf(pat, sizeof pat, "\"name\": \"%s\"", name);
  found |= strstr(json, pat) != NULL;
  opd_free(json);
  return found;
}

/* Defines the model as one graph on `device` (NULL: "cpu") over the
 * parameters of `arena` (laid out by mlp_layout; an attached published
 * arena or the caller's own), for batch `batch`, in the linear form or
 * the matmul form. On success *graph is the handle and x, y hold the
 * declared input and output shapes (their arena and offset are the
 * caller's to set). Returns 0 or a negative OPD_E* code with
 * opd_last_error() set; nothing is left defined on failure. */
static inline int mlp_graph_define(opd_client_t *c, const char *device,
                                   uint64_t arena, int64_t batch, int linear,
                                   uint64_t *graph, opd_tensor_t *x,
                                   opd_tensor_t *y) {
  mlp_param_t p[MLP_NPARAMS];
  mlp_node_t n[MLP_MAX_NODES];
  int64_t xshape[2];
  int rc = 0, v = 0;
  mlp_layout(p);
  int nn = mlp_nodes(linear, batch, n, xshape);
  opd_graph_def_t *g = opd_graph_def_new();
  if (!g) return OPD_ENOMEM;
  if ((rc = opd_graph_input(g, "x", OPD_DTYPE_FLOAT32, 2, xshape)) < 0) goto out;
  for (int k = 0; k < MLP_NPARAMS; k++) {
    opd_tensor_t t;
    mlp_param_tensor(arena, p, k, linear, &t);
    if ((rc = opd_graph_const(g, p[k].name, &t)) < 0) goto out;
  }
  for (int k = 0; k < nn; k++) {
    opd_attr_t act = {.name = "act", .type = OPD_ATTR_STR, .s = n[k].act};
    v = opd_graph_node(g, n[k].op, n[k].in, (uint32_t)n[k].n_in, &act,
                       n[k].act ? 1 : 0, 1);
    if (v < 0) { rc = v; goto out; }
  }
  if ((rc = opd_graph_output(g, v)) < 0) goto out;
  rc = opd_graph_define(c, device, g, graph);
  if (rc == 0) {
    opd_tensor_init(x, 0, 0, OPD_DTYPE_FLOAT32, 2, xshape);
    opd_tensor_init(y, 0, 0, OPD_DTYPE_FLOAT32, 2, n[nn - 1].shape);
  }
out:
  opd_graph_def_free(g);
  return rc < 0 ? rc : 0;
}

/* The reference: out[b] for each batch row b of the events in x (laid out
 * as the chosen form declares), from the weights in `w` (mlp_layout), in
 * double. h is scratch of 2 * MLP_HID doubles. */
static inline void mlp_reference(const void *w, const mlp_param_t *p,
                                 const float *x, int linear, int64_t batch,
                                 double *h, double *out) {
  const float *W[MLP_NPARAMS];
  for (int k = 0; k < MLP_NPARAMS; k++)
    W[k] = (const float *)((const char *)w + p[k].offset);
  for (int64_t b = 0; b < batch; b++) {
    double *h1 = h, *h2 = h + MLP_HID;
    for (int i = 0; i < MLP_HID; i++) {
      double acc = W[MLP_B1][i];
      for (int j = 0; j < MLP_IN; j++)
        acc += (double)W[MLP_W1][i * MLP_IN + j] * x[mlp_x_index(linear, batch, b, j)];
      h1[i] = acc > 0 ? acc : 0;
    }
    for (int i = 0; i < MLP_HID; i++) {
      double acc = W[MLP_B2][i];
      for (int j = 0; j < MLP_HID; j++) acc += (double)W[MLP_W2][i * MLP_HID + j] * h1[j];
      h2[i] = acc > 0 ? acc : 0;
    }
    double acc = W[MLP_B3][0];
    for (int j = 0; j < MLP_HID; j++) acc += (double)W[MLP_W3][j] * h2[j];
    out[b] = acc;
  }
}

/* The largest |got - want| / (1e-4 + 1e-3 |want|) over a batch: <= 1 is a
 * match (float32 sums of 512 products against a double reference). */
static inline double mlp_error(const float *got, const double *want, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs(got[i] - want[i]) / (1e-4 + 1e-3 * fabs(want[i]));
    if (e > worst || e != e) worst = e != e ? INFINITY : e;
  }
  return worst;
}

#endif /* HFT_MLP_H */
