/* The CUDA backend's own types and helpers, shared by its four files:
 * device.c (devices, init, shutdown), memory.c (pinned, device, exportable
 * and imported memory), launch.c (plans, streams, launching a run) and
 * poller.c (completion: events, the loop's watcher, the poller thread);
 * strided.c copies strided tensors around a run's kernel.
 * Calls go device.c -> {memory.c, launch.c, poller.c} and launch.c ->
 * {poller.c, strided.c}, never back (state.c holds their one shared variable).
 * Nothing outside daemon/backend/cuda/ includes this header. */
#ifndef OPD_BACKEND_CUDA_STATE_H
#define OPD_BACKEND_CUDA_STATE_H

#include <cublasLt.h>
#include <cuda.h> /* driver types only: entry points come from the runtime */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>

#include "common/clock.h" /* opd_steps_t */
#include "daemon/backend/backend.h"
#include "daemon/backend/cuda/flag.h"
#include "daemon/run/strided.h"
#include "daemon/types.h"
#include "kernels/cuda/cuda.h"

typedef struct cuda_dev {
  int index;                     /* CUDA device ordinal */
  char name[256];
  uint64_t total_mem;
  int cc_major, cc_minor;
  int pdl; /* dependent launches of the built-in kernels (sm_90+, OPD_PDL) */
  cudaStream_t util;             /* allocations, frees */
  void *lt;                      /* cublasLtHandle_t */
  int prio_low, prio_high;       /* stream priority range */
  int mps;                       /* its contexts are shared through MPS */
  char uuid[48];                 /* "GPU-xxxxxxxx-xxxx-...", as nvidia-smi */
  opd_cuda_board_t *board;       /* the timeout board of WORD waits (pinned,
                                    mapped; freed at exit), or NULL: no WORD
                                    runs on this device */
  opd_cuda_board_t *board_dev;   /* ... its device address */
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
  int dev_inflight[OPD_MAX_DEVICES]; /* ... per device ("auto" placement) */
  uint64_t dev_runs[OPD_MAX_DEVICES]; /* runs launched per device (stats) */
  int inflight;                  /* launched, not yet done: keeps the loop
                                    alive (the async handle is ref'd) */
  int loop_polls;                /* the loop is polling the events itself
                                    (atomic; see opd__cuda_poll) */
  /* where the time of short jobs (request to reply under 1 ms) goes, in
   * ns summed over n_short jobs, and per piece a histogram of 0.1 us
   * buckets for the medians: logged at shutdown (docs/gpu.md) */
  uint64_t n_short, ns_sum[4]; /* to launch, launch, to seen, to reply */
  uint32_t hist[4][HIST_BUCKETS];
  /* the steps of launching an ordered run (OPD_RUN_F_WAIT), on the loop's
   * thread: the wait for the client's event, the kernel's launch, the
   * record of the session's event, the completion event's record; ns
   * summed, the longest, how many over 20 us: logged at shutdown */
  opd_steps_t ordered;
  struct cuda_spare_flag *spare_flags; /* ended sessions' flag words */
  uint64_t spin_until;            /* after a launch the loop spins (no
                                    epoll) for its completion until then */
} cuda_state_t;

/* A session's state on one device (s->backend_session[dev]): its stream,
 * and the events that order it with a client's stream (STREAM). */
typedef struct cuda_sess {
  cudaStream_t stream;           /* the one its runs go on now: of its own
                                    class, or a graph's (class_stream) */
  cudaStream_t cls_stream[2];    /* per class of service (daemon/sched.h):
                                    best-effort, latency; NULL until used */
  int cur_cls;                   /* stream's class */
  cudaEvent_t switch_ev;         /* orders the runs across the two */
  cudaEvent_t wait_ev;           /* the client's, opened by IPC handle, or
                                    NULL: OPD_RUN_F_WAIT waits for it */
  cudaEvent_t signal_ev;         /* ours, interprocess, or NULL:
                                    OPD_RUN_F_SIGNAL records it */
  unsigned char signal_handle[64]; /* its cudaIpcEventHandle_t */
  unsigned *flag;                /* the flag word FLAG runs write (STREAM
                                    with "flag"; 2 MiB of its own, so that
                                    its IPC handle maps nothing else), or
                                    NULL */
  unsigned char flag_handle[64]; /* its cudaIpcMemHandle_t */
  cudaEvent_t pool[OPD_STREAM_EVENTS]; /* the client's, FLAG runs wait on
                                    pool[id % n_pool] */
  int n_pool;
  uint64_t wait_ns;              /* a WORD run's wait gives up after this */
} cuda_sess_t;



/* A flag word whose session ended: kept (never cudaFree'd while the
 * daemon serves: cudaFree waits for the whole device, and a stream
 * waiting on a dead client's event may never finish), and given to a
 * later session of the same uid once `done` (recorded on the old stream)
 * has passed: another uid never maps memory a client of this one held. */
typedef struct cuda_spare_flag {
  unsigned *p;
  unsigned char handle[64];
  cudaEvent_t done;
  uid_t uid;
  int dev;
  struct cuda_spare_flag *next;
} cuda_spare_flag_t;

static inline cuda_sess_t *cuda_sess(const opd_session_t *s, int dev) {
  return (cuda_sess_t *)s->backend_session[dev];
}

