/* GRAPH_DEFINE and GRAPH_DESTROY: a definition checked once and planned.
 *
 * DESIGN
 * define() goes in passes, each on private copies: (1) the values: the
 * inputs (name, dtype, shape), the constants (tensors in this session's
 * arenas, on the graph's device) and, per node, its op and output count,
 * which numbers the node outputs; (2) the order: nodes run once every
 * value they read is made (Kahn's algorithm, definition order among the
 * ready ones); what is left is on a cycle, which the error spells out;
 * (3) each node in that order checked as a RUN is (arity, attributes,
 * dtypes against its row, the op's shape rule), which gives its outputs'
 * dtypes and shapes; (4) the outputs, then the views: an intermediate a
 * VIEW op (reshape) makes of an intermediate shares its memory, which
 * lives until the last reader of either; (5) the intermediates placed in one
 * buffer by liveness (largest first, the lowest offset that no value
 * alive at the same steps uses); (6) the backend's prepare (every node has
 * a kernel there; the buffer). Every error names the node by its place in
 * the definition, its op and what was wrong ("node 2 (linear): ...").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"
#include "daemon/devq.h"
#include "daemon/graph/graph.h"
#include "daemon/graph/table.h"
#include "daemon/limits.h"
#include "daemon/mem/arena.h"
#include "daemon/outbox.h"
#include "daemon/run/attrs.h"
#include "daemon/run/validate.h"
#include "daemon/sched.h"
#include "kernels/common/kutil.h"
#include "kernels/runtime/opcheck.h"

#define TEMP_ALIGN 256

static const msgpack_object *array_of(const msgpack_object *body, const char *key,
                                      uint32_t *n) {
  const msgpack_object *o = opd__mp_get(body, key);
  *n = o != NULL && o->type == MSGPACK_OBJECT_ARRAY ? o->via.array.size : 0;
  return o != NULL && o->type == MSGPACK_OBJECT_ARRAY ? o : NULL;
}

static void contiguous(opd_tview_t *v) {
  int64_t st = 1;
  v->numel = 1;
  for (int d = v->rank - 1; d >= 0; d--) {
    v->strides[d] = st;
    st *= v->shape[d] > 0 ? v->shape[d] : 1;
    v->numel *= v->shape[d];
  }
}

/* (1) the graph's inputs */
static int inputs(opd_graph_t *g, const msgpack_object *o, opd_err_t *err) {
  for (int k = 0; k < g->n_in; k++) {
    const msgpack_object *m = &o->via.array.ptr[k];
    opd_gval_t *v = &g->vals[k];
    uint64_t dt;
    const msgpack_object *sh = opd__mp_get(m, "shape");
    if (m->type != MSGPACK_OBJECT_MAP || opd__mp_uint(opd__mp_get(m, "dtype"), &dt) != 0 ||
        sh == NULL || sh->type != MSGPACK_OBJECT_ARRAY)
      return opd__errf(err, OPD_EPROTO, "input %d must be {\"name\": str, "
                       "\"dtype\": uint, \"shape\": [int]}", k);
    if (dt == 0 || dt >= OPD_DTYPE_COUNT_)
      return opd__errf(err, OPD_EDTYPE, "input %d has unknown dtype %llu", k,
                       (unsigned long long)dt);
    if (sh->via.array.size > OPD_MAX_RANK)
      return opd__errf(err, OPD_ESHAPE, "input %d has rank %u, over %d", k,
                       sh->via.array.size, OPD_MAX_RANK);
    v->kind = OPD_GV_INPUT;
    v->index = k;
    v->view.dtype = (int32_t)dt;
    v->view.rank = (int32_t)sh->via.array.size;
    uint64_t bytes = opd__dtype_size((int)dt);
    for (int d = 0; d < v->view.rank; d++) {
      int64_t x;
      if (opd__mp_int(&sh->via.array.ptr[d], &x) != 0 || x < 0 || x > (INT64_C(1) << 40) ||
          __builtin_mul_overflow(bytes, (uint64_t)x, &bytes))
        return opd__errf(err, OPD_ESHAPE, "input %d: dim %d must be 0..2^40 "
                         "and the tensor's bytes fit 64 bits", k, d);
      v->view.shape[d] = x;
    }
    contiguous(&v->view);
    v->bytes = bytes;
  }
  return 0;
}

