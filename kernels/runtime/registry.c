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
  X(hardtanh)      \
  X(hardsigmoid)   \
  X(hardswish)     \
  X(neg)           \
  X(abs)           \
  X(exp)           \
  X(log)           \
  X(sqrt)          \
  X(rsqrt)         \
  X(sin)           \
  X(cos)           \
  X(softmax)       \
  X(layernorm)     \
  X(rmsnorm)       \
  X(matmul)        \
  X(linear)        \
  X(gru_cell)      \
  X(conv2d)        \
  X(nms)           \
  X(permute)       \
  X(reshape)       \
  X(slice)         \
  X(cat)           \
  X(embedding)     \
  X(where)         \
  X(gather)        \
  X(expand)        \
  X(sum)           \
  X(mean)          \
  X(amax)          \
  X(log_softmax)   \
  X(max_pool2d)    \
  X(adaptive_avg_pool2d) \
  X(batch_norm)    \
  X(sdpa)          \
  X(rope)          \
  X(swiglu)        \
  X(eq)            \
  X(ne)            \
  X(lt)            \
  X(le)            \
  X(gt)            \
  X(ge)

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

/* Edit distance (insert, delete, substitute; an adjacent swap counts one)
 * of a and b, both shorter than OPD_MAX_NAME. */
static int distance(const char *a, const char *b) {
  int la = (int)strlen(a), lb = (int)strlen(b);
  int d[OPD_MAX_NAME + 1][OPD_MAX_NAME + 1];
  if (la > OPD_MAX_NAME || lb > OPD_MAX_NAME) return OPD_MAX_NAME;
  for (int i = 0; i <= la; i++) d[i][0] = i;
  for (int j = 0; j <= lb; j++) d[0][j] = j;
  for (int i = 1; i <= la; i++)
    for (int j = 1; j <= lb; j++) {
      int v = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          d[i - 2][j - 2] + 1 < v)
        v = d[i - 2][j - 2] + 1;
      d[i][j] = v;
    }
  return d[la][lb];
}

const char *opd__op_nearest(const char *name) {
  const char *best = NULL;
  int best_d = 0, len = name ? (int)strlen(name) : 0;
  if (len == 0 || len >= OPD_MAX_NAME) return NULL;
  for (int i = 0; i < opd__n_ops; i++) {
    int dd = distance(name, opd__ops[i]->name);
    if (best == NULL || dd < best_d) best = opd__ops[i]->name, best_d = dd;
  }
  /* close enough to be a typo: at most 2 edits, and fewer than a third of
   * the name (a 3-letter name needs 1) */
  return best != NULL && best_d <= 2 && best_d * 3 <= len ? best : NULL;
}

/* Returns the op named `name`, or NULL. */
const opd_op_def_t *opd__op_find(const char *name) {
  int i = opd__op_index(name);
  return i < 0 ? NULL : opd__ops[i];
}
