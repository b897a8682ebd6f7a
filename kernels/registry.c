/* The operator table: one row per op, looked up by name.
 *
 * DESIGN
 * Each op lives in kernels/<op>/ and exports `opd__op_<name>`; this file
 * only lists them, in the order of OPD_BUILTIN_OPS (kernel.h), which is the
 * order `opctl ops` shows. Adding an op is one X line there.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kernels/kernel.h"

/* Operators of test builds only (make TEST_OPS=1): see kernels/fault. */
#ifdef OPD_TEST_OPS
#define OPD_TEST_OPS_LIST(X) X(fault)
#else
#define OPD_TEST_OPS_LIST(X)
#endif

#define X(name) extern const opd_op_def_t opd__op_##name;
OPD_BUILTIN_OPS(X)
OPD_TEST_OPS_LIST(X)
#undef X

const opd_op_def_t *const opd__ops[] = {
#define X(name) &opd__op_##name,
    OPD_BUILTIN_OPS(X)
    OPD_TEST_OPS_LIST(X)
#undef X
};

const int opd__n_ops = (int)(sizeof opd__ops / sizeof opd__ops[0]);

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

int opd__kerr(opd_kcall_t *call, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(call->err, sizeof call->err, fmt, ap);
  va_end(ap);
  return code;
}
