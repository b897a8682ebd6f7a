/* torch.ops.opd.* on CUDA tensors with no Python in the call: kernels for
 * torch's dispatcher written in C against torch's stable C ABI (shims.c),
 * and their registration, for the CUDA key and (cpukern.c) the CPU key.
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
 *
 * CPU tensors: the same rows serve torch's CPU key once
 * opd_torch_cpu_kernels turns it on (opd.torch.cpu_kernels()): a second
 * table of trampolines calls cpukern.c's kernel, registered in a library
 * of its own (cpu_lib) for every row made so far and every later one,
 * and dropped whole (aoti_torch_delete_library_object) when turned off,
 * which gives the CPU calls back to the Python kernel. The decision is per
 * call, not per plan: a call whose tensors all lie in arenas the
 * connection knows runs in C (one synchronous opd_run_on, outputs in
 * hostmem.c's shared memory); any other goes whole to the Python kernel
 * (staging, shm registration, counted as always). It is off by default
 * because a C kernel cannot raise a Python exception through torch's C
 * ABI: with it on, every error of a CPU call (its own and the Python
 * kernel's behind it) is a RuntimeError, where the Python kernel alone
 * raises opd's BadArgumentError and the rest. Reading the stack and the
 * errors' wording are call.c's, shared by both kernels.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/libopd/internal.h"
#include "client/torch/call.h"
#include "client/torch/cpukern.h"

#define T opd__torch
#define MAX_OPS 400       /* kernels one process registers (54 ops and
                             their forms and overloads: about 200) */
#define FORM_KIND OPD_TORCH_FORM_KIND

/* ---- kernels and their plans ---------------------------------------------- */

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER; /* ops, n_ops, lib,
                                                             cpu_lib */
static top_t *ops[MAX_OPS];
static int n_ops;
static void *lib;     /* the torch::Library of the CUDA kernels */
static void *cpu_lib; /* that of the CPU kernels, while they are on */

/* a tensor handle a batch kept, dropped when it joins (opd__batch_keep) */
static void drop_handle(void *h) { T.del((ath_t)h); }

/* ---- a call ----------------------------------------------------------------- */

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
    return opd__torch_fail(k, o, "%s: torch did not describe it", what);
  if (dty != T.cuda) {
    snprintf(m, sizeof m, "%s is not a CUDA tensor (the run is on CUDA: "
             "every tensor must be on the same CUDA device)", what);
    return opd__torch_fail(k, o, "%s", m);
  }
  if (*dev < 0) {
    *dev = di;
  } else if (di != *dev) {
    snprintf(m, sizeof m, "%s is on another CUDA device than input 0", what);
    return opd__torch_fail(k, o, "%s", m);
  }
  int code = opd__torch_dtype(dt);
  if (code == 0) return opd__torch_fail(k, o, "%s has a dtype opd does not take", what);
  if (rank > OPD_MAX_RANK) return opd__torch_fail(k, o, "%s has a rank over 8", what);
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
        return opd__torch_fail_output(k, o, 0, x, d);
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
        return opd__torch_fail_output(k, o, j, &g, d);
      if (contig) {
        if (T.data_ptr(k->out[j], &ptrs[j]) != 0)
          return opd__torch_fail(k, o, "%s: no data pointer", what);
        if (g.strided) d->strided = 1, memcpy(d->strides, g.strides, sizeof d->strides);
      } else if (empty_like(d, dev, &k->otmp[j], &ptrs[j]) != 0) {
        return opd__torch_fail(k, o, "%s", "torch could not allocate an output");
      }
    } else if (empty_like(d, dev, &k->out[j], &ptrs[j]) != 0) {
      return opd__torch_fail(k, o, "%s", "torch could not allocate an output");
    }
  }
  return 0;
}

