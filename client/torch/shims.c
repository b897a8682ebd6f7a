/* torch's stable C ABI looked up in this process, and the connection the
 * torch kernels run on (client/torch/shims.h declares what this file
 * gives torchops.c).
 *
 * DESIGN
 * torch >= 2.10 exports a C interface to its dispatcher and tensors (the
 * "stable ABI" shims, aoti_torch_* and torch_*: plain C functions of
 * libtorch_cpu.so and libtorch_cuda.so). Nothing here links against
 * torch: the shims are looked up once with dlsym in the process that
 * loaded torch (opd_torch_available), so libopd builds and runs without
 * it and an older torch gets the reason (the first shim it lacks).
 *
 * Errors: a boxed kernel reports one only by throwing a C++ exception, so
 * opd__torch_throw throws std::runtime_error through libstdc++'s C ABI
 * (__cxa_allocate_exception, __cxa_throw; the frames of client/torch are
 * built with unwind tables, -fexceptions); torch turns it into a Python
 * RuntimeError carrying opd's message.
 *
 * The connection: opd.torch binds one (opd_torch_bind) and rebinds it when
 * it connects again; a call after fork() in a child, or with no connection
 * bound, asks Python for one through the callback given to
 * opd_torch_bind (a ctypes function: it takes the GIL itself).
 */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/libopd/internal.h"
#include "client/torch/hostmem.h"
#include "client/torch/shims.h"

opd_torch_shims_t opd__torch;
#define T opd__torch

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
  /* optional: without it a strided tensor goes as a contiguous copy */
  *(void **)&T.strides = find("aoti_torch_get_strides");
  /* optional: without them no CPU kernel (cpukern.c) */
  *(void **)&T.from_blob = find("torch_from_blob");
  *(void **)&T.type_cpu = find("aoti_torch_device_type_cpu");
  *(void **)&T.lib_del = find("aoti_torch_delete_library_object");
  T.cuda = T.type_cuda();
  T.cpu = T.type_cpu != NULL ? T.type_cpu() : -1;
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

_Noreturn void opd__torch_throw(const char *msg) {
  void *e = T.cxa_alloc(16); /* sizeof(std::runtime_error) on LP64 */
  T.rt_ctor(e, msg);
  T.cxa_throw(e, T.rt_typeinfo, T.rt_dtor);
  abort(); /* not reached */
}

/* ---- the connection -------------------------------------------------------- */

typedef void *(*rebind_fn)(void);
static unsigned unbinds; /* connections closed so far (opd__torch_unbinds) */
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
  __atomic_add_fetch(&unbinds, 1, __ATOMIC_RELEASE); /* its prepared runs */
  opd__torch_host_forget(c); /* its registrations of the CPU kernel's arenas */
}

unsigned opd__torch_unbinds(void) {
  return __atomic_load_n(&unbinds, __ATOMIC_ACQUIRE);
}

opd_client_t *opd__torch_bound(void) {
  pthread_mutex_lock(&t_mu);
  opd_client_t *c = bound;
  if (bound_gen != __atomic_load_n(&opd__fork_gen, __ATOMIC_RELAXED)) c = NULL;
  pthread_mutex_unlock(&t_mu);
  return c;
}

opd_client_t *opd__torch_connection(char *msg, size_t cap) {
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

/* ---- dtypes and torch's own ops ------------------------------------------ */

int opd__torch_dtype(int32_t tdt) {
  for (int d = 1; d < 10; d++)
    if (T.tdt[d] == tdt) return d;
  return 0;
}

ath_t opd__torch_contiguous(ath_t t) {
  ath_t extra = NULL;
  if (T.new_handle(t, &extra) != 0) return NULL;
  siv_t st[2] = {(siv_t)(uintptr_t)extra, 0 /* MemoryFormat::Contiguous */};
  if (T.dispatch("aten::contiguous", "", st) != 0) return NULL;
  return (ath_t)(uintptr_t)st[0];
}

int opd__torch_copy(ath_t dst, ath_t src) {
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
