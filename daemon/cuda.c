/* The CUDA backend: devices, streams, pinned arenas, device arenas, and
 * running a job's kernel on a session's stream.
 *
 * DESIGN
 * One process owns every GPU: at start we create each selected device's
 * primary context, a cuBLASLt handle and a utility
 * stream, and keep the device's stream-ordered memory pool from returning
 * memory to the driver (allocations then cost no device-wide sync). Each
 * session gets its own non-blocking stream per device the first time it
 * runs there (high priority if it asked at hello), so one client's ops stay
 * ordered and different clients' ops overlap.
 *
 * A CUDA job is launched from the loop thread: host tensors are staged
 * through stream-ordered scratch (cudaMallocAsync, H2D copy from the pinned
 * arena), the kernel gets a workspace the same way when it needs one
 * (cuBLASLt, im2col, nms masks: never shared between streams, and the pool
 * recycles it, so idle sessions hold no device memory), the kernel is
 * launched, outputs are copied back, scratch is freed on the stream, and an
 * event is recorded. A completion thread polls the pending jobs' events
 * (see poller_main), moves finished ones to a locked list and wakes the
 * loop with uv_async_send; the loop then replies. Nothing blocks the loop
 * or other clients on the GPU.
 *
 * Errors: every CUDA call is checked through CU(); a failure becomes the
 * job's error ("cuda:0: <what>: <cudaGetErrorString>"). An error that
 * poisons the context (illegal address and the like) goes to
 * opd__server_poisoned: unhealthy in stats, CUDA work refused, then a
 * drain and exit status 3 for the init system to restart opd (a context
 * cannot be repaired in-process; see docs/operations.md).
 */
#include <cublasLt.h>
#include <cuda.h> /* driver types only: entry points come from the runtime */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/wire.h"
#include "daemon/log.h"
#include "daemon/server.h"
#include "kernels/cuda/cuda.h"

typedef struct cuda_dev {
  int index;                     /* CUDA device ordinal */
  char name[256];
  uint64_t total_mem;
  int cc_major, cc_minor;
  cudaStream_t util;             /* allocations, frees */
  void *lt;                      /* cublasLtHandle_t */
  int prio_low, prio_high;       /* stream priority range */
} cuda_dev_t;

/* A client's IPC handle opened for one session. */
typedef struct ipc_open {
  uint64_t session;
  int dev;                       /* our device index */
  unsigned char handle[64];      /* cudaIpcMemHandle_t */
  char *base;                    /* where it is mapped here */
  size_t alloc;                  /* bytes of the allocation */
  int refs;                      /* arenas using it */
  struct ipc_open *next;
} ipc_open_t;

typedef CUresult (*get_range_fn)(CUdeviceptr *base, size_t *size,
                                 CUdeviceptr ptr);

/* The driver's VMM calls, reached through the runtime (no libcuda link). */
typedef struct vmm_api {
  CUresult (*create)(CUmemGenericAllocationHandle *, size_t,
                     const CUmemAllocationProp *, unsigned long long);
  CUresult (*release)(CUmemGenericAllocationHandle);
  CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
                      unsigned long long);
  CUresult (*addr_free)(CUdeviceptr, size_t);
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                  unsigned long long);
  CUresult (*unmap)(CUdeviceptr, size_t);
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
  CUresult (*export_fd)(void *, CUmemGenericAllocationHandle,
                        CUmemAllocationHandleType, unsigned long long);
  CUresult (*granularity)(size_t *, const CUmemAllocationProp *,
                          CUmemAllocationGranularity_flags);
} vmm_api_t;

/* An exportable device allocation. */
typedef struct vmm_alloc {
  CUmemGenericAllocationHandle handle;
  CUdeviceptr ptr;
  size_t size;                   /* rounded up to the granularity */
  int dev;
} vmm_alloc_t;

#define HIST_BUCKETS 1000 /* 0.1 us each: up to 100 us */

typedef struct cuda_state {
  cuda_dev_t dev[OPD_MAX_DEVICES];
  ipc_open_t *ipc;               /* opened client handles */
  get_range_fn get_range;        /* cuMemGetAddressRange, or NULL */
  vmm_api_t vmm;                 /* all set, or vmm.create NULL */
  uv_async_t async;              /* wakes the loop for completions */
  pthread_mutex_t mu;            /* guards done, pending, stop, events */
  pthread_cond_t cv;             /* pending became non-empty, or stop */
  pthread_t poller;              /* notices completed jobs (events) */
  int poller_started, stop;
  opd_job_t *pending;            /* launched jobs, oldest first */
  opd_job_t *pending_tail;
  cudaEvent_t free_ev[OPD_MAX_DEVICES][64]; /* recycled completion events */
  int n_free_ev[OPD_MAX_DEVICES];
  opd_job_t *done;               /* completed jobs, pushed by CUDA's thread */
  int inflight;                  /* launched, not yet done: keeps the loop
                                    alive (the async handle is ref'd) */
  int loop_polls;                /* the loop is polling the events itself
                                    (atomic; see opd__cuda_poll) */
  /* where the time of short jobs (request to reply under 1 ms) goes, in
   * ns summed over n_short jobs, and per piece a histogram of 0.1 us
   * buckets for the medians: logged at shutdown (docs/gpu.md) */
  uint64_t n_short, ns_sum[4]; /* to launch, launch, to seen, to reply */
  uint32_t hist[4][HIST_BUCKETS];
} cuda_state_t;

