/* libopd graphs: a definition built value by value, sent once; runs.
 *
 * DESIGN
 * opd_graph_def_t collects the definition on the client (copies of every
 * name, tensor and attribute, so the caller's may go) and numbers the
 * values as the daemon will: inputs, then constants, then each node's
 * outputs in node order (include/opd/protocol.h, GRAPH_DEFINE). Nothing
 * reaches the daemon until opd_graph_define, which packs it as one
 * GRAPH_DEFINE request and keeps the output shapes of the reply in the
 * definition. A graph run is a RUN frame naming the graph
 * (opd__build_graph_run); a prepared one is that frame kept, run with
 * opd_run_prepared like any prepared run. Values are given in order, so a
 * definition built with these calls has no cycle; the daemon still checks
 * (a hand-written GRAPH_DEFINE may name a later node's output).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/libopd/internal.h"

typedef struct gnode {
  char op[OPD_MAX_NAME];
  int in[OPD_MAX_TENSORS];
  uint32_t n_in, n_out, n_attrs;
  opd_attr_t *attrs;             /* names and strings copied */
} gnode_t;

struct opd_graph_def {
  char in_name[OPD_MAX_TENSORS][OPD_MAX_NAME];
  opd_tensor_t in[OPD_MAX_TENSORS];  /* dtype, rank, shape */
  uint32_t n_in;
  char (*c_name)[OPD_MAX_NAME];
  opd_tensor_t *consts;
  uint32_t n_const, cap_const;
  gnode_t *nodes;
  uint32_t n_nodes, cap_nodes;
  int out[OPD_MAX_TENSORS];
  uint32_t n_out;
  char cls[16];                  /* "class" ("" : the session's) */
  int n_vals;
  int sealed;                    /* a node was added: no more inputs or
                                    constants (their ids come first) */
  opd_tensor_t shapes[OPD_MAX_TENSORS]; /* the outputs, after define */
  uint64_t temp_bytes;               /* the intermediates' memory, after define */
  int defined;
};

opd_graph_def_t *opd_graph_def_new(void) {
  opd_graph_def_t *g = calloc(1, sizeof *g);
  if (g == NULL) opd__fail(OPD_ENOMEM, "out of memory");
  return g;
}

void opd_graph_def_free(opd_graph_def_t *g) {
  if (g == NULL) return;
  for (uint32_t i = 0; i < g->n_nodes; i++) {
    for (uint32_t k = 0; k < g->nodes[i].n_attrs; k++) {
      free((char *)g->nodes[i].attrs[k].name);
      free((char *)g->nodes[i].attrs[k].s);
    }
    free(g->nodes[i].attrs);
  }
  free(g->nodes);
  free(g->consts);
  free(g->c_name);
  free(g);
}

static int name_ok(const char *what, const char *name) {
  if (name == NULL || strlen(name) >= OPD_MAX_NAME)
    return opd__fail(OPD_EINVAL, "%s: a name of 1 to %d bytes is needed", what,
                     OPD_MAX_NAME - 1);
  return 0;
}

int opd_graph_input(opd_graph_def_t *g, const char *name, int32_t dtype,
                    int32_t rank, const int64_t *shape) {
  int rc;
  if (g == NULL) return opd__fail(OPD_EINVAL, "opd_graph_input: g is NULL");
  if ((rc = name_ok("opd_graph_input", name)) != 0) return rc;
  if (g->sealed)
    return opd__fail(OPD_ESTATE, "opd_graph_input: inputs come before the "
                     "first node");
  if (g->n_in + 1 > OPD_MAX_TENSORS)
    return opd__fail(OPD_ELIMIT, "opd_graph_input: at most %d inputs",
                     OPD_MAX_TENSORS);
  if ((rc = opd_tensor_init(&g->in[g->n_in], 0, 0, dtype, rank, shape)) != 0)
    return rc;
  snprintf(g->in_name[g->n_in], OPD_MAX_NAME, "%s", name);
  g->n_in++;
  return g->n_vals++;
}