/* (1) the constants: tensors of this session's arenas, a reference each */
static int consts(opd_session_t *s, opd_graph_t *g, const msgpack_object *o,
                  opd_err_t *err) {
  for (int k = 0; k < g->n_const; k++) {
    const msgpack_object *m = &o->via.array.ptr[k];
    opd_gval_t *v = &g->vals[g->n_in + k];
    opd_arena_t *a;
    opd_desc_t d;
    opd_err_t e;
    char name[OPD_MAX_NAME] = "?", dn[16];
    if (m->type != MSGPACK_OBJECT_MAP || opd__mp_get(m, "tensor") == NULL)
      return opd__errf(err, OPD_EPROTO, "constant %d must be {\"name\": str, "
                       "\"tensor\": tensor}", k);
    (void)opd__mp_str(opd__mp_get(m, "name"), name, sizeof name);
    int rc = opd__graph_tensor(s, opd__mp_get(m, "tensor"), &a, &d, &v->bytes,
                               &v->view, &e);
    if (rc != 0) return opd__errf(err, rc, "constant %d (%s): %s", k, name, e.msg);
    if (a->device != g->device)
      return opd__errf(err, OPD_EDEVICE, "constant %d (%s) is in %s memory, "
                       "the graph runs on %s: a graph's constants live on its "
                       "device (device memory: alloc, then publish)", k, name,
                       a->device < 0 ? "host" : "device",
                       opd__graph_devname(g->device, dn, sizeof dn));
    v->kind = OPD_GV_CONST;
    v->index = k;
    int i;
    for (i = 0; i < g->n_arenas && g->arenas[i] != a; i++) {
    }
    if (i == g->n_arenas) {
      g->arenas[g->n_arenas++] = a;
      a->refs++;
    }
  }
  return 0;
}

/* (1) each node's op and the ids of its outputs */
static int node_ops(opd_graph_t *g, const msgpack_object *o, opd_err_t *err) {
  int next = g->n_in + g->n_const;
  for (int i = 0; i < g->n_nodes; i++) {
    const msgpack_object *m = &o->via.array.ptr[i];
    opd_gnode_t *n = &g->nodes[i];
    char name[OPD_MAX_NAME];
    uint64_t n_out;
    if (m->type != MSGPACK_OBJECT_MAP ||
        opd__mp_str(opd__mp_get(m, "op"), name, sizeof name) != 0)
      return opd__errf(err, OPD_EPROTO, "node %d must be {\"op\": str, "
                       "\"in\": [uint], \"n_out\"?: uint, \"attrs\"?: map}", i);
    n->def = i;
    if ((n->op_index = opd__op_index(name)) < 0) {
      const char *near = opd__op_nearest(name);
      return opd__errf(err, OPD_ENOOP, "node %d: unknown operator \"%s\" "
                       "(%s%s%s`opctl ops` lists them)", i, name,
                       near ? "did you mean \"" : "", near ? near : "",
                       near ? "\"? " : "");
    }
    const opd_op_def_t *op = opd__ops[n->op_index];
    const msgpack_object *no = opd__mp_get(m, "n_out");
    if (no != NULL && (opd__mp_uint(no, &n_out) != 0 || n_out != (uint64_t)op->n_out))
      return opd__errf(err, OPD_EARITY, "node %d (%s): \"n_out\" must be %d, "
                       "the op's number of outputs", i, name, op->n_out);
    n->call.op = op;
    n->call.n_out = op->n_out;
    for (int k = 0; k < op->n_out; k++) {
      n->out[k] = next;
      g->vals[next].kind = OPD_GV_TEMP;
      g->vals[next].producer = i;
      next++;
    }
  }
  return 0;
}

/* The producer of value v (a node), or -1 */
static int producer(const opd_graph_t *g, int v) {
  return v >= g->n_in + g->n_const ? g->vals[v].producer : -1;
}

