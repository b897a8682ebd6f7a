/* libopd's CUDA driver: loaded from libcuda.so.1 at first use, this
 * process's devices named for the daemon, and the daemon's exported
 * device arenas mapped here (opd_cuda_map_export).
 *
 * DESIGN
 * libopd links no CUDA library. A client that orders runs with its stream
 * has a CUDA context, so the driver is in its process: the entry points
 * (cuda.h's opd__cu_t) are looked up once with dlopen and dlsym. This is
 * the only loader of the driver in opd's clients: the Python package maps
 * exported arenas through opd_cuda_map_export and opd_cuda_unmap rather
 * than loading the driver itself. The file depends on nothing of libopd
 * but errors.c, so that run.c and the stream-ordering files may use it.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "client/libopd/cuda.h"
#include "client/libopd/internal.h"

/* ---- the driver ------------------------------------------------------- */

opd__cu_t opd__cu; /* cuda.h */
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static void cu_load(void);
/* Loads the driver once (any thread; later calls return at once). */
static void load_once(void) { pthread_once(&cu_once, cu_load); }

/* The VMM calls of opd_cuda_map_export (optional: vmm_ok). */
static void vmm_load(void *h) {
  struct { void **fn; const char *name; } sym[] = {
      {(void **)&opd__cu.init, "cuInit"},
      {(void **)&opd__cu.primary_retain, "cuDevicePrimaryCtxRetain"},
      {(void **)&opd__cu.mem_import, "cuMemImportFromShareableHandle"},
      {(void **)&opd__cu.mem_reserve, "cuMemAddressReserve"},
      {(void **)&opd__cu.mem_map, "cuMemMap"},
      {(void **)&opd__cu.mem_set_access, "cuMemSetAccess"},
      {(void **)&opd__cu.mem_unmap, "cuMemUnmap"},
      {(void **)&opd__cu.mem_address_free, "cuMemAddressFree"},
      {(void **)&opd__cu.mem_release, "cuMemRelease"},
  };
  opd__cu.error_name = (cu_result(*)(cu_result, const char **))dlsym(h, "cuGetErrorName");
  opd__cu.vmm_ok = 1;
  for (size_t i = 0; i < sizeof sym / sizeof sym[0]; i++)
    if ((*sym[i].fn = dlsym(h, sym[i].name)) == NULL) opd__cu.vmm_ok = 0;
}