int opd_graph_const(opd_graph_def_t *g, const char *name, const opd_tensor_t *t) {
  int rc;
  if (g == NULL || t == NULL)
    return opd__fail(OPD_EINVAL, "opd_graph_const: g and t must not be NULL");
  if ((rc = name_ok("opd_graph_const", name)) != 0) return rc;
  if (g->sealed)
    return opd__fail(OPD_ESTATE, "opd_graph_const: constants come before the "
                     "first node");
  if (g->n_const >= OPD_MAX_GRAPH_CONSTS)
    return opd__fail(OPD_ELIMIT, "opd_graph_const: at most %d constants",
                     OPD_MAX_GRAPH_CONSTS);
  if (g->n_const == g->cap_const) {
    uint32_t cap = g->cap_const ? 2 * g->cap_const : 16;
    opd_tensor_t *c = realloc(g->consts, cap * sizeof *c);
    if (c != NULL) g->consts = c;
    char(*n)[OPD_MAX_NAME] = c ? realloc(g->c_name, cap * sizeof *n) : NULL;
    if (n == NULL) return opd__fail(OPD_ENOMEM, "out of memory");
    g->c_name = n;
    g->cap_const = cap;
  }
  g->consts[g->n_const] = *t;
  snprintf(g->c_name[g->n_const], OPD_MAX_NAME, "%s", name);
  g->n_const++;
  g->n_vals++;
  return g->n_in + g->n_const - 1;
}

int opd_graph_node(opd_graph_def_t *g, const char *op, const int *in,
                   uint32_t n_in, const opd_attr_t *attrs, uint32_t n_attrs,
                   uint32_t n_out) {
  int rc;
  if (g == NULL || (n_in && in == NULL) || (n_attrs && attrs == NULL))
    return opd__fail(OPD_EINVAL, "opd_graph_node: NULL graph, or NULL array "
                     "with a count");
  if ((rc = name_ok("opd_graph_node", op)) != 0) return rc;
  if (n_in > OPD_MAX_TENSORS || n_out > OPD_MAX_TENSORS || n_attrs > OPD_MAX_ATTRS)
    return opd__fail(OPD_ELIMIT, "opd_graph_node (%s): at most %d inputs, %d "
                     "outputs and %d attributes", op, OPD_MAX_TENSORS,
                     OPD_MAX_TENSORS, OPD_MAX_ATTRS);
  for (uint32_t k = 0; k < n_in; k++)
    if (in[k] < 0 || in[k] >= g->n_vals)
      return opd__fail(OPD_EINVAL, "opd_graph_node (%s): input %u is value %d; "
                       "the values so far are 0..%d", op, k, in[k], g->n_vals - 1);
  if (g->n_nodes >= OPD_MAX_GRAPH_NODES)
    return opd__fail(OPD_ELIMIT, "opd_graph_node: at most %d nodes",
                     OPD_MAX_GRAPH_NODES);
  if (g->n_nodes == g->cap_nodes) {
    uint32_t cap = g->cap_nodes ? 2 * g->cap_nodes : 16;
    gnode_t *n = realloc(g->nodes, cap * sizeof *n);
    if (n == NULL) return opd__fail(OPD_ENOMEM, "out of memory");
    g->nodes = n;
    g->cap_nodes = cap;
  }
  gnode_t *n = &g->nodes[g->n_nodes];
  memset(n, 0, sizeof *n);
  snprintf(n->op, sizeof n->op, "%s", op);
  memcpy(n->in, in, sizeof(int) * n_in);
  n->n_in = n_in;
  n->n_out = n_out;
  if (n_attrs > 0 && (n->attrs = calloc(n_attrs, sizeof *n->attrs)) == NULL)
    return opd__fail(OPD_ENOMEM, "out of memory");
  for (uint32_t k = 0; k < n_attrs; k++) {
    n->attrs[k] = attrs[k];
    n->attrs[k].name = attrs[k].name ? strdup(attrs[k].name) : NULL;
    n->attrs[k].s = attrs[k].type == OPD_ATTR_STR && attrs[k].s ? strdup(attrs[k].s) : NULL;
    n->n_attrs = k + 1;
    if (n->attrs[k].name == NULL ||
        (attrs[k].type == OPD_ATTR_STR && n->attrs[k].s == NULL)) {
      for (uint32_t j = 0; j <= k; j++) {
        free((char *)n->attrs[j].name);
        free((char *)n->attrs[j].s);
      }
      free(n->attrs);
      return opd__fail(OPD_EINVAL, "opd_graph_node (%s): attribute %u has no "
                       "name or string (or out of memory)", op, k);
    }
  }
  g->n_nodes++;
  g->sealed = 1;
  int first = g->n_vals;
  g->n_vals += (int)n_out;
  return first;
}

