/* Reading one call of a torch kernel off torch's boxed stack, and its
 * errors: client/torch/call.h says what it gives.
 *
 * DESIGN
 * The stack holds the schema's arguments as StableIValues: tensors as
 * owning handles, Tensor? as a heap box or null, Tensor[], str and int[]
 * as owning handles, the out= tensors of <op>_out after the inputs. Every
 * handle becomes the call's as it is read, so that a kernel that fails
 * half way releases all of them (opd__torch_call_release) before it
 * throws.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/libopd/internal.h"
#include "client/torch/call.h"

#define T opd__torch
#define OPD_STR_(x) #x
#define OPD_STR(x) OPD_STR_(x)

void opd__torch_call_release(call_t *k) {
  for (uint32_t i = 0; i < OPD_MAX_TENSORS; i++) {
    if (k->in[i]) T.del(k->in[i]);
    if (k->tmp[i]) T.del(k->tmp[i]);
    if (k->out[i]) T.del(k->out[i]);
    if (k->otmp[i]) T.del(k->otmp[i]);
    k->in[i] = k->tmp[i] = k->out[i] = k->otmp[i] = NULL;
  }
}

int opd__torch_fail(call_t *k, const top_t *o, const char *fmt, const char *arg) {
  char m[400];
  snprintf(m, sizeof m, fmt, arg);
  snprintf(k->msg, sizeof k->msg, "opd: %s: %s", o->tname, m);
  return -1;
}

/* t's shape as Python prints a tuple: "()", "(4,)", "(3, 4)" */
static const char *shape_str(const opd_tensor_t *t, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "(");
  for (int r = 0; r < t->rank && n < cap; r++)
    n += (size_t)snprintf(buf + n, cap - n, r ? ", %lld" : "%lld",
                          (long long)t->shape[r]);
  if (n < cap) snprintf(buf + n, cap - n, t->rank == 1 ? ",)" : ")");
  return buf;
}

/* "output j has dtype .. and shape ..; the op's output here is .. ..", as
 * opd.torch's Python path words it */
int opd__torch_fail_output(call_t *k, const top_t *o, uint32_t j,
                           const opd_tensor_t *got, const opd_tensor_t *want) {
  char g[160], w[160];
  snprintf(k->msg, sizeof k->msg, "opd: %s: output %u has dtype %s and "
           "shape %s; the op's output here is %s %s", o->tname, j,
           opd_dtype_name(got->dtype), shape_str(got, g, sizeof g),
           opd_dtype_name(want->dtype), shape_str(want, w, sizeof w));
  return -1;
}

/* libopd's last error as the call's message, its op named once (the
 * daemon's messages start with it) */
int opd__torch_fail_opd(call_t *k, const top_t *o) {
  const char *m = opd_last_error();
  size_t n = strlen(o->op);
  if (strncmp(m, o->op, n) == 0 && m[n] == ':')
    snprintf(k->msg, sizeof k->msg, "opd: %s", m);
  else
    snprintf(k->msg, sizeof k->msg, "opd: %s: %s", o->tname, m);
  return -1;
}

/* ---- reading the stack ------------------------------------------------------ */

/* The inputs from stack[*pos..] into k->in (every handle is ours from
 * here): fixed ones (Tensor, or Tensor? boxed or null) or one Tensor[]. */
static int read_inputs(const top_t *o, call_t *k, const siv_t *stack,
                       uint32_t *pos) {
  uint32_t present = 0;
  if (o->variadic) {
    void *h = (void *)(uintptr_t)stack[(*pos)++];
    size_t n = 0;
    if (h != NULL && T.list_size(h, &n) != 0) n = 0;
    for (size_t j = 0; j < n; j++) {
      siv_t e = 0;
      if (T.list_get(h, j, &e) != 0) continue;
      if (j < OPD_MAX_TENSORS) k->in[j] = (ath_t)(uintptr_t)e;
      else if (e != 0) T.del((ath_t)(uintptr_t)e);
    }
    if (h != NULL) T.list_del(h);
    k->n_in = (uint32_t)(n < OPD_MAX_TENSORS ? n : OPD_MAX_TENSORS);
    if (n > OPD_MAX_TENSORS)
      return opd__torch_fail(k, o, "more than %s tensors in the input list",
                  OPD_STR(OPD_MAX_TENSORS));
    return 0;
  }
  for (uint32_t i = 0; i < o->n_in; i++, (*pos)++) {
    if (i < o->min_in) {
      k->in[i] = (ath_t)(uintptr_t)stack[*pos];
    } else if (stack[*pos] != 0) { /* Tensor?: a boxed StableIValue */
      siv_t *box = (siv_t *)(uintptr_t)stack[*pos];
      k->in[i] = (ath_t)(uintptr_t)*box;
      T.op_delete(box);
    }
    if (k->in[i] != NULL) present = i + 1;
  }
  k->n_in = present;
  return 0;
}