/* The kernel of ops[idx]: see DESIGN. */
static void cuda_kernel(int idx, siv_t *stack, uint64_t n_args, uint64_t n_ret) {
  top_t *o = ops[idx];
  call_t k;
  memset(&k, 0, sizeof k);
  opd_tensor_t t[2 * OPD_MAX_TENSORS];
  void *ptrs[2 * OPD_MAX_TENSORS];
  opd_torch_sig_t s;
  s.len = 0, s.over = 0;
  int rc = 0, dev = -1;
  memset(t, 0, sizeof t);

  rc = opd__torch_call_read(o, &k, stack, n_args, n_ret, &s);
  if (rc == -2) opd__torch_throw(k.msg); /* not a stack we can read: leave it */
  if (rc != 0) goto out;

  /* the inputs: CUDA, one device, as they are (strided ones described by
   * their strides; contiguous copies made here only without them) */
  for (uint32_t i = 0; i < k.n_in; i++) {
    bool contig = true;
    char what[32];
    snprintf(what, sizeof what, "input %u", i);
    if (k.in[i] == NULL) {
      rc = opd__torch_fail(&k, o, "%s is None but a later input is given", what);
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
        rc = opd__torch_fail_opd(&k, o);
        goto out;
      }
      if ((k.tmp[i] = opd__torch_contiguous(k.in[i])) == NULL) {
        rc = opd__torch_fail(&k, o, "%s: aten::contiguous failed", what);
        goto out;
      }
      use = k.tmp[i];
    }
    if (T.data_ptr(use, &ptrs[i]) != 0) {
      rc = opd__torch_fail(&k, o, "%s: no data pointer", what);
      goto out;
    }
    opd__torch_sig_put(&s, &t[i].dtype, sizeof t[i].dtype);
    opd__torch_sig_put(&s, &t[i].rank, sizeof t[i].rank);
    opd__torch_sig_put(&s, t[i].shape, sizeof t[i].shape[0] * (size_t)t[i].rank);
    if (t[i].strided)
      opd__torch_sig_put(&s, t[i].strides, sizeof t[i].strides[0] * (size_t)t[i].rank);
  }
  if (dev < 0) {
    rc = opd__torch_fail(&k, o, "%s", "no tensor input: the CUDA kernel needs one");
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
  if ((rc = opd__torch_plan_of(o, &o->plans, &k, c, &s, t, outs, &n_out,
                                &ran)) != 0)
    goto out;
  if (n_out != o->n_out) {
    rc = opd__torch_fail(&k, o, "the daemon's shape rule gave another number of outputs "
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
    rc = opd__torch_fail(&k, o, "%s", "torch gave no current CUDA stream");
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
    rc = opd__torch_fail_opd(&k, o);
    goto out;
  }
  if (!ran) opd__torch_plan_ran(&o->plans, &s);
  if (back != NULL && opd__torch_copy(k.in[0], back) != 0) {
    rc = opd__torch_fail(&k, o, "%s", "aten::copy_ back into the input failed");
    goto out;
  }
  for (uint32_t j = 0; j < k.n_out; j++)
    if (k.otmp[j] != NULL && opd__torch_copy(k.out[j], k.otmp[j]) != 0) {
      rc = opd__torch_fail(&k, o, "%s", "aten::copy_ into the out= tensor failed");
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
  opd__torch_call_release(&k);
  if (rc != 0) opd__torch_throw(k.msg);
}

#define K(n) \
  static void k##n(siv_t *s, uint64_t a, uint64_t r) { cuda_kernel(n, s, a, r); }
#define K10(n) K(n##0) K(n##1) K(n##2) K(n##3) K(n##4) K(n##5) K(n##6) \
  K(n##7) K(n##8) K(n##9)
K(0) K(1) K(2) K(3) K(4) K(5) K(6) K(7) K(8) K(9)
K10(1) K10(2) K10(3) K10(4) K10(5) K10(6) K10(7) K10(8) K10(9)
K10(10) K10(11) K10(12) K10(13) K10(14) K10(15)
K10(16) K10(17) K10(18) K10(19) K10(20) K10(21) K10(22) K10(23) K10(24)
K10(25) K10(26) K10(27) K10(28) K10(29) K10(30) K10(31) K10(32) K10(33)
K10(34) K10(35) K10(36) K10(37) K10(38) K10(39)
#define T10(n) k##n##0, k##n##1, k##n##2, k##n##3, k##n##4, k##n##5, \
  k##n##6, k##n##7, k##n##8, k##n##9
static const boxed_fn kernels[MAX_OPS] = {
    k0, k1, k2, k3, k4, k5, k6, k7, k8, k9, T10(1), T10(2), T10(3), T10(4),
    T10(5), T10(6), T10(7), T10(8), T10(9), T10(10), T10(11), T10(12),
    T10(13), T10(14), T10(15), T10(16), T10(17), T10(18), T10(19),
    T10(20), T10(21), T10(22), T10(23), T10(24), T10(25), T10(26),
    T10(27), T10(28), T10(29), T10(30), T10(31), T10(32), T10(33),
    T10(34), T10(35), T10(36), T10(37), T10(38), T10(39)};
/* the same rows for torch's CPU key (cpukern.c) */
#define C(n) static void c##n(siv_t *s, uint64_t a, uint64_t r) { \
    opd__torch_cpu_kernel(ops[n], s, a, r); }
#define C10(n) C(n##0) C(n##1) C(n##2) C(n##3) C(n##4) C(n##5) C(n##6) \
  C(n##7) C(n##8) C(n##9)
C(0) C(1) C(2) C(3) C(4) C(5) C(6) C(7) C(8) C(9)
C10(1) C10(2) C10(3) C10(4) C10(5) C10(6) C10(7) C10(8) C10(9)
C10(10) C10(11) C10(12) C10(13) C10(14) C10(15)
C10(16) C10(17) C10(18) C10(19) C10(20) C10(21) C10(22) C10(23) C10(24)
C10(25) C10(26) C10(27) C10(28) C10(29) C10(30) C10(31) C10(32) C10(33)
C10(34) C10(35) C10(36) C10(37) C10(38) C10(39)
#define CT10(n) c##n##0, c##n##1, c##n##2, c##n##3, c##n##4, c##n##5, \
  c##n##6, c##n##7, c##n##8, c##n##9
static const boxed_fn cpu_kernels[MAX_OPS] = {
    c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, CT10(1), CT10(2), CT10(3),
    CT10(4), CT10(5), CT10(6), CT10(7), CT10(8), CT10(9), CT10(10), CT10(11),
    CT10(12), CT10(13), CT10(14), CT10(15), CT10(16), CT10(17), CT10(18),
    CT10(19), CT10(20), CT10(21), CT10(22), CT10(23), CT10(24), CT10(25),
    CT10(26), CT10(27), CT10(28), CT10(29), CT10(30), CT10(31), CT10(32),
    CT10(33), CT10(34), CT10(35), CT10(36), CT10(37), CT10(38), CT10(39)};

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
  opd__torch_plans_init(&o->cpu_plans);
  ops[n_ops] = o;
  if (T.impl(lib, o->tname, kernels[n_ops]) != 0) {
    ops[n_ops] = NULL;
    opd__torch_plans_destroy(&o->plans);
    opd__torch_plans_destroy(&o->cpu_plans);
    rc = opd__fail(OPD_ESTATE, "opd_torch_kernel: torch refused the CUDA "
                   "kernel of %s::%s", ns, o->tname);
    free(o);
    goto out;
  }
  /* the CPU kernels are on: this one too (a refusal leaves Python's) */
  if (cpu_lib != NULL) T.impl(cpu_lib, o->tname, cpu_kernels[n_ops]);
  n_ops++;
out:
  pthread_mutex_unlock(&reg_mu);
  return rc;
}

int opd_torch_cpu_kernels(const char *ns, int on, opd_torch_fallback_fn fb) {
  char why[160];
  if (!opd_torch_available(why, sizeof why))
    return opd__fail(OPD_ESTATE, "opd_torch_cpu_kernels: %s", why);
  if (ns == NULL) return opd__fail(OPD_EINVAL, "opd_torch_cpu_kernels: no namespace");
  if (T.from_blob == NULL || T.type_cpu == NULL || T.lib_del == NULL)
    return opd__fail(OPD_EBACKEND, "opd_torch_cpu_kernels: torch has no "
                     "torch_from_blob (torch >= 2.11 exports it)");
  int rc = 0;
  pthread_mutex_lock(&reg_mu);
  if (cpu_lib != NULL) { /* off, or on again: from a new library */
    T.lib_del(cpu_lib);
    cpu_lib = NULL;
  }
  opd__torch_cpu_fallback(on ? fb : NULL);
  if (on && T.init_impl(ns, "CPU", __FILE__, __LINE__, &cpu_lib) != 0) {
    cpu_lib = NULL;
    rc = opd__fail(OPD_ESTATE, "opd_torch_cpu_kernels: torch refused a "
                   "library for %s on CPU", ns);
  }
  for (int i = 0; cpu_lib != NULL && i < n_ops; i++)
    if (T.impl(cpu_lib, ops[i]->tname, cpu_kernels[i]) != 0) {
      T.lib_del(cpu_lib);
      cpu_lib = NULL;
      rc = opd__fail(OPD_ESTATE, "opd_torch_cpu_kernels: torch refused the "
                     "CPU kernel of %s::%s", ns, ops[i]->tname);
    }
  pthread_mutex_unlock(&reg_mu);
  return rc;
}