/* (2) execution order into order[]; a cycle is the error */
static int order_nodes(opd_graph_t *g, const msgpack_object *o, int *order,
                       opd_err_t *err) {
  char *done = calloc((size_t)g->n_nodes, 1);
  if (done == NULL) return opd__errf(err, OPD_ENOMEM, "out of memory");
  for (int i = 0; i < g->n_nodes; i++) {
    const msgpack_object *in = opd__mp_get(&o->via.array.ptr[i], "in");
    opd_gnode_t *n = &g->nodes[i];
    const opd_op_def_t *op = n->call.op;
    int cnt = in != NULL && in->type == MSGPACK_OBJECT_ARRAY ? (int)in->via.array.size : -1;
    if (in != NULL && in->type != MSGPACK_OBJECT_ARRAY && in->type != MSGPACK_OBJECT_NIL) {
      free(done);
      return opd__errf(err, OPD_EPROTO, "node %d (%s): \"in\" must be an array "
                       "of value ids", i, op->name);
    }
    if (cnt < 0) cnt = 0;
    if (cnt < op->n_in_min || cnt > op->n_in_max) {
      free(done);
      return opd__errf(err, OPD_EARITY, "node %d (%s): expects %d to %d inputs, "
                       "got %d", i, op->name, op->n_in_min, op->n_in_max, cnt);
    }
    n->call.n_in = cnt;
    for (int k = 0; k < cnt; k++) {
      uint64_t v;
      if (opd__mp_uint(&in->via.array.ptr[k], &v) != 0 || v >= (uint64_t)g->n_vals) {
        free(done);
        return opd__errf(err, OPD_EINVAL, "node %d (%s): input %d names no "
                         "value (ids are 0..%d: %d inputs, %d constants, then "
                         "the nodes' outputs)", i, op->name, k, g->n_vals - 1,
                         g->n_in, g->n_const);
      }
      n->in[k] = (int)v;
    }
  }
  int n_done = 0;
  for (int progress = 1; progress && n_done < g->n_nodes;) {
    progress = 0;
    for (int i = 0; i < g->n_nodes; i++) {
      const opd_gnode_t *n = &g->nodes[i];
      int ready = !done[i];
      for (int k = 0; ready && k < n->call.n_in; k++) {
        int p = producer(g, n->in[k]);
        ready = p < 0 || (done[p] && p != i);
      }
      if (!ready) continue;
      done[i] = 1;
      order[n_done++] = i;
      progress = 1;
    }
  }
  if (n_done == g->n_nodes) {
    free(done);
    return 0;
  }
  /* a node left waits on another left: walk back until one repeats */
  int start = 0, walk[OPD_MAX_GRAPH_NODES + 1], len = 0;
  while (done[start]) start++;
  char *seen = calloc((size_t)g->n_nodes, 1);
  for (int at = start; seen != NULL && !seen[at];) {
    seen[at] = 1;
    walk[len++] = at;
    const opd_gnode_t *n = &g->nodes[at];
    for (int k = 0; k < n->call.n_in; k++) {
      int p = producer(g, n->in[k]);
      if (p >= 0 && !done[p]) {
        at = p;
        break;
      }
    }
    if (seen[at]) { /* the cycle starts where `at` first was */
      int first = 0;
      while (walk[first] != at) first++;
      char msg[200];
      size_t m = 0;
      msg[0] = '\0';
      for (int j = len - 1; j >= first && m < sizeof msg; j--)
        m += (size_t)snprintf(msg + m, sizeof msg - m, "node %d (%s) -> ", walk[j],
                              g->nodes[walk[j]].call.op->name);
      if (m < sizeof msg)
        snprintf(msg + m, sizeof msg - m, "node %d", walk[len - 1]);
      free(seen);
      free(done);
      return opd__errf(err, OPD_EINVAL, "the nodes form a cycle: %s (each "
                       "reads the output of the one before it)", msg);
    }
  }
  free(seen);
  free(done);
  return opd__errf(err, OPD_EINVAL, "the nodes form a cycle");
}