static void cu_load(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    snprintf(opd__cu.why, sizeof opd__cu.why, "the CUDA driver is not "
             "available in this process (%s)", dlerror());
    return;
  }
  vmm_load(h);
  struct { void **fn; const char *name; } sym[] = {
      {(void **)&opd__cu.ctx_get_current, "cuCtxGetCurrent"},
      {(void **)&opd__cu.ctx_push, "cuCtxPushCurrent_v2"},
      {(void **)&opd__cu.ctx_pop, "cuCtxPopCurrent_v2"},
      {(void **)&opd__cu.stream_get_ctx, "cuStreamGetCtx"},
      {(void **)&opd__cu.event_create, "cuEventCreate"},
      {(void **)&opd__cu.event_destroy, "cuEventDestroy_v2"},
      {(void **)&opd__cu.event_record, "cuEventRecord"},
      {(void **)&opd__cu.stream_wait_event, "cuStreamWaitEvent"},
      {(void **)&opd__cu.ipc_get_event, "cuIpcGetEventHandle"},
      {(void **)&opd__cu.ipc_open_event, "cuIpcOpenEventHandle"},
      {(void **)&opd__cu.ipc_get_mem, "cuIpcGetMemHandle"},
      {(void **)&opd__cu.pointer_attrs, "cuPointerGetAttributes"},
      {(void **)&opd__cu.error_string, "cuGetErrorString"},
      {(void **)&opd__cu.ctx_get_device, "cuCtxGetDevice"},
      {(void **)&opd__cu.device_attr, "cuDeviceGetAttribute"},
      {(void **)&opd__cu.stream_sync, "cuStreamSynchronize"},
  };
  for (size_t i = 0; i < sizeof sym / sizeof sym[0]; i++) {
    if ((*sym[i].fn = dlsym(h, sym[i].name)) == NULL) {
      snprintf(opd__cu.why, sizeof opd__cu.why, "libcuda.so.1 has no %s (a driver "
               "older than CUDA 11?)", sym[i].name);
      return;
    }
  }
  opd__cu.device_get = (cu_result(*)(int *, int))dlsym(h, "cuDeviceGet");
  opd__cu.device_count = (cu_result(*)(int *))dlsym(h, "cuDeviceGetCount");
  void *uu = dlsym(h, "cuDeviceGetUuid_v2"); /* MIG instances their own */
  if (uu == NULL) uu = dlsym(h, "cuDeviceGetUuid");
  opd__cu.device_uuid = (cu_result(*)(unsigned char *, int))uu;
  struct { void **fn; const char *name, *alt; } poll[] = {
      {(void **)&opd__cu.ipc_open_mem, "cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle"},
      {(void **)&opd__cu.ipc_close_mem, "cuIpcCloseMemHandle", NULL},
      {(void **)&opd__cu.module_load_data, "cuModuleLoadData", NULL},
      {(void **)&opd__cu.module_get_function, "cuModuleGetFunction", NULL},
      {(void **)&opd__cu.module_unload, "cuModuleUnload", NULL},
      {(void **)&opd__cu.launch_kernel, "cuLaunchKernel", NULL},
      {(void **)&opd__cu.mem_host_alloc, "cuMemHostAlloc", NULL},
      {(void **)&opd__cu.mem_host_device_ptr, "cuMemHostGetDevicePointer_v2",
       "cuMemHostGetDevicePointer"},
      {(void **)&opd__cu.mem_free_host, "cuMemFreeHost", NULL},
      {(void **)&opd__cu.ctx_synchronize, "cuCtxSynchronize", NULL},
  };
  opd__cu.memset_d32 = (cu_result(*)(cu_ptr_t, unsigned, size_t, void *))dlsym(
      h, "cuMemsetD32Async");
  opd__cu.stream_query = (cu_result(*)(void *))dlsym(h, "cuStreamQuery");
  opd__cu.stream_create = (cu_result(*)(void **, unsigned))dlsym(h, "cuStreamCreate");
  opd__cu.stream_destroy = (cu_result(*)(void *))dlsym(h, "cuStreamDestroy_v2");
  opd__cu.launch_kernel_ex = (cu_result(*)(const void *, void *, void **, void **))dlsym(
      h, "cuLaunchKernelEx");
  opd__cu.poll_ok = 1;
  for (size_t i = 0; i < sizeof poll / sizeof poll[0]; i++) {
    *poll[i].fn = dlsym(h, poll[i].name);
    if (*poll[i].fn == NULL && poll[i].alt) *poll[i].fn = dlsym(h, poll[i].alt);
    if (*poll[i].fn == NULL) opd__cu.poll_ok = 0;
  }
  opd__cu.ok = 1;
}


int opd__cu_ready(const char *who) {
  load_once();
  return opd__cu.ok ? 0 : opd__fail(OPD_EBACKEND, "%s: %s", who, opd__cu.why);
}

const char *opd__cu_str(cu_result r) {
  const char *s = NULL;
  if (opd__cu.error_string == NULL || opd__cu.error_string(r, &s) != 0 || s == NULL)
    return "unknown CUDA error";
  return s;
}

/* ---- this process's devices, by UUID on the wire ---------------------- */

/* The daemon's cuda:N is not this process's cuda:N as soon as the two see
 * different CUDA_VISIBLE_DEVICES, so a device of this process is sent by
 * its UUID ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi -L
 * prints it), which the daemon maps to its own device or refuses naming
 * it. Looked up once per device (the driver must be initialized: a
 * process with a context or device memory is); "cuda:N" is sent where the
 * driver cannot tell (no cuDeviceGetUuid, not initialized). */
static char uuid_name[OPD_CUDA_DEVICES][48];
static pthread_mutex_t uuid_mu = PTHREAD_MUTEX_INITIALIZER;

const char *opd__cuda_uuid(int dev) {
  if (dev < 0 || dev >= OPD_CUDA_DEVICES || !opd__cu.ok || opd__cu.device_get == NULL ||
      opd__cu.device_uuid == NULL)
    return NULL;
  pthread_mutex_lock(&uuid_mu);
  char *name = uuid_name[dev];
  int d;
  unsigned char u[16];
  if (name[0] == '\0' && opd__cu.device_get(&d, dev) == 0 && opd__cu.device_uuid(u, d) == 0)
    snprintf(name, sizeof uuid_name[0],
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
             "%02x%02x%02x%02x%02x%02x",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10],
             u[11], u[12], u[13], u[14], u[15]);
  pthread_mutex_unlock(&uuid_mu);
  return name[0] ? name : NULL;
}

/* What the daemon is sent for this process's device dev: its UUID, else
 * "cuda:N" (in buf, 16 bytes). */
