/* libFuzzer target: graph definitions, from a GRAPH_DEFINE body to a
 * checked, planned graph (daemon/graph/define.c opd__graph_build), run
 * once on the CPU when it is small.
 *
 * DESIGN
 * Input: one msgpack payload, decoded as a request body is
 * (opd__mp_decode), then built by the daemon's own code against a session
 * made here that holds one host arena (id 1, 64 KiB of a float pattern)
 * on a server with no CUDA device. A refusal must carry a message. A
 * built graph must hold the invariants its runs rely on: every node reads
 * only values made by earlier nodes (or inputs and constants), every
 * intermediate lies inside the planned buffer and no two intermediates
 * alive at a common step share a byte, each output is made by a node;
 * then, when its inputs, outputs and intermediates total at most 1 MiB,
 * its nodes run on the CPU kernels against fresh buffers (ASan watches
 * every byte they touch). Freeing it must give the arena's references
 * back.
 */
#include <msgpack.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"
#include "daemon/graph/graph.h"
#include "daemon/graph/table.h"
#include "kernels/runtime/exec.h"

#define FUZZ_TARGET "fuzz_graph"
#include "tests/fuzz/fuzz.h"

#define ARENA (64 * 1024)

static opd_server_t srv;
static opd_session_t sess;
static opd_arena_t arena;
static opd_arena_t *table[1];

static void setup(void) {
  srv.cfg.limits.max_session_bytes = 1ull << 30;
  sess.srv = &srv;
  sess.id = 1;
  arena.id = 1;
  arena.size = ARENA;
  arena.device = -1;
  arena.refs = 1;
  arena.srv = &srv;
  arena.base = aligned_alloc(64, ARENA);
  float *f = arena.base;
  for (int i = 0; i < ARENA / 4; i++) f[i] = (float)(i % 13) - 6.0f;
  table[0] = &arena;
  sess.arenas = table;
  sess.n_arenas = 1;
}

static void check(const opd_graph_t *g) {
  char *made = calloc((size_t)g->n_vals + 1, 1);
  for (int v = 0; v < g->n_in + g->n_const; v++) made[v] = 1;
  for (int i = 0; i < g->n_nodes; i++) {
    const opd_gnode_t *n = &g->nodes[i];
    for (int k = 0; k < n->call.n_in; k++)
      CHECK(made[n->in[k]], "node %d reads value %d before it is made", i, n->in[k]);
    for (int k = 0; k < n->call.n_out; k++) made[n->out[k]] = 1;
  }
  for (int k = 0; k < g->n_out; k++)
    CHECK(g->vals[g->out_val[k]].kind == OPD_GV_OUTPUT && g->vals[g->out_val[k]].producer >= 0,
          "output %d is not made by a node", k);
  for (int v = 0; v < g->n_vals; v++) {
    const opd_gval_t *a = &g->vals[v];
    if (a->kind != OPD_GV_TEMP) continue;
    CHECK(a->offset + a->bytes <= g->temp_bytes, "value %d outside the buffer", v);
    for (int w = v + 1; w < g->n_vals; w++) {
      const opd_gval_t *b = &g->vals[w];
      if (b->kind != OPD_GV_TEMP || a->bytes == 0 || b->bytes == 0) continue;
      int live = a->first <= b->last && b->first <= a->last;
      int share = a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
      CHECK(!(live && share), "values %d and %d share bytes while both live", v, w);
    }
  }
  free(made);
}

/* The nodes on the CPU, on fresh input and output buffers. */
static void run(opd_graph_t *g) {
  uint64_t total = g->temp_bytes;
  void *in[OPD_MAX_TENSORS] = {0}, *out[OPD_MAX_TENSORS] = {0};
  for (int k = 0; k < g->n_in; k++) total += g->vals[g->in_val[k]].bytes;
  for (int k = 0; k < g->n_out; k++) total += g->vals[g->out_val[k]].bytes;
  if (total > (1u << 20)) return;
  for (int k = 0; k < g->n_in; k++) {
    uint64_t b = g->vals[g->in_val[k]].bytes;
    in[k] = calloc(1, b ? b : 1);
  }
  for (int k = 0; k < g->n_out; k++) {
    uint64_t b = g->vals[g->out_val[k]].bytes;
    out[k] = malloc(b ? b : 1);
  }
  opd__graph_bind(g, in, out);
  for (int i = 0; i < g->n_nodes; i++) {
    opd_kcall_t *c = &g->nodes[i].call;
    c->exec = &opd__exec_serial;
    (void)(c->op->cpu_fast ? c->op->cpu_fast : c->op->cpu_ref)(c);
  }
  for (int k = 0; k < g->n_in; k++) free(in[k]);
  for (int k = 0; k < g->n_out; k++) free(out[k]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int ready;
  if (!ready) setup(), ready = 1;
  opd_mp_arena_t mp;
  msgpack_object body;
  char why[200];
  opd__mp_arena_init(&mp);
  if (opd__mp_decode(&mp, data, size, OPD_MAX_DEPTH, &body, why, sizeof why) == 0 &&
      body.type == MSGPACK_OBJECT_MAP) {
    opd_graph_t *g = NULL;
    opd_err_t err = {.code = 0, .msg = ""};
    int rc = opd__graph_build(&sess, &body, &g, &err);
    if (rc != 0) {
      CHECK(err.msg[0] != '\0', "refused (%d) without a message", rc);
    } else {
      check(g);
      run(g);
    }
    opd__graph_free(g);
    CHECK(arena.refs == 1, "the arena has %d references after the graph went",
          arena.refs);
  }
  opd__mp_arena_destroy(&mp);
  return 0;
}