/* Evaluates a CUDA call; on failure formats "what: error" into err and
 * returns the opd error code from the enclosing function (style item 3:
 * a check macro that returns instead of exiting). */
#define CU(call, err, errlen)                                              \
  do {                                                                     \
    cudaError_t e_ = (call);                                               \
    if (e_ != cudaSuccess) {                                               \
      snprintf((err), (errlen), "%s:%d: %s: %s", __FILE__, __LINE__, #call, \
               cudaGetErrorString(e_));                                    \
      return cuda_code(e_);                                                \
    }                                                                      \
  } while (0)

static int cuda_code(cudaError_t e) {
  return e == cudaErrorMemoryAllocation ? OPD_ENOMEM : OPD_EBACKEND;
}

/* Errors after which the context is unusable. */
static int is_sticky(cudaError_t e) {
  return e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure ||
         e == cudaErrorHardwareStackError || e == cudaErrorIllegalInstruction ||
         e == cudaErrorMisalignedAddress || e == cudaErrorInvalidAddressSpace ||
         e == cudaErrorInvalidPc || e == cudaErrorUnknown ||
         e == cudaErrorAssert;
}

static void on_async(uv_async_t *h);
static void reply_done(opd_server_t *srv, opd_job_t *list);
static void cuda_reap(opd_server_t *srv);

/* cudaSetDevice, skipped when this thread's device already is index: on the
 * loop thread it sits on every launch's path. Every device switch in the
 * daemon goes through here, so the cache stays true. */
static _Thread_local int cur_device = -1;

static cudaError_t set_device(int index) {
  if (index == cur_device) return cudaSuccess;
  cudaError_t e = cudaSetDevice(index);
  cur_device = e == cudaSuccess ? index : -1;
  return e;
}
static void *poller_main(void *arg);

static void *driver_fn(const char *name) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault,
                                       &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess)
    return NULL;
  return fn;
}

/* Parses --devices: "all", "none", or "0,2". Fills use[], returns count or
 * -1 with err. */
static int parse_devices(const char *spec, int avail, int *use, char *err,
                         size_t errlen) {
  int n = 0;
  if (spec[0] == '\0' || strcmp(spec, "all") == 0) {
    for (int i = 0; i < avail && i < OPD_MAX_DEVICES; i++) use[n++] = i;
    return n;
  }
  if (strcmp(spec, "none") == 0) return 0;
  const char *p = spec;
  while (*p) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 0 || v >= avail || n >= OPD_MAX_DEVICES) {
      snprintf(err, errlen,
               "--devices %s: no CUDA device %.*s (%d visible)", spec,
               (int)(end == p ? (long)strlen(p) : end - p), p, avail);
      return -1;
    }
    use[n++] = (int)v;
    p = *end == ',' ? end + 1 : end;
    if (*end != ',' && *end != '\0') {
      snprintf(err, errlen, "--devices expects all, none or a list like 0,1");
      return -1;
    }
  }
  return n;
}

static int dev_init(cuda_dev_t *d, int index, char *err, size_t errlen) {
  struct cudaDeviceProp prop;
  d->index = index;
  CU(set_device(index), err, errlen);
  CU(cudaFree(0), err, errlen); /* creates the primary context now */
  CU(cudaGetDeviceProperties(&prop, index), err, errlen);
  snprintf(d->name, sizeof d->name, "%s", prop.name);
  d->total_mem = prop.totalGlobalMem;
  d->cc_major = prop.major;
  d->cc_minor = prop.minor;
  CU(cudaDeviceGetStreamPriorityRange(&d->prio_low, &d->prio_high), err,
     errlen);
  CU(cudaStreamCreateWithFlags(&d->util, cudaStreamNonBlocking), err, errlen);
  cudaMemPool_t pool;
  CU(cudaDeviceGetDefaultMemPool(&pool, index), err, errlen);
  uint64_t keep = UINT64_MAX;
  CU(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
     err, errlen);
  cublasLtHandle_t lt;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
    snprintf(err, errlen, "cublasLtCreate failed");
    return OPD_EBACKEND;
  }
  d->lt = lt;
  return 0;
}

