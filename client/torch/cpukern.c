/* torch.ops.opd.* on CPU tensors with no Python in the call: libopd's C
 * kernel for torch's CPU dispatch key, where the tensors already lie in
 * shared memory the daemon maps.
 *
 * DESIGN
 * opd.torch's Python kernel (python/opd/_torchops.py) serves CPU tensors
 * by default; opd.torch.cpu_kernels() (opd_torch_cpu_kernels) registers
 * this one for torch's CPU key too, for every form that has a CUDA C
 * kernel (torchops.c: the same rows, read from the same boxed stack by
 * call.c). A call is served here when every tensor of it, inputs and
 * out= tensors, lies in an arena the connection knows (opd_arena_find:
 * the arenas of opd.torch.empty and of earlier outputs, the shm files of
 * share_memory_() storages once registered): strided views go as they
 * are, their strides in their descriptors. Its outputs are blocks of
 * hostmem.c's shared memory, handed to torch as tensors over them
 * (torch_from_blob; the block comes back when torch frees the storage);
 * the in-place form writes over input 0, the _out form into the given
 * tensors. The outputs' dtypes and shapes come from the plan cache
 * (plans.c, keyed as on CUDA, CPU signatures in their own cache), the
 * daemon's shape rule asked once per signature; then one opd_run_on
 * ("cpu"), which returns when the daemon ran it. A signature's first call
 * goes to the Python kernel, which runs it and says whether the daemon
 * takes such calls as they are (then the plan is made and later ones run
 * here) or whether it changes them (torch's semantics, python/opd/
 * _torchsem.py: type promotion, torch's argument forms; the plan then
 * sends every later one to it), so that results are the Python kernel's. A call that repeats the
 * kernel's last request exactly (the same attributes and tensors at the
 * same places: a loop on the same inputs whose outputs died, their blocks
 * handed out again) sends it prepared (opd_prepare once, then
 * opd_run_prepared: no encoding), as the Python kernel does; once a
 * connection closed (opd__torch_unbinds) none made before is sent.
 * Any call it cannot serve (a tensor in torch's own memory, which must be
 * staged; a shm storage not registered yet; a zero-size or rank > 8
 * tensor; a dtype opd lacks; an empty Tensor[]) goes whole to the Python
 * kernel through the function opd.torch gave (opd__torch_cpu_fallback):
 * it registers shm storages, stages and counts copies as always, and the
 * next call of a registered storage is served here. The handles of the
 * call are handed to it (it takes them over) and it hands back the
 * outputs' handles.
 * Errors are thrown as on CUDA: torch raises RuntimeError("opd: softmax:
 * ..."), also for an error of the Python kernel reached through the
 * fallback (torch's C ABI carries no Python exception through a C
 * kernel): which is why the Python kernel stays the default.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/libopd/internal.h"
#include "client/torch/cpukern.h"
#include "client/torch/hostmem.h"

#define T opd__torch

static opd_torch_fallback_fn fallback; /* set by opd__torch_cpu_fallback */

/* A kernel's last request: sent again prepared when a call repeats it */
struct opd_torch_last {
  int busy;                 /* one call uses it at a time (others skip it) */
  opd_client_t *c;          /* the connection it was made for, */
  unsigned epoch, gen;      /* while no connection closed (opd__torch_
                               unbinds), in this fork */
  opd_torch_sig_t s;        /* the attributes, inputs' dtypes and shapes */
  uint32_t n;               /* tensors in t */
  opd_tensor_t t[2 * OPD_MAX_TENSORS]; /* every descriptor, places too */
  opd_prepared_t *p;        /* prepared once it repeated, else NULL */
};

void opd__torch_cpu_fallback(opd_torch_fallback_fn fn) {
  __atomic_store_n(&fallback, fn, __ATOMIC_RELEASE);
}

