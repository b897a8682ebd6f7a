/* The operator registry: the table of rows the daemon and plugins see.
 *
 * DESIGN
 * kernels/runtime/registry.c lists the built-in rows (one X line per op in
 * OPD_OPS); plugins (kernels/runtime/plugin.c) append theirs at start-up,
 * before anyone is served, and nothing changes the table afterwards, so
 * readers on any thread need no lock. Kernels never include this header:
 * a kernel reads its own row through call->op, never the table.
 */
#ifndef OPD_KERNELS_RUNTIME_REGISTRY_H
#define OPD_KERNELS_RUNTIME_REGISTRY_H

#include "opd/op.h"

#define OPD_MAX_OPS 256
extern const opd_op_def_t *opd__ops[OPD_MAX_OPS]; /* in `opctl ops` order */
extern int opd__n_ops;                           /* rows in use */
extern const int opd__n_builtin_ops;             /* [0, this): built-ins */

/* The op named `name`, or NULL (also for a NULL name). */
const opd_op_def_t *opd__op_find(const char *name);
/* The index in opd__ops of the op named `name`, or -1 if unknown. */
int opd__op_index(const char *name);
/* The name of the op closest to `name` when it looks like a typo of it
 * (at most 2 edits, under a third of the name), else NULL: for "did you
 * mean" in an unknown operator's message. */
const char *opd__op_nearest(const char *name);
/* Appends a row; returns its index, or -1 when the table is full. The row
 * is not checked here (opd__op_validate, kernels/runtime/opcheck.h). */
int opd__op_register(const opd_op_def_t *op);
/* Drops the rows at [n, opd__n_ops) (never built-ins). */
void opd__ops_truncate(int n);

#endif /* OPD_KERNELS_RUNTIME_REGISTRY_H */