/* (3) node n at step `step`: checked as a RUN is, outputs' shapes made */
static int check_node(opd_graph_t *g, opd_gnode_t *n, int step,
                      const msgpack_object *def, opd_err_t *err) {
  opd_kcall_t *c = &n->call;
  const opd_op_def_t *op = c->op;
  opd_tshape_t expect[OPD_MAX_TENSORS];
  opd_err_t e;
  int rc;
  if ((rc = opd__attrs_resolve(op, opd__mp_get(def, "attrs"), c, &e)) != 0)
    return opd__errf(err, rc, "node %d (%s): %s", n->def, op->name, e.msg);
  for (int k = 0; k < c->n_in; k++) {
    opd_gval_t *v = &g->vals[n->in[k]];
    int s = k;
    while (s > 0 && op->in[s].name == NULL) s--;
    if (!((op->in[s].dtypes >> v->view.dtype) & 1))
      return opd__errf(err, OPD_EDTYPE, "node %d (%s): input %d (%s) is value "
                       "%d of dtype %s, which the op does not take", n->def,
                       op->name, k, op->in[s].name ? op->in[s].name : "?",
                       n->in[k], opd__dtype_name(v->view.dtype));
    c->in[k] = v->view;
    c->in[k].data = NULL;
    if (v->kind == OPD_GV_TEMP && v->last < step) v->last = step;
  }
  if ((rc = opd__op_shape(c, expect)) != 0)
    return opd__errf(err, rc, "node %d (%s): %s", n->def, op->name, c->err);
  for (int k = 0; k < op->n_out; k++) {
    opd_gval_t *v = &g->vals[n->out[k]];
    v->view.dtype = expect[k].dtype;
    v->view.rank = expect[k].rank;
    memcpy(v->view.shape, expect[k].shape, sizeof(int64_t) * (size_t)expect[k].rank);
    contiguous(&v->view);
    uint64_t bytes = opd__dtype_size(expect[k].dtype);
    for (int d = 0; d < expect[k].rank; d++)
      if (__builtin_mul_overflow(bytes, (uint64_t)expect[k].shape[d], &bytes))
        return opd__errf(err, OPD_EOVERFLOW, "node %d (%s): output %d's size "
                         "overflows", n->def, op->name, k);
    v->bytes = bytes;
    v->first = v->last = step;
    c->out[k] = v->view;
  }
  return 0;
}

/* (4) the outputs */
static int outputs(opd_graph_t *g, const msgpack_object *o, opd_err_t *err) {
  for (int k = 0; k < g->n_out; k++) {
    uint64_t v;
    if (opd__mp_uint(&o->via.array.ptr[k], &v) != 0 || v >= (uint64_t)g->n_vals)
      return opd__errf(err, OPD_EINVAL, "output %d names no value (ids are "
                       "0..%d)", k, g->n_vals - 1);
    opd_gval_t *val = &g->vals[v];
    if (val->kind == OPD_GV_OUTPUT)
      return opd__errf(err, OPD_EINVAL, "output %d is value %llu, already "
                       "output %d: list each value once", k,
                       (unsigned long long)v, val->index);
    if (val->kind != OPD_GV_TEMP)
      return opd__errf(err, OPD_EINVAL, "output %d is the graph's %s %d: an "
                       "output must be made by a node", k,
                       val->kind == OPD_GV_INPUT ? "input" : "constant", val->index);
    val->kind = OPD_GV_OUTPUT;
    val->index = k;
    g->out_val[k] = (int)v;
  }
  return 0;
}

/* (4b) an intermediate made by a VIEW op (reshape) from an intermediate
 * shares its memory: no copy runs (the kernel sees out == in), and the
 * memory lives until the last reader of any view of it */
static void views(opd_graph_t *g) {
  for (int i = 0; i < g->n_nodes; i++) {
    const opd_gnode_t *n = &g->nodes[i];
    if (!(n->call.op->flags & OPD_OPF_VIEW) || n->call.n_in < 1) continue;
    opd_gval_t *in = &g->vals[n->in[0]], *out = &g->vals[n->out[0]];
    if (in->kind != OPD_GV_TEMP || out->kind != OPD_GV_TEMP || in->bytes != out->bytes)
      continue;
    int root = in->view_of >= 0 ? in->view_of : n->in[0];
    out->view_of = root;
    if (g->vals[root].last < out->last) g->vals[root].last = out->last;
  }
}

