/* The CUDA backend's memory: pinned host arenas, device arenas (plain or
 * exportable through CUDA VMM), and client memory imported by IPC handle.
 *
 * DESIGN
 * Device arenas come from the device's stream-ordered pool (zeroed, and
 * synchronized on the utility stream before their id is returned, so any
 * session's stream may use them). Exportable ones are VMM allocations
 * with POSIX fd handles, rounded to the driver's granularity. A client's
 * IPC handle is opened once per session and device and shared by the
 * arenas cut from it (reference counted); its allocation's extent, from
 * cuMemGetAddressRange, bounds every arena. Freeing waits for nothing:
 * an arena is released only once no job uses it (its references).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/backend/cuda/state.h"
#include "daemon/log.h"

void opd__cu_pin(opd_server_t *srv, opd_arena_t *a) {
  if (srv->n_devices == 0) return;
  cudaError_t e = cudaHostRegister(a->base, a->size, cudaHostRegisterPortable);
  if (e != cudaSuccess) {
    /* still usable: copies from it are just slower */
    LOG_WARN("arena %llu: cudaHostRegister of %llu bytes: %s",
             (unsigned long long)a->id, (unsigned long long)a->size,
             cudaGetErrorString(e));
    cudaGetLastError();
    return;
  }
  a->pinned = 1;
}

static int alloc_plain(opd_server_t *srv, int dev, uint64_t size, void **ptr,
                       opd_err_t *err) {
  cuda_state_t *st = cuda_state(srv);
  if (st == NULL || dev < 0 || dev >= srv->n_devices) {
    return opd__errf(err, OPD_EDEVICE,
                     "no device cuda:%d (this daemon has %d)", dev,
                     srv->n_devices);
  }
  cuda_dev_t *d = &st->dev[dev];
  CU(set_device(d->index), err);
  cudaError_t e = cudaMallocAsync(ptr, size, d->util);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return opd__errf(err, cuda_code(e),
                     "cuda:%d: cannot allocate %llu bytes: %s", dev,
                     (unsigned long long)size, cudaGetErrorString(e));
  }
  /* the pool hands out memory ordered on `util`: make it usable by any
   * session stream before we return its id */
  CU(cudaStreamSynchronize(d->util), err);
  CU(cudaMemsetAsync(*ptr, 0, size, d->util), err);
  CU(cudaStreamSynchronize(d->util), err);
  return 0;
}

static void free_plain(opd_server_t *srv, int dev, void *ptr) {
  cuda_state_t *st = cuda_state(srv);
  if (st == NULL || dev < 0 || dev >= srv->n_devices) return;
  set_device(st->dev[dev].index);
  /* every job that used it has completed (the arena's references) */
  cudaFreeAsync(ptr, st->dev[dev].util);
}

/* ---- exportable device memory (CUDA VMM) ---------------------------------- */

static const char *cu_name(CUresult r) {
  static char buf[32];
  snprintf(buf, sizeof buf, "CUresult %d", (int)r);
  return buf;
}