int opd__cuda_init(opd_server_t *srv) {
  int avail = 0, use[OPD_MAX_DEVICES];
  char err[300];
  srv->healthy = 1;
  cudaError_t e = cudaGetDeviceCount(&avail);
  if (e != cudaSuccess) avail = 0;
  int n = parse_devices(srv->cfg.devices, avail, use, err, sizeof err);
  if (n < 0) {
    LOG_ERROR("%s", err);
    return OPD_EDEVICE;
  }
  if (n == 0) {
    if (strcmp(srv->cfg.devices, "none") != 0)
      LOG_INFO("no CUDA device (%s): running the cpu backend only",
               e != cudaSuccess ? cudaGetErrorString(e) : "none visible");
    return 0;
  }
  cuda_state_t *st = calloc(1, sizeof *st);
  if (st == NULL) return OPD_ENOMEM;
  pthread_mutex_init(&st->mu, NULL);
  for (int i = 0; i < n; i++) {
    if (dev_init(&st->dev[i], use[i], err, sizeof err) != 0) {
      LOG_ERROR("cuda:%d: %s", use[i], err);
      free(st);
      return OPD_EBACKEND;
    }
    LOG_INFO("cuda:%d: %s, %.1f GiB, compute %d.%d", use[i], st->dev[i].name,
             st->dev[i].total_mem / 1073741824.0, st->dev[i].cc_major,
             st->dev[i].cc_minor);
  }
  /* the driver's calls we need, without linking libcuda */
  st->get_range = (get_range_fn)driver_fn("cuMemGetAddressRange");
  if (st->get_range == NULL)
    LOG_WARN("cuMemGetAddressRange unavailable: imported sizes unchecked");
  vmm_api_t *v = &st->vmm;
  *(void **)&v->create = driver_fn("cuMemCreate");
  *(void **)&v->release = driver_fn("cuMemRelease");
  *(void **)&v->reserve = driver_fn("cuMemAddressReserve");
  *(void **)&v->addr_free = driver_fn("cuMemAddressFree");
  *(void **)&v->map = driver_fn("cuMemMap");
  *(void **)&v->unmap = driver_fn("cuMemUnmap");
  *(void **)&v->set_access = driver_fn("cuMemSetAccess");
  *(void **)&v->export_fd = driver_fn("cuMemExportToShareableHandle");
  *(void **)&v->granularity = driver_fn("cuMemGetAllocationGranularity");
  if (!v->create || !v->release || !v->reserve || !v->addr_free || !v->map ||
      !v->unmap || !v->set_access || !v->export_fd || !v->granularity) {
    LOG_WARN("CUDA VMM calls unavailable: exportable arenas are refused");
    v->create = NULL;
  }
  uv_async_init(srv->loop, &st->async, on_async);
  st->async.data = srv;
  uv_unref((uv_handle_t *)&st->async);
  srv->cuda = st;
  srv->n_devices = n;
  pthread_cond_init(&st->cv, NULL);
  if (pthread_create(&st->poller, NULL, poller_main, srv) != 0) {
    LOG_ERROR("cannot start the CUDA completion thread");
    return OPD_EBACKEND;
  }
  st->poller_started = 1;
  return 0;
}

void opd__cuda_shutdown(opd_server_t *srv) {
  cuda_state_t *st = srv->cuda;
  if (st == NULL) return;
  if (st->poller_started) {
    pthread_mutex_lock(&st->mu);
    __atomic_store_n(&st->stop, 1, __ATOMIC_RELEASE);
    pthread_cond_signal(&st->cv);
    pthread_mutex_unlock(&st->mu);
    pthread_join(st->poller, NULL);
  }
  if (st->n_short > 0) {
    double n = (double)st->n_short * 1000.0, med[4];
    for (int k = 0; k < 4; k++) /* us: 0.1 us buckets */
      med[k] = opd__hist_pct(st->hist[k], HIST_BUCKETS, st->n_short, 0.5, 0.1);
    LOG_INFO("cuda: %llu jobs under 1 ms, mean us: request to launch %.2f, "
             "launch %.2f, launch to seen complete %.2f, to replied %.2f; "
             "median us: %.2f, %.2f, %.2f, %.2f",
             (unsigned long long)st->n_short, st->ns_sum[0] / n,
             st->ns_sum[1] / n, st->ns_sum[2] / n, st->ns_sum[3] / n, med[0],
             med[1], med[2], med[3]);
  }
  for (int i = 0; i < srv->n_devices; i++) {
    cuda_dev_t *d = &st->dev[i];
    set_device(d->index);
    cudaStreamSynchronize(d->util);
    cublasLtDestroy((cublasLtHandle_t)d->lt);
    cudaStreamDestroy(d->util);
  }
  for (int d = 0; d < srv->n_devices; d++)
    for (int i = 0; i < st->n_free_ev[d]; i++) cudaEventDestroy(st->free_ev[d][i]);
  pthread_cond_destroy(&st->cv);
  pthread_mutex_destroy(&st->mu);
  free(st);
  srv->cuda = NULL;
  srv->n_devices = 0;
}

