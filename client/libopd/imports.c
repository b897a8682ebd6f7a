/* libopd's device pointers as tensors: this process's CUDA memory
 * imported into the daemon once per allocation (opd_tensor_cuda,
 * opd_cuda_forget), and the cache of those imports.
 *
 * DESIGN
 * The allocation a pointer lies in (the driver's buffer id, base and
 * size: one cuPointerGetAttributes) is imported once per connection by
 * its CUDA IPC handle (opd_import_cuda) and cached (IMPORTS entries, least
 * recently used out, released); a tensor is then an (arena, offset) of
 * it. The cache holds nothing of the caller's memory alive: the caller
 * may free it whenever it could free it without opd. An allocation freed
 * and another made at its addresses has a new buffer id, so the cache
 * misses; entries whose range the new one overlaps are dead, and are
 * released and a SYNC waited for (the daemon has closed their handles
 * then) before the new one is imported, since the driver may give the new
 * allocation the same handle bytes.
 */
#include <string.h>

#include "client/libopd/stream.h"

/* The bytes from element 0 to past the last element of t. */
static int tensor_extent(const opd_tensor_t *t, uint64_t *out) {
  int32_t es = opd_dtype_size(t->dtype);
  if (es <= 0) return opd__fail(OPD_EINVAL, "opd_tensor_cuda: dtype %d is "
                                "unknown", t->dtype);
  if (t->rank < 0 || t->rank > OPD_MAX_RANK)
    return opd__fail(OPD_ELIMIT, "opd_tensor_cuda: rank %d out of 0..%d",
                     t->rank, OPD_MAX_RANK);
  uint64_t last = 0, n = 1;
  for (int i = 0; i < t->rank; i++) {
    int64_t d = t->shape[i];
    if (d < 0) return opd__fail(OPD_EINVAL, "opd_tensor_cuda: dimension %d "
                                "is %lld", i, (long long)d);
    if (d == 0) {
      *out = 0;
      return 0;
    }
    if (t->strided) {
      if (t->strides[i] < 0)
        return opd__fail(OPD_ELAYOUT, "opd_tensor_cuda: negative stride %lld",
                         (long long)t->strides[i]);
      last += (uint64_t)(d - 1) * (uint64_t)t->strides[i];
    } else if (__builtin_mul_overflow(n, (uint64_t)d, &n)) {
      return opd__fail(OPD_EOVERFLOW, "opd_tensor_cuda: the size overflows");
    }
  }
  uint64_t elems = t->strided ? last + 1 : n;
  if (__builtin_mul_overflow(elems, (uint64_t)es, out))
    return opd__fail(OPD_EOVERFLOW, "opd_tensor_cuda: the size overflows");
  return 0;
}

static void imp_drop(opd_client_t *c, struct opd_cuda *k, int i) {
  opd_arena_release(c, k->imp[i].arena); /* an error leaves it to the close */
  k->imp[i] = k->imp[--k->n_imp];
}

/* Imports the allocation [base, base+size) with buffer id `buffer` (k->mu
 * held): dead entries it overlaps and, when full, the least recently used
 * go first. */
static int imp_add(opd_client_t *c, struct opd_cuda *k, int dev,
                   unsigned long long buffer, cu_ptr_t base, size_t size,
                   cimport_t **out) {
  int stale = 0;
  for (int i = k->n_imp - 1; i >= 0; i--) {
    cimport_t *e = &k->imp[i];
    if (e->dev == dev && e->base < base + size && base < e->base + e->size) {
      imp_drop(c, k, i);
      stale = 1;
    }
  }
  if (k->n_imp == IMPORTS) {
    int lru = 0;
    for (int i = 1; i < k->n_imp; i++)
      if (k->imp[i].used < k->imp[lru].used) lru = i;
    imp_drop(c, k, lru);
  }
  int rc;
  /* the dead imports' handles closed before the same bytes may come again */
  if (stale && (rc = opd__call(c, OPD_MSG_SYNC, NULL, NULL, -1, NULL, NULL)) != 0)
    return rc;
  cu_ipc_t h;
  cu_result r = opd__cu.ipc_get_mem(&h, base);
  if (r != 0)
    return opd__fail(OPD_EINVAL, "opd_tensor_cuda: this CUDA memory cannot be "
                     "shared by IPC handle (cuIpcGetMemHandle: %s): memory of "
                     "cudaMalloc is needed (not cudaMallocAsync pools, VMM "
                     "memory such as torch's expandable_segments, managed or "
                     "host memory)", opd__cu_str(r));
  uint64_t arena;
  char buf[16];
  const char *wire = opd__cuda_wire_name(dev, buf); /* the daemon's device by UUID */
  rc = opd_import_cuda(c, h.bytes, 64, 0, size, wire, &arena);
  if (rc == OPD_ELIMIT && k->n_imp > 0) { /* the session's arenas: make room */
    while (k->n_imp > 0) imp_drop(c, k, 0);
    rc = opd_import_cuda(c, h.bytes, 64, 0, size, wire, &arena);
  }
  if (rc != 0) return rc;
  cimport_t *e = &k->imp[k->n_imp++];
  *e = (cimport_t){buffer, base, size, arena, dev, ++k->clock};
  *out = e;
  return 0;
}

