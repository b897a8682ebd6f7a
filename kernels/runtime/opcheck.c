/* Checks of an operator row and of what its functions return, the same
 * for built-ins and plugins.
 *
 * DESIGN
 * A plugin's row is data the daemon did not write, so before the row is
 * registered opd__op_validate checks every field generic code relies on
 * (names, counts within the arrays, dtype masks, attribute defaults, the
 * functions that must exist, flags); the built-ins pass the same check in
 * tests/unit. At run time the daemon does not trust a shape rule either:
 * opd__op_shape checks each output it computed (a dtype, a rank that fits
 * the arrays, extents >= 0, a byte size without overflow) before anything
 * is sized or compared from it, and opd__kernel_rc turns a kernel's return
 * value that is not an OPD_E* code into a backend error, so a plugin's
 * mistake becomes an error reply naming the op, never a wrong allocation
 * or a reply code a client cannot read.
 */
#include <stdio.h>
#include <string.h>

#include "kernels/runtime/opcheck.h"

#include "kernels/kernel.h" /* opd__kerr */

#define ERR(...) (snprintf(err, errlen, __VA_ARGS__), OPD_EINVAL)

/* every dtype bit the protocol defines */
static const uint32_t valid_dtypes = 0
#define X(name, val, size, str) | (1u << val)
    OPD_DTYPE_MAP(X)
#undef X
    ;

static const uint32_t known_flags =
    OPD_OPF_STRIDED | OPD_OPF_INPLACE | OPD_OPF_CUDA_BLASLT |
    OPD_OPF_NO_CAPTURE | OPD_OPF_VIEW | OPD_OPF_ELEMENTWISE |
    OPD_OPF_CPU_STRIDED | OPD_OPF_STEADY_COST;

static int dtype_size(int dtype) {
  switch (dtype) {
#define X(name, val, size, str) \
  case val: return size;
    OPD_DTYPE_MAP(X)
#undef X
  }
  return 0;
}

/* [a-z][a-z0-9_]*, shorter than OPD_MAX_NAME: also a Python identifier
 * (torch.ops.opd.<name>). */
static int good_name(const char *s) {
  if (s == NULL || !(s[0] >= 'a' && s[0] <= 'z')) return 0;
  size_t n = strnlen(s, OPD_MAX_NAME);
  if (n >= OPD_MAX_NAME) return 0;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
          s[i] == '_'))
      return 0;
  return 1;
}

static int in_choices(const char *choices, const char *s) {
  size_t n = strlen(s);
  for (const char *p = choices; *p;) {
    const char *bar = strchr(p, '|');
    size_t w = bar ? (size_t)(bar - p) : strlen(p);
    if (w == n && strncmp(p, s, n) == 0) return 1;
    p += w + (bar != NULL);
  }
  return 0;
}

static int check_io(const opd_io_spec_t *io, int n, const char *what,
                    int named_first_only, char *err, size_t errlen) {
  for (int i = 0; i < n; i++) {
    /* a variadic op's later inputs may reuse the last named spec */
    if (io[i].name == NULL && named_first_only && i > 0) continue;
    if (io[i].name == NULL || io[i].name[0] == '\0' ||
        strnlen(io[i].name, OPD_MAX_NAME) >= OPD_MAX_NAME)
      return ERR("%s %d has no name (or one of %d bytes or more)", what, i,
                 OPD_MAX_NAME);
    if ((io[i].dtypes & valid_dtypes) == 0)
      return ERR("%s %d (%s) accepts no dtype (dtypes mask 0x%x)", what, i,
                 io[i].name, io[i].dtypes);
  }
  return 0;
}

static int check_attr(const opd_attr_spec_t *a, int i, char *err,
                      size_t errlen) {
  if (!good_name(a->name))
    return ERR("attribute %d has an invalid name \"%.64s\" (expected "
               "[a-z][a-z0-9_]*, under %d bytes)",
               i, a->name ? a->name : "(null)", OPD_MAX_NAME);
  if (a->type < OPD_ATTR_INT || a->type > OPD_ATTR_INTS)
    return ERR("attribute \"%s\" has unknown type %d", a->name, a->type);
  if (a->choices != NULL && a->type != OPD_ATTR_STR)
    return ERR("attribute \"%s\": choices are for str attributes only",
               a->name);
  if (a->required) return 0;
  if (a->def.type != a->type)
    return ERR("attribute \"%s\": its default has type %d, not the "
               "attribute's type %d",
               a->name, a->def.type, a->type);
  if (a->type == OPD_ATTR_INTS && (a->def.n < 1 || a->def.n > OPD_MAX_RANK))
    return ERR("attribute \"%s\": its default holds %d ints (1 to %d)",
               a->name, a->def.n, OPD_MAX_RANK);
  if (a->type == OPD_ATTR_STR) {
    if (memchr(a->def.s, '\0', sizeof a->def.s) == NULL)
      return ERR("attribute \"%s\": its default is not NUL-terminated",
                 a->name);
    if (a->choices != NULL && !in_choices(a->choices, a->def.s))
      return ERR("attribute \"%s\": its default \"%s\" is not one of %s",
                 a->name, a->def.s, a->choices);
  }
  return 0;
}

