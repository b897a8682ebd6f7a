/* libopd's CUDA driver: the entry points loaded from libcuda.so.1, and
 * this process's devices as the daemon is sent them (cuda.c). Not
 * installed; internal to libopd.
 *
 * DESIGN
 * libopd links no CUDA library and includes no CUDA header: the types the
 * driver's entry points take are declared here, and the entry points are
 * looked up once (dlopen, dlsym) into opd__cu, which cuda.c fills at
 * first use and nothing else writes. The stream-ordering files
 * (stream.h) and run.c use it; conn.c and the rest of the core never do
 * (conn.c reaches the CUDA side only through opd__conn_hooks_t).
 */
#ifndef OPD_CLIENT_CUDA_H
#define OPD_CLIENT_CUDA_H

#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

typedef int cu_result;                      /* CUresult */
typedef struct { char bytes[64]; } cu_ipc_t; /* CUipc{Event,Mem}Handle */
typedef unsigned long long cu_ptr_t;        /* CUdeviceptr */
enum { CU_EV_FLAGS = 0x2 | 0x4 };           /* DISABLE_TIMING | INTERPROCESS */
enum { CU_ATTR_DEVICE_ORDINAL = 9, CU_ATTR_BUFFER_ID = 7, CU_ATTR_RANGE_START = 11,
       CU_ATTR_RANGE_SIZE = 12 };
enum { CU_ATTR_MPS_ENABLED = 133 }; /* CU_DEVICE_ATTRIBUTE_MPS_ENABLED */

/* cuLaunchKernelEx's CUlaunchConfig and CUlaunchAttribute (cuda.h, CUDA
 * 12), for the one attribute libopd sets */
typedef struct {
  unsigned id;                   /* CUlaunchAttributeID */
  char pad[4];
  union { char pad[64]; int allowed; } value;
} cu_launch_attr_t;
typedef struct {
  unsigned grid[3], block[3], shared;
  void *stream;
  cu_launch_attr_t *attrs;
  unsigned n_attrs;
} cu_launch_config_t;
enum { CU_LAUNCH_ATTR_PROGRAMMATIC_SERIALIZATION = 6 };

/* CUmemAccessDesc (CUmemLocation, then CUmemAccess_flags) */
typedef struct {
  int type;                      /* CUmemLocationType: 1, a device */
  int id;                        /* the device's ordinal */
  int flags;                     /* CUmemAccess_flags: 3, read-write */
} cu_access_t;

#define OPD_CUDA_DEVICES 16 /* devices of this process libopd names */

/* The driver's entry points; ok: the required ones are there (else why
 * says what is missing). Filled once, at the first opd__cu_ready or naming call. */