int opd_graph_output(opd_graph_def_t *g, int value) {
  if (g == NULL) return opd__fail(OPD_EINVAL, "opd_graph_output: g is NULL");
  if (value < 0 || value >= g->n_vals)
    return opd__fail(OPD_EINVAL, "opd_graph_output: value %d; the values so "
                     "far are 0..%d", value, g->n_vals - 1);
  if (g->n_in + g->n_out + 1 > OPD_MAX_TENSORS)
    return opd__fail(OPD_ELIMIT, "opd_graph_output: at most %d inputs and "
                     "outputs together", OPD_MAX_TENSORS);
  g->out[g->n_out++] = value;
  return 0;
}

int opd_graph_def_class(opd_graph_def_t *g, const char *cls) {
  if (g == NULL || cls == NULL ||
      (strcmp(cls, "latency") && strcmp(cls, "best-effort")))
    return opd__fail(OPD_EINVAL, "opd_graph_def_class: the class is "
                     "\"latency\" or \"best-effort\", not \"%s\"",
                     cls ? cls : "(null)");
  snprintf(g->cls, sizeof g->cls, "%s", cls);
  return 0;
}

typedef struct define_args {
  const opd_graph_def_t *g;
  const char *device;
} define_args_t;

static void pack_define(msgpack_packer *pk, const void *arg) {
  const define_args_t *a = arg;
  const opd_graph_def_t *g = a->g;
  fbuf_t *b = pk->data; /* the packer writes into the frame (frame.c) */
  msgpack_pack_map(pk, g->cls[0] ? 6 : 5);
  if (g->cls[0]) {
    PACK_STR(pk, "class");
    PACK_STR(pk, g->cls);
  }
  PACK_STR(pk, "device");
  PACK_STR(pk, a->device ? a->device : "cpu");
  PACK_STR(pk, "inputs");
  msgpack_pack_array(pk, g->n_in);
  for (uint32_t k = 0; k < g->n_in; k++) {
    msgpack_pack_map(pk, 3);
    PACK_STR(pk, "name");
    PACK_STR(pk, g->in_name[k]);
    PACK_STR(pk, "dtype");
    msgpack_pack_uint32(pk, (uint32_t)g->in[k].dtype);
    PACK_STR(pk, "shape");
    msgpack_pack_array(pk, (size_t)g->in[k].rank);
    for (int d = 0; d < g->in[k].rank; d++) msgpack_pack_int64(pk, g->in[k].shape[d]);
  }
  PACK_STR(pk, "consts");
  msgpack_pack_array(pk, g->n_const);
  for (uint32_t k = 0; k < g->n_const; k++) {
    msgpack_pack_map(pk, 2);
    PACK_STR(pk, "name");
    PACK_STR(pk, g->c_name[k]);
    PACK_STR(pk, "tensor");
    (void)opd__pack_tensor(b, &g->consts[k]); /* rank checked at define */
  }
  PACK_STR(pk, "nodes");
  msgpack_pack_array(pk, g->n_nodes);
  for (uint32_t i = 0; i < g->n_nodes; i++) {
    const gnode_t *n = &g->nodes[i];
    msgpack_pack_map(pk, 4);
    PACK_STR(pk, "op");
    PACK_STR(pk, n->op);
    PACK_STR(pk, "in");
    msgpack_pack_array(pk, n->n_in);
    for (uint32_t k = 0; k < n->n_in; k++) msgpack_pack_uint32(pk, (uint32_t)n->in[k]);
    PACK_STR(pk, "n_out");
    msgpack_pack_uint32(pk, n->n_out);
    PACK_STR(pk, "attrs");
    (void)opd__pack_attrs(b, n->attrs, n->n_attrs);
  }
  PACK_STR(pk, "outputs");
  msgpack_pack_array(pk, g->n_out);
  for (uint32_t k = 0; k < g->n_out; k++) msgpack_pack_uint32(pk, (uint32_t)g->out[k]);
}