int opd__op_validate(const opd_op_def_t *op, char *err, size_t errlen) {
  int rc;
  if (op == NULL) return ERR("a row is NULL");
  if (!good_name(op->name))
    return ERR("op name \"%.64s\" is invalid (expected [a-z][a-z0-9_]*, "
               "under %d bytes)",
               op->name ? op->name : "(null)", OPD_MAX_NAME);
  if (op->n_in_min < 0 || op->n_in_min > op->n_in_max ||
      op->n_in_max > OPD_MAX_TENSORS)
    return ERR("%s: n_in_min %d and n_in_max %d must satisfy 0 <= min <= "
               "max <= %d",
               op->name, op->n_in_min, op->n_in_max, OPD_MAX_TENSORS);
  if (op->n_out < 0 || op->n_out > OPD_MAX_TENSORS)
    return ERR("%s: n_out %d is outside 0..%d", op->name, op->n_out,
               OPD_MAX_TENSORS);
  if (op->n_in_min + op->n_out > OPD_MAX_TENSORS)
    return ERR("%s: %d required inputs and %d outputs exceed %d tensors per "
               "run",
               op->name, op->n_in_min, op->n_out, OPD_MAX_TENSORS);
  char sub[200];
  if ((rc = check_io(op->in, op->n_in_max, "input", 1, sub, sizeof sub)) ||
      (rc = check_io(op->out, op->n_out, "output", 0, sub, sizeof sub)))
    return ERR("%s: %s", op->name, sub);
  if (op->n_attrs < 0 || op->n_attrs > OPD_MAX_ATTRS)
    return ERR("%s: n_attrs %d is outside 0..%d", op->name, op->n_attrs,
               OPD_MAX_ATTRS);
  for (int i = 0; i < op->n_attrs; i++) {
    if ((rc = check_attr(&op->attrs[i], i, sub, sizeof sub)) != 0)
      return ERR("%s: %s", op->name, sub);
    for (int j = 0; j < i; j++)
      if (strcmp(op->attrs[j].name, op->attrs[i].name) == 0)
        return ERR("%s: attribute \"%s\" is listed twice", op->name,
                   op->attrs[i].name);
  }
  if (op->flags & ~known_flags)
    return ERR("%s: unknown flags 0x%x", op->name, op->flags & ~known_flags);
  if (op->shape == NULL) return ERR("%s: no shape rule (shape is NULL)", op->name);
  if (op->cpu_ref == NULL)
    return ERR("%s: no CPU reference kernel (cpu_ref is NULL)", op->name);
  if (op->cpu_dtypes & ~valid_dtypes)
    return ERR("%s: cpu_dtypes 0x%x has unknown dtype bits", op->name,
               op->cpu_dtypes);
  if (op->cuda != NULL && (op->cuda_dtypes & valid_dtypes) == 0)
    return ERR("%s: a CUDA kernel that takes no dtype (cuda_dtypes 0x%x)",
               op->name, op->cuda_dtypes);
  return 0;
}

#undef ERR

int opd__op_shape(opd_kcall_t *call, opd_tshape_t *out) {
  const opd_op_def_t *op = call->op;
  for (int i = 0; i < op->n_out; i++) out[i].dtype = 0, out[i].rank = -1;
  call->err[0] = '\0';
  int rc = op->shape(call, out);
  call->err[sizeof call->err - 1] = '\0';
  if (rc != 0) return opd__kernel_rc(call, rc);
  for (int i = 0; i < op->n_out; i++) {
    const char *name = op->out[i].name;
    int size = out[i].dtype > 0 && out[i].dtype < OPD_DTYPE_COUNT_
                   ? dtype_size(out[i].dtype)
                   : 0;
    if (size == 0)
      return opd__kerr(call, OPD_EINTERNAL,
                       "its shape rule gave output %d (%s) dtype %d, which "
                       "is not a dtype; refused",
                       i, name, out[i].dtype);
    if (out[i].rank < 0 || out[i].rank > OPD_MAX_RANK)
      return opd__kerr(call, OPD_EINTERNAL,
                       "its shape rule gave output %d (%s) rank %d, outside "
                       "0..%d; refused",
                       i, name, out[i].rank, OPD_MAX_RANK);
    int64_t bytes = size;
    for (int d = 0; d < out[i].rank; d++) {
      if (out[i].shape[d] < 0)
        return opd__kerr(call, OPD_EINTERNAL,
                         "its shape rule gave output %d (%s) the negative "
                         "extent %lld in dim %d; refused",
                         i, name, (long long)out[i].shape[d], d);
      if (__builtin_mul_overflow(bytes, out[i].shape[d], &bytes))
        return opd__kerr(call, OPD_EOVERFLOW,
                         "its shape rule gave output %d (%s) a size that "
                         "overflows 64 bits (dim %d is %lld); refused",
                         i, name, d, (long long)out[i].shape[d]);
    }
  }
  return 0;
}

int opd__kernel_rc(opd_kcall_t *call, int rc) {
  call->err[sizeof call->err - 1] = '\0';
  if (rc == 0 || (rc < 0 && rc >= OPD_ERRNO_LAST_)) return rc;
  char was[sizeof call->err];
  memcpy(was, call->err, sizeof was);
  opd__kerr(call, OPD_EBACKEND, "returned %d, which is not an OPD_E* code%s%.200s",
            rc, was[0] ? ": " : "", was);
  return OPD_EBACKEND;
}
