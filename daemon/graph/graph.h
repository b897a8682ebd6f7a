/* A graph: ops checked once, run as one job (daemon/graph/).
 *
 * DESIGN
 * GRAPH_DEFINE (define.c) turns a definition into this structure: values
 * (the graph's inputs, its constants, each node's outputs) with their
 * dtypes and shapes, and nodes in execution order, each holding its
 * kernel call already checked (opd_kcall_t: views, attributes resolved).
 * A value is a run's input or output tensor, a constant (a view into an
 * arena the graph holds a reference on), or an intermediate at an offset
 * of one buffer (`temp`, planned by liveness: two intermediates share
 * bytes only when no step needs both). A run (grun.c) checks only its
 * own tensors against the declared ones and is one job (job->graph); the
 * backend that runs it points the node calls at the run's tensors
 * (opd__graph_bind: nothing changes when they are the ones of the last
 * run, the usual server loop) and executes them back to back (CPU:
 * backend/cpu.c) or launches the captured CUDA graph (backend/cuda/).
 *
 * A graph is reference counted: its session's table holds one reference,
 * each job running it one. It belongs to the session that defined it
 * (session id); ids are daemon-wide and never reused, and the server
 * keeps every live graph on one list so that another session's id is
 * told apart from an unknown one. Fields are written by define.c, except
 * the binding (bound_*, the node calls' data) and the learnt cost, which
 * the backend running the graph's job writes (one job of a session runs
 * at a time, so never two at once), and `backend`, the device backend's.
 */
#ifndef OPD_DAEMON_GRAPH_H
#define OPD_DAEMON_GRAPH_H

#include <stdint.h>
#include <stdio.h>

#include "daemon/types.h"
#include "kernels/runtime/registry.h"

enum { OPD_GV_INPUT = 0, OPD_GV_CONST, OPD_GV_TEMP, OPD_GV_OUTPUT };

typedef struct opd_gval {
  int kind;                      /* OPD_GV_* */
  int index;                     /* INPUT, OUTPUT: the run's tensor k; CONST: k */
  int producer;                  /* the node (definition order) making it; -1 */
  int first, last;               /* execution steps that make it and last read it */
  int view_of;                   /* TEMP: the value whose memory it shares
                                    (a VIEW op's output), -1 none */
  uint64_t offset;               /* TEMP: in temp */
  uint64_t bytes;
  opd_tview_t view;              /* dtype, shape, contiguous strides; data set
                                    for CONST (host or device pointer) */
} opd_gval_t;

typedef struct opd_gnode {
  int op_index;                  /* into opd__ops */
  int def;                       /* its place in the definition (messages) */
  int in[OPD_MAX_TENSORS];       /* value ids */
  int out[OPD_MAX_TENSORS];
  opd_kcall_t call;              /* checked; INPUT/OUTPUT data bound per run */
} opd_gnode_t;

/* One place a run's tensor goes into: node `node`'s input (or output)
 * slot `slot` is the run's input (or output) k. */
typedef struct opd_gbind {
  uint16_t node;
  uint8_t slot, node_out, run_out, k;
} opd_gbind_t;

struct opd_graph {
  uint64_t id;                   /* daemon-wide, never reused */
  uint64_t session;              /* the defining session's id */
  opd_server_t *srv;
  opd_graph_t *next;             /* the server's list */
  int refs;                      /* session table + jobs */
  int device;                    /* -1: cpu; else a CUDA device */
  char name[OPD_MAX_NAME];
  int n_in, n_out, n_const, n_vals, n_nodes, n_binds;
  int in_val[OPD_MAX_TENSORS], out_val[OPD_MAX_TENSORS];
  opd_gval_t *vals;
  opd_gnode_t *nodes;            /* in execution order */
  opd_gbind_t *binds;
  opd_arena_t **arenas;          /* the constants' arenas, one reference each */
  int n_arenas;
  uint64_t temp_bytes;           /* intermediates: planned size */
  void *temp;                    /* ... their buffer (the backend's memory) */
  uint64_t bytes;                /* what the graph holds: counted in its
                                    session's bytes while it lives */
  void *bound_in[OPD_MAX_TENSORS], *bound_out[OPD_MAX_TENSORS];
  int bound;                     /* the node calls hold bound_* */
  uint64_t cost_ns;              /* cpu: a run's kernel time, a moving mean */
  int cls;                       /* its runs' class: 0 the session's,
                                    1 best-effort, 2 latency (sched.h) */
  void *backend;                 /* the device backend's (CUDA graph) */
};

/* The row graph runs carry as their op (call.op: "graph"), so that
 * messages, stats and metrics name them; never in the registry. */
extern const opd_op_def_t opd__graph_op;
/* The op_stats slot of graph runs: past the registry's rows. */
static inline int opd__graph_stats_slot(void) { return opd__n_ops; }

/* "cpu" or "cuda:N" into buf. */
static inline const char *opd__graph_devname(int dev, char *buf, size_t cap) {
  if (dev < 0) return "cpu";
  snprintf(buf, cap, "cuda:%d", dev);
  return buf;
}

/* Points the node calls at a run's tensors (data pointers in[k], out[k]);
 * returns 1 if anything changed since the last run, 0 if not. */
static inline int opd__graph_bind(opd_graph_t *g, void *const *in, void *const *out) {
  int same = g->bound;
  for (int k = 0; same && k < g->n_in; k++) same = g->bound_in[k] == in[k];
  for (int k = 0; same && k < g->n_out; k++) same = g->bound_out[k] == out[k];
  if (same) return 0;
  for (int i = 0; i < g->n_binds; i++) {
    const opd_gbind_t *b = &g->binds[i];
    opd_kcall_t *c = &g->nodes[b->node].call;
    opd_tview_t *v = b->node_out ? &c->out[b->slot] : &c->in[b->slot];
    v->data = b->run_out ? out[b->k] : in[b->k];
  }
  for (int k = 0; k < g->n_in; k++) g->bound_in[k] = in[k];
  for (int k = 0; k < g->n_out; k++) g->bound_out[k] = out[k];
  g->bound = 1;
  return 1;
}

#endif /* OPD_DAEMON_GRAPH_H */
