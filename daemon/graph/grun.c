/* A graph's run: a RUN naming "graph", checked against the graph and
 * made one job.
 *
 * DESIGN
 * Everything about the nodes was checked at define; a run checks only its
 * own tensors: the same number the graph takes and gives, each decoded,
 * in an arena of this session, inside it (opd__desc_validate), contiguous,
 * with the dtype and shape the graph declared, on the graph's device (or
 * host memory, which a CUDA graph stages), outputs writable and touching
 * no other output or input. The job carries the graph (a reference) and
 * the run's tensors in its call (call.op is the "graph" row: messages,
 * stats and metrics name it); the backend binds them to the node calls
 * when it runs (daemon/graph/graph.h). A run is validated this way once:
 * the same body again is the run cache's (daemon/run/runcache.c).
 */
#include <stdio.h>
#include <string.h>

#include "common/wire.h"
#include "daemon/graph/graph.h"
#include "daemon/graph/table.h"
#include "daemon/mem/arena.h"
#include "kernels/common/kutil.h"

int opd__graph_tensor(opd_session_t *s, const msgpack_object *o,
                      opd_arena_t **arena, opd_desc_t *d, uint64_t *extent,
                      opd_tview_t *view, opd_err_t *err) {
  char why[200];
  int64_t numel;
  int rc;
  if ((rc = opd__desc_decode(o, d, why, sizeof why)) != 0)
    return opd__errf(err, rc, "%s", why);
  if (d->dtype <= 0 || d->dtype >= OPD_DTYPE_COUNT_)
    return opd__errf(err, OPD_EDTYPE, "unknown dtype %d", d->dtype);
  *arena = opd__arena_find(s, d->arena);
  if (*arena == NULL)
    return opd__errf(err, OPD_EARENA, "unknown arena %llu (not registered "
                     "by this session)", (unsigned long long)d->arena);
  if ((rc = opd__desc_validate(d, (*arena)->size, &numel, extent, why,
                               sizeof why)) != 0)
    return opd__errf(err, rc, "%s", why);
  if (!d->contiguous && !opd__desc_is_contiguous(d))
    return opd__errf(err, OPD_ELAYOUT, "is not contiguous; a graph takes "
                     "C-contiguous tensors (the copy op makes one)");
  view->data = (char *)(*arena)->base + d->offset;
  view->dtype = d->dtype;
  view->rank = d->rank;
  memcpy(view->shape, d->shape, sizeof view->shape);
  memcpy(view->strides, d->strides, sizeof view->strides);
  view->numel = numel;
  return 0;
}

/* Tensor k of the run (an input, or an output) against value v. */
static int check_one(opd_session_t *s, const opd_graph_t *g,
                     const msgpack_object *o, int out, int k,
                     opd_arena_t **arena, opd_desc_t *d, uint64_t *extent,
                     opd_tview_t *view, opd_err_t *err) {
  const opd_gval_t *v = &g->vals[out ? g->out_val[k] : g->in_val[k]];
  const char *what = out ? "output" : "input";
  opd_err_t e;
  char a[120], b[120];
  int rc = opd__graph_tensor(s, o, arena, d, extent, view, &e);
  if (rc != 0) return opd__errf(err, rc, "%s %d: %s", what, k, e.msg);
  if (d->dtype != v->view.dtype)
    return opd__errf(err, OPD_EDTYPE, "%s %d has dtype %s, the graph's is %s",
                     what, k, opd__dtype_name(d->dtype),
                     opd__dtype_name(v->view.dtype));
  if (d->rank != v->view.rank ||
      memcmp(d->shape, v->view.shape, sizeof(int64_t) * (size_t)d->rank) != 0)
    return opd__errf(err, OPD_ESHAPE, "%s %d has shape %s, the graph's is %s",
                     what, k, opd__shape_str(a, sizeof a, d->shape, d->rank),
                     opd__shape_str(b, sizeof b, v->view.shape, v->view.rank));
  int dev = (*arena)->device;
  if (dev >= 0 && dev != g->device)
    return opd__errf(err, OPD_EDEVICE, "%s %d is on cuda:%d, the graph runs "
                     "on %s", what, k, dev, opd__graph_devname(g->device, a, sizeof a));
  if (out && (*arena)->readonly)
    return opd__errf(err, OPD_EREADONLY, "output %d is in arena %llu, "
                     "attached read-only", k, (unsigned long long)(*arena)->id);
  return 0;
}

