/* torch.ops.opd.* on CUDA tensors with no Python in the call: kernels for
 * torch's dispatcher written in C against torch's stable C ABI.
 *
 * DESIGN
 * opd.torch (python/opd/torch.py) defines every operator of the daemon in
 * torch's dispatcher with a Python implementation. A call through that
 * implementation costs some 25 us of Python per op on the H200 (the
 * dispatcher's trip into Python ~10, the argument handling and
 * torch.empty ~12: bench/probe_calls.py) where torch's own layer_norm
 * takes 17 in all, so a model whose norms go through opd gets slower
 * however fast opd's kernels are. torch >= 2.10 exports a C interface to
 * its dispatcher and tensors (the "stable ABI" shims, aoti_torch_* and
 * torch_*: plain C functions of libtorch_cpu.so and libtorch_cuda.so), so
 * a kernel for the CUDA dispatch key can be C: this file. opd.torch
 * registers one (opd_torch_kernel) for each functional and in-place form
 * whose arguments it can read; torch then calls it for CUDA tensors (a
 * kernel for the backend key takes precedence over the Python one, which
 * stays for CPU tensors, the out= forms and torch.compile's fake tensors).
 *
 * Nothing here links against torch: the shims are looked up with dlsym in
 * the process that loaded torch (opd_torch_available), so libopd builds
 * and runs without it and an older torch simply keeps the Python path.
 *
 * A call: the boxed stack holds the schema's arguments as StableIValues
 * (tensors as owning handles, Tensor? as a heap box or null, str and int[]
 * as owning handles): the kernel reads each, keys a plan cache per op by
 * the device, the inputs' dtypes and shapes and the attribute values (the
 * first call of a key asks the daemon's shape rule, opd_infer, as the
 * Python path does), allocates the outputs with torch's caching allocator
 * on the tensors' device (aoti_torch_empty_strided), takes torch's current
 * stream and makes one opd_run_stream_ptrs call: the run ordered with that
 * stream on the GPU, answered once the daemon enqueued it (docs/async.md);
 * once a signature's run was answered, its later calls are
 * opd_enqueue_stream_ptrs, which does not wait for the answer (under MPS:
 * a poll kernel on torch's stream waits for the daemon's flag word), so
 * a refusal of those is raised by a later call instead.
 * A non-contiguous input is made contiguous first (aten::contiguous through
 * the dispatcher); an in-place form on a non-contiguous tensor writes a
 * contiguous temporary and copies it back (aten::copy_), as the Python path
 * does.
 *
 * Errors: a boxed kernel reports one only by throwing a C++ exception, so
 * this C code throws std::runtime_error through libstdc++'s C ABI
 * (__cxa_allocate_exception, __cxa_throw; the frames here have unwind
 * tables) once it has released what it holds; torch turns it into a Python
 * RuntimeError carrying opd's message ("opd: layernorm: input 0 has ...").
 * Validation errors are thus still raised at the call, as RuntimeError
 * rather than opd.BadArgumentError (OPD_TORCH_C=0 keeps every call in
 * Python, typed errors included).
 *
 * The connection: opd.torch binds one (opd_torch_bind) and rebinds it when
 * it connects again; a call after fork() in a child, or with no connection
 * bound, asks Python for one through the callback given to
 * opd_torch_bind (a ctypes function: it takes the GIL itself).
 */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/libopd/internal.h"

typedef uint64_t siv_t;   /* StableIValue */
typedef void *ath_t;      /* AtenTensorHandle */
typedef int32_t aerr_t;   /* AOTITorchError: 0 success */
typedef void (*boxed_fn)(siv_t *stack, uint64_t n_args, uint64_t n_ret);

#define MAX_OPS 160       /* kernels one process registers */
#define PLANS 16          /* signatures cached per op */

/* ---- torch's shims, looked up once ---------------------------------------- */