const char *opd__cuda_wire_name(int dev, char *buf) {
  const char *u = opd__cuda_uuid(dev);
  if (u != NULL) return u;
  snprintf(buf, 16, "cuda:%d", dev);
  return buf;
}

int opd_cuda_device_name(int dev, char *buf, size_t cap) {
  if (buf == NULL || cap == 0 || dev < 0 || dev >= OPD_CUDA_DEVICES)
    return opd__fail(OPD_EINVAL, "opd_cuda_device_name: device %d out of "
                     "0..%d or no buffer", dev, OPD_CUDA_DEVICES - 1);
  load_once();
  char tmp[16];
  const char *n = opd__cuda_wire_name(dev, tmp);
  if (strlen(n) >= cap)
    return opd__fail(OPD_ELIMIT, "opd_cuda_device_name: %zu bytes of room "
                     "for \"%s\"", cap, n);
  strcpy(buf, n);
  return 0;
}

/* This process's index of the device with UUID `uuid` ("GPU-" optional,
 * any case), or -1. */
static int uuid_index(const char *uuid) {
  const char *want = strncasecmp(uuid, "GPU-", 4) == 0 ? uuid + 4 : uuid;
  int n = 0;
  if (opd__cu.device_count == NULL || opd__cu.device_count(&n) != 0) return -1;
  for (int i = 0; i < n && i < OPD_CUDA_DEVICES; i++) {
    const char *u = opd__cuda_uuid(i);
    if (u != NULL && strcasecmp(u + 4, want) == 0) return i;
  }
  return -1;
}

/* N of "cuda" (0) or "cuda:N" (N < OPD_CUDA_DEVICES), else -1. */
static int cuda_n(const char *device) {
  if (device == NULL || strncmp(device, "cuda", 4) != 0) return -1;
  if (device[4] == '\0') return 0;
  char *end;
  long n = device[4] == ':' && device[5] ? strtol(device + 5, &end, 10) : -1;
  return n >= 0 && n < OPD_CUDA_DEVICES && *end == '\0' ? (int)n : -1;
}

int opd__cuda_index(const char *who, const char *device, int *dev) {
  if ((*dev = cuda_n(device)) >= 0) return 0;
  if (device != NULL && strncmp(device, "cuda", 4) != 0 && strlen(device) >= 32) {
    int rc = opd__cu_ready(who);
    if (rc != 0) return rc;
    if ((*dev = uuid_index(device)) >= 0) return 0;
    return opd__fail(OPD_EDEVICE, "%s: no CUDA device of this process has UUID "
                     "%s", who, device);
  }
  return opd__fail(OPD_EINVAL, "%s: device \"%s\" is not \"cuda\", "
                   "\"cuda:N\" (N < %d) or a UUID", who,
                   device ? device : "(null)", OPD_CUDA_DEVICES);
}

/* ---- contexts -------------------------------------------------------- */

int opd__ctx_enter(void *ctx) {
  void *cur = NULL;
  if (opd__cu.ctx_get_current(&cur) == 0 && cur == ctx) return 0;
  return opd__cu.ctx_push(ctx) == 0;
}

void opd__ctx_leave(int pushed) {
  void *old;
  if (pushed) opd__cu.ctx_pop(&old);
}

/* The device string a prepared stream-ordered run sends (cuda.h). */
void opd__cuda_wire(const char *device, char *out, size_t cap) {
  snprintf(out, cap, "%s", device);
  load_once();
  int dev = cuda_n(device);
  const char *u = dev >= 0 ? opd__cuda_uuid(dev) : NULL;
  if (u != NULL) snprintf(out, cap, "%s", u);
}

/* ---- the daemon's exported arenas mapped here ------------------------- */

/* The driver's name of r and its number, "CUDA_ERROR_X (N)". */
static const char *cu_name(cu_result r, char *buf, size_t cap) {
  const char *s = NULL;
  if (opd__cu.error_name != NULL && opd__cu.error_name(r, &s) == 0 && s != NULL)
    snprintf(buf, cap, "%s (%d)", s, r);
  else
    snprintf(buf, cap, "CUresult %d", r);
  return buf;
}

static void *primary_ctx[OPD_CUDA_DEVICES]; /* retained for the process */
static pthread_mutex_t primary_mu = PTHREAD_MUTEX_INITIALIZER;

/* Device dev's primary context pushed on this thread (the one the CUDA
 * runtime and torch use, so the addresses mapped are valid there; retained
 * once per device for the life of the process): 0, or OPD_EBACKEND /
 * OPD_EINVAL naming who. */