typedef struct {
  int ok;
  char why[240];
  cu_result (*ctx_get_current)(void **);
  cu_result (*ctx_push)(void *);
  cu_result (*ctx_pop)(void **);
  cu_result (*stream_get_ctx)(void *, void **);
  cu_result (*event_create)(void **, unsigned);
  cu_result (*event_destroy)(void *);
  cu_result (*event_record)(void *, void *);
  cu_result (*stream_wait_event)(void *, void *, unsigned);
  cu_result (*ipc_get_event)(cu_ipc_t *, void *);
  cu_result (*ipc_open_event)(void **, cu_ipc_t);
  cu_result (*ipc_get_mem)(cu_ipc_t *, cu_ptr_t);
  cu_result (*pointer_attrs)(unsigned, int *, void **, cu_ptr_t);
  cu_result (*error_string)(cu_result, const char **);
  cu_result (*ctx_get_device)(int *);
  cu_result (*device_attr)(int *, int, int);
  cu_result (*stream_sync)(void *);
  /* optional (the UUID of a device; without them "cuda:N" is sent) */
  cu_result (*device_get)(int *, int);
  cu_result (*device_uuid)(unsigned char *, int); /* CUuuid: 16 bytes */
  cu_result (*device_count)(int *);
  /* optional (opd_enqueue_stream*: the poll kernel and the flag word;
   * without them those calls wait for the daemon's answer) */
  int poll_ok;
  cu_result (*ipc_open_mem)(cu_ptr_t *, cu_ipc_t, unsigned);
  cu_result (*ipc_close_mem)(cu_ptr_t);
  cu_result (*module_load_data)(void **, const void *);
  cu_result (*module_get_function)(void **, void *, const char *);
  cu_result (*module_unload)(void *);
  cu_result (*launch_kernel)(void *, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, unsigned, void *, void **,
                             void **);
  cu_result (*mem_host_alloc)(void **, size_t, unsigned);
  cu_result (*mem_host_device_ptr)(cu_ptr_t *, void *, unsigned);
  cu_result (*mem_free_host)(void *);
  cu_result (*ctx_synchronize)(void);
  /* optional (the client's words of WORD runs; without it, their events) */
  cu_result (*memset_d32)(cu_ptr_t, unsigned, size_t, void *);
  /* optional (an enqueued run on an idle stream waits for nothing) */
  cu_result (*stream_query)(void *);
  /* optional (a stream of libopd's for calls on the legacy default
   * stream, OPD_STREAM_LEGACY's comparison modes; without them, on the
   * legacy stream itself) */
  cu_result (*stream_create)(void **, unsigned);
  cu_result (*stream_destroy)(void *);
  /* optional (OPD_STREAM_LEGACY=pdl: the poll kernel a programmatic
   * dependent launch; without it, a plain launch) */
  cu_result (*launch_kernel_ex)(const void *, void *, void **, void **);
  /* optional (opd_cuda_map_export: the daemon's exported arenas mapped
   * here with the CUDA VMM calls, in the device's primary context) */
  int vmm_ok;
  cu_result (*init)(unsigned);
  cu_result (*primary_retain)(void **, int);
  cu_result (*error_name)(cu_result, const char **);
  cu_result (*mem_import)(unsigned long long *, void *, int);
  cu_result (*mem_reserve)(cu_ptr_t *, size_t, size_t, cu_ptr_t,
                           unsigned long long);
  cu_result (*mem_map)(cu_ptr_t, size_t, size_t, unsigned long long,
                       unsigned long long);
  cu_result (*mem_set_access)(cu_ptr_t, size_t, const cu_access_t *, size_t);
  cu_result (*mem_unmap)(cu_ptr_t, size_t);
  cu_result (*mem_address_free)(cu_ptr_t, size_t);
  cu_result (*mem_release)(unsigned long long);
} opd__cu_t;

/* The driver (read-only outside cuda.c; valid once opd__cu_ready returned 0). */
extern opd__cu_t opd__cu;

/* Loads it; 0, or OPD_EBACKEND naming `who` and why it is not there. */
int opd__cu_ready(const char *who);
/* The driver's words for r ("unknown CUDA error" where it has none). */
const char *opd__cu_str(cu_result r);

/* This process's device dev as the daemon is sent it: its UUID ("GPU-"
 * and 36 characters) where the driver can tell, else "cuda:N" written
 * into buf (16 bytes). The driver loaded. */
const char *opd__cuda_wire_name(int dev, char *buf);
/* Its UUID, or NULL where the driver cannot tell. */
const char *opd__cuda_uuid(int dev);
/* *dev: this process's index of "cuda", "cuda:N" or a device's UUID; 0,
 * or OPD_EINVAL / OPD_EDEVICE / OPD_EBACKEND naming `who`. */
int opd__cuda_index(const char *who, const char *device, int *dev);
/* The device string a prepared stream-ordered run sends for the caller's
 * `device` (run.c): this process's device by UUID where the driver is
 * loaded and can tell, else `device` itself (into out, cap bytes). */
void opd__cuda_wire(const char *device, char *out, size_t cap);

/* Makes ctx current on this thread when it is not: 1 if pushed, for
 * opd__ctx_leave to pop. */
int opd__ctx_enter(void *ctx);
void opd__ctx_leave(int pushed);

#pragma GCC visibility pop

#endif