int opd_graph_define(opd_client_t *c, const char *device, opd_graph_def_t *g,
                     uint64_t *graph) {
  reply_t r = {.payload = NULL};
  int rc = opd__check_usable(c);
  if (rc) return rc;
  if (g == NULL || graph == NULL)
    return opd__fail(OPD_EINVAL, "opd_graph_define: g and graph must not be NULL");
  for (uint32_t i = 0; i < g->n_nodes; i++) /* what packing cannot refuse */
    for (uint32_t k = 0; k < g->nodes[i].n_attrs; k++) {
      const opd_attr_t *a = &g->nodes[i].attrs[k];
      if (a->type < OPD_ATTR_INT || a->type > OPD_ATTR_INTS ||
          (a->type == OPD_ATTR_INTS && (a->n < 0 || a->n > OPD_MAX_RANK)))
        return opd__fail(OPD_EINVAL, "opd_graph_define: node %u (%s): "
                         "attribute \"%s\" has a bad type or count", i,
                         g->nodes[i].op, a->name);
    }
  for (uint32_t k = 0; k < g->n_const; k++)
    if (g->consts[k].rank < 0 || g->consts[k].rank > OPD_MAX_RANK)
      return opd__fail(OPD_EINVAL, "opd_graph_define: constant %u (%s) has rank "
                       "%d", k, g->c_name[k], g->consts[k].rank);
  define_args_t a = {g, device};
  rc = opd__call(c, OPD_MSG_GRAPH_DEFINE, pack_define, &a, -1, &r.payload, &r.len);
  if (rc != 0) return rc;
  const msgpack_object *body = opd__reply_decode(&r);
  const msgpack_object *outs = body ? opd__mp_get(body, "outputs") : NULL;
  if (body == NULL || opd__mp_uint(opd__mp_get(body, "graph"), graph) != 0 ||
      outs == NULL || outs->type != MSGPACK_OBJECT_ARRAY ||
      outs->via.array.size != g->n_out)
    rc = opd__fail(OPD_EPROTO, "graph_define: malformed reply");
  for (uint32_t k = 0; rc == 0 && k < g->n_out; k++) {
    const msgpack_object *o = &outs->via.array.ptr[k];
    const msgpack_object *sh = o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size == 2
                               ? &o->via.array.ptr[1] : NULL;
    uint64_t dt;
    if (sh == NULL || sh->type != MSGPACK_OBJECT_ARRAY ||
        sh->via.array.size > OPD_MAX_RANK ||
        opd__mp_uint(&o->via.array.ptr[0], &dt) != 0) {
      rc = opd__fail(OPD_EPROTO, "graph_define: malformed reply");
      break;
    }
    opd_tensor_t *t = &g->shapes[k];
    memset(t, 0, sizeof *t);
    t->dtype = (int32_t)dt;
    t->rank = (int32_t)sh->via.array.size;
    for (int d = 0; d < t->rank; d++)
      if (opd__mp_int(&sh->via.array.ptr[d], &t->shape[d]) != 0)
        rc = opd__fail(OPD_EPROTO, "graph_define: malformed reply");
  }
  g->temp_bytes = 0;
  if (rc == 0) (void)opd__mp_uint(opd__mp_get(body, "temp_bytes"), &g->temp_bytes);
  g->defined = rc == 0;
  opd__reply_free(&r);
  return rc;
}