/* (5) offsets of the intermediates; returns the buffer's size */
static uint64_t plan_temps(opd_graph_t *g) {
  int n = 0, *t = malloc(sizeof(int) * (size_t)(g->n_vals + 1));
  uint64_t total = 0;
  if (t == NULL) return UINT64_MAX;
  for (int v = g->n_in + g->n_const; v < g->n_vals; v++)
    if (g->vals[v].kind == OPD_GV_TEMP && g->vals[v].view_of < 0) t[n++] = v;
  for (int i = 1; i < n; i++) /* largest first (insertion sort: n is small) */
    for (int j = i; j > 0 && g->vals[t[j]].bytes > g->vals[t[j - 1]].bytes; j--) {
      int x = t[j];
      t[j] = t[j - 1], t[j - 1] = x;
    }
  for (int i = 0; i < n; i++) {
    opd_gval_t *v = &g->vals[t[i]];
    uint64_t size = (v->bytes + TEMP_ALIGN - 1) / TEMP_ALIGN * TEMP_ALIGN, at = 0;
    for (int again = 1; again;) { /* the lowest offset clear of the live ones */
      again = 0;
      for (int j = 0; j < i; j++) {
        const opd_gval_t *w = &g->vals[t[j]];
        uint64_t wsize = (w->bytes + TEMP_ALIGN - 1) / TEMP_ALIGN * TEMP_ALIGN;
        if (w->first <= v->last && v->first <= w->last && at < w->offset + wsize &&
            w->offset < at + size) {
          at = w->offset + wsize;
          again = 1;
        }
      }
    }
    v->offset = at;
    if (at + size > total) total = at + size;
  }
  free(t);
  for (int v = g->n_in + g->n_const; v < g->n_vals; v++)
    if (g->vals[v].kind == OPD_GV_TEMP && g->vals[v].view_of >= 0)
      g->vals[v].offset = g->vals[g->vals[v].view_of].offset;
  return total > 0 ? total : TEMP_ALIGN; /* never NULL: an empty view points somewhere */
}

/* (6) where the run's tensors go into the node calls, and the pointers
 * of the constants and intermediates */
static int bind_plan(opd_graph_t *g, opd_err_t *err) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++)
    n += g->nodes[i].call.n_in + g->nodes[i].call.n_out;
  if ((g->binds = calloc((size_t)n + 1, sizeof *g->binds)) == NULL)
    return opd__errf(err, OPD_ENOMEM, "out of memory");
  for (int i = 0; i < g->n_nodes; i++) {
    opd_gnode_t *nd = &g->nodes[i];
    for (int k = 0; k < nd->call.n_in + nd->call.n_out; k++) {
      int is_out = k >= nd->call.n_in, slot = is_out ? k - nd->call.n_in : k;
      const opd_gval_t *v = &g->vals[is_out ? nd->out[slot] : nd->in[slot]];
      opd_tview_t *view = is_out ? &nd->call.out[slot] : &nd->call.in[slot];
      if (v->kind == OPD_GV_CONST) view->data = v->view.data;
      else if (v->kind == OPD_GV_TEMP) /* NULL: every intermediate is empty */
        view->data = g->temp ? (char *)g->temp + v->offset : NULL;
      else
        g->binds[g->n_binds++] = (opd_gbind_t){(uint16_t)i, (uint8_t)slot,
                                               (uint8_t)is_out,
                                               (uint8_t)(v->kind == OPD_GV_OUTPUT),
                                               (uint8_t)v->index};
    }
  }
  return 0;
}

/* GRAPH_DEFINE's "class": its runs' class of service instead of the
 * session's (the latency class only for those who may ask for it). */
static int graph_class(opd_session_t *s, const msgpack_object *o,
                       opd_graph_t *g, opd_err_t *err) {
  char name[16];
  int cls;
  if (o == NULL || o->type == MSGPACK_OBJECT_NIL) return 0;
  if (opd__mp_str(o, name, sizeof name) != 0 || (cls = opd__class_parse(name)) < 0)
    return opd__errf(err, OPD_EINVAL, "\"class\" must be \"latency\" or "
                     "\"best-effort\"");
  if (cls == OPD_CLASS_LATENCY && !opd__sched_may_latency(s->srv, s))
    return opd__errf(err, OPD_EPERM, "uid %u may not ask for the latency class "
                     "(\"class\"); the daemon grants it to the users and groups "
                     "of --latency-users / --latency-groups", (unsigned)s->uid);
  g->cls = cls == OPD_CLASS_LATENCY ? 2 : 1;
  if (g->cls == 2) opd__devq_latency(s->srv, 1); /* until opd__graph_free */
  return 0;
}