static int alloc_vmm(opd_server_t *srv, int dev, uint64_t size, void **ptr,
                     void **token, opd_err_t *err) {
  cuda_state_t *st = cuda_state(srv);
  vmm_api_t *v = st ? &st->vmm : NULL;
  if (st == NULL || dev < 0 || dev >= srv->n_devices) {
    return opd__errf(err, OPD_EDEVICE, "no device cuda:%d", dev);
  }
  if (v->create == NULL) {
    return opd__errf(err, OPD_EBACKEND,
                     "this driver does not offer CUDA VMM: exportable "
                     "memory is not available");
  }
  CU(set_device(st->dev[dev].index), err);
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = st->dev[dev].index;
  size_t gran = 0;
  CUresult r = v->granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  if (r != CUDA_SUCCESS || gran == 0) gran = 2u << 20;
  vmm_alloc_t *a = calloc(1, sizeof *a);
  if (a == NULL) {
    return opd__errf(err, OPD_ENOMEM, "out of memory");
  }
  a->dev = dev;
  a->size = (size + gran - 1) / gran * gran;
  const char *step = "cuMemCreate";
  if ((r = v->create(&a->handle, a->size, &prop, 0)) != CUDA_SUCCESS) goto fail;
  step = "cuMemAddressReserve";
  if ((r = v->reserve(&a->ptr, a->size, gran, 0, 0)) != CUDA_SUCCESS) goto release;
  step = "cuMemMap";
  if ((r = v->map(a->ptr, a->size, 0, a->handle, 0)) != CUDA_SUCCESS) goto unreserve;
  CUmemAccessDesc acc = {.location = prop.location,
                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  step = "cuMemSetAccess";
  if ((r = v->set_access(a->ptr, a->size, &acc, 1)) != CUDA_SUCCESS) goto unmap;
  /* cudaMemset is asynchronous to the host for device memory, and the
   * session streams do not wait for the legacy stream: a run right after
   * this alloc could write its outputs before the zeroing did */
  CU(cudaMemsetAsync((void *)a->ptr, 0, a->size, st->dev[dev].util), err);
  CU(cudaStreamSynchronize(st->dev[dev].util), err);
  *ptr = (void *)a->ptr;
  *token = a;
  return 0;
unmap:
  v->unmap(a->ptr, a->size);
unreserve:
  v->addr_free(a->ptr, a->size);
release:
  v->release(a->handle);
fail:
  opd__errf(err, r == CUDA_ERROR_OUT_OF_MEMORY ? OPD_ENOMEM : OPD_EBACKEND,
            "cuda:%d: %s of %zu bytes failed: %s", dev, step, a->size,
            r == CUDA_ERROR_OUT_OF_MEMORY ? "out of memory" : cu_name(r));
  free(a);
  return r == CUDA_ERROR_OUT_OF_MEMORY ? OPD_ENOMEM : OPD_EBACKEND;
}

static void free_vmm(opd_server_t *srv, void *token) {
  cuda_state_t *st = cuda_state(srv);
  vmm_alloc_t *a = token;
  set_device(st->dev[a->dev].index);
  st->vmm.unmap(a->ptr, a->size);
  st->vmm.addr_free(a->ptr, a->size);
  st->vmm.release(a->handle);
  free(a);
}

int opd__cu_alloc(opd_server_t *srv, int dev, uint64_t size, int exportable,
                  void **ptr, void **token, opd_err_t *err) {
  *token = NULL;
  return exportable ? alloc_vmm(srv, dev, size, ptr, token, err)
                    : alloc_plain(srv, dev, size, ptr, err);
}

int opd__cu_export(opd_server_t *srv, void *token, int *fd, uint64_t *bytes,
                   opd_err_t *err) {
  cuda_state_t *st = cuda_state(srv);
  vmm_alloc_t *a = token;
  int out = -1;
  CUresult r = st->vmm.export_fd(&out, a->handle,
                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  if (r != CUDA_SUCCESS) {
    return opd__errf(err, OPD_EBACKEND,
                     "cuMemExportToShareableHandle failed: %s",
                     cu_name(r));
  }
  *fd = out;
  *bytes = a->size;
  return 0;
}

/* ---- client memory by IPC handle ------------------------------------------ */

static void import_close(opd_server_t *srv, void *token) {
  cuda_state_t *st = cuda_state(srv);
  ipc_open_t *o = token, **pp;
  if (--o->refs > 0) return;
  for (pp = &st->ipc; *pp != o; pp = &(*pp)->next) {
  }
  *pp = o->next;
  set_device(st->dev[o->dev].index);
  cudaIpcCloseMemHandle(o->base);
  free(o);
}

int opd__cu_import(opd_server_t *srv, uint64_t session, int dev,
                   const void *handle, uint64_t offset, uint64_t size,
                   void **ptr, void **token, opd_err_t *err) {
  cuda_state_t *st = cuda_state(srv);
  ipc_open_t *o;
  if (st == NULL || dev < 0 || dev >= srv->n_devices) {
    return opd__errf(err, OPD_EDEVICE, "no device cuda:%d", dev);
  }
  for (o = st->ipc; o; o = o->next)
    if (o->session == session && o->dev == dev &&
        memcmp(o->handle, handle, sizeof o->handle) == 0)
      break;
  if (o == NULL) {
    cudaIpcMemHandle_t h;
    void *p;
    memcpy(&h, handle, sizeof h);
    CU(set_device(st->dev[dev].index), err);
    cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return opd__errf(err, OPD_EINVAL,
                       "the IPC handle does not open on cuda:%d: %s", dev,
                       cudaGetErrorString(e));
    }
    size_t alloc = SIZE_MAX;
    CUdeviceptr base;
    if (st->get_range != NULL &&
        st->get_range(&base, &alloc, (CUdeviceptr)p) == CUDA_SUCCESS)
      alloc -= (size_t)((CUdeviceptr)p - base);
    if ((o = calloc(1, sizeof *o)) == NULL) {
      cudaIpcCloseMemHandle(p);
      return opd__errf(err, OPD_ENOMEM, "out of memory");
    }
    o->session = session;
    o->dev = dev;
    memcpy(o->handle, handle, sizeof o->handle);
    o->base = p;
    o->alloc = alloc;
    o->next = st->ipc;
    st->ipc = o;
  }
  uint64_t end;
  if (__builtin_add_overflow(offset, size, &end) || end > o->alloc) {
    opd__errf(err, OPD_EBOUNDS, "bytes [%llu, %llu+%llu) lie outside the "
              "shared allocation of %zu bytes", (unsigned long long)offset,
              (unsigned long long)offset, (unsigned long long)size, o->alloc);
    if (o->refs == 0) {
      o->refs = 1;
      import_close(srv, o); /* closes the handle again */
    }
    return OPD_EBOUNDS;
  }
  o->refs++;
  *ptr = o->base + offset;
  *token = o;
  return 0;
}

/* What the backend holds for the arena: the IPC import, the device memory
 * (VMM or pool), or the host pin. */
void opd__cu_release(opd_arena_t *a) {
  if (a->import != NULL) {
    import_close(a->srv, a->import);
  } else if (a->device >= 0) {
    if (a->vmm) free_vmm(a->srv, a->vmm);
    else free_plain(a->srv, a->device, a->base);
  } else if (a->pinned) {
    cudaHostUnregister(a->base);
    a->pinned = 0;
  }
}