void opd__cuda_pack_devices(opd_server_t *srv, msgpack_packer *pk) {
  cuda_state_t *st = srv->cuda;
  msgpack_pack_array(pk, (size_t)srv->n_devices);
  for (int i = 0; i < srv->n_devices; i++) {
    cuda_dev_t *d = &st->dev[i];
    char cc[16];
    snprintf(cc, sizeof cc, "%d.%d", d->cc_major, d->cc_minor);
    msgpack_pack_map(pk, 4);
    msgpack_pack_str_with_body(pk, "device", 6);
    char name[16];
    int n = snprintf(name, sizeof name, "cuda:%d", i);
    msgpack_pack_str_with_body(pk, name, (size_t)n);
    msgpack_pack_str_with_body(pk, "name", 4);
    msgpack_pack_str_with_body(pk, d->name, strlen(d->name));
    msgpack_pack_str_with_body(pk, "memory", 6);
    msgpack_pack_uint64(pk, d->total_mem);
    msgpack_pack_str_with_body(pk, "compute", 7);
    msgpack_pack_str_with_body(pk, cc, strlen(cc));
  }
}

/* ---- memory ------------------------------------------------------------- */

int opd__cuda_host_register(opd_server_t *srv, opd_arena_t *a) {
  if (srv->n_devices == 0) return 0;
  cudaError_t e = cudaHostRegister(a->base, a->size, cudaHostRegisterPortable);
  if (e != cudaSuccess) {
    /* still usable: copies from it are just slower */
    LOG_WARN("arena %llu: cudaHostRegister of %llu bytes: %s",
             (unsigned long long)a->id, (unsigned long long)a->size,
             cudaGetErrorString(e));
    cudaGetLastError();
    return 0;
  }
  a->pinned = 1;
  return 0;
}

void opd__cuda_host_unregister(opd_arena_t *a) {
  if (a->pinned) cudaHostUnregister(a->base);
  a->pinned = 0;
}

int opd__cuda_alloc(opd_server_t *srv, int dev, uint64_t size, void **ptr,
                    char *err, size_t errlen) {
  cuda_state_t *st = srv->cuda;
  if (st == NULL || dev < 0 || dev >= srv->n_devices) {
    snprintf(err, errlen, "no device cuda:%d (this daemon has %d)", dev,
             srv->n_devices);
    return OPD_EDEVICE;
  }
  cuda_dev_t *d = &st->dev[dev];
  CU(set_device(d->index), err, errlen);
  cudaError_t e = cudaMallocAsync(ptr, size, d->util);
  if (e != cudaSuccess) {
    cudaGetLastError();
    snprintf(err, errlen, "cuda:%d: cannot allocate %llu bytes: %s", dev,
             (unsigned long long)size, cudaGetErrorString(e));
    return cuda_code(e);
  }
  /* the pool hands out memory ordered on `util`: make it usable by any
   * session stream before we return its id */
  CU(cudaStreamSynchronize(d->util), err, errlen);
  CU(cudaMemsetAsync(*ptr, 0, size, d->util), err, errlen);
  CU(cudaStreamSynchronize(d->util), err, errlen);
  return 0;
}

