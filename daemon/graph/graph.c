/* Graphs' lifetime: the session's table, the server's list, references.
 *
 * DESIGN
 * A graph lives while its session's table or a job holds it (refs). The
 * last reference gives the backend's memory back (graph_release), drops
 * the references on its constants' arenas and frees it; a session's end
 * or GRAPH_DESTROY only drops the table's reference, so a run already
 * queued or running finishes on the graph it was checked against.
 * Destroying a graph bumps the server's arena epoch, so that no run cache
 * still holds a run of it (daemon/run/runcache.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/devq.h"
#include "daemon/graph/graph.h"
#include "daemon/graph/table.h"
#include "daemon/mem/arena.h"

static int graph_shape(opd_kcall_t *call, opd_tshape_t *out) {
  (void)out;
  snprintf(call->err, sizeof call->err,
           "runs only as a defined graph ({\"graph\": id})");
  return OPD_ENOOP;
}

static int graph_cpu(opd_kcall_t *call) {
  snprintf(call->err, sizeof call->err, "runs only as a defined graph");
  return OPD_ENOOP;
}

const opd_op_def_t opd__graph_op = {
    .name = "graph",
    .summary = "a defined graph's run (docs/graphs.md)",
    .n_in_min = 0,
    .n_in_max = OPD_MAX_TENSORS,
    .n_out = 0,
    .shape = graph_shape,
    .cpu_ref = graph_cpu,
};

opd_graph_t *opd__graph_find(opd_session_t *s, uint64_t id) {
  for (uint32_t i = 0; i < s->n_graphs; i++)
    if (s->graphs[i]->id == id) return s->graphs[i];
  return NULL;
}

int opd__graph_lookup(opd_session_t *s, uint64_t id, opd_graph_t **g,
                      opd_err_t *err) {
  if ((*g = opd__graph_find(s, id)) != NULL) return 0;
  for (const opd_graph_t *o = s->srv->graphs; o != NULL; o = o->next)
    if (o->id == id)
      return opd__errf(err, OPD_ENOENT, "graph %llu is not one of this "
                       "session's (a graph belongs to the session that "
                       "defined it)", (unsigned long long)id);
  return opd__errf(err, OPD_ENOENT, "no graph %llu (never defined, or "
                   "destroyed)", (unsigned long long)id);
}

void opd__graph_free(opd_graph_t *g) {
  if (g == NULL) return;
  if (g->cls == 2) opd__devq_latency(g->srv, -1); /* counted at define */
  opd__backend_for(g->device)->graph_release(g);
  for (int i = 0; i < g->n_arenas; i++) opd__arena_unref(g->arenas[i]);
  free(g->arenas);
  free(g->vals);
  free(g->nodes);
  free(g->binds);
  free(g);
}

void opd__graph_unref(opd_server_t *srv, opd_graph_t *g) {
  if (--g->refs > 0) return;
  for (opd_graph_t **pp = &srv->graphs; *pp != NULL; pp = &(*pp)->next)
    if (*pp == g) {
      *pp = g->next;
      srv->n_graphs--;
      break;
    }
  opd__graph_free(g);
}

int opd__graph_add(opd_session_t *s, opd_graph_t *g, opd_err_t *err) {
  opd_server_t *srv = s->srv;
  if (s->n_graphs >= OPD_MAX_GRAPHS)
    return opd__errf(err, OPD_ELIMIT, "this session has %u graphs, the "
                     "limit (destroy one first)", s->n_graphs);
  if (s->graphs == NULL &&
      (s->graphs = calloc(OPD_MAX_GRAPHS, sizeof *s->graphs)) == NULL)
    return opd__errf(err, OPD_ENOMEM, "out of memory");
  g->id = ++srv->next_graph_id;
  g->session = s->id;
  g->refs = 1;
  s->graphs[s->n_graphs++] = g;
  g->next = srv->graphs;
  srv->graphs = g;
  srv->n_graphs++;
  srv->graphs_defined++;
  return 0;
}

static void drop(opd_session_t *s, uint32_t i) {
  opd_graph_t *g = s->graphs[i];
  s->graphs[i] = s->graphs[--s->n_graphs];
  s->srv->arena_epoch++; /* no run cache keeps a run of it */
  opd__graph_unref(s->srv, g);
}

int opd__graph_destroy(opd_session_t *s, uint64_t id, opd_err_t *err) {
  for (uint32_t i = 0; i < s->n_graphs; i++)
    if (s->graphs[i]->id == id) {
      drop(s, i);
      return 0;
    }
  opd_graph_t *g;
  return opd__graph_lookup(s, id, &g, err);
}

void opd__graphs_release_all(opd_session_t *s) {
  while (s->n_graphs > 0) drop(s, s->n_graphs - 1);
  free(s->graphs);
  s->graphs = NULL;
}