/* A CUDA run's state, in its job's backend_job bytes. */
typedef struct cuda_job {
  const opd_op_def_t *kernel;    /* the op row whose ->cuda runs */
  cudaEvent_t event;             /* recorded after its work */
  int status;                    /* cudaError_t the stream reported */
  uint32_t wait_ms;              /* a WORD run: its wait's timeout */
  uint64_t t_launched;           /* its work queued (event recorded) */
  uint64_t t_seen;               /* its event seen complete */
  /* host tensors are staged through device scratch */
  void *host_in[OPD_MAX_TENSORS];  /* host address, or NULL */
  void *host_out[OPD_MAX_TENSORS];
  uint64_t in_bytes[OPD_MAX_TENSORS], out_bytes[OPD_MAX_TENSORS];
} cuda_job_t;
_Static_assert(sizeof(cuda_job_t) <= OPD_BACKEND_JOB_BYTES,
               "cuda_job_t must fit in opd_job_t.backend_job");

static inline cuda_job_t *cuda_job(opd_job_t *job) {
  return (cuda_job_t *)(void *)job->backend_job;
}

/* Evaluates a CUDA call; on failure fills err with "what: error" and
 * returns the opd error code from the enclosing function (style item 3:
 * a check macro that returns instead of exiting). */
#define CU(call, err)                                                   \
  do {                                                                  \
    cudaError_t e_ = (call);                                            \
    if (e_ != cudaSuccess)                                              \
      return opd__errf((err), cuda_code(e_), "%s:%d: %s: %s", __FILE__, \
                       __LINE__, #call, cudaGetErrorString(e_));        \
  } while (0)

static inline int cuda_code(cudaError_t e) {
  return e == cudaErrorMemoryAllocation ? OPD_ENOMEM : OPD_EBACKEND;
}

/* Errors after which the context is unusable. */
static inline int is_sticky(cudaError_t e) {
  return e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure ||
         e == cudaErrorHardwareStackError || e == cudaErrorIllegalInstruction ||
         e == cudaErrorMisalignedAddress || e == cudaErrorInvalidAddressSpace ||
         e == cudaErrorInvalidPc || e == cudaErrorUnknown ||
         e == cudaErrorAssert;
}

/* cudaSetDevice, skipped when this thread's device already is index: on the
 * loop thread it sits on every launch's path. Every device switch in the
 * backend goes through here, so the cache stays true. */
extern _Thread_local int opd__cu_cur_device; /* state.c */
static inline cudaError_t set_device(int index) {
  if (index == opd__cu_cur_device) return cudaSuccess;
  cudaError_t e = cudaSetDevice(index);
  opd__cu_cur_device = e == cudaSuccess ? index : -1;
  return e;
}

static inline cuda_state_t *cuda_state(const opd_server_t *srv) {
  return (cuda_state_t *)srv->backend_state;
}

/* memory.c */
void opd__cu_pin(opd_server_t *srv, opd_arena_t *a);
void opd__cu_release(opd_arena_t *a);
int opd__cu_alloc(opd_server_t *srv, int dev, uint64_t size, int exportable,
                  void **ptr, void **token, opd_err_t *err);
int opd__cu_import(opd_server_t *srv, uint64_t session, int dev,
                   const void *handle, uint64_t offset, uint64_t size,
                   void **ptr, void **token, opd_err_t *err);
int opd__cu_export(opd_server_t *srv, void *token, int *fd, uint64_t *bytes,
                   opd_err_t *err);
/* launch.c */
int opd__cu_plan(opd_job_t *job, const opd_tplace_t *in,
                 const opd_tplace_t *out, opd_err_t *err);
int opd__cu_launch(opd_job_t *job);
void opd__cu_session_end(opd_session_t *s);
int opd__cu_stream(opd_session_t *s, int dev, const opd_stream_req_t *rq,
                   opd_stream_rep_t *rp, opd_err_t *err);
/* the flag words of ended sessions (launch.c), at shutdown */
void opd__cu_flags_free(opd_server_t *srv);
void opd__cu_signal(opd_session_t *s, int dev, uint32_t value);
/* graph.c: a graph's memory, its captured work, and a run's enqueueing
 * (after the run's waits, before its event; *host: staged tensors) */
int opd__cu_graph_prepare(opd_graph_t *g, opd_err_t *err);
void opd__cu_graph_release(opd_graph_t *g);
int opd__cu_graph_enqueue(opd_job_t *job, cudaStream_t stream, int *host,
                          opd_err_t *err);
/* poller.c: the completion side. start registers the loop watcher and
 * starts the thread; stop joins it and logs the short jobs' breakdown. */
int opd__cu_poller_start(opd_server_t *srv);
void opd__cu_poller_stop(opd_server_t *srv);
int opd__cu_event_take(cuda_state_t *st, int dev, cudaEvent_t *ev);
void opd__cu_event_give(cuda_state_t *st, int dev, cudaEvent_t ev);
void opd__cu_events_free(opd_server_t *srv);
/* a launched job (its event recorded): polled until it completes */
void opd__cu_pending_add(opd_server_t *srv, opd_job_t *job);
/* strided.c: a run's strided tensors (daemon/run/strided.h) on its
 * stream. gather: *scratch from cudaMallocAsync (the caller frees it on
 * the stream), the views pointed at it, the inputs copied in; scatter:
 * the outputs copied out after the kernel, the views put back. 0, or an
 * error with err set (the views put back). */
int opd__cu_strided_gather(opd_job_t *job, cudaStream_t stream, void **scratch,
                           opd_strided_save_t *sv, opd_err_t *err);
int opd__cu_strided_scatter(opd_job_t *job, cudaStream_t stream,
                            const opd_strided_save_t *sv, opd_err_t *err);
int opd__cu_load(const opd_server_t *srv, int dev);

#endif /* OPD_BACKEND_CUDA_STATE_H */