static struct {
  int state; /* 0 not looked up, 1 available, -1 not */
  char why[160];
  aerr_t (*init_impl)(const char *, const char *, const char *, uint32_t, void **);
  aerr_t (*impl)(void *, const char *, boxed_fn);
  aerr_t (*data_ptr)(ath_t, void **);
  aerr_t (*dim)(ath_t, int64_t *);
  aerr_t (*sizes)(ath_t, int64_t **);
  aerr_t (*dtype)(ath_t, int32_t *);
  aerr_t (*dev_type)(ath_t, int32_t *);
  aerr_t (*dev_index)(ath_t, int32_t *);
  aerr_t (*contiguous)(ath_t, bool *);
  aerr_t (*empty)(int64_t, const int64_t *, const int64_t *, int32_t, int32_t,
                  int32_t, ath_t *);
  aerr_t (*new_handle)(ath_t, ath_t *);
  aerr_t (*del)(ath_t);
  aerr_t (*dispatch)(const char *, const char *, siv_t *);
  aerr_t (*stream)(int32_t, void **);
  aerr_t (*str)(void *, const char **);
  aerr_t (*str_del)(void *);
  aerr_t (*list_size)(void *, size_t *);
  aerr_t (*list_get)(void *, size_t, siv_t *);
  aerr_t (*list_del)(void *);
  int32_t (*type_cuda)(void);
  int32_t (*dt[10])(void); /* by OPD_DTYPE_* code: torch's ScalarType */
  void (*op_delete)(void *);                       /* ::operator delete */
  void *(*cxa_alloc)(size_t);
  void (*cxa_throw)(void *, void *, void (*)(void *));
  void *rt_typeinfo;                               /* std::runtime_error */
  void (*rt_ctor)(void *, const char *);
  void (*rt_dtor)(void *);
  int32_t cuda;
  int32_t tdt[10];
  void *lib; /* the torch::Library of the CUDA kernels */
} T;

static pthread_mutex_t t_mu = PTHREAD_MUTEX_INITIALIZER;

/* torch's libraries are loaded RTLD_LOCAL by its Python extension (and
 * libstdc++ with them): their symbols are looked up in each by handle
 * (dlopen RTLD_NOLOAD of each loaded library file), then globally. */
static void *libs[6];
static int n_libs;

static void *find(const char *name) {
  for (int i = 0; i < n_libs; i++) {
    void *p = dlsym(libs[i], name);
    if (p != NULL) return p;
  }
  return NULL;
}

#define LOOK(field, name)                                                   \
  do {                                                                      \
    *(void **)&T.field = find(name);                                        \
    if (T.field == NULL) {                                                  \
      snprintf(T.why, sizeof T.why, "torch has no %s (torch >= 2.10 "       \
               "exports its stable C ABI)", name);                          \
      return -1;                                                            \
    }                                                                       \
  } while (0)

/* dl_iterate_phdr: the loaded libraries whose file name has one of these
 * (any soname or version suffix) */
static int add_loaded(struct dl_phdr_info *info, size_t size, void *arg) {
  static const char *const names[] = {"/libtorch_cpu.so", "/libtorch_cuda.so",
                                      "/libstdc++.so"};
  (void)size, (void)arg;
  if (info->dlpi_name == NULL || n_libs == (int)(sizeof libs / sizeof libs[0]))
    return 0;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strstr(info->dlpi_name, names[i]) != NULL) {
      void *h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
      if (h != NULL) libs[n_libs++] = h; /* kept: torch stays loaded */
    }
  return 0;
}