/* Points t at ptr (k->mu held; dev parsed, the driver loaded). */
int opd__tensor_at(opd_client_t *c, struct opd_cuda *k, int dev,
                     const char *device, const void *ptr, opd_tensor_t *t) {
  uint64_t bytes = 0;
  int rc = tensor_extent(t, &bytes);
  if (rc != 0) return rc;
  unsigned long long buffer = 0;
  cu_ptr_t base = 0;
  size_t size = 0;
  int ord = -1;
  int attr[4] = {CU_ATTR_BUFFER_ID, CU_ATTR_RANGE_START, CU_ATTR_RANGE_SIZE,
                 CU_ATTR_DEVICE_ORDINAL};
  void *val[4] = {&buffer, &base, &size, &ord};
  cu_result r = opd__cu.pointer_attrs(4, attr, val, (cu_ptr_t)(uintptr_t)ptr);
  if (r != 0 || size == 0)
    return opd__fail(OPD_EINVAL, "opd_tensor_cuda: %p is not CUDA device "
                     "memory of this process (cuPointerGetAttributes: %s)",
                     ptr, r ? opd__cu_str(r) : "no allocation there");
  if (ord >= 0 && device != NULL && strcmp(device, "cuda") == 0)
    dev = ord; /* "cuda": the memory's */
  else if (ord >= 0 && ord != dev)
    return opd__fail(OPD_EINVAL, "opd_tensor_cuda: %p is memory of cuda:%d of "
                     "this process, not of cuda:%d (\"%s\")", ptr, ord, dev,
                     device);
  uint64_t off = (uint64_t)(uintptr_t)ptr - base;
  if (bytes > size - off)
    return opd__fail(OPD_EBOUNDS, "opd_tensor_cuda: the tensor's %llu bytes "
                     "at %p run past its allocation (%zu bytes at 0x%llx)",
                     (unsigned long long)bytes, ptr, size,
                     (unsigned long long)base);
  cimport_t *e = NULL;
  for (int i = 0; i < k->n_imp && e == NULL; i++)
    if (k->imp[i].buffer == buffer && k->imp[i].dev == dev) e = &k->imp[i];
  if (e != NULL) e->used = ++k->clock;
  else rc = imp_add(c, k, dev, buffer, base, size, &e);
  if (rc == 0) {
    t->arena = e->arena;
    t->offset = off;
  }
  return rc;
}

int opd_tensor_cuda(opd_client_t *c, const char *device, const void *ptr,
                    opd_tensor_t *t) {
  int dev, rc = opd__check_usable(c);
  if (rc == 0 && t == NULL)
    rc = opd__fail(OPD_EINVAL, "opd_tensor_cuda: t is NULL");
  if (rc == 0) rc = opd__cuda_index("opd_tensor_cuda", device, &dev);
  if (rc == 0) rc = opd__cu_ready("opd_tensor_cuda");
  struct opd_cuda *k = rc == 0 ? opd__cuda_of(c) : NULL;
  if (rc != 0 || k == NULL) return rc ? rc : OPD_ENOMEM;
  pthread_mutex_lock(&k->mu);
  rc = opd__tensor_at(c, k, dev, device, ptr, t);
  pthread_mutex_unlock(&k->mu);
  return rc;
}

int opd_cuda_forget(opd_client_t *c) {
  int rc = opd__check_usable(c);
  if (rc) return rc;
  struct opd_cuda *k = c->cuda;
  if (k == NULL) return 0;
  pthread_mutex_lock(&k->mu);
  while (k->n_imp > 0) imp_drop(c, k, 0);
  pthread_mutex_unlock(&k->mu);
  return 0;
}
