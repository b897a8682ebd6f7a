/* opd graphs: a model defined once, run as one request (docs/graphs.md).
 * Included by opd/opd.h; part of libopd's API. */
#ifndef OPD_GRAPH_H
#define OPD_GRAPH_H

#include <stdint.h>

#include "opd/opd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- graphs: a model in one request (docs/graphs.md) -------------------- *
 *
 * A definition is built value by value: the graph's inputs first, then its
 * constants (tensors of this connection's arenas, usually published
 * weights it attached), then nodes, each any op of the daemon with its
 * attributes, reading values by id. Each call returns the id of the value
 * it adds (a node: its first output's; its others follow), or a negative
 * OPD_E* code. opd_graph_define sends it once: the daemon checks every
 * node, plans the intermediates and (on CUDA) captures a CUDA graph, and
 * answers a handle of this connection. A run is then one request with the
 * graph's input and output tensors, of the dtypes and shapes defined (the
 * outputs' from opd_graph_def_outputs): no per-node checks, allocation or
 * round trip. Handles end with opd_graph_destroy or the connection. */
typedef struct opd_graph_def opd_graph_def_t;
opd_graph_def_t *opd_graph_def_new(void); /* NULL: out of memory */
void opd_graph_def_free(opd_graph_def_t *g);
int opd_graph_input(opd_graph_def_t *g, const char *name, int32_t dtype,
                    int32_t rank, const int64_t *shape);
int opd_graph_const(opd_graph_def_t *g, const char *name, const opd_tensor_t *t);
/* n_out: the op's number of outputs (1 for every built-in op but nms, 2;
 * `opctl ops` shows it): the daemon refuses another */
int opd_graph_node(opd_graph_def_t *g, const char *op, const int *in,
                   uint32_t n_in, const opd_attr_t *attrs, uint32_t n_attrs,
                   uint32_t n_out);
int opd_graph_output(opd_graph_def_t *g, int value); /* 0 or an error */
/* The class of service of the graph's runs, "latency" or "best-effort",
 * instead of its session's (docs/scheduling.md); 0 or OPD_EINVAL. */
int opd_graph_def_class(opd_graph_def_t *g, const char *cls);
/* device NULL: "cpu"; else "cuda", "cuda:N" or a UUID */
int opd_graph_define(opd_client_t *c, const char *device, opd_graph_def_t *g,
                     uint64_t *graph);
/* after opd_graph_define: the outputs' dtypes and shapes (arena, offset 0) */
int opd_graph_def_outputs(const opd_graph_def_t *g, opd_tensor_t *out,
                          uint32_t cap, uint32_t *n_out);
/* after opd_graph_define: the bytes of device (or host) memory the daemon
 * planned for the intermediates (reused by liveness; a reshape of an
 * intermediate shares its memory) */
int opd_graph_def_temp_bytes(const opd_graph_def_t *g, uint64_t *bytes);
int opd_graph_run(opd_client_t *c, uint64_t graph, const opd_tensor_t *in,
                  uint32_t n_in, const opd_tensor_t *out, uint32_t n_out);
/* flags: 0 or OPD_RUN_ASYNC (answered when enqueued: device runs) */
int opd_graph_submit(opd_client_t *c, uint64_t graph, const opd_tensor_t *in,
                     uint32_t n_in, const opd_tensor_t *out, uint32_t n_out,
                     uint32_t flags, uint64_t *req);
/* a graph run encoded once: opd_run_prepared / opd_submit_prepared it,
 * opd_prepared_free it (the hot path of a server reusing its tensors) */
int opd_graph_prepare(opd_client_t *c, uint64_t graph, const opd_tensor_t *in,
                      uint32_t n_in, const opd_tensor_t *out, uint32_t n_out,
                      uint32_t flags, opd_prepared_t **p);
int opd_graph_destroy(opd_client_t *c, uint64_t graph);

#ifdef __cplusplus
}
#endif

#endif /* OPD_GRAPH_H */