static int look_up(void) {
  libs[n_libs++] = RTLD_DEFAULT;
  dl_iterate_phdr(add_loaded, NULL);
  LOOK(init_impl, "aoti_torch_library_init_impl");
  LOOK(impl, "aoti_torch_library_impl");
  LOOK(data_ptr, "aoti_torch_get_data_ptr");
  LOOK(dim, "aoti_torch_get_dim");
  LOOK(sizes, "aoti_torch_get_sizes");
  LOOK(dtype, "aoti_torch_get_dtype");
  LOOK(dev_type, "aoti_torch_get_device_type");
  LOOK(dev_index, "aoti_torch_get_device_index");
  LOOK(contiguous, "aoti_torch_is_contiguous");
  LOOK(empty, "aoti_torch_empty_strided");
  LOOK(new_handle, "aoti_torch_new_tensor_handle");
  LOOK(del, "aoti_torch_delete_tensor_object");
  LOOK(dispatch, "aoti_torch_call_dispatcher");
  LOOK(stream, "aoti_torch_get_current_cuda_stream");
  LOOK(str, "torch_string_c_str");
  LOOK(str_del, "torch_delete_string");
  LOOK(list_size, "torch_list_size");
  LOOK(list_get, "torch_list_get_item");
  LOOK(list_del, "torch_delete_list");
  LOOK(type_cuda, "aoti_torch_device_type_cuda");
  LOOK(dt[OPD_DTYPE_FLOAT32], "aoti_torch_dtype_float32");
  LOOK(dt[OPD_DTYPE_FLOAT16], "aoti_torch_dtype_float16");
  LOOK(dt[OPD_DTYPE_BFLOAT16], "aoti_torch_dtype_bfloat16");
  LOOK(dt[OPD_DTYPE_FLOAT64], "aoti_torch_dtype_float64");
  LOOK(dt[OPD_DTYPE_INT8], "aoti_torch_dtype_int8");
  LOOK(dt[OPD_DTYPE_UINT8], "aoti_torch_dtype_uint8");
  LOOK(dt[OPD_DTYPE_INT32], "aoti_torch_dtype_int32");
  LOOK(dt[OPD_DTYPE_INT64], "aoti_torch_dtype_int64");
  LOOK(dt[OPD_DTYPE_BOOL], "aoti_torch_dtype_bool");
  LOOK(op_delete, "_ZdlPv");
  LOOK(cxa_alloc, "__cxa_allocate_exception");
  LOOK(cxa_throw, "__cxa_throw");
  LOOK(rt_typeinfo, "_ZTISt13runtime_error");
  LOOK(rt_ctor, "_ZNSt13runtime_errorC1EPKc");
  LOOK(rt_dtor, "_ZNSt13runtime_errorD1Ev");
  T.cuda = T.type_cuda();
  for (int d = 1; d < 10; d++) T.tdt[d] = T.dt[d]();
  return 0;
}

int opd_torch_available(char *why, size_t cap) {
  pthread_mutex_lock(&t_mu);
  if (T.state == 0) T.state = look_up() == 0 ? 1 : -1;
  int ok = T.state == 1;
  pthread_mutex_unlock(&t_mu);
  if (!ok && why != NULL && cap > 0) snprintf(why, cap, "%s", T.why);
  return ok;
}

/* Throws std::runtime_error(msg) into torch's dispatcher; never returns. */
static void throw_error(const char *msg) {
  void *e = T.cxa_alloc(16); /* sizeof(std::runtime_error) on LP64 */
  T.rt_ctor(e, msg);
  T.cxa_throw(e, T.rt_typeinfo, T.rt_dtor);
  abort(); /* not reached */
}

/* ---- the connection -------------------------------------------------------- */

typedef void *(*rebind_fn)(void);
static opd_client_t *bound;
static unsigned bound_gen;
static rebind_fn rebind;

void opd_torch_bind(opd_client_t *c, void *(*again)(void)) {
  pthread_mutex_lock(&t_mu);
  bound = c;
  bound_gen = __atomic_load_n(&opd__fork_gen, __ATOMIC_RELAXED);
  if (again != NULL) rebind = again;
  pthread_mutex_unlock(&t_mu);
}

void opd_torch_unbind(opd_client_t *c) {
  pthread_mutex_lock(&t_mu);
  if (bound == c) bound = NULL;
  pthread_mutex_unlock(&t_mu);
}

/* the bound connection if there is a current one, else NULL (no rebind) */
static opd_client_t *bound_now(void) {
  pthread_mutex_lock(&t_mu);
  opd_client_t *c = bound;
  if (bound_gen != __atomic_load_n(&opd__fork_gen, __ATOMIC_RELAXED)) c = NULL;
  pthread_mutex_unlock(&t_mu);
  return c;
}

/* The bound connection, asking Python for a new one when there is none or
 * it is the parent's (fork). NULL with msg set when there is none. */
static opd_client_t *connection(char *msg, size_t cap) {
  pthread_mutex_lock(&t_mu);
  opd_client_t *c = bound;
  int stale = c == NULL ||
              bound_gen != __atomic_load_n(&opd__fork_gen, __ATOMIC_RELAXED);
  rebind_fn again = rebind;
  pthread_mutex_unlock(&t_mu);
  if (!stale) return c;
  if (again != NULL) again(); /* opd.torch.client(): binds a connection */
  pthread_mutex_lock(&t_mu);
  c = bound;
  stale = c == NULL ||
          bound_gen != __atomic_load_n(&opd__fork_gen, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&t_mu);
  if (stale) {
    snprintf(msg, cap, "opd.torch: no connection to a daemon is bound "
             "(opd.torch.register(...) binds one)");
    return NULL;
  }
  return c;
}

/* ---- operators and their plans ------------------------------------------- */