int opd__graph_build(opd_session_t *s, const msgpack_object *body,
                     opd_graph_t **out, opd_err_t *err) {
  uint32_t n_in, n_const, n_nodes, n_out;
  const msgpack_object *o_in = array_of(body, "inputs", &n_in);
  const msgpack_object *o_const = array_of(body, "consts", &n_const);
  const msgpack_object *o_nodes = array_of(body, "nodes", &n_nodes);
  const msgpack_object *o_out = array_of(body, "outputs", &n_out);
  const msgpack_object *o_dev = opd__mp_get(body, "device");
  char dev[OPD_MAX_NAME] = "cpu";
  int device, rc;
  if (o_nodes == NULL || o_out == NULL)
    return opd__errf(err, OPD_EPROTO, "\"nodes\" and \"outputs\" (arrays) "
                     "are required");
  if (n_nodes == 0 || n_nodes > OPD_MAX_GRAPH_NODES)
    return opd__errf(err, n_nodes ? OPD_ELIMIT : OPD_EINVAL, "a graph has 1 "
                     "to %d nodes, this one %u", OPD_MAX_GRAPH_NODES, n_nodes);
  if (n_const > OPD_MAX_GRAPH_CONSTS)
    return opd__errf(err, OPD_ELIMIT, "a graph has at most %d constants, this "
                     "one %u", OPD_MAX_GRAPH_CONSTS, n_const);
  if (n_out == 0 || n_in + n_out > OPD_MAX_TENSORS)
    return opd__errf(err, n_out ? OPD_ELIMIT : OPD_EINVAL, "a graph has at "
                     "least one output and at most %d inputs and outputs "
                     "together, this one %u and %u", OPD_MAX_TENSORS, n_in, n_out);
  if (o_dev != NULL && o_dev->type != MSGPACK_OBJECT_NIL &&
      opd__mp_str(o_dev, dev, sizeof dev) != 0)
    return opd__errf(err, OPD_EPROTO, "\"device\" must be a short string");
  if ((rc = opd__device_parse(s->srv, dev, &device, err)) != 0) return rc;
  if (device == OPD_DEV_ANY)
    return opd__errf(err, OPD_EDEVICE, "a graph runs on one device: give cpu, "
                     "cuda or cuda:N, not auto");
  opd_graph_t *g = calloc(1, sizeof *g);
  if (g == NULL) return opd__errf(err, OPD_ENOMEM, "out of memory");
  *out = g;
  g->srv = s->srv;
  g->device = device < 0 ? -1 : device;
  g->n_in = (int)n_in, g->n_const = (int)n_const, g->n_nodes = (int)n_nodes;
  g->n_out = (int)n_out;
  (void)opd__mp_str(opd__mp_get(body, "name"), g->name, sizeof g->name);
  if ((rc = graph_class(s, opd__mp_get(body, "class"), g, err)) != 0) return rc;
  int n_vals = g->n_in + g->n_const;
  for (uint32_t i = 0; i < n_nodes; i++) {
    char name[OPD_MAX_NAME];
    const msgpack_object *m = &o_nodes->via.array.ptr[i];
    int idx = m->type == MSGPACK_OBJECT_MAP &&
              opd__mp_str(opd__mp_get(m, "op"), name, sizeof name) == 0
              ? opd__op_index(name) : -1;
    n_vals += idx >= 0 ? opd__ops[idx]->n_out : 0;
  }
  g->n_vals = n_vals;
  int *order = malloc(sizeof(int) * n_nodes);
  opd_gnode_t *defs = calloc(n_nodes, sizeof *defs);
  g->vals = calloc((size_t)n_vals + 1, sizeof *g->vals);
  g->nodes = defs;
  g->arenas = calloc((size_t)n_const + 1, sizeof *g->arenas);
  if (order == NULL || defs == NULL || g->vals == NULL || g->arenas == NULL) {
    free(order);
    return opd__errf(err, OPD_ENOMEM, "out of memory");
  }
  for (int v = 0; v < n_vals; v++) g->vals[v].producer = g->vals[v].view_of = -1;
  for (int k = 0; k < g->n_in; k++) g->in_val[k] = k;
  if ((rc = inputs(g, o_in, err)) != 0 || (rc = consts(s, g, o_const, err)) != 0 ||
      (rc = node_ops(g, o_nodes, err)) != 0 ||
      (rc = order_nodes(g, o_nodes, order, err)) != 0) {
    free(order);
    return rc;
  }
  /* the nodes in execution order; values keep their producers' places */
  if ((g->nodes = calloc(n_nodes, sizeof *g->nodes)) == NULL) {
    g->nodes = defs;
    free(order);
    return opd__errf(err, OPD_ENOMEM, "out of memory");
  }
  for (uint32_t step = 0; step < n_nodes; step++) {
    g->nodes[step] = defs[order[step]];
    rc = check_node(g, &g->nodes[step], (int)step,
                    &o_nodes->via.array.ptr[order[step]], err);
    if (rc != 0) break;
  }
  free(defs);
  free(order);
  if (rc != 0 || (rc = outputs(g, o_out, err)) != 0) return rc;
  views(g);
  if ((g->temp_bytes = plan_temps(g)) == UINT64_MAX)
    return opd__errf(err, OPD_ENOMEM, "out of memory");
  g->bytes = g->temp_bytes + sizeof *g + sizeof *g->nodes * n_nodes +
             sizeof *g->vals * (size_t)n_vals;
  uint64_t held = s->bytes_mapped;
  for (uint32_t i = 0; i < s->n_graphs; i++) held += s->graphs[i]->bytes;
  if (held + g->bytes > s->srv->cfg.limits.max_session_bytes)
    return opd__errf(err, OPD_ELIMIT, "the graph needs %llu bytes (%llu of "
                     "intermediates); with the %llu this session holds that "
                     "passes max_session_bytes (%llu)",
                     (unsigned long long)g->bytes, (unsigned long long)g->temp_bytes,
                     (unsigned long long)held,
                     (unsigned long long)s->srv->cfg.limits.max_session_bytes);
  if ((rc = opd__backend_for(g->device)->graph_prepare(g, err)) != 0) return rc;
  return bind_plan(g, err);
}