/* The attributes from stack[*pos..] into k->attr, their values into s. */
static int read_attrs(const top_t *o, call_t *k, const siv_t *stack,
                      uint32_t *pos, opd_torch_sig_t *s) {
  int rc = 0;
  for (uint32_t a = 0; a < o->n_attrs; a++, (*pos)++) {
    opd_attr_t *at = &k->attr[a];
    siv_t v = stack[*pos];
    at->name = o->attr_name[a];
    at->type = o->attr_type[a];
    switch (o->attr_type[a]) {
    case OPD_ATTR_INT: at->i = (int64_t)v; break;
    case OPD_ATTR_BOOL: at->i = (v & 0xff) != 0; break;
    case OPD_ATTR_FLOAT: memcpy(&at->f, &v, sizeof at->f); break;
    case OPD_ATTR_STR: {
      const char *str = NULL;
      void *h = (void *)(uintptr_t)v;
      if (h != NULL && T.str(h, &str) == 0 && str != NULL)
        snprintf(k->strs[a], sizeof k->strs[a], "%s", str);
      if (h != NULL) T.str_del(h);
      at->s = k->strs[a];
      break;
    }
    case OPD_ATTR_INTS: {
      void *h = (void *)(uintptr_t)v;
      size_t n = 0;
      if (h != NULL && T.list_size(h, &n) == 0) {
        if (n > OPD_MAX_RANK && rc == 0)
          rc = opd__torch_fail(k, o, "attribute %s has more than 8 values", at->name);
        for (size_t j = 0; j < n && j < OPD_MAX_RANK; j++) {
          siv_t e = 0;
          T.list_get(h, j, &e);
          at->ints[j] = (int64_t)e;
        }
        at->n = (int32_t)(n < OPD_MAX_RANK ? n : OPD_MAX_RANK);
      }
      if (h != NULL) T.list_del(h);
      break;
    }
    default: break;
    }
    opd__torch_sig_put(s, &at->i, sizeof at->i);
    opd__torch_sig_put(s, &at->f, sizeof at->f);
    if (at->type == OPD_ATTR_STR) opd__torch_sig_put(s, k->strs[a], strlen(k->strs[a]) + 1);
    if (at->type == OPD_ATTR_INTS)
      opd__torch_sig_put(s, at->ints, sizeof at->ints[0] * (size_t)at->n);
  }
  return rc;
}

int opd__torch_call_read(const top_t *o, call_t *k, const siv_t *stack,
                         uint64_t n_args, uint64_t n_ret, opd_torch_sig_t *s) {
  uint32_t pos = 0;
  uint64_t given = o->kind == OPD_TORCH_OUT ? o->n_out : 0;
  if (n_args != (o->variadic ? 1 : o->n_in) + given + o->n_attrs ||
      n_ret != (o->kind == OPD_TORCH_FUNCTIONAL ? o->n_out : 0)) {
    opd__torch_fail(k, o, "%s", "the schema torch calls with is not the one registered");
    return -2;
  }
  int rc = read_inputs(o, k, stack, &pos);
  for (uint32_t j = 0; j < given; j++) /* out=: owned handles, like inputs */
    k->out[j] = (ath_t)(uintptr_t)stack[pos++];
  if (read_attrs(o, k, stack, &pos, s) != 0 && rc == 0) rc = -1;
  return rc;
}

int opd__torch_plan_of(top_t *o, opd_torch_plans_t *pl, call_t *k,
                       opd_client_t *c, const opd_torch_sig_t *s,
                       const opd_tensor_t *ins, opd_tensor_t *outs,
                       uint32_t *n_out, int *ran) {
  if (opd__torch_plan_find(pl, s, outs, n_out, ran)) return 0;
  *ran = 0;
  if (opd_infer(c, o->op, ins, k->n_in, k->attr, o->n_attrs, outs,
                OPD_MAX_TENSORS, n_out) != 0)
    return opd__torch_fail_opd(k, o);
  opd__torch_plan_store(pl, s, outs, *n_out);
  return 0;
}