typedef struct plan {
  unsigned char key[512];
  uint32_t key_len;
  uint32_t n_out;
  opd_tensor_t out[OPD_MAX_TENSORS]; /* dtypes and shapes from opd_infer */
  uint64_t used;
  int ran;                       /* a run of it was answered "enqueued":
                                    later ones are not waited for */
} plan_t;

typedef struct top {
  char op[64];          /* the daemon's operator */
  char tname[72];       /* the torch name: op, or op + "_" (in place) */
  int inplace;
  uint32_t n_in, min_in, n_attrs, n_out;
  char attr_name[OPD_MAX_ATTRS][64];
  int32_t attr_type[OPD_MAX_ATTRS]; /* OPD_ATTR_* */
  pthread_mutex_t mu;
  plan_t plans[PLANS];
  uint32_t n_plans;
  uint64_t tick;
} top_t;

static top_t *ops[MAX_OPS];
static int n_ops;

/* one call's state, released before returning or throwing */
typedef struct call {
  ath_t in[OPD_MAX_TENSORS];   /* owned handles of the inputs */
  ath_t tmp[OPD_MAX_TENSORS];  /* contiguous copies made here */
  ath_t out[OPD_MAX_TENSORS];
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
    k->in[i] = k->tmp[i] = k->out[i] = NULL;
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

static int dtype_of(int32_t tdt) {
  for (int d = 1; d < 10; d++)
    if (T.tdt[d] == tdt) return d;
  return 0;
}

/* aten::contiguous(t) through the dispatcher: a new owned handle */
static ath_t contiguous(ath_t t) {
  ath_t extra = NULL;
  if (T.new_handle(t, &extra) != 0) return NULL;
  siv_t st[2] = {(siv_t)(uintptr_t)extra, 0 /* MemoryFormat::Contiguous */};
  if (T.dispatch("aten::contiguous", "", st) != 0) return NULL;
  return (ath_t)(uintptr_t)st[0];
}

/* aten::copy_(dst, src): dst written on torch's current stream */
static int copy_into(ath_t dst, ath_t src) {
  ath_t d = NULL, s = NULL;
  if (T.new_handle(dst, &d) != 0) return -1;
  if (T.new_handle(src, &s) != 0) {
    T.del(d);
    return -1;
  }
  siv_t st[3] = {(siv_t)(uintptr_t)d, (siv_t)(uintptr_t)s, 0 /* non_blocking */};
  if (T.dispatch("aten::copy_", "", st) != 0) return -1;
  T.del((ath_t)(uintptr_t)st[0]); /* the returned self */
  return 0;
}

static void key_put(unsigned char *key, uint32_t *len, const void *p, size_t n,
                    int *over) {
  if (*len + n > 512) {
    *over = 1;
    return;
  }
  memcpy(key + *len, p, n);
  *len += (uint32_t)n;
}

/* The kernel of ops[idx]: see DESIGN. */
static void kernel(int idx, siv_t *stack, uint64_t n_args, uint64_t n_ret) {
  top_t *o = ops[idx];
  call_t k;
  memset(&k, 0, sizeof k);
  opd_tensor_t t[2 * OPD_MAX_TENSORS];
  void *ptrs[2 * OPD_MAX_TENSORS];
  unsigned char key[512];
  uint32_t key_len = 0;
  int over = 0, rc = 0, dev = -1;
  uint32_t pos = 0;
  memset(t, 0, sizeof t);

  if (n_args != o->n_in + o->n_attrs || n_ret != (o->inplace ? 0 : o->n_out)) {
    fail(&k, o, "%s", "the schema torch calls with is not the one registered");
    throw_error(k.msg); /* the stack is not what we can read: leave it */
  }
  /* the inputs: every handle is ours from here */
  uint32_t present = 0;
  for (uint32_t i = 0; i < o->n_in; i++, pos++) {
    if (i < o->min_in) {
      k.in[i] = (ath_t)(uintptr_t)stack[pos];
    } else if (stack[pos] != 0) { /* Tensor?: a boxed StableIValue */
      siv_t *box = (siv_t *)(uintptr_t)stack[pos];
      k.in[i] = (ath_t)(uintptr_t)*box;
      T.op_delete(box);
    }
    if (k.in[i] != NULL) present = i + 1;
  }
  k.n_in = present;
  /* the attributes */
  for (uint32_t a = 0; a < o->n_attrs; a++, pos++) {
    opd_attr_t *at = &k.attr[a];
    siv_t v = stack[pos];
    at->name = o->attr_name[a];
    at->type = o->attr_type[a];
    switch (o->attr_type[a]) {
    case OPD_ATTR_INT: at->i = (int64_t)v; break;
    case OPD_ATTR_BOOL: at->i = (v & 0xff) != 0; break;
    case OPD_ATTR_FLOAT: memcpy(&at->f, &v, sizeof at->f); break;
    case OPD_ATTR_STR: {
      const char *s = NULL;
      void *h = (void *)(uintptr_t)v;
      if (h != NULL && T.str(h, &s) == 0 && s != NULL)
        snprintf(k.strs[a], sizeof k.strs[a], "%s", s);
      if (h != NULL) T.str_del(h);
      at->s = k.strs[a];
      break;
    }
    case OPD_ATTR_INTS: {
      void *h = (void *)(uintptr_t)v;
      size_t n = 0;
      if (h != NULL && T.list_size(h, &n) == 0) {
        if (n > OPD_MAX_RANK && rc == 0)
          rc = fail(&k, o, "attribute %s has more than 8 values", at->name);
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
    key_put(key, &key_len, &at->i, sizeof at->i, &over);
    key_put(key, &key_len, &at->f, sizeof at->f, &over);
    if (at->type == OPD_ATTR_STR)
      key_put(key, &key_len, k.strs[a], strlen(k.strs[a]) + 1, &over);
    if (at->type == OPD_ATTR_INTS)
      key_put(key, &key_len, at->ints, sizeof at->ints[0] * (size_t)at->n, &over);
  }
  if (rc != 0) goto out;

  /* the tensors: CUDA, one device, contiguous (copies made here else) */
  for (uint32_t i = 0; i < k.n_in; i++) {
    int32_t dt = 0, dty = 0, di = 0;
    int64_t rank = 0, *sz = NULL;
    bool contig = true;
    char what[48];
    snprintf(what, sizeof what, "%u", i);
    if (k.in[i] == NULL) {
      rc = fail(&k, o, "input %s is None but a later input is given", what);
      goto out;
    }
    if (T.dev_type(k.in[i], &dty) || T.dev_index(k.in[i], &di) ||
        T.dtype(k.in[i], &dt) || T.dim(k.in[i], &rank) ||
        T.sizes(k.in[i], &sz) || T.contiguous(k.in[i], &contig)) {
      rc = fail(&k, o, "input %s: torch did not describe it", what);
      goto out;
    }
    if (dty != T.cuda) {
      rc = fail(&k, o, "input %s is not a CUDA tensor (the run is on CUDA: "
                "every tensor must be on the same CUDA device)", what);
      goto out;
    }
    if (dev < 0) dev = di;
    else if (di != dev) {
      rc = fail(&k, o, "input %s is on another CUDA device than input 0", what);
      goto out;
    }
    int code = dtype_of(dt);
    if (code == 0) {
      rc = fail(&k, o, "input %s has a dtype opd does not take", what);
      goto out;
    }
    if (rank > OPD_MAX_RANK) {
      rc = fail(&k, o, "input %s has a rank over 8", what);
      goto out;
    }
    ath_t use = k.in[i];
    if (!contig) {
      /* torch's copy reads what an open batch's runs may still write: the
       * batch joins the stream first (opd__batch_join) */
      void *cs = NULL;
      opd_client_t *bc = bound_now();
      if (bc != NULL && T.stream(dev, &cs) == 0 && opd__batch_join(bc, cs) != 0) {
        rc = fail_opd(&k, o);
        goto out;
      }
      if ((k.tmp[i] = contiguous(k.in[i])) == NULL) {
        rc = fail(&k, o, "input %s: aten::contiguous failed", what);
        goto out;
      }
      use = k.tmp[i];
    }
    if (T.data_ptr(use, &ptrs[i]) != 0) {
      rc = fail(&k, o, "input %s: no data pointer", what);
      goto out;
    }
    t[i].dtype = code;
    t[i].rank = (int32_t)rank;
    for (int64_t d = 0; d < rank; d++) t[i].shape[d] = sz[d];
    key_put(key, &key_len, &t[i].dtype, sizeof t[i].dtype, &over);
    key_put(key, &key_len, &t[i].rank, sizeof t[i].rank, &over);
    key_put(key, &key_len, t[i].shape, sizeof t[i].shape[0] * (size_t)rank, &over);
  }
  if (dev < 0) {
    rc = fail(&k, o, "%s", "no tensor input: the CUDA kernel needs one");
    goto out;
  }
  key_put(key, &key_len, &dev, sizeof dev, &over);
  key_put(key, &key_len, &k.n_in, sizeof k.n_in, &over);

  opd_client_t *c = connection(k.msg, sizeof k.msg);
  if (c == NULL) {
    rc = -1;
    goto out;
  }
  char device[16];
  snprintf(device, sizeof device, "cuda:%d", dev);

  /* the plan of this signature: the outputs' dtypes and shapes, into
   * t[n_in..] (a hit copies those, not the plan) */
  opd_tensor_t *outs = t + k.n_in;
  uint32_t n_out = 0;
  int hit = 0, ran = 0;
  pthread_mutex_lock(&o->mu);
  for (uint32_t p = 0; p < o->n_plans && !over; p++) {
    plan_t *pl = &o->plans[p];
    if (pl->key_len == key_len && memcmp(pl->key, key, key_len) == 0) {
      pl->used = ++o->tick;
      n_out = pl->n_out;
      memcpy(outs, pl->out, sizeof outs[0] * n_out);
      hit = 1;
      ran = pl->ran;
      break;
    }
  }
  pthread_mutex_unlock(&o->mu);
  if (!hit) {
    if (opd_infer(c, o->op, t, k.n_in, k.attr, o->n_attrs, outs,
                  OPD_MAX_TENSORS, &n_out) != 0) {
      rc = fail_opd(&k, o);
      goto out;
    }
    if (!over) {
      pthread_mutex_lock(&o->mu);
      uint32_t slot = o->n_plans;
      if (slot == PLANS) { /* the least recently used goes */
        slot = 0;
        for (uint32_t p = 1; p < PLANS; p++)
          if (o->plans[p].used < o->plans[slot].used) slot = p;
      } else {
        o->n_plans++;
      }
      plan_t *pl = &o->plans[slot];
      memcpy(pl->key, key, key_len);
      pl->key_len = key_len;
      pl->n_out = n_out;
      memcpy(pl->out, outs, sizeof outs[0] * n_out);
      pl->used = ++o->tick;
      pl->ran = 0;
      pthread_mutex_unlock(&o->mu);
    }
  }
  if (n_out != o->n_out) {
    rc = fail(&k, o, "the daemon's shape rule gave another number of outputs "
              "than the schema (%s)", "restart the program after a daemon "
              "upgrade");
    goto out;
  }

  /* the outputs: torch's caching allocator, or the first input (in place) */
  ath_t back = NULL; /* in place on a non-contiguous tensor: copied back */
  for (uint32_t j = 0; j < n_out; j++) {
    opd_tensor_t *d = &outs[j];
    d->arena = d->offset = 0;
    if (o->inplace) {
      const opd_tensor_t *x = &t[0];
      if (d->dtype != x->dtype || d->rank != x->rank ||
          memcmp(d->shape, x->shape, sizeof d->shape[0] * (size_t)x->rank) != 0) {
        char got[160], want[160]; /* worded as opd.torch's Python path */
        snprintf(k.msg, sizeof k.msg, "opd: %s: output 0 has dtype %s and "
                 "shape %s; the op's output here is %s %s", o->tname,
                 opd_dtype_name(x->dtype), shape_str(x, got, sizeof got),
                 opd_dtype_name(d->dtype), shape_str(d, want, sizeof want));
        rc = -1;
        goto out;
      }
      ptrs[k.n_in + j] = ptrs[0];
      if (k.tmp[0] != NULL) back = k.tmp[0];
      continue;
    }
    int64_t strides[OPD_MAX_RANK], s = 1;
    for (int r = d->rank - 1; r >= 0; r--) {
      strides[r] = s;
      s *= d->shape[r] > 0 ? d->shape[r] : 1;
    }
    if (T.empty(d->rank, d->shape, strides, T.tdt[d->dtype], T.cuda, dev,
                &k.out[j]) != 0 ||
        T.data_ptr(k.out[j], &ptrs[k.n_in + j]) != 0) {
      rc = fail(&k, o, "%s", "torch could not allocate an output");
      goto out;
    }
  }
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
  for (uint32_t i = 0; i < OPD_MAX_TENSORS; i++) torch_work |= k.tmp[i] != NULL;
  int lazy = ran && !(batched && torch_work);
  if ((lazy ? opd_enqueue_stream_ptrs : opd_run_stream_ptrs)(
          c, device, stream, o->op, ptrs, t, k.n_in, k.n_out, k.attr,
          o->n_attrs) != 0) {
    rc = fail_opd(&k, o);
    goto out;
  }
  if (!ran && !over) {
    pthread_mutex_lock(&o->mu);
    for (uint32_t p = 0; p < o->n_plans; p++) {
      plan_t *pl = &o->plans[p];
      if (pl->key_len == key_len && memcmp(pl->key, key, key_len) == 0) pl->ran = 1;
    }
    pthread_mutex_unlock(&o->mu);
  }
  if (back != NULL && copy_into(k.in[0], back) != 0) {
    rc = fail(&k, o, "%s", "aten::copy_ back into the input failed");
    goto out;
  }
  if (lazy && batched) {
    for (uint32_t i = 0; i < OPD_MAX_TENSORS; i++)
      if (k.in[i] != NULL && opd__batch_keep(c, stream, k.in[i], drop_handle))
        k.in[i] = NULL; /* the batch's now */
    for (uint32_t j = 0; !o->inplace && j < k.n_out; j++) {
      ath_t h = NULL;
      if (T.new_handle(k.out[j], &h) == 0 && h != NULL &&
          !opd__batch_keep(c, stream, h, drop_handle))
        T.del(h);
    }
  }
  if (!o->inplace)
    for (uint32_t j = 0; j < k.n_out; j++) {
      stack[j] = (siv_t)(uintptr_t)k.out[j]; /* torch owns them now */
      k.out[j] = NULL;
    }
out:
  call_release(&k);
  if (rc != 0) throw_error(k.msg);
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

int opd_torch_kernel(const char *ns, const char *op, int inplace,
                     uint32_t n_in, uint32_t min_in, uint32_t n_out,
                     uint32_t n_attrs, const char *const *attr_names,
                     const int32_t *attr_types) {
  char why[160];
  if (!opd_torch_available(why, sizeof why))
    return opd__fail(OPD_ESTATE, "opd_torch_kernel: %s", why);
  if (ns == NULL || op == NULL || strlen(op) >= 64 || n_in > OPD_MAX_TENSORS ||
      min_in > n_in || n_out > OPD_MAX_TENSORS || n_attrs > OPD_MAX_ATTRS ||
      (inplace && (n_in == 0 || n_out != 1)))
    return opd__fail(OPD_EINVAL, "opd_torch_kernel: bad arguments for %s",
                     op ? op : "(null)");
  for (uint32_t a = 0; a < n_attrs; a++)
    if (attr_names[a] == NULL || strlen(attr_names[a]) >= 64 ||
        attr_types[a] < OPD_ATTR_INT || attr_types[a] > OPD_ATTR_INTS)
      return opd__fail(OPD_EINVAL, "opd_torch_kernel: %s: attribute %u", op, a);
  pthread_mutex_lock(&t_mu);
  int rc = 0;
  if (n_ops == MAX_OPS) {
    rc = opd__fail(OPD_ELIMIT, "opd_torch_kernel: more than %d kernels",
                   MAX_OPS);
    goto out;
  }
  if (T.lib == NULL &&
      T.init_impl(ns, "CUDA", __FILE__, __LINE__, &T.lib) != 0) {
    T.lib = NULL;
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
  snprintf(o->tname, sizeof o->tname, "%s%s", op, inplace ? "_" : "");
  o->inplace = inplace;
  o->n_in = n_in, o->min_in = min_in, o->n_out = n_out, o->n_attrs = n_attrs;
  for (uint32_t a = 0; a < n_attrs; a++) {
    snprintf(o->attr_name[a], sizeof o->attr_name[a], "%s", attr_names[a]);
    o->attr_type[a] = attr_types[a];
  }
  pthread_mutex_init(&o->mu, NULL);
  ops[n_ops] = o;
  if (T.impl(T.lib, o->tname, kernels[n_ops]) != 0) {
    ops[n_ops] = NULL;
    pthread_mutex_destroy(&o->mu);
    free(o);
    rc = opd__fail(OPD_ESTATE, "opd_torch_kernel: torch refused the CUDA "
                   "kernel of %s::%s", ns, inplace ? "(in place)" : op);
    goto out;
  }
  n_ops++;
out:
  pthread_mutex_unlock(&t_mu);
  return rc;
}