/* The run of o on c with descriptors t[0..n_in + n_out) and signature s:
 * prepared when it is o's last request again (opd_run_prepared: no
 * encoding), else encoded (opd_run_on) and kept as the last. */
static int run(top_t *o, call_t *k, opd_client_t *c, const opd_torch_sig_t *s,
               const opd_tensor_t *t, uint32_t n_out) {
  struct opd_torch_last *l = __atomic_load_n(&o->last, __ATOMIC_ACQUIRE);
  if (l == NULL) {
    struct opd_torch_last *fresh = calloc(1, sizeof *fresh), *none = NULL;
    if (fresh != NULL && !__atomic_compare_exchange_n(&o->last, &none, fresh, 0,
                                                      __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      free(fresh);
    l = __atomic_load_n(&o->last, __ATOMIC_ACQUIRE);
  }
  uint32_t n = k->n_in + n_out;
  if (l == NULL || __atomic_exchange_n(&l->busy, 1, __ATOMIC_ACQUIRE))
    return opd_run_on(c, "cpu", o->op, t, k->n_in, t + k->n_in, n_out, k->attr,
                      o->n_attrs);
  unsigned ep = opd__torch_unbinds();
  unsigned gen = __atomic_load_n(&opd__fork_gen, __ATOMIC_RELAXED);
  int same = !s->over && l->c == c && l->epoch == ep && l->gen == gen &&
             l->n == n && l->s.len == s->len && memcmp(l->s.b, s->b, s->len) == 0 &&
             memcmp(l->t, t, n * sizeof t[0]) == 0;
  int rc;
  if (same && l->p != NULL) {
    rc = opd_run_prepared(c, l->p);
  } else {
    if (!same) {
      opd_prepared_free(l->p);
      l->p = NULL, l->c = c, l->epoch = ep, l->gen = gen, l->n = n, l->s = *s;
      memcpy(l->t, t, n * sizeof t[0]);
    }
    rc = opd_run_on(c, "cpu", o->op, t, k->n_in, t + k->n_in, n_out, k->attr,
                    o->n_attrs);
    if (same && rc == 0) /* a loop on the same tensors: encode it once */
      opd_prepare(c, "cpu", o->op, t, k->n_in, t + k->n_in, n_out, k->attr,
                  o->n_attrs, &l->p);
  }
  if (rc != 0) { /* its error is this call's; the next one encodes again */
    opd_prepared_free(l->p);
    l->p = NULL, l->n = 0;
  }
  __atomic_store_n(&l->busy, 0, __ATOMIC_RELEASE);
  return rc;
}

/* CPU tensor h described into *t (its strides when not contiguous) and
 * placed (t->arena, t->offset) in an arena c knows: 0; 1 when it is not
 * one this kernel serves (the Python kernel then does). */
static int place(opd_client_t *c, ath_t h, opd_tensor_t *t) {
  int32_t dt = 0, dty = 0;
  int64_t rank = 0, *sz = NULL, *st = NULL;
  bool contig = false;
  void *p = NULL;
  if (h == NULL || T.dev_type(h, &dty) || dty != T.cpu || T.dtype(h, &dt) ||
      T.dim(h, &rank) || rank > OPD_MAX_RANK || T.sizes(h, &sz) ||
      T.contiguous(h, &contig))
    return 1;
  int code = opd__torch_dtype(dt);
  if (code == 0) return 1;
  memset(t, 0, sizeof *t);
  t->dtype = code;
  t->rank = (int32_t)rank;
  uint64_t esize = (uint64_t)opd_dtype_size(code), numel = 1, last = 0;
  for (int64_t d = 0; d < rank; d++) t->shape[d] = sz[d], numel *= (uint64_t)sz[d];
  if (numel == 0) return 1;
  if (!contig) {
    if (T.strides == NULL || T.strides(h, &st) != 0 || st == NULL) return 1;
    t->strided = 1;
    for (int64_t d = 0; d < rank; d++) {
      if (st[d] < 0) return 1;
      t->strides[d] = st[d];
      last += (uint64_t)(sz[d] - 1) * (uint64_t)st[d];
    }
  }
  uint64_t bytes = (contig ? numel : last + 1) * esize;
  if (T.data_ptr(h, &p) != 0 || p == NULL) return 1;
  return opd_arena_find(c, p, bytes, &t->arena, &t->offset) == 0 ? 0 : 1;
}

/* A new CPU tensor over a block of hostmem.c shaped as d (contiguous) into
 * *h, d's place set to the block's. */
static int new_output(opd_client_t *c, opd_tensor_t *d, ath_t *h) {
  int64_t strides[OPD_MAX_RANK], n = 1;
  for (int r = d->rank - 1; r >= 0; r--) {
    strides[r] = n;
    n *= d->shape[r];
  }
  void *ptr = NULL, *ctx = NULL;
  int rc = opd__torch_host_alloc(c, (uint64_t)n * (uint64_t)opd_dtype_size(d->dtype),
                                 &ptr, &d->arena, &d->offset, &ctx);
  if (rc != 0) return rc;
  if (T.from_blob(ptr, d->rank, d->shape, strides, 0, T.tdt[d->dtype], T.cpu, -1,
                  h, 0 /* strided layout */, NULL, 0, opd__torch_host_free,
                  ctx) != 0) {
    opd__torch_host_free(ptr, ctx);
    return opd__fail(OPD_ENOMEM, "torch made no tensor of an output block");
  }
  return 0;
}

/* The call k to the Python kernel (see DESIGN): 0, 1 when the Python
 * kernel keeps calls of this signature (it changes them: torch's
 * semantics), or -1 with k->msg. */
static int fall_back(const top_t *o, call_t *k, siv_t *stack) {
  opd_torch_fallback_fn fn = __atomic_load_n(&fallback, __ATOMIC_ACQUIRE);
  if (fn == NULL)
    return opd__torch_fail(k, o, "%s", "no Python kernel to run this call "
                           "(opd.torch.cpu_kernels was turned off)");
  void *ret[OPD_MAX_TENSORS] = {0};
  char msg[400] = "";
  uint32_t given = o->kind == OPD_TORCH_OUT ? o->n_out : 0;
  int rc = fn(o->op, o->kind, (void **)k->in, k->n_in, (void **)k->out, given,
              k->attr, o->n_attrs, ret, msg, sizeof msg);
  for (uint32_t i = 0; i < OPD_MAX_TENSORS; i++) /* the Python kernel's now */
    k->in[i] = NULL;
  for (uint32_t j = 0; j < given; j++) k->out[j] = NULL;
  if (rc != 0 && rc != 2) {
    snprintf(k->msg, sizeof k->msg, "opd: %s", msg[0] ? msg : "the Python kernel failed");
    for (uint32_t j = 0; j < OPD_MAX_TENSORS; j++)
      if (ret[j] != NULL) T.del(ret[j]);
    return -1;
  }
  if (o->kind == OPD_TORCH_FUNCTIONAL)
    for (uint32_t j = 0; j < o->n_out; j++) stack[j] = (siv_t)(uintptr_t)ret[j];
  return rc == 2;
}

void opd__torch_cpu_kernel(top_t *o, siv_t *stack, uint64_t n_args,
                           uint64_t n_ret) {
  call_t k;
  memset(&k, 0, sizeof k);
  opd_tensor_t t[2 * OPD_MAX_TENSORS];
  opd_torch_sig_t s;
  s.len = 0, s.over = 0;
  memset(t, 0, sizeof t);
  int rc = opd__torch_call_read(o, &k, stack, n_args, n_ret, &s);
  if (rc == -2) opd__torch_throw(k.msg); /* not a stack we can read: leave it */
  if (rc != 0) goto out;
  opd_client_t *c = opd__torch_connection(k.msg, sizeof k.msg);
  if (c == NULL) {
    rc = -1;
    goto out;
  }
  if (k.n_in == 0) goto back;
  for (uint32_t i = 0; i < k.n_in; i++) {
    if (k.in[i] == NULL) goto back; /* None before a given input: its error */
    if (place(c, k.in[i], &t[i]) != 0) goto back;
    opd__torch_sig_put(&s, &t[i].dtype, sizeof t[i].dtype);
    opd__torch_sig_put(&s, &t[i].rank, sizeof t[i].rank);
    opd__torch_sig_put(&s, t[i].shape, sizeof t[i].shape[0] * (size_t)t[i].rank);
    if (t[i].strided)
      opd__torch_sig_put(&s, t[i].strides, sizeof t[i].strides[0] * (size_t)t[i].rank);
  }
  opd_tensor_t *outs = t + k.n_in;
  uint32_t given = o->kind == OPD_TORCH_OUT ? o->n_out : 0;
  for (uint32_t j = 0; j < given; j++) /* out=: in an arena, or Python's */
    if (place(c, k.out[j], &outs[j]) != 0) goto back;
  opd__torch_sig_put(&s, &k.n_in, sizeof k.n_in);

  /* a signature's first call goes to the Python kernel, which says
   * whether it is the daemon's as it is (the plan marked ran: later calls
   * are served here) or one it changes (torch's semantics: it keeps them) */
  opd_tensor_t want[OPD_MAX_TENSORS];
  uint32_t n_out = 0;
  int ran = 0;
  if (!opd__torch_plan_find(&o->cpu_plans, &s, want, &n_out, &ran)) {
    int kept = fall_back(o, &k, stack);
    if (kept >= 0 && !s.over && opd_infer(c, o->op, t, k.n_in, k.attr, o->n_attrs,
                                          want, OPD_MAX_TENSORS, &n_out) == 0) {
      opd__torch_plan_store(&o->cpu_plans, &s, want, n_out);
      if (!kept) opd__torch_plan_ran(&o->cpu_plans, &s);
    }
    rc = kept < 0 ? -1 : 0;
    goto out;
  }
  if (!ran) goto back; /* the Python kernel's */
  if (n_out != o->n_out) {
    rc = opd__torch_fail(&k, o, "the daemon's shape rule gave another number "
                         "of outputs than the schema (%s)", "restart the "
                         "program after a daemon upgrade");
    goto out;
  }
  for (uint32_t j = 0; j < n_out; j++) {
    const opd_tensor_t *w = &want[j];
    opd_tensor_t *g = o->kind == OPD_TORCH_INPLACE ? &t[0] : &outs[j];
    if (o->kind == OPD_TORCH_FUNCTIONAL) {
      outs[j] = *w;
      if (new_output(c, &outs[j], &k.out[j]) != 0) {
        rc = opd__torch_fail_opd(&k, o);
        goto out;
      }
      continue;
    }
    if (g->dtype != w->dtype || g->rank != w->rank ||
        memcmp(g->shape, w->shape, sizeof w->shape[0] * (size_t)w->rank) != 0) {
      rc = opd__torch_fail_output(&k, o, j, g, w);
      goto out;
    }
    if (o->kind == OPD_TORCH_INPLACE) outs[j] = t[0];
  }
  k.n_out = n_out;
  if (run(o, &k, c, &s, t, n_out) != 0) {
    rc = opd__torch_fail_opd(&k, o);
    goto out;
  }
  if (o->kind == OPD_TORCH_FUNCTIONAL)
    for (uint32_t j = 0; j < n_out; j++) {
      stack[j] = (siv_t)(uintptr_t)k.out[j]; /* torch owns them now */
      k.out[j] = NULL;
    }
  goto out;
back:
  rc = fall_back(o, &k, stack) < 0 ? -1 : 0;
out:
  opd__torch_call_release(&k);
  if (rc != 0) opd__torch_throw(k.msg);
}
