/* torch.ops.opd.* on CUDA tensors with no Python in the call: kernels for
 * torch's dispatcher written in C against torch's stable C ABI (shims.c).
 *
 * DESIGN
 * opd.torch (python/opd/torch.py) defines every operator of the daemon in
 * torch's dispatcher with a Python implementation, which serves CPU
 * tensors and torch.compile's fake tensors. On CUDA a call through Python
 * cost some 25 us per op (bench/probe_calls.py; torch's own layer_norm
 * takes 17 in all), so the CUDA kernel is C (torch >= 2.10): opd.torch
 * registers one (opd_torch_kernel) for every form of every op, the
 * functional one, the in-place <op>_ (the output written over input 0)
 * and <op>_out (into given tensors), with fixed or variadic (Tensor[])
 * inputs; torch calls it for CUDA tensors (a backend key's kernel takes
 * precedence over the Python one). It is the only CUDA path: with an
 * older torch opd.torch refuses CUDA tensors naming the version needed.
 *
 * A call: the boxed stack holds the schema's arguments as StableIValues
 * (tensors as owning handles, Tensor? as a heap box or null, Tensor[],
 * str and int[] as owning handles; the out= tensors of <op>_out after the
 * inputs): the kernel reads each, keys a plan cache per form by the
 * device, the inputs' dtypes and shapes and the attribute values (the
 * first call of a key asks the daemon's shape rule, opd_infer, as the
 * Python path does), allocates the outputs with torch's caching allocator
 * on the tensors' device (aoti_torch_empty_strided) or takes the given
 * ones (checked against the shape rule: dtype, shape, device), takes
 * torch's current stream and makes one opd_run_stream_ptrs call: the run
 * ordered with that stream on the GPU, answered once the daemon enqueued
 * it (docs/async.md); once a signature's run was answered, its later
 * calls are opd_enqueue_stream_ptrs, which does not wait for the answer
 * (under MPS: a poll kernel on torch's stream waits for the daemon's flag
 * word), so a refusal of those is raised by a later call instead.
 * A strided tensor (a transpose, a slice, an expand) goes as it is, its
 * strides in its descriptor: the daemon copies it around a kernel that
 * needs a contiguous one, in the same run (daemon/run/strided.h), and
 * writes a strided out= (or an in-place form's strided input) through a
 * contiguous temporary of its own. Only with a torch that lacks
 * aoti_torch_get_strides is a non-contiguous input made contiguous here
 * (aten::contiguous through the dispatcher), and a non-contiguous output
 * written as a contiguous temporary copied back (aten::copy_).
 *
 * Errors are thrown (opd__torch_throw) once the call released what it
 * holds: torch raises them as RuntimeError("opd: layernorm: input 0 has
 * ...").
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/libopd/internal.h"
#include "client/torch/plans.h"
#include "client/torch/shims.h"

#define T opd__torch
#define MAX_OPS 160       /* kernels one process registers */
#define FORM_KIND 0x3     /* OPD_TORCH_FUNCTIONAL, _INPLACE or _OUT */
#define OPD_STR_(x) #x
#define OPD_STR(x) OPD_STR_(x)

/* ---- kernels and their plans ---------------------------------------------- */

typedef struct top {
  char op[64];          /* the daemon's operator */
  char tname[72];       /* the torch name: op, op + "_" or op + "_out" */
  int kind;             /* OPD_TORCH_FUNCTIONAL, _INPLACE or _OUT */
  int variadic;         /* the inputs are one Tensor[] */
  uint32_t n_in, min_in, n_attrs, n_out;
  char attr_name[OPD_MAX_ATTRS][64];
  int32_t attr_type[OPD_MAX_ATTRS]; /* OPD_ATTR_* */
  opd_torch_plans_t plans; /* the outputs per call signature */
} top_t;

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER; /* ops, n_ops, lib */
static top_t *ops[MAX_OPS];
static int n_ops;
static void *lib; /* the torch::Library of the CUDA kernels */

