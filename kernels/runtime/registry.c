/* The operator table: one row per op, looked up by name.
 *
 * DESIGN
 Each op exports its row `opd__op_<name>` (include/opd/op.h: schema, CPU
 * and CUDA kernels, workspace, flags), from its folder kernels/<op>/ or,
 * for an op of a family that shares one body (binary, unary, norm), from
 * its family's table kernels/<family>/ops.c; this file only lists them, in
 * the order `opctl ops` shows. Adding an op is its row (a folder, or one
 * row of a family's table) plus one X line in OPD_OPS. This list is the only place that names
 * the built-in ops: generic code reads rows, tests iterate opd__ops (and
 * tests that cannot link it read the X lines of OPD_OPS in this file).
 *
 * The table is extendable at start-up: plugins
 * (kernels/runtime/plugin.c) append their rows with opd__op_register
 * before the daemon serves anyone, and nothing changes it afterwards, so readers on any thread need no lock.
 * Built-ins come first, at indexes [0, opd__n_builtin_ops).
 */
#include "kernels/runtime/registry.h"

#include <string.h>

/* The built-in operators, one X per row (kernels/<op>/op.c or a row of
 * kernels/<family>/ops.c). */
#define OPD_OPS(X) \
  X(noop)          \
  X(copy)          \
  X(add)           \
  X(mul)           \
  X(sub)           \
  X(div)           \
  X(relu)          \
  X(gelu)          \
  X(silu)          \
  X(sigmoid)       \
  X(tanh)          \
  X(softmax)       \
  X(layernorm)     \
  X(rmsnorm)       \
  X(matmul)        \
  X(linear)        \
  X(gru_cell)      \
  X(conv2d)        \
  X(nms)

/* Operators of test builds only (make TEST_OPS=1): see kernels/fault and
 * kernels/hostsync. */
#ifdef OPD_TEST_OPS
#define OPD_TEST_OPS_LIST(X) X(fault) X(hostsync) X(hostsync_nocap)
#else
#define OPD_TEST_OPS_LIST(X)
#endif

#define X(name) extern const opd_op_def_t opd__op_##name;
OPD_OPS(X)
OPD_TEST_OPS_LIST(X)
#undef X

#define X(name) +1
enum { N_BUILTIN = 0 OPD_OPS(X) OPD_TEST_OPS_LIST(X) };
#undef X

const opd_op_def_t *opd__ops[OPD_MAX_OPS] = {
#define X(name) &opd__op_##name,
    OPD_OPS(X)
    OPD_TEST_OPS_LIST(X)
#undef X
};

int opd__n_ops = N_BUILTIN;
const int opd__n_builtin_ops = N_BUILTIN;

int opd__op_register(const opd_op_def_t *op) {
  if (opd__n_ops >= OPD_MAX_OPS) return -1;
  opd__ops[opd__n_ops] = op;
  return opd__n_ops++;
}

void opd__ops_truncate(int n) {
  if (n < N_BUILTIN) n = N_BUILTIN;
  for (int i = n; i < opd__n_ops; i++) opd__ops[i] = NULL;
  if (n < opd__n_ops) opd__n_ops = n;
}

/* Returns the index in opd__ops of the op named `name`, or -1. */
int opd__op_index(const char *name) {
  if (!name) return -1;
  for (int i = 0; i < opd__n_ops; i++)
    if (strcmp(opd__ops[i]->name, name) == 0) return i;
  return -1;
}

/* Returns the op named `name`, or NULL. */
const opd_op_def_t *opd__op_find(const char *name) {
  int i = opd__op_index(name);
  return i < 0 ? NULL : opd__ops[i];
}