int opd_graph_def_outputs(const opd_graph_def_t *g, opd_tensor_t *out,
                          uint32_t cap, uint32_t *n_out) {
  if (g == NULL || n_out == NULL || (cap && out == NULL))
    return opd__fail(OPD_EINVAL, "opd_graph_def_outputs: NULL argument");
  if (!g->defined)
    return opd__fail(OPD_ESTATE, "opd_graph_def_outputs: the graph is not "
                     "defined yet (opd_graph_define fills them)");
  *n_out = g->n_out;
  for (uint32_t k = 0; k < g->n_out && k < cap; k++) out[k] = g->shapes[k];
  return 0;
}

int opd_graph_def_temp_bytes(const opd_graph_def_t *g, uint64_t *bytes) {
  if (g == NULL || bytes == NULL)
    return opd__fail(OPD_EINVAL, "opd_graph_def_temp_bytes: NULL argument");
  if (!g->defined)
    return opd__fail(OPD_ESTATE, "opd_graph_def_temp_bytes: the graph is not "
                     "defined yet");
  *bytes = g->temp_bytes;
  return 0;
}

static uint32_t wire_flags(uint32_t flags) {
  return flags & OPD_RUN_ASYNC ? OPD_RUN_F_ASYNC : 0;
}

int opd_graph_submit(opd_client_t *c, uint64_t graph, const opd_tensor_t *in,
                     uint32_t n_in, const opd_tensor_t *out, uint32_t n_out,
                     uint32_t flags, uint64_t *req) {
  fbuf_t b;
  int rc = opd__check_usable(c);
  if (rc) return rc;
  if (req == NULL) return opd__fail(OPD_EINVAL, "opd_graph_submit: req is NULL");
  if (flags & ~OPD_RUN_ASYNC)
    return opd__fail(OPD_EINVAL, "opd_graph_submit: flags 0x%x: only "
                     "OPD_RUN_ASYNC is known", flags);
  uint64_t id = opd__new_id(c);
  if ((rc = opd__build_graph_run(&b, id, graph, wire_flags(flags), in, n_in, out,
                                 n_out)) != 0)
    return rc;
  rc = opd__submit_frame(c, &b, id, 0, -1);
  opd__fbuf_free(&b);
  if (rc == 0) *req = id;
  return rc;
}

int opd_graph_run(opd_client_t *c, uint64_t graph, const opd_tensor_t *in,
                  uint32_t n_in, const opd_tensor_t *out, uint32_t n_out) {
  uint64_t req;
  int rc = opd_graph_submit(c, graph, in, n_in, out, n_out, 0, &req);
  if (rc != 0) return rc;
  return opd__wait_reply(c, req, -1, NULL, NULL, NULL);
}

int opd_graph_prepare(opd_client_t *c, uint64_t graph, const opd_tensor_t *in,
                      uint32_t n_in, const opd_tensor_t *out, uint32_t n_out,
                      uint32_t flags, opd_prepared_t **p) {
  fbuf_t b;
  int rc = opd__check_usable(c);
  if (rc) return rc;
  if (p == NULL) return opd__fail(OPD_EINVAL, "opd_graph_prepare: p is NULL");
  if (flags & ~OPD_RUN_ASYNC)
    return opd__fail(OPD_EINVAL, "opd_graph_prepare: flags 0x%x: only "
                     "OPD_RUN_ASYNC is known", flags);
  /* UINT64_MAX packs as 0xcf + 8 bytes: the slot new ids go into */
  if ((rc = opd__build_graph_run(&b, UINT64_MAX, graph, wire_flags(flags), in,
                                 n_in, out, n_out)) != 0)
    return rc;
  rc = opd__prepared_from(c, &b, wire_flags(flags), p);
  opd__fbuf_free(&b);
  return rc;
}

static void pack_graph_id(msgpack_packer *pk, const void *arg) {
  msgpack_pack_map(pk, 1);
  PACK_STR(pk, "graph");
  msgpack_pack_uint64(pk, *(const uint64_t *)arg);
}

int opd_graph_destroy(opd_client_t *c, uint64_t graph) {
  int rc = opd__check_usable(c);
  if (rc) return rc;
  return opd__call(c, OPD_MSG_GRAPH_DESTROY, pack_graph_id, &graph, -1, NULL, NULL);
}
