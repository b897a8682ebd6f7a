/* Graphs: the messages (define.c, grun.c) and their lifetime (graph.c). */
#ifndef OPD_GRAPH_TABLE_H
#define OPD_GRAPH_TABLE_H

#include <msgpack.h>

#include "common/wire.h" /* opd_desc_t */
#include "daemon/types.h"

/* ---- graph.c: tables and references ---------------------------------- */

/* The session's graph of that id, or NULL. */
opd_graph_t *opd__graph_find(opd_session_t *s, uint64_t id);
/* ... or OPD_ENOENT with err telling another session's graph from one
 * that does not exist. */
int opd__graph_lookup(opd_session_t *s, uint64_t id, opd_graph_t **g,
                      opd_err_t *err);
/* A checked graph into the session's table (its id given here, one
 * reference): 0, or OPD_ELIMIT / OPD_ENOMEM (the graph is the caller's). */
int opd__graph_add(opd_session_t *s, opd_graph_t *g, opd_err_t *err);
/* GRAPH_DESTROY: the table's reference goes. */
int opd__graph_destroy(opd_session_t *s, uint64_t id, opd_err_t *err);
/* A job's reference goes (the last frees the graph). */
void opd__graph_unref(opd_server_t *srv, opd_graph_t *g);
/* A graph never added (define.c's failures) or whose last reference went. */
void opd__graph_free(opd_graph_t *g);
/* The session's end: every table reference goes. */
void opd__graphs_release_all(opd_session_t *s);

/* ---- define.c, grun.c: the messages ----------------------------------- */

/* A GRAPH_DEFINE body checked and planned into *out, not yet in a table
 * (0), or an error code with err set; *out, when set, is the caller's to
 * free either way (opd__graph_free) or to add (opd__graph_add). */
int opd__graph_build(opd_session_t *s, const msgpack_object *body,
                     opd_graph_t **out, opd_err_t *err);
/* GRAPH_DEFINE and GRAPH_DESTROY: replied here. */
void opd__graph_define(const opd_req_t *r, const msgpack_object *body);
void opd__graph_destroy_request(const opd_req_t *r, const msgpack_object *body);
/* One tensor of a graph's definition or run (grun.c): decoded, in an
 * arena of this session, inside it, C-contiguous; *view its view (data
 * set), *extent its bytes. 0, or an error code with err set (the message
 * names no tensor: the caller prefixes it). */
int opd__graph_tensor(opd_session_t *s, const msgpack_object *o,
                      opd_arena_t **arena, opd_desc_t *d, uint64_t *extent,
                      opd_tview_t *view, opd_err_t *err);
/* A RUN naming "graph": its tensors checked against the graph's, then a
 * job queued (0), or an error code with err set (the caller replies). */
int opd__graph_run(const opd_req_t *r, const msgpack_object *body,
                   opd_job_t *job, opd_err_t *err);

#endif /* OPD_GRAPH_TABLE_H */