static int primary_push(const char *who, int dev) {
  if (dev < 0 || dev >= OPD_CUDA_DEVICES)
    return opd__fail(OPD_EINVAL, "%s: device %d out of 0..%d", who, dev,
                     OPD_CUDA_DEVICES - 1);
  load_once();
  if (!opd__cu.ok || !opd__cu.vmm_ok || opd__cu.device_get == NULL)
    return opd__fail(OPD_EBACKEND, "%s: a zero-copy view of daemon memory "
                     "needs the CUDA VMM calls of libcuda.so.1: %s", who,
                     opd__cu.why[0] ? opd__cu.why : "the driver is too old");
  char nb[64];
  cu_result r = 0;
  pthread_mutex_lock(&primary_mu);
  if (primary_ctx[dev] == NULL) {
    int d = 0;
    void *ctx = NULL;
    r = opd__cu.init(0);
    if (r == 0) r = opd__cu.device_get(&d, dev);
    if (r == 0) r = opd__cu.primary_retain(&ctx, d);
    if (r == 0) primary_ctx[dev] = ctx;
  }
  void *ctx = primary_ctx[dev];
  pthread_mutex_unlock(&primary_mu);
  if (r != 0)
    return opd__fail(OPD_EBACKEND, "cuda:%d: no CUDA context here: %s", dev,
                     cu_name(r, nb, sizeof nb));
  if ((r = opd__cu.ctx_push(ctx)) != 0)
    return opd__fail(OPD_EBACKEND, "cuCtxPushCurrent: %s",
                     cu_name(r, nb, sizeof nb));
  return 0;
}

int opd_cuda_map_export(int fd, uint64_t size, int device, uint64_t *ptr,
                        uint64_t *handle) {
  if (ptr == NULL || handle == NULL)
    return opd__fail(OPD_EINVAL, "opd_cuda_map_export: ptr or handle is NULL");
  int rc = primary_push("opd_cuda_map_export", device);
  if (rc != 0) return rc;
  unsigned long long h = 0;
  cu_ptr_t p = 0;
  int done = 0; /* 1: reserved, 2: mapped, 3: accessible */
  const char *step = "cuMemImportFromShareableHandle";
  /* handle type 1: a POSIX fd, passed as the pointer-sized value */
  cu_result r = opd__cu.mem_import(&h, (void *)(intptr_t)fd, 1);
  char nb[64];
  if (r != 0) {
    rc = opd__fail(OPD_EBACKEND, "cuda:%d: %s: %s", device, step,
                   cu_name(r, nb, sizeof nb));
  } else {
    step = "cuMemAddressReserve";
    r = opd__cu.mem_reserve(&p, size, 0, 0, 0);
    if (r == 0) {
      done = 1;
      step = "cuMemMap";
      r = opd__cu.mem_map(p, size, 0, h, 0);
    }
    if (r == 0) {
      done = 2;
      cu_access_t acc = {1 /* a device */, device, 3 /* read-write */};
      step = "cuMemSetAccess";
      r = opd__cu.mem_set_access(p, size, &acc, 1);
    }
    if (r == 0) done = 3;
    else
      rc = opd__fail(OPD_EBACKEND, "cuda:%d: %s of %llu bytes: %s", device,
                     step, (unsigned long long)size, cu_name(r, nb, sizeof nb));
    if (done < 3) { /* what was made undone */
      if (done >= 2) opd__cu.mem_unmap(p, size);
      if (done >= 1) opd__cu.mem_address_free(p, size);
      opd__cu.mem_release(h);
    }
  }
  void *old;
  opd__cu.ctx_pop(&old);
  if (rc == 0) {
    *ptr = p;
    *handle = h;
  }
  return rc;
}

int opd_cuda_unmap(uint64_t ptr, uint64_t size, uint64_t handle, int device) {
  int rc = primary_push("opd_cuda_unmap", device);
  if (rc != 0) return rc;
  cu_result r = opd__cu.mem_unmap(ptr, size);
  cu_result r2 = opd__cu.mem_address_free(ptr, size);
  cu_result r3 = opd__cu.mem_release(handle);
  void *old;
  opd__cu.ctx_pop(&old);
  if (r == 0) r = r2;
  if (r == 0) r = r3;
  char nb[64];
  return r == 0 ? 0 : opd__fail(OPD_EBACKEND, "cuda:%d: unmapping %llu bytes "
                                "at 0x%llx: %s", device, (unsigned long long)size,
                                (unsigned long long)ptr, cu_name(r, nb, sizeof nb));
}