static int overlap(const opd_arena_t *a, uint64_t ao, uint64_t ae,
                   const opd_arena_t *b, uint64_t bo, uint64_t be) {
  return a == b && ae > 0 && be > 0 && ao < bo + be && bo < ao + ae;
}

int opd__graph_run(const opd_req_t *r, const msgpack_object *body,
                   opd_job_t *job, opd_err_t *err) {
  opd_session_t *s = r->s;
  uint64_t id, flags = 0;
  opd_graph_t *g;
  int rc;
  if (opd__mp_uint(opd__mp_get(body, "graph"), &id) != 0)
    return opd__errf(err, OPD_EPROTO, "\"graph\" must be a graph id (uint)");
  const msgpack_object *o_async = opd__mp_get(body, "async");
  if (o_async != NULL &&
      (opd__mp_uint(o_async, &flags) != 0 || (flags & ~(uint64_t)OPD_RUN_F_ASYNC)))
    return opd__errf(err, OPD_EPROTO, "\"async\" of a graph run takes ASYNC "
                     "(1) only (stream-ordered WAIT/SIGNAL/FLAG runs are for "
                     "single ops)");
  if ((rc = opd__graph_lookup(s, id, &g, err)) != 0) return rc;
  const msgpack_object *o_in = opd__mp_get(body, "in"), *o_out = opd__mp_get(body, "out");
  uint32_t n_in = o_in && o_in->type == MSGPACK_OBJECT_ARRAY ? o_in->via.array.size : 0;
  uint32_t n_out = o_out && o_out->type == MSGPACK_OBJECT_ARRAY ? o_out->via.array.size : 0;
  if ((o_in && o_in->type != MSGPACK_OBJECT_ARRAY && o_in->type != MSGPACK_OBJECT_NIL) ||
      (o_out && o_out->type != MSGPACK_OBJECT_ARRAY && o_out->type != MSGPACK_OBJECT_NIL))
    return opd__errf(err, OPD_EPROTO, "\"in\" and \"out\" must be arrays of tensors");
  if ((int)n_in != g->n_in || (int)n_out != g->n_out)
    return opd__errf(err, OPD_EARITY, "graph %llu takes %d inputs and gives "
                     "%d outputs, the run has %u and %u",
                     (unsigned long long)id, g->n_in, g->n_out, n_in, n_out);

  opd_kcall_t *call = &job->call;
  opd_arena_t *arena[OPD_MAX_TENSORS];
  opd_desc_t d[OPD_MAX_TENSORS];
  uint64_t extent[OPD_MAX_TENSORS];
  int n = (int)(n_in + n_out);
  job->bytes = 0;
  for (int i = 0; i < n; i++) {
    int out = i >= (int)n_in, k = out ? i - (int)n_in : i;
    rc = check_one(s, g, &(out ? o_out : o_in)->via.array.ptr[k], out, k,
                   &arena[i], &d[i], &extent[i],
                   out ? &call->out[k] : &call->in[k], err);
    if (rc != 0) return rc;
    job->bytes += extent[i];
  }
  for (int i = (int)n_in; i < n; i++)
    for (int j = 0; j < i; j++)
      if (overlap(arena[i], d[i].offset, extent[i], arena[j], d[j].offset, extent[j]))
        return opd__errf(err, OPD_EALIAS, "output %d overlaps %s %d",
                         i - (int)n_in, j < (int)n_in ? "input" : "output",
                         j < (int)n_in ? j : j - (int)n_in);
  call->op = &opd__graph_op;
  call->n_in = (int32_t)n_in;
  call->n_out = (int32_t)n_out;
  call->err[0] = '\0';
  job->graph = g;
  job->flags = (uint32_t)flags;
  job->device = g->device;
  job->by_load = 0;
  opd_tplace_t pin[OPD_MAX_TENSORS], pout[OPD_MAX_TENSORS];
  for (int i = 0; i < n; i++) {
    opd_tplace_t p = {arena[i]->device < 0, extent[i]};
    if (i < (int)n_in) pin[i] = p;
    else pout[i - (int)n_in] = p;
  }
  if ((rc = opd__backend_for(g->device)->plan(job, pin, pout, err)) != 0) {
    job->graph = NULL; /* no reference was taken */
    return rc;
  }
  g->refs++;
  job->n_arenas = 0;
  for (int i = 0; i < n; i++) {
    int k;
    for (k = 0; k < job->n_arenas && job->arenas[k] != arena[i]; k++) {
    }
    if (k == job->n_arenas) {
      job->arenas[job->n_arenas++] = arena[i];
      arena[i]->refs++;
    }
  }
  return 0;
}