void opd__graph_define(const opd_req_t *r, const msgpack_object *body) {
  opd_session_t *s = r->s;
  opd_server_t *srv = s->srv;
  opd_graph_t *g = NULL;
  opd_err_t err;
  int rc = opd__graph_build(s, body, &g, &err);
  if (rc == 0) rc = opd__graph_add(s, g, &err);
  if (rc != 0) {
    opd__reply_error(r, rc, "graph_define: %s", err.msg);
    opd__graph_free(g);
    return;
  }
  char dn[16];
  msgpack_packer pk;
  msgpack_sbuffer_clear(&srv->scratch);
  msgpack_packer_init(&pk, &srv->scratch, msgpack_sbuffer_write);
  msgpack_pack_map(&pk, 5);
  PACK_STR(&pk, "graph");
  msgpack_pack_uint64(&pk, g->id);
  PACK_STR(&pk, "outputs");
  msgpack_pack_array(&pk, (size_t)g->n_out);
  for (int k = 0; k < g->n_out; k++) {
    const opd_tview_t *v = &g->vals[g->out_val[k]].view;
    msgpack_pack_array(&pk, 2);
    msgpack_pack_uint32(&pk, (uint32_t)v->dtype);
    msgpack_pack_array(&pk, (size_t)v->rank);
    for (int d = 0; d < v->rank; d++) msgpack_pack_int64(&pk, v->shape[d]);
  }
  PACK_STR(&pk, "nodes");
  msgpack_pack_uint32(&pk, (uint32_t)g->n_nodes);
  PACK_STR(&pk, "temp_bytes");
  msgpack_pack_uint64(&pk, g->temp_bytes);
  PACK_STR(&pk, "device");
  PACK_STR(&pk, opd__graph_devname(g->device, dn, sizeof dn));
  opd__reply(r, srv->scratch.data, srv->scratch.size);
}

void opd__graph_destroy_request(const opd_req_t *r, const msgpack_object *body) {
  uint64_t id;
  opd_err_t err;
  if (opd__mp_uint(opd__mp_get(body, "graph"), &id) != 0) {
    opd__reply_error(r, OPD_EPROTO, "graph_destroy: \"graph\" must be a graph id");
    return;
  }
  if (opd__graph_destroy(r->s, id, &err) != 0) {
    opd__reply_error(r, err.code, "graph_destroy: %s", err.msg);
    return;
  }
  opd__reply(r, "\x80", 1);
}