void opd__cuda_free(opd_server_t *srv, int dev, void *ptr) {
  cuda_state_t *st = srv->cuda;
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

int opd__cuda_alloc_vmm(opd_server_t *srv, int dev, uint64_t size, void **ptr,
                        void **token, char *err, size_t errlen) {
  cuda_state_t *st = srv->cuda;
  vmm_api_t *v = st ? &st->vmm : NULL;
  if (st == NULL || dev < 0 || dev >= srv->n_devices) {
    snprintf(err, errlen, "no device cuda:%d", dev);
    return OPD_EDEVICE;
  }
  if (v->create == NULL) {
    snprintf(err, errlen, "this driver does not offer CUDA VMM: exportable "
             "memory is not available");
    return OPD_EBACKEND;
  }
  CU(set_device(st->dev[dev].index), err, errlen);
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
    snprintf(err, errlen, "out of memory");
    return OPD_ENOMEM;
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
  CU(cudaMemset((void *)a->ptr, 0, a->size), err, errlen);
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
  snprintf(err, errlen, "cuda:%d: %s of %zu bytes failed: %s", dev, step,
           a->size, r == CUDA_ERROR_OUT_OF_MEMORY ? "out of memory" : cu_name(r));
  free(a);
  return r == CUDA_ERROR_OUT_OF_MEMORY ? OPD_ENOMEM : OPD_EBACKEND;
}

void opd__cuda_free_vmm(opd_server_t *srv, void *token) {
  cuda_state_t *st = srv->cuda;
  vmm_alloc_t *a = token;
  set_device(st->dev[a->dev].index);
  st->vmm.unmap(a->ptr, a->size);
  st->vmm.addr_free(a->ptr, a->size);
  st->vmm.release(a->handle);
  free(a);
}

uint64_t opd__cuda_vmm_size(void *token) {
  return ((vmm_alloc_t *)token)->size;
}

int opd__cuda_export(opd_server_t *srv, void *token, int *fd, char *err,
                     size_t errlen) {
  cuda_state_t *st = srv->cuda;
  vmm_alloc_t *a = token;
  int out = -1;
  CUresult r = st->vmm.export_fd(&out, a->handle,
                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  if (r != CUDA_SUCCESS) {
    snprintf(err, errlen, "cuMemExportToShareableHandle failed: %s",
             cu_name(r));
    return OPD_EBACKEND;
  }
  *fd = out;
  return 0;
}

/* ---- client memory by IPC handle ------------------------------------------ */

int opd__cuda_import(opd_server_t *srv, uint64_t session, int dev,
                     const void *handle, uint64_t offset, uint64_t size,
                     void **ptr, void **token, char *err, size_t errlen) {
  cuda_state_t *st = srv->cuda;
  ipc_open_t *o;
  if (st == NULL || dev < 0 || dev >= srv->n_devices) {
    snprintf(err, errlen, "no device cuda:%d", dev);
    return OPD_EDEVICE;
  }
  for (o = st->ipc; o; o = o->next)
    if (o->session == session && o->dev == dev &&
        memcmp(o->handle, handle, sizeof o->handle) == 0)
      break;
  if (o == NULL) {
    cudaIpcMemHandle_t h;
    void *p;
    memcpy(&h, handle, sizeof h);
    CU(set_device(st->dev[dev].index), err, errlen);
    cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      cudaGetLastError();
      snprintf(err, errlen, "the IPC handle does not open on cuda:%d: %s", dev,
               cudaGetErrorString(e));
      return OPD_EINVAL;
    }
    size_t alloc = SIZE_MAX;
    CUdeviceptr base;
    if (st->get_range != NULL &&
        st->get_range(&base, &alloc, (CUdeviceptr)p) == CUDA_SUCCESS)
      alloc -= (size_t)((CUdeviceptr)p - base);
    if ((o = calloc(1, sizeof *o)) == NULL) {
      cudaIpcCloseMemHandle(p);
      snprintf(err, errlen, "out of memory");
      return OPD_ENOMEM;
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
    snprintf(err, errlen, "bytes [%llu, %llu+%llu) lie outside the shared "
             "allocation of %zu bytes", (unsigned long long)offset,
             (unsigned long long)offset, (unsigned long long)size, o->alloc);
    if (o->refs == 0) {
      o->refs = 1;
      opd__cuda_import_release(srv, o); /* closes the handle again */
    }
    return OPD_EBOUNDS;
  }
  o->refs++;
  *ptr = o->base + offset;
  *token = o;
  return 0;
}

void opd__cuda_import_release(opd_server_t *srv, void *token) {
  cuda_state_t *st = srv->cuda;
  ipc_open_t *o = token, **pp;
  if (--o->refs > 0) return;
  for (pp = &st->ipc; *pp != o; pp = &(*pp)->next) {
  }
  *pp = o->next;
  set_device(st->dev[o->dev].index);
  cudaIpcCloseMemHandle(o->base);
  free(o);
}

/* ---- kernels and jobs ---------------------------------------------------- */

const void *opd__cuda_kernel(const opd_op_def_t *op, int dtype, char *err,
                             size_t errlen) {
  if (op == NULL || op->cuda == NULL) {
    snprintf(err, errlen, "has no CUDA kernel; run it with device cpu");
    return NULL;
  }
  if (dtype > 0 && !((op->cuda_dtypes >> dtype) & 1)) {
    snprintf(err, errlen, "has no CUDA kernel for %s", opd__dtype_name(dtype));
    return NULL;
  }
  return op;
}

static int session_stream(opd_session_t *s, int dev, cudaStream_t *out,
                          char *err, size_t errlen) {
  cuda_state_t *st = s->srv->cuda;
  cuda_dev_t *d = &st->dev[dev];
  if (s->streams[dev] == NULL) {
    cudaStream_t stream;
    CU(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking,
                                    s->priority ? d->prio_high : d->prio_low),
       err, errlen);
    s->streams[dev] = stream;
  }
  *out = s->streams[dev];
  return 0;
}

void opd__cuda_session_release(opd_session_t *s) {
  cuda_state_t *st = s->srv->cuda;
  if (st == NULL) return;
  for (int i = 0; i < s->srv->n_devices; i++) {
    if (s->streams[i] == NULL) continue;
    set_device(st->dev[i].index);
    cudaStreamDestroy(s->streams[i]); /* returns at once; work drains */
    s->streams[i] = NULL;
  }
}

/* The completion poller. A launched job ends with an event recorded on
 * its stream (a stream that failed reports its error there too, so a
 * poisoned context is noticed even when the kernel never completes).
 *
 * Right after a launch the loop thread itself queries the events (it spins
 * for GPU_SPIN_NS: daemon/ringsvc.c, on_idle, opd__cuda_poll) and replies
 * at once: a tiny op needs no hand-off between threads, no wake-up, and no
 * second thread in the driver's locks while the loop launches. Meanwhile
 * this thread sleeps on its condition variable. When the loop stops
 * polling with jobs still pending (opd__cuda_loop_polls(srv, 0): a kernel
 * longer than GPU_SPIN_NS, or the loop about to block), it wakes this
 * thread, which polls them (spinning for up to SPIN_NS after the last
 * progress, then sleeps doubling up to MAX_SLEEP_NS) and hands finished
 * ones to the loop through uv_async_send. With nothing pending, or while
 * the loop polls, it sleeps: no busy core besides the loop's own. Querying
 * instead of a stream callback saves the driver's callback thread hand-off
 * (tens of microseconds on a tiny op). */
#define SPIN_NS 50000
#define MAX_SLEEP_NS 100000
/* how long the loop itself spins for a launched job (see on_idle) */
#define GPU_SPIN_NS 50000

static void cpu_pause(int n) {
  for (int i = 0; i < n; i++) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

/* Moves the pending jobs whose events completed (or failed) to the done
 * list; caller holds mu. Returns how many moved. */
static int collect_done(cuda_state_t *st) {
  int done = 0;
  for (opd_job_t **pp = &st->pending, *prev = NULL; *pp;) {
    opd_job_t *job = *pp;
    set_device(st->dev[job->device].index);
    cudaError_t e = cudaEventQuery((cudaEvent_t)job->cuda_event);
    if (e == cudaErrorNotReady) {
      prev = job;
      pp = &job->next;
      continue;
    }
    *pp = job->next; /* finished, or its stream failed */
    if (st->pending_tail == job) st->pending_tail = prev;
    job->cuda_status = (int)e;
    job->t_seen = opd__now_ns();
    job->ns = job->t_seen - job->t_start;
    job->next = st->done;
    st->done = job;
    done++;
  }
  return done;
}

static void *poller_main(void *arg) {
  opd_server_t *srv = arg;
  cuda_state_t *st = srv->cuda;
  uint64_t last_progress = 0;
  long sleep_ns = 0;

  pthread_mutex_lock(&st->mu);
  for (;;) {
    if ((__atomic_load_n(&st->loop_polls, __ATOMIC_RELAXED) || st->pending == NULL) &&
        !st->stop) {
      while ((__atomic_load_n(&st->loop_polls, __ATOMIC_RELAXED) ||
              st->pending == NULL) && !st->stop)
        pthread_cond_wait(&st->cv, &st->mu);
      last_progress = opd__now_ns();
      sleep_ns = 0;
    }
    if (st->stop) break;
    if (collect_done(st)) {
      pthread_mutex_unlock(&st->mu);
      uv_async_send(&st->async);
      pthread_mutex_lock(&st->mu);
      last_progress = opd__now_ns();
      sleep_ns = 0;
      continue;
    }
    if (opd__now_ns() - last_progress < SPIN_NS) {
      /* let launches in between: the loop thread takes mu to queue jobs */
      pthread_mutex_unlock(&st->mu);
      cpu_pause(8);
      pthread_mutex_lock(&st->mu);
      continue;
    }
    /* a long kernel: back off, 2 us doubling up to MAX_SLEEP_NS */
    sleep_ns = sleep_ns ? (sleep_ns * 2 > MAX_SLEEP_NS ? MAX_SLEEP_NS : sleep_ns * 2)
                        : 2000;
    pthread_mutex_unlock(&st->mu);
    struct timespec ts = {0, sleep_ns};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&st->mu);
  }
  pthread_mutex_unlock(&st->mu);
  return NULL;
}

/* on: the loop polls (the poller sleeps); off: the poller takes over the
 * pending jobs, woken only if there are any. */
void opd__cuda_loop_polls(opd_server_t *srv, int on) {
  cuda_state_t *st = srv->cuda;
  if (st == NULL || __atomic_load_n(&st->loop_polls, __ATOMIC_RELAXED) == on)
    return;
  if (on) {
    __atomic_store_n(&st->loop_polls, 1, __ATOMIC_RELAXED);
    return;
  }
  pthread_mutex_lock(&st->mu);
  __atomic_store_n(&st->loop_polls, 0, __ATOMIC_RELAXED);
  if (st->pending != NULL) pthread_cond_signal(&st->cv);
  pthread_mutex_unlock(&st->mu);
}

int opd__cuda_poll(opd_server_t *srv) {
  cuda_state_t *st = srv->cuda;
  if (st == NULL || (__atomic_load_n(&st->pending, __ATOMIC_RELAXED) == NULL &&
                     __atomic_load_n(&st->done, __ATOMIC_RELAXED) == NULL) ||
      pthread_mutex_trylock(&st->mu) != 0)
    return 0;
  int done = collect_done(st);
  opd_job_t *list = st->done; /* with what the poller finished before */
  st->done = NULL;
  pthread_mutex_unlock(&st->mu);
  reply_done(srv, list);
  return done + (list != NULL);
}

/* An event for a job on device dev (recycled; loop thread only). */
static int take_event(cuda_state_t *st, int dev, cudaEvent_t *ev) {
  if (st->n_free_ev[dev] > 0) {
    *ev = st->free_ev[dev][--st->n_free_ev[dev]];
    return 0;
  }
  return cudaEventCreateWithFlags(ev, cudaEventDisableTiming) == cudaSuccess
             ? 0
             : -1;
}

static void give_event(cuda_state_t *st, int dev, cudaEvent_t ev) {
  if (st->n_free_ev[dev] < 64) st->free_ev[dev][st->n_free_ev[dev]++] = ev;
  else cudaEventDestroy(ev);
}

static void on_async(uv_async_t *h) {
  cuda_reap((opd_server_t *)h->data);
}

int opd__cuda_inflight(opd_server_t *srv) {
  cuda_state_t *st = srv->cuda;
  return st != NULL ? st->inflight : 0;
}

/* Replies to the finished jobs of list (loop thread). */
static void reply_done(opd_server_t *srv, opd_job_t *list) {
  cuda_state_t *st = srv->cuda;
  /* the list is newest first; sessions are independent, order is moot */
  while (list) {
    opd_job_t *job = list;
    list = job->next;
    job->next = NULL;
    cudaError_t e = (cudaError_t)job->cuda_status;
    if (e != cudaSuccess) {
      job->rc = OPD_EBACKEND;
      snprintf(job->call.err, sizeof job->call.err, "cuda:%d: %s",
               job->device, cudaGetErrorString(e));
      if (is_sticky(e)) opd__server_poisoned(srv, cudaGetErrorString(e));
    }
    if (--st->inflight == 0) uv_unref((uv_handle_t *)&st->async);
    if (e == cudaSuccess) /* an event of a failed stream is not reused */
      give_event(st, job->device, (cudaEvent_t)job->cuda_event);
    job->cuda_event = NULL;
    uint64_t now = opd__now_ns();
    if (now - job->t_recv < 1000000) {
      uint64_t piece[4] = {job->t_start - job->t_recv,
                           job->t_launched - job->t_start,
                           job->t_seen - job->t_launched, now - job->t_seen};
      st->n_short++;
      for (int k = 0; k < 4; k++) { /* histograms of 0.1 us buckets */
        st->ns_sum[k] += piece[k];
        opd__hist_add(st->hist[k], HIST_BUCKETS, piece[k], 100);
      }
    }
    opd__job_done(job);
  }
}

/* Replies to every job the poller finished (loop thread). */
static void cuda_reap(opd_server_t *srv) {
  cuda_state_t *st = srv->cuda;
  pthread_mutex_lock(&st->mu);
  opd_job_t *list = st->done;
  st->done = NULL;
  pthread_mutex_unlock(&st->mu);
  reply_done(srv, list);
}

/* Launches everything of one job on the session's stream. On error the
 * scratch already allocated is freed on the stream; nothing was queued
 * that would call back. */
int opd__cuda_job_launch(opd_job_t *job) {
  opd_session_t *s = job->s;
  cuda_state_t *st = s->srv->cuda;
  opd_kcall_t *call = &job->call;
  char *err = call->err;
  size_t errlen = sizeof call->err;
  int dev = job->device;
  cuda_dev_t *d = &st->dev[dev];
  cudaStream_t stream;
  void *scratch[2 * OPD_MAX_TENSORS];
  int n_scratch = 0, rc = 0;

  if (!s->srv->healthy) {
    snprintf(err, errlen, "cuda:%d: %s", dev, s->srv->goodbye_why);
    return OPD_EBACKEND;
  }
  CU(set_device(d->index), err, errlen);
  if ((rc = session_stream(s, dev, &stream, err, errlen)) != 0) return rc;
  job->t_start = opd__now_ns();

#define STEP(x)                                                  \
  do {                                                           \
    cudaError_t e_ = (x);                                        \
    if (e_ != cudaSuccess) {                                     \
      snprintf(err, errlen, "cuda:%d: %s: %s", dev, #x,          \
               cudaGetErrorString(e_));                          \
      rc = cuda_code(e_);                                        \
      goto fail;                                                 \
    }                                                            \
  } while (0)

  for (int i = 0; i < call->n_in; i++) {
    if (job->host_in[i] == NULL || job->in_bytes[i] == 0) continue;
    void *p;
    STEP(cudaMallocAsync(&p, job->in_bytes[i], stream));
    scratch[n_scratch++] = p;
    STEP(cudaMemcpyAsync(p, job->host_in[i], job->in_bytes[i],
                         cudaMemcpyHostToDevice, stream));
    call->in[i].data = p;
  }
  for (int i = 0; i < call->n_out; i++) {
    if (job->host_out[i] == NULL || job->out_bytes[i] == 0) continue;
    void *p;
    STEP(cudaMallocAsync(&p, job->out_bytes[i], stream));
    scratch[n_scratch++] = p;
    call->out[i].data = p;
  }
  const opd_op_def_t *op = job->cuda_kernel;
  size_t scratch_bytes = op->cuda_workspace ? op->cuda_workspace(call) : 0;
  size_t ws_bytes = 0;
  if (scratch_bytes > 0 || (op->flags & OPD_OPF_CUDA_BLASLT))
    ws_bytes = OPD_CUDA_LT_WORKSPACE + scratch_bytes;
  void *ws = NULL;
  if (ws_bytes > 0) {
    STEP(cudaMallocAsync(&ws, ws_bytes, stream));
    scratch[n_scratch++] = ws;
  }
  opd_cuda_ctx_t ctx = {.stream = stream, .cublaslt = d->lt, .workspace = ws,
                        .workspace_bytes = ws_bytes, .device = d->index};
  rc = opd__kernel_rc(call, op->cuda(call, &ctx));
  if (rc != 0) goto fail;
  for (int i = 0; i < call->n_out; i++) {
    if (job->host_out[i] == NULL || job->out_bytes[i] == 0) continue;
    STEP(cudaMemcpyAsync(job->host_out[i], call->out[i].data,
                         job->out_bytes[i], cudaMemcpyDeviceToHost, stream));
  }
  for (int i = 0; i < n_scratch; i++) cudaFreeAsync(scratch[i], stream);
  n_scratch = 0;
  cudaEvent_t ev;
  if (take_event(st, dev, &ev) != 0) {
    snprintf(err, errlen, "cuda:%d: cudaEventCreate: %s", dev,
             cudaGetErrorString(cudaGetLastError()));
    rc = OPD_EBACKEND;
    goto fail;
  }
  cudaError_t er = cudaEventRecord(ev, stream);
  if (er != cudaSuccess) {
    give_event(st, dev, ev);
    snprintf(err, errlen, "cuda:%d: cudaEventRecord: %s", dev,
             cudaGetErrorString(er));
    rc = cuda_code(er);
    goto fail;
  }
  job->cuda_event = ev;
  job->t_launched = opd__now_ns();
  job->next = NULL;
  pthread_mutex_lock(&st->mu);
  if (st->pending_tail) st->pending_tail->next = job;
  else st->pending = job;
  st->pending_tail = job;
  /* no signal: the loop polls it first (on_idle, started below), and
   * wakes the poller if it is still pending when the loop stops */
  pthread_mutex_unlock(&st->mu);
  if (st->inflight++ == 0) uv_ref((uv_handle_t *)&st->async);
  /* a tiny op finishes within microseconds: the loop watches for it
   * without blocking for a while (daemon/ringsvc.c, on_idle) */
  s->srv->gpu_spin_until = opd__now_ns() + GPU_SPIN_NS;
  opd__ring_update_idle(s->srv);
  return 0;
fail:
#undef STEP
  for (int i = 0; i < n_scratch; i++) cudaFreeAsync(scratch[i], stream);
  cudaError_t sticky = cudaGetLastError();
  if (is_sticky(sticky)) opd__server_poisoned(s->srv, cudaGetErrorString(sticky));
  return rc;
}