/* one call's state, released before returning or throwing */
typedef struct call {
  ath_t in[OPD_MAX_TENSORS];   /* owned handles of the inputs */
  ath_t tmp[OPD_MAX_TENSORS];  /* contiguous copies made here */
  ath_t out[OPD_MAX_TENSORS];  /* outputs: made here, or given (out=) */
  ath_t otmp[OPD_MAX_TENSORS]; /* temporaries of non-contiguous outputs */
  uint32_t n_in, n_out;
  char strs[OPD_MAX_ATTRS][128];
  opd_attr_t attr[OPD_MAX_ATTRS];
  char msg[512];
} call_t;

/* a tensor handle a batch kept, dropped when it joins (opd__batch_keep) */
static void drop_handle(void *h) { T.del((ath_t)h); }

static void call_release(call_t *k) {
  for (uint32_t i = 0; i < OPD_MAX_TENSORS; i++) {
    if (k->in[i]) T.del(k->in[i]);
    if (k->tmp[i]) T.del(k->tmp[i]);
    if (k->out[i]) T.del(k->out[i]);
    if (k->otmp[i]) T.del(k->otmp[i]);
    k->in[i] = k->tmp[i] = k->out[i] = k->otmp[i] = NULL;
  }
}

static int fail(call_t *k, const top_t *o, const char *fmt, const char *arg) {
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
static int fail_output(call_t *k, const top_t *o, uint32_t j,
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
static int fail_opd(call_t *k, const top_t *o) {
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
      return fail(k, o, "more than %s tensors in the input list",
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
          rc = fail(k, o, "attribute %s has more than 8 values", at->name);
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

/* Tensor h as opd describes it (dtype, rank, shape, and its strides when
 * it is not contiguous and torch gives them) into *t, its CUDA device into
 * *dev and into *contig whether the daemon takes it as it is (contiguous,
 * or its strides described); what = "input 0", "output 1", ... for the
 * error. */
static int describe(call_t *k, const top_t *o, ath_t h, const char *what,
                    opd_tensor_t *t, int *dev, bool *contig) {
  int32_t dt = 0, dty = 0, di = 0;
  int64_t rank = 0, *sz = NULL;
  char m[96];
  if (T.dev_type(h, &dty) || T.dev_index(h, &di) || T.dtype(h, &dt) ||
      T.dim(h, &rank) || T.sizes(h, &sz) || T.contiguous(h, contig))
    return fail(k, o, "%s: torch did not describe it", what);
  if (dty != T.cuda) {
    snprintf(m, sizeof m, "%s is not a CUDA tensor (the run is on CUDA: "
             "every tensor must be on the same CUDA device)", what);
    return fail(k, o, "%s", m);
  }
  if (*dev < 0) {
    *dev = di;
  } else if (di != *dev) {
    snprintf(m, sizeof m, "%s is on another CUDA device than input 0", what);
    return fail(k, o, "%s", m);
  }
  int code = opd__torch_dtype(dt);
  if (code == 0) return fail(k, o, "%s has a dtype opd does not take", what);
  if (rank > OPD_MAX_RANK) return fail(k, o, "%s has a rank over 8", what);
  memset(t, 0, sizeof *t);
  t->dtype = code;
  t->rank = (int32_t)rank;
  for (int64_t d = 0; d < rank; d++) t->shape[d] = sz[d];
  int64_t *st = NULL;
  if (!*contig && T.strides != NULL && T.strides(h, &st) == 0 && st != NULL) {
    t->strided = 1;
    for (int64_t d = 0; d < rank; d++) t->strides[d] = st[d];
    *contig = true;
  }
  return 0;
}

/* ---- a call ----------------------------------------------------------------- */

/* The outputs' dtypes and shapes of signature s into outs[0..*n_out): from
 * o's plan cache, else from the daemon's shape rule (a new plan). *ran:
 * the signature's run was answered before. */
static int plan_of(top_t *o, call_t *k, opd_client_t *c, const opd_torch_sig_t *s,
                   const opd_tensor_t *ins, opd_tensor_t *outs,
                   uint32_t *n_out, int *ran) {
  if (opd__torch_plan_find(&o->plans, s, outs, n_out, ran)) return 0;
  *ran = 0;
  if (opd_infer(c, o->op, ins, k->n_in, k->attr, o->n_attrs, outs,
                OPD_MAX_TENSORS, n_out) != 0)
    return fail_opd(k, o);
  opd__torch_plan_store(&o->plans, s, outs, *n_out);
  return 0;
}

/* A contiguous CUDA tensor shaped as d on device dev, into *h; its data
 * pointer into *ptr. */
static int empty_like(const opd_tensor_t *d, int dev, ath_t *h, void **ptr) {
  int64_t strides[OPD_MAX_RANK], s = 1;
  for (int r = d->rank - 1; r >= 0; r--) {
    strides[r] = s;
    s *= d->shape[r] > 0 ? d->shape[r] : 1;
  }
  if (T.empty(d->rank, d->shape, strides, T.tdt[d->dtype], T.cuda, dev, h) != 0)
    return -1;
  return T.data_ptr(*h, ptr);
}

/* The outputs' pointers into ptrs[0..n_out): new tensors (functional),
 * input 0 (in place: *back its contiguous copy to copy back, if any) or
 * the given out= tensors k->out, checked against the shape rule (a
 * non-contiguous one gets a temporary in k->otmp, copied back). */
static int outputs(top_t *o, call_t *k, const opd_tensor_t *ins, void *const *in_ptrs,
                   opd_tensor_t *outs, uint32_t n_out, int dev, void **ptrs,
                   ath_t *back) {
  for (uint32_t j = 0; j < n_out; j++) {
    opd_tensor_t *d = &outs[j];
    d->arena = d->offset = 0;
    if (o->kind == OPD_TORCH_INPLACE) {
      const opd_tensor_t *x = &ins[0];
      if (d->dtype != x->dtype || d->rank != x->rank ||
          memcmp(d->shape, x->shape, sizeof d->shape[0] * (size_t)x->rank) != 0)
        return fail_output(k, o, 0, x, d);
      ptrs[j] = in_ptrs[0];
      if (k->tmp[0] != NULL) *back = k->tmp[0];
      else if (x->strided) /* written through its own strides */
        d->strided = 1, memcpy(d->strides, x->strides, sizeof d->strides);
    } else if (o->kind == OPD_TORCH_OUT) {
      opd_tensor_t g;
      bool contig = true;
      char what[32];
      snprintf(what, sizeof what, "output %u", j);
      if (describe(k, o, k->out[j], what, &g, &dev, &contig) != 0) return -1;
      if (g.dtype != d->dtype || g.rank != d->rank ||
          memcmp(g.shape, d->shape, sizeof d->shape[0] * (size_t)d->rank) != 0)
        return fail_output(k, o, j, &g, d);
      if (contig) {
        if (T.data_ptr(k->out[j], &ptrs[j]) != 0)
          return fail(k, o, "%s: no data pointer", what);
        if (g.strided) d->strided = 1, memcpy(d->strides, g.strides, sizeof d->strides);
      } else if (empty_like(d, dev, &k->otmp[j], &ptrs[j]) != 0) {
        return fail(k, o, "%s", "torch could not allocate an output");
      }
    } else if (empty_like(d, dev, &k->out[j], &ptrs[j]) != 0) {
      return fail(k, o, "%s", "torch could not allocate an output");
    }
  }
  return 0;
}

/* The kernel of ops[idx]: see DESIGN. */
static void kernel(int idx, siv_t *stack, uint64_t n_args, uint64_t n_ret) {
  top_t *o = ops[idx];
  call_t k;
  memset(&k, 0, sizeof k);
  opd_tensor_t t[2 * OPD_MAX_TENSORS];
  void *ptrs[2 * OPD_MAX_TENSORS];
  opd_torch_sig_t s;
  s.len = 0, s.over = 0;
  int rc = 0, dev = -1;
  uint32_t pos = 0;
  memset(t, 0, sizeof t);

  uint64_t given = o->kind == OPD_TORCH_OUT ? o->n_out : 0;
  if (n_args != (o->variadic ? 1 : o->n_in) + given + o->n_attrs ||
      n_ret != (o->kind == OPD_TORCH_FUNCTIONAL ? o->n_out : 0)) {
    fail(&k, o, "%s", "the schema torch calls with is not the one registered");
    opd__torch_throw(k.msg); /* the stack is not what we can read: leave it */
  }
  rc = read_inputs(o, &k, stack, &pos);
  for (uint32_t j = 0; j < given; j++) /* out=: owned handles, like inputs */
    k.out[j] = (ath_t)(uintptr_t)stack[pos++];
  if (read_attrs(o, &k, stack, &pos, &s) != 0 && rc == 0) rc = -1;
  if (rc != 0) goto out;

  /* the inputs: CUDA, one device, as they are (strided ones described by
   * their strides; contiguous copies made here only without them) */
  for (uint32_t i = 0; i < k.n_in; i++) {
    bool contig = true;
    char what[32];
    snprintf(what, sizeof what, "input %u", i);
    if (k.in[i] == NULL) {
      rc = fail(&k, o, "%s is None but a later input is given", what);
      goto out;
    }
    if ((rc = describe(&k, o, k.in[i], what, &t[i], &dev, &contig)) != 0) goto out;
    ath_t use = k.in[i];
    if (!contig) {
      /* torch's copy reads what an open batch's runs may still write: the
       * batch joins the stream first (opd__batch_join) */
      void *cs = NULL;
      opd_client_t *bc = opd__torch_bound();
      if (bc != NULL && T.stream(dev, &cs) == 0 && opd__batch_join(bc, cs) != 0) {
        rc = fail_opd(&k, o);
        goto out;
      }
      if ((k.tmp[i] = opd__torch_contiguous(k.in[i])) == NULL) {
        rc = fail(&k, o, "%s: aten::contiguous failed", what);
        goto out;
      }
      use = k.tmp[i];
    }
    if (T.data_ptr(use, &ptrs[i]) != 0) {
      rc = fail(&k, o, "%s: no data pointer", what);
      goto out;
    }
    opd__torch_sig_put(&s, &t[i].dtype, sizeof t[i].dtype);
    opd__torch_sig_put(&s, &t[i].rank, sizeof t[i].rank);
    opd__torch_sig_put(&s, t[i].shape, sizeof t[i].shape[0] * (size_t)t[i].rank);
    if (t[i].strided)
      opd__torch_sig_put(&s, t[i].strides, sizeof t[i].strides[0] * (size_t)t[i].rank);
  }
  if (dev < 0) {
    rc = fail(&k, o, "%s", "no tensor input: the CUDA kernel needs one");
    goto out;
  }
  opd__torch_sig_put(&s, &dev, sizeof dev);
  opd__torch_sig_put(&s, &k.n_in, sizeof k.n_in);

  opd_client_t *c = opd__torch_connection(k.msg, sizeof k.msg);
  if (c == NULL) {
    rc = -1;
    goto out;
  }
  char device[16];
  snprintf(device, sizeof device, "cuda:%d", dev);

  /* the outputs' dtypes and shapes into t[n_in..], then their memory */
  opd_tensor_t *outs = t + k.n_in;
  uint32_t n_out = 0;
  int ran = 0;
  if ((rc = plan_of(o, &k, c, &s, t, outs, &n_out, &ran)) != 0) goto out;
  if (n_out != o->n_out) {
    rc = fail(&k, o, "the daemon's shape rule gave another number of outputs "
              "than the schema (%s)", "restart the program after a daemon "
              "upgrade");
    goto out;
  }
  ath_t back = NULL; /* in place on a non-contiguous tensor: copied back */
  if ((rc = outputs(o, &k, t, ptrs, outs, n_out, dev, ptrs + k.n_in, &back)) != 0)
    goto out;
  k.n_out = n_out;

  void *stream = NULL;
  if (T.stream(dev, &stream) != 0) {
    rc = fail(&k, o, "%s", "torch gave no current CUDA stream");
    goto out;
  }
  /* a signature the daemon took before is enqueued without waiting for
   * its answer (a refusal then fails a later call: opd_enqueue_stream*);
   * a new one waits, so that its bad arguments are this call's error.
   * Inside a batch (opd.torch.batch(), opd_batch_begin) an enqueued run
   * does not wait for the stream, nor the stream for it: one that needs
   * torch's own work around it (a contiguous copy before, a copy back
   * after) is ordered as outside instead, and the others' tensors are
   * kept alive until the batch joins the stream (torch's caching
   * allocator would hand their memory out again at once) */
  int batched = opd__batch_open(c, stream), torch_work = back != NULL;
  for (uint32_t i = 0; i < OPD_MAX_TENSORS; i++)
    torch_work |= k.tmp[i] != NULL || k.otmp[i] != NULL;
  int lazy = ran && !(batched && torch_work);
  if ((lazy ? opd_enqueue_stream_ptrs : opd_run_stream_ptrs)(
          c, device, stream, o->op, ptrs, t, k.n_in, k.n_out, k.attr,
          o->n_attrs) != 0) {
    rc = fail_opd(&k, o);
    goto out;
  }
  if (!ran) opd__torch_plan_ran(&o->plans, &s);
  if (back != NULL && opd__torch_copy(k.in[0], back) != 0) {
    rc = fail(&k, o, "%s", "aten::copy_ back into the input failed");
    goto out;
  }
  for (uint32_t j = 0; j < k.n_out; j++)
    if (k.otmp[j] != NULL && opd__torch_copy(k.out[j], k.otmp[j]) != 0) {
      rc = fail(&k, o, "%s", "aten::copy_ into the out= tensor failed");
      goto out;
    }
  if (lazy && batched) {
    for (uint32_t i = 0; i < OPD_MAX_TENSORS; i++)
      if (k.in[i] != NULL && opd__batch_keep(c, stream, k.in[i], drop_handle))
        k.in[i] = NULL; /* the batch's now */
    for (uint32_t j = 0; o->kind != OPD_TORCH_INPLACE && j < k.n_out; j++) {
      ath_t h = NULL;
      if (T.new_handle(k.out[j], &h) == 0 && h != NULL &&
          !opd__batch_keep(c, stream, h, drop_handle))
        T.del(h);
    }
  }
  if (o->kind == OPD_TORCH_FUNCTIONAL)
    for (uint32_t j = 0; j < k.n_out; j++) {
      stack[j] = (siv_t)(uintptr_t)k.out[j]; /* torch owns them now */
      k.out[j] = NULL;
    }
out:
  call_release(&k);
  if (rc != 0) opd__torch_throw(k.msg);
}

#define K(n) \
  static void k##n(siv_t *s, uint64_t a, uint64_t r) { kernel(n, s, a, r); }
#define K10(n) K(n##0) K(n##1) K(n##2) K(n##3) K(n##4) K(n##5) K(n##6) \
  K(n##7) K(n##8) K(n##9)
K(0) K(1) K(2) K(3) K(4) K(5) K(6) K(7) K(8) K(9)
K10(1) K10(2) K10(3) K10(4) K10(5) K10(6) K10(7) K10(8) K10(9)
K10(10) K10(11) K10(12) K10(13) K10(14) K10(15)
#define T10(n) k##n##0, k##n##1, k##n##2, k##n##3, k##n##4, k##n##5, \
  k##n##6, k##n##7, k##n##8, k##n##9
static const boxed_fn kernels[MAX_OPS] = {
    k0, k1, k2, k3, k4, k5, k6, k7, k8, k9, T10(1), T10(2), T10(3), T10(4),
    T10(5), T10(6), T10(7), T10(8), T10(9), T10(10), T10(11), T10(12),
    T10(13), T10(14), T10(15)};

/* ---- registration -------------------------------------------------------------- */

int opd_torch_kernel(const char *ns, const char *op, int form,
                     uint32_t n_in, uint32_t min_in, uint32_t n_out,
                     uint32_t n_attrs, const char *const *attr_names,
                     const int32_t *attr_types) {
  char why[160];
  int kind = form & FORM_KIND, variadic = (form & OPD_TORCH_VARIADIC) != 0;
  if (!opd_torch_available(why, sizeof why))
    return opd__fail(OPD_ESTATE, "opd_torch_kernel: %s", why);
  if (ns == NULL || op == NULL || strlen(op) >= 64 || n_in > OPD_MAX_TENSORS ||
      min_in > n_in || n_out > OPD_MAX_TENSORS || n_attrs > OPD_MAX_ATTRS ||
      (form & ~(FORM_KIND | OPD_TORCH_VARIADIC)) != 0 || kind == FORM_KIND ||
      (kind == OPD_TORCH_INPLACE && (n_in == 0 || n_out != 1 || variadic)) ||
      (kind == OPD_TORCH_OUT && n_out == 0) || (variadic && n_in != 1))
    return opd__fail(OPD_EINVAL, "opd_torch_kernel: bad arguments for %s",
                     op ? op : "(null)");
  for (uint32_t a = 0; a < n_attrs; a++)
    if (attr_names[a] == NULL || strlen(attr_names[a]) >= 64 ||
        attr_types[a] < OPD_ATTR_INT || attr_types[a] > OPD_ATTR_INTS)
      return opd__fail(OPD_EINVAL, "opd_torch_kernel: %s: attribute %u", op, a);
  static const char *const suffix[] = {"", "_", "_out"};
  pthread_mutex_lock(&reg_mu);
  int rc = 0;
  if (n_ops == MAX_OPS) {
    rc = opd__fail(OPD_ELIMIT, "opd_torch_kernel: more than %d kernels",
                   MAX_OPS);
    goto out;
  }
  if (lib == NULL && T.init_impl(ns, "CUDA", __FILE__, __LINE__, &lib) != 0) {
    lib = NULL;
    rc = opd__fail(OPD_ESTATE, "opd_torch_kernel: torch refused a library "
                   "for %s on CUDA", ns);
    goto out;
  }
  top_t *o = calloc(1, sizeof *o);
  if (o == NULL) {
    rc = opd__fail(OPD_ENOMEM, "out of memory");
    goto out;
  }
  snprintf(o->op, sizeof o->op, "%s", op);
  snprintf(o->tname, sizeof o->tname, "%s%s", op, suffix[kind]);
  o->kind = kind, o->variadic = variadic;
  o->n_in = n_in, o->min_in = min_in, o->n_out = n_out, o->n_attrs = n_attrs;
  for (uint32_t a = 0; a < n_attrs; a++) {
    snprintf(o->attr_name[a], sizeof o->attr_name[a], "%s", attr_names[a]);
    o->attr_type[a] = attr_types[a];
  }
  opd__torch_plans_init(&o->plans);
  ops[n_ops] = o;
  if (T.impl(lib, o->tname, kernels[n_ops]) != 0) {
    ops[n_ops] = NULL;
    opd__torch_plans_destroy(&o->plans);
    rc = opd__fail(OPD_ESTATE, "opd_torch_kernel: torch refused the CUDA "
                   "kernel of %s::%s", ns, o->tname);
    free(o);
    goto out;
  }
  n_ops++;
out:
  pthread_mutex_unlock(&reg_mu);
  return rc;
}
