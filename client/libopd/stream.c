/* libopd's CUDA side: asynchronous runs, runs ordered with a caller's CUDA
 * stream, this process's device pointers as tensors, synchronization.
 *
 * DESIGN
 * libopd links no CUDA library. A client that orders runs with its stream
 * has a CUDA context, so the driver (libcuda.so.1) is in its process: the
 * dozen entry points used here are looked up once (dlopen, dlsym), and
 * the types they take are declared here (no CUDA header at build time).
 *
 * Stream order (opd_run_stream): per connection and device, an
 * interprocess event of ours, which the daemon opens (STREAM) and its
 * stream waits for before the run (OPD_RUN_F_WAIT), and the session's
 * interprocess event of the daemon, opened here, which the daemon records
 * after the run (OPD_RUN_F_SIGNAL). One call records ours on the caller's
 * stream, sends the run, and once the daemon answers that it enqueued it
 * makes the caller's stream wait for the daemon's: both waits happen on
 * the GPU, no thread waits for a kernel. A wait takes the event's latest
 * record at the time it is queued, so one pair serves every run, provided
 * the calls of one connection and device do not interleave: they are
 * serialized (cuda_t.mu), which costs nothing the GPU would not serialize
 * anyway (a session has one stream per device). Those GPU waits are cheap
 * only when both processes' contexts are shared through MPS: otherwise
 * the GPU time-slices the two contexts and each wait costs a context
 * switch (about 140 us each way on an H200, bench/results). Without MPS
 * the order is kept on the host instead (gpu_order): the caller's stream
 * is synchronized, the run is answered when done.
 *
 * Device pointers (opd_tensor_cuda): the allocation a pointer lies in (the
 * driver's buffer id, base and size: one cuPointerGetAttributes) is
 * imported once per connection by its CUDA IPC handle (opd_import_cuda)
 * and cached (IMPORTS entries, least recently used out, released); a
 * tensor is then an (arena, offset) of it. The cache holds nothing of the
 * caller's memory alive: the caller may free it whenever it could free it
 * without opd. An allocation freed and another made at its addresses has a
 * new buffer id, so the cache misses; entries whose range the new one
 * overlaps are dead, and are released and a SYNC waited for (the daemon
 * has closed their handles then) before the new one is imported, since
 * the driver may give the new allocation the same handle bytes.
 */
#include <dlfcn.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/libopd/internal.h"
#include "common/clock.h"

/* ---- the driver ------------------------------------------------------- */

typedef int cu_result;                      /* CUresult */
typedef struct { char bytes[64]; } cu_ipc_t; /* CUipc{Event,Mem}Handle */
typedef unsigned long long cu_ptr_t;        /* CUdeviceptr */
enum { CU_EV_FLAGS = 0x2 | 0x4 };           /* DISABLE_TIMING | INTERPROCESS */
enum { CU_ATTR_DEVICE_ORDINAL = 9, CU_ATTR_BUFFER_ID = 7, CU_ATTR_RANGE_START = 11,
       CU_ATTR_RANGE_SIZE = 12 };

static struct {
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
  /* optional (libopd's part of a call on the legacy default stream goes
   * on a private stream of its own: OPD_STREAM_LEGACY; without them, on
   * the legacy stream itself) */
  cu_result (*stream_create)(void **, unsigned);
  cu_result (*stream_destroy)(void *);
  /* optional (OPD_STREAM_LEGACY=pdl: the poll kernel a programmatic
   * dependent launch; without it, as kernel) */
  cu_result (*launch_kernel_ex)(const void *, void *, void **, void **);
} cu;

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
enum { CU_ATTR_MPS_ENABLED = 133 }; /* CU_DEVICE_ATTRIBUTE_MPS_ENABLED */
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

static void cu_load(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    snprintf(cu.why, sizeof cu.why, "the CUDA driver is not available in this "
             "process (%s)", dlerror());
    return;
  }
  struct { void **fn; const char *name; } sym[] = {
      {(void **)&cu.ctx_get_current, "cuCtxGetCurrent"},
      {(void **)&cu.ctx_push, "cuCtxPushCurrent_v2"},
      {(void **)&cu.ctx_pop, "cuCtxPopCurrent_v2"},
      {(void **)&cu.stream_get_ctx, "cuStreamGetCtx"},
      {(void **)&cu.event_create, "cuEventCreate"},
      {(void **)&cu.event_destroy, "cuEventDestroy_v2"},
      {(void **)&cu.event_record, "cuEventRecord"},
      {(void **)&cu.stream_wait_event, "cuStreamWaitEvent"},
      {(void **)&cu.ipc_get_event, "cuIpcGetEventHandle"},
      {(void **)&cu.ipc_open_event, "cuIpcOpenEventHandle"},
      {(void **)&cu.ipc_get_mem, "cuIpcGetMemHandle"},
      {(void **)&cu.pointer_attrs, "cuPointerGetAttributes"},
      {(void **)&cu.error_string, "cuGetErrorString"},
      {(void **)&cu.ctx_get_device, "cuCtxGetDevice"},
      {(void **)&cu.device_attr, "cuDeviceGetAttribute"},
      {(void **)&cu.stream_sync, "cuStreamSynchronize"},
  };
  for (size_t i = 0; i < sizeof sym / sizeof sym[0]; i++) {
    if ((*sym[i].fn = dlsym(h, sym[i].name)) == NULL) {
      snprintf(cu.why, sizeof cu.why, "libcuda.so.1 has no %s (a driver "
               "older than CUDA 11?)", sym[i].name);
      return;
    }
  }
  cu.device_get = (cu_result(*)(int *, int))dlsym(h, "cuDeviceGet");
  cu.device_count = (cu_result(*)(int *))dlsym(h, "cuDeviceGetCount");
  void *uu = dlsym(h, "cuDeviceGetUuid_v2"); /* MIG instances their own */
  if (uu == NULL) uu = dlsym(h, "cuDeviceGetUuid");
  cu.device_uuid = (cu_result(*)(unsigned char *, int))uu;
  struct { void **fn; const char *name, *alt; } poll[] = {
      {(void **)&cu.ipc_open_mem, "cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle"},
      {(void **)&cu.ipc_close_mem, "cuIpcCloseMemHandle", NULL},
      {(void **)&cu.module_load_data, "cuModuleLoadData", NULL},
      {(void **)&cu.module_get_function, "cuModuleGetFunction", NULL},
      {(void **)&cu.module_unload, "cuModuleUnload", NULL},
      {(void **)&cu.launch_kernel, "cuLaunchKernel", NULL},
      {(void **)&cu.mem_host_alloc, "cuMemHostAlloc", NULL},
      {(void **)&cu.mem_host_device_ptr, "cuMemHostGetDevicePointer_v2",
       "cuMemHostGetDevicePointer"},
      {(void **)&cu.mem_free_host, "cuMemFreeHost", NULL},
      {(void **)&cu.ctx_synchronize, "cuCtxSynchronize", NULL},
  };
  cu.memset_d32 = (cu_result(*)(cu_ptr_t, unsigned, size_t, void *))dlsym(
      h, "cuMemsetD32Async");
  cu.stream_query = (cu_result(*)(void *))dlsym(h, "cuStreamQuery");
  cu.stream_create = (cu_result(*)(void **, unsigned))dlsym(h, "cuStreamCreate");
  cu.stream_destroy = (cu_result(*)(void *))dlsym(h, "cuStreamDestroy_v2");
  cu.launch_kernel_ex = (cu_result(*)(const void *, void *, void **, void **))dlsym(
      h, "cuLaunchKernelEx");
  cu.poll_ok = 1;
  for (size_t i = 0; i < sizeof poll / sizeof poll[0]; i++) {
    *poll[i].fn = dlsym(h, poll[i].name);
    if (*poll[i].fn == NULL && poll[i].alt) *poll[i].fn = dlsym(h, poll[i].alt);
    if (*poll[i].fn == NULL) cu.poll_ok = 0;
  }
  cu.ok = 1;
}

/* The kernel an enqueued run (opd_enqueue_stream*) puts on the caller's
 * stream: one thread polls the daemon's flag word (mapped here by IPC
 * handle) until it reaches `want` (the run's request id, low 32 bits;
 * signed difference, so it wraps), or until timeout_ns of %globaltimer
 * have passed: then err[0] = 1, err[1] = want (pinned host memory that
 * the next call reads) and the stream goes on. PTX 7.0 for sm_70 and
 * later (ld.acquire.sys), loaded once per context (cuModuleLoadData: the
 * driver JITs it for the device). Its source:
 *   extern "C" __global__ void opd_poll(const unsigned *word, unsigned want,
 *                                       unsigned *err, unsigned long long t) {
 *     t0 = globaltimer;
 *     for (;;) { x = ld.acquire.sys(word); if ((int)(x - want) >= 0) return;
 *                if (globaltimer - t0 > t) { err[0] = 1; err[1] = want;
 *                                            membar.sys; return; } } }
 * Why a kernel: stream memory operations (cuStreamWaitValue32) are not
 * supported on the H200 this was built on, and an event cannot be waited
 * for before the daemon has recorded it, which is what made the call wait
 * for the daemon's answer (bench/bench_handoff.cu measures both ways). */
/* ... as a PTX entry NAME; EXTRA_PARAM, LOAD_EXTRA and AT_DONE add to it
 * (the stamped form below) */
#define POLL_ENTRY(NAME, EXTRA_PARAM, LOAD_EXTRA, AT_DONE)                  \
  ".visible .entry " NAME "(.param .u64 p_word, .param .u32 p_want,\n"     \
  "    .param .u64 p_err, .param .u64 p_timeout" EXTRA_PARAM ")\n"         \
  "{\n"                                                                    \
  "  .reg .pred %p<3>;\n"                                                  \
  "  .reg .b32 %r<5>;\n"                                                   \
  "  .reg .b64 %rd<12>;\n"                                                 \
  "  ld.param.u64 %rd3, [p_word];\n"                                       \
  "  ld.param.u32 %r1, [p_want];\n"                                        \
  "  ld.param.u64 %rd6, [p_err];\n"                                        \
  "  ld.param.u64 %rd4, [p_timeout];\n" LOAD_EXTRA                         \
  "  cvta.to.global.u64 %rd1, %rd6;\n"                                     \
  "  mov.u64 %rd5, %globaltimer;\n"                                        \
  "LOOP:\n"                                                                \
  "  ld.acquire.sys.global.u32 %r2, [%rd3];\n"                             \
  "  sub.s32 %r3, %r2, %r1;\n"                                             \
  "  setp.gt.s32 %p1, %r3, -1;\n"                                          \
  "  @%p1 bra DONE;\n"                                                     \
  "  mov.u64 %rd8, %globaltimer;\n"                                        \
  "  sub.s64 %rd9, %rd8, %rd5;\n"                                          \
  "  setp.le.u64 %p2, %rd9, %rd4;\n"                                       \
  "  @%p2 bra LOOP;\n"                                                     \
  "  st.global.u32 [%rd1+4], %r1;\n"                                       \
  "  mov.u32 %r4, 1;\n"                                                    \
  "  st.global.u32 [%rd1], %r4;\n"                                         \
  "  membar.sys;\n"                                                        \
  "DONE:\n" AT_DONE                                                        \
  "  ret;\n"                                                               \
  "}\n"

/* LOAD_EXTRA of the forms that write the caller's word (p_mine) first */
#define STORE_MINE                                                         \
  "  ld.param.u64 %rd10, [p_mine];\n"                                      \
  "  membar.sys;\n"                                                        \
  "  st.release.sys.global.u32 [%rd10], %r1;\n"

static const char poll_ptx[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    POLL_ENTRY("opd_poll", "", "", "")
    /* the same, stamping %globaltimer at its start and once it saw the
     * word into st[0], st[1] (OPD_STREAM_STAMPS; include/opd/protocol.h) */
    POLL_ENTRY("opd_poll_st", ", .param .u64 p_st", "  ld.param.u64 %rd10, [p_st];\n",
               "  mov.u64 %rd11, %globaltimer;\n"
               "  st.global.u64 [%rd10], %rd5;\n"
               "  st.global.u64 [%rd10+8], %rd11;\n")
    /* the same, first writing `want` to the caller's stream's word at
     * p_mine (OPD_STREAM_LEGACY=kernel: the word and the wait one
     * operation on the stream, not a memset and a kernel) */
    POLL_ENTRY("opd_poll_w", ", .param .u64 p_mine", STORE_MINE, "");

/* opd_poll_w as a programmatic dependent launch's (sm_90 and later; PTX
 * 7.8): it first waits for the grids before it on the stream to end and
 * their writes to be seen (griddepcontrol.wait), then writes the word.
 * Loaded where the device takes it (OPD_STREAM_LEGACY=pdl). */
static const char poll_ptx90[] =
    ".version 7.8\n"
    ".target sm_90\n"
    ".address_size 64\n"
    POLL_ENTRY("opd_poll_wp", ", .param .u64 p_mine",
               "  griddepcontrol.wait;\n" STORE_MINE, "");

static int cu_ready(const char *who) {
  pthread_once(&cu_once, cu_load);
  return cu.ok ? 0 : opd__fail(OPD_EBACKEND, "%s: %s", who, cu.why);
}

static const char *cu_str(cu_result r) {
  const char *s = NULL;
  if (cu.error_string == NULL || cu.error_string(r, &s) != 0 || s == NULL)
    return "unknown CUDA error";
  return s;
}

/* ---- a connection's CUDA state ---------------------------------------- */

#define DEVICES 16   /* devices a connection orders streams on */
#define IMPORTS 40   /* allocations imported per connection (LRU); the
                        daemon's --max-arenas is 64 per session */

typedef struct {
  void *ctx;                     /* the context the events belong to, or
                                    NULL: not made yet */
  void *mine;                    /* recorded on the caller's stream */
  void *theirs;                  /* the daemon's, recorded after runs */
  int gpu;                       /* order on the GPU (else on the host) */
  /* enqueued runs (opd_enqueue_stream*): the session's flag word, mapped
   * here (0: none, those calls wait for the answer), the poll kernel of
   * ctx, the pinned words it sets when its wait times out */
  cu_ptr_t flag;
  void *pool[OPD_STREAM_EVENTS]; /* interprocess events: an enqueued run
                                    with request id R records pool[R % n],
                                    which the daemon waits for */
  void *mod, *fn;
  void *fn_st;                   /* opd_poll_st (OPD_STREAM_STAMPS), or NULL */
  void *fn_w;                    /* opd_poll_w (LEGACY_KERNEL), or NULL */
  void *mod90, *fn_wp;           /* opd_poll_wp (LEGACY_PDL), or NULL */
  volatile uint32_t *err;        /* [0] 1: timed out, [1] the request */
  cu_ptr_t err_dev;
  int polled;                    /* a poll kernel queued (close syncs) */
  /* WORD runs (the daemon said "words"): the stream of each slot, 1..
   * n_slots; a run on it writes its id to the slot's word in the flag
   * allocation before it (cuMemsetD32Async), which the daemon's stream
   * polls. A slot is never given to another stream (its word only grows);
   * streams past the last slot use the pool's events. */
  int words;
  int n_slots;
  void *slot_stream[OPD_RUN_WORD_SLOTS];
  /* calls on the legacy default stream (OPD_STREAM_LEGACY, side_for): a
   * non-blocking stream of libopd's in ctx, an event the legacy stream
   * waits for after the poll kernel (join), one it records for the side
   * stream before the word (fork); made on first use, NULL before */
  void *side, *fork_ev, *join_ev;
  int side_failed;               /* could not be made: the legacy stream */
} cevents_t;

#define LAZY 64      /* enqueued runs of a connection whose answers are
                        read later: at this many the older half is read */

/* A batch (opd_batch_begin): enqueued runs on one stream ordered among
 * themselves on the daemon's stream, joined back to the caller's stream at
 * opd_batch_end (one poll kernel for the last), and what must outlive them
 * (opd__batch_keep: torch's tensors), dropped once that poll kernel is on
 * the stream. At BATCH_RUNS runs, or when the kept objects would not fit,
 * the batch joins by itself and goes on (memory stays bounded). */
#define BATCH_RUNS 64
#define BATCH_KEEP 1024
typedef struct {
  int open;
  void *stream, *ctx;            /* the caller's stream and its context */
  int dev;                       /* the stream's device (this process's) */
  cevents_t *e;                  /* dev's events (the poll kernel) */
  int runs;                      /* runs since the last join */
  uint64_t last;                 /* the last one's request id */
  int n_keep;
  struct {
    void *obj;
    void (*drop)(void *);
  } keep[BATCH_KEEP];
  uint64_t n_runs, n_joins;      /* for the trace */
} batch_t;

typedef struct {
  unsigned long long buffer;     /* the driver's id of the allocation */
  cu_ptr_t base;
  size_t size;
  uint64_t arena;                /* the daemon's id of its import */
  int dev;
  uint64_t used;                 /* the LRU clock when last used */
} cimport_t;

struct opd_cuda {
  pthread_mutex_t mu;            /* everything below */
  cevents_t ev[DEVICES];
  cimport_t imp[IMPORTS];
  int n_imp;
  uint64_t clock;
  uint64_t lazy[LAZY];           /* enqueued runs' ids, answers unread,
                                    oldest first */
  int n_lazy;
  int lazy_rc;                   /* the first of them that failed, not yet
                                    told: its code and message */
  char lazy_msg[OPD_ERRMSG_CAP];
  uint64_t poll_ns;              /* the poll kernel's timeout
                                    (OPD_STREAM_POLL_TIMEOUT_MS) */
  int no_poll;                   /* OPD_STREAM_POLL=0 */
  int no_words;                  /* OPD_STREAM_WORDS=0: events only */
  int no_idle;                   /* OPD_STREAM_IDLE=0: always wait */
  int stamps;                    /* OPD_STREAM_STAMPS=1: the poll kernels
                                    stamp their start and end (diagnosis) */
  uint32_t wait_ms;              /* OPD_STREAM_WAIT_MS: the daemon's wait for
                                    a word gives up after this (0: its own) */
  /* OPD_STREAM_TRACE: where ordered calls spend their time (tensors,
   * record, the run's round trip, the wait), printed at close */
  int trace;
  opd_steps_t steps;
  uint64_t idle;                 /* enqueued runs whose stream was idle */
  batch_t batch;
};

/* OPD_STREAM_LEGACY: where a call whose stream is CUDA's legacy default
 * stream (torch's default stream) puts libopd's part of it */
enum {
  LEGACY_DIRECT = 0,             /* "direct": everything on the caller's */
  LEGACY_SIDE = 1,               /* "side": the poll kernel on libopd's own
                                    stream, the caller's waits for it by an
                                    event; the word's memset on the caller's */
  LEGACY_FORK = 2,               /* "fork": the word's memset too, after an
                                    event the caller's stream records */
  LEGACY_BUSY = 3,               /* "busy": as side, but a call that found
                                    the stream idle all on the caller's */
  /* WORD and the modes after it make no idle check (ordered) */
  LEGACY_WORD = 4,               /* "word": as direct, but no idle check
                                    (cuStreamQuery) on the legacy stream:
                                    every call marks it with its word */
  LEGACY_KERNEL = 5,             /* "kernel": as word, but the word written
                                    by the poll kernel as it starts: one
                                    operation on the legacy stream a call */
  LEGACY_PDL = 6,                /* "pdl": as kernel, the poll kernel a
                                    programmatic dependent launch (sm_90):
                                    it starts as the kernel before it ends,
                                    and waits for it (griddepcontrol.wait)
                                    before it writes the word */
  LEGACY_DEFAULT = LEGACY_PDL,   /* never behind direct in one process on
                                    the H200, ahead where the host is the
                                    bound (bench/results/2026-12-05-h200-
                                    legacy-pdl.txt); as kernel where there
                                    is no sm_90 or cuLaunchKernelEx */
};

/* The process's LEGACY_* mode: OPD_STREAM_LEGACY when first asked, or
 * what opd__stream_legacy set (the benchmarks compare the modes in one
 * process: bench/probe_level.py). */
static int legacy_mode = -1;

static const char *const legacy_name[] = {"direct", "side", "fork", "busy", "word",
                                            "kernel", "pdl"};

static int legacy_parse(const char *v) {
  if (v == NULL) return LEGACY_DEFAULT;
  for (int i = 0; i < (int)(sizeof legacy_name / sizeof legacy_name[0]); i++)
    if (strcmp(v, legacy_name[i]) == 0) return i;
  return -1;
}

static int legacy(void) {
  int m = __atomic_load_n(&legacy_mode, __ATOMIC_RELAXED);
  if (m < 0) {
    const char *env = getenv("OPD_STREAM_LEGACY");
    m = legacy_parse(env);
    if (m < 0) {
      fprintf(stderr, "opd: OPD_STREAM_LEGACY=%s is not direct, side, fork, "
              "busy, word, kernel or pdl: using %s\n", env, legacy_name[LEGACY_DEFAULT]);
      m = LEGACY_DEFAULT;
    }
    __atomic_store_n(&legacy_mode, m, __ATOMIC_RELAXED);
  }
  return m;
}

int opd__stream_legacy(const char *mode) {
  if (mode == NULL) return legacy();
  int m = legacy_parse(mode);
  if (m < 0)
    return opd__fail(OPD_EINVAL, "OPD_STREAM_LEGACY: \"%s\" is not direct, "
                     "side, fork, busy, word, kernel or pdl", mode);
  __atomic_store_n(&legacy_mode, m, __ATOMIC_RELAXED);
  return 0;
}

static const char *const trace_step[4] = {"tensors", "cuEventRecord / the word",
                                          "the run", "cuStreamWaitEvent / the poll"};

/* OPD_STREAM_TRACE's lines (at close, and every 2000 calls) */
static void trace_print(const struct opd_cuda *k) {
  const opd_steps_t *s = &k->steps;
  for (int i = 0; s->n > 0 && i < 4; i++)
    fprintf(stderr, "opd: %llu ordered calls, %s: mean %.2f us, max %.1f "
            "us, %llu over 20 us\n", (unsigned long long)s->n, trace_step[i],
            s->sum[i] / 1000.0 / (double)s->n, s->max[i] / 1000.0,
            (unsigned long long)s->slow[i]);
  if (s->n > 0)
    fprintf(stderr, "opd: %llu enqueued calls found their stream idle (no "
            "wait); %llu batched runs, %llu joins\n", (unsigned long long)k->idle,
            (unsigned long long)k->batch.n_runs, (unsigned long long)k->batch.n_joins);
}

static pthread_mutex_t make_mu = PTHREAD_MUTEX_INITIALIZER;

/* e's pool of interprocess events (any context may destroy them). */
static void pool_destroy(cevents_t *e) {
  for (int i = 0; i < OPD_STREAM_EVENTS; i++)
    if (e->pool[i] != NULL) {
      cu.event_destroy(e->pool[i]);
      e->pool[i] = NULL;
    }
}

/* e's poll path forgotten (its context gone: what it held went with it) */
static void poll_forget(cevents_t *e) {
  pool_destroy(e);
  e->flag = 0;
  e->mod = e->fn = e->fn_st = e->fn_w = e->mod90 = e->fn_wp = NULL;
  e->err = NULL;
  e->err_dev = 0;
  e->polled = 0;
  e->side = e->fork_ev = e->join_ev = NULL;
  e->side_failed = 0;
}

/* ... released in the current context. */
static void poll_release(cevents_t *e) {
  if (e->flag) cu.ipc_close_mem(e->flag);
  if (e->mod) cu.module_unload(e->mod);
  if (e->mod90) cu.module_unload(e->mod90);
  if (e->err) cu.mem_free_host((void *)e->err);
  if (e->side) cu.stream_destroy(e->side);
  if (e->fork_ev) cu.event_destroy(e->fork_ev);
  if (e->join_ev) cu.event_destroy(e->join_ev);
  poll_forget(e);
}

/* ... in its own context (best effort: at exit the context may be gone,
 * and what it held with it). A poll kernel still queued reads the flag
 * word and writes the error words: the context finishes its work first. */
static void poll_free(cevents_t *e) {
  if (e->flag == 0 && e->mod == NULL && e->err == NULL && e->pool[0] == NULL &&
      e->side == NULL)
    return;
  void *old;
  if (e->ctx != NULL && cu.ctx_push(e->ctx) == 0) {
    if (e->polled) cu.ctx_synchronize();
    poll_release(e);
    cu.ctx_pop(&old);
    return;
  }
  poll_forget(e);
}

static struct opd_cuda *cuda_of(opd_client_t *c) {
  struct opd_cuda *k = __atomic_load_n(&c->cuda, __ATOMIC_ACQUIRE);
  if (k != NULL) return k;
  pthread_mutex_lock(&make_mu);
  if ((k = c->cuda) == NULL && (k = calloc(1, sizeof *k)) != NULL) {
    pthread_mutex_init(&k->mu, NULL);
    const char *tr = getenv("OPD_STREAM_TRACE");
    k->trace = tr != NULL && *tr && strcmp(tr, "0") != 0;
    const char *pl = getenv("OPD_STREAM_POLL");
    k->no_poll = pl != NULL && strcmp(pl, "0") == 0;
    const char *to = getenv("OPD_STREAM_POLL_TIMEOUT_MS");
    long ms = to != NULL ? strtol(to, NULL, 10) : 0;
    k->poll_ns = (uint64_t)(ms > 0 ? ms : 10000) * 1000000u;
    const char *w = getenv("OPD_STREAM_WORDS");
    k->no_words = w != NULL && strcmp(w, "0") == 0;
    const char *il = getenv("OPD_STREAM_IDLE");
    k->no_idle = il != NULL && strcmp(il, "0") == 0;
    const char *sp = getenv("OPD_STREAM_STAMPS");
    k->stamps = sp != NULL && strcmp(sp, "1") == 0;
    const char *wm = getenv("OPD_STREAM_WAIT_MS");
    long wms = wm != NULL ? strtol(wm, NULL, 10) : 0;
    k->wait_ms = wms > 0 && wms <= 86400000 ? (uint32_t)wms : 0;
    __atomic_store_n(&c->cuda, k, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&make_mu);
  if (k == NULL) opd__fail(OPD_ENOMEM, "out of memory");
  return k;
}

void opd__cuda_free(opd_client_t *c) {
  struct opd_cuda *k = c->cuda;
  if (k == NULL) return;
  if (k->trace) trace_print(k);
  /* the events are this process's: after a fork the child leaves them */
  int mine = cu.ok && c->fork_gen == __atomic_load_n(&opd__fork_gen, __ATOMIC_RELAXED);
  batch_t *b = &k->batch; /* opd__cuda_close joined it: what is left */
  for (int i = 0; i < b->n_keep; i++) b->keep[i].drop(b->keep[i].obj);
  b->n_keep = 0;
  if (mine) {
    for (int d = 0; d < DEVICES; d++) {
      poll_free(&k->ev[d]);
      if (k->ev[d].mine) cu.event_destroy(k->ev[d].mine);
      if (k->ev[d].theirs) cu.event_destroy(k->ev[d].theirs);
    }
  }
  pthread_mutex_destroy(&k->mu);
  free(k);
  c->cuda = NULL;
}

/* ---- this process's devices, by UUID on the wire ---------------------- */

/* The daemon's cuda:N is not this process's cuda:N as soon as the two see
 * different CUDA_VISIBLE_DEVICES, so a device of this process is sent by
 * its UUID ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi -L
 * prints it), which the daemon maps to its own device or refuses naming
 * it. Looked up once per device (the driver must be initialized: a
 * process with a context or device memory is); "cuda:N" is sent where the
 * driver cannot tell (no cuDeviceGetUuid, not initialized). */
static char uuid_name[DEVICES][48];
static pthread_mutex_t uuid_mu = PTHREAD_MUTEX_INITIALIZER;

static const char *local_uuid(int dev) {
  if (dev < 0 || dev >= DEVICES || !cu.ok || cu.device_get == NULL ||
      cu.device_uuid == NULL)
    return NULL;
  pthread_mutex_lock(&uuid_mu);
  char *name = uuid_name[dev];
  int d;
  unsigned char u[16];
  if (name[0] == '\0' && cu.device_get(&d, dev) == 0 && cu.device_uuid(u, d) == 0)
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
static const char *wire_name(int dev, char *buf) {
  const char *u = local_uuid(dev);
  if (u != NULL) return u;
  snprintf(buf, 16, "cuda:%d", dev);
  return buf;
}

int opd_cuda_device_name(int dev, char *buf, size_t cap) {
  if (buf == NULL || cap == 0 || dev < 0 || dev >= DEVICES)
    return opd__fail(OPD_EINVAL, "opd_cuda_device_name: device %d out of "
                     "0..%d or no buffer", dev, DEVICES - 1);
  pthread_once(&cu_once, cu_load);
  char tmp[16];
  const char *n = wire_name(dev, tmp);
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
  if (cu.device_count == NULL || cu.device_count(&n) != 0) return -1;
  for (int i = 0; i < n && i < DEVICES; i++) {
    const char *u = local_uuid(i);
    if (u != NULL && strcasecmp(u + 4, want) == 0) return i;
  }
  return -1;
}

/* The index N of "cuda" (0), "cuda:N" or a UUID of this process's device
 * (the driver loaded). */
/* N of "cuda" (0) or "cuda:N" (N < DEVICES), else -1. */
static int cuda_n(const char *device) {
  if (device == NULL || strncmp(device, "cuda", 4) != 0) return -1;
  if (device[4] == '\0') return 0;
  char *end;
  long n = device[4] == ':' && device[5] ? strtol(device + 5, &end, 10) : -1;
  return n >= 0 && n < DEVICES && *end == '\0' ? (int)n : -1;
}

static int cuda_index(const char *who, const char *device, int *dev) {
  if ((*dev = cuda_n(device)) >= 0) return 0;
  if (device != NULL && strncmp(device, "cuda", 4) != 0 && strlen(device) >= 32) {
    int rc = cu_ready(who);
    if (rc != 0) return rc;
    if ((*dev = uuid_index(device)) >= 0) return 0;
    return opd__fail(OPD_EDEVICE, "%s: no CUDA device of this process has UUID "
                     "%s", who, device);
  }
  return opd__fail(OPD_EINVAL, "%s: device \"%s\" is not \"cuda\", "
                   "\"cuda:N\" (N < %d) or a UUID", who,
                   device ? device : "(null)", DEVICES);
}

/* Makes ctx current on this thread when it is not: 1 if pushed. */
static int ctx_enter(void *ctx) {
  void *cur = NULL;
  if (cu.ctx_get_current(&cur) == 0 && cur == ctx) return 0;
  return cu.ctx_push(ctx) == 0;
}

static void ctx_leave(int pushed) {
  void *old;
  if (pushed) cu.ctx_pop(&old);
}

/* ---- stream order ------------------------------------------------------ */

typedef struct {
  const char *device;
  const cu_ipc_t *event;
  int flag;                      /* ask for the session's flag word */
  const cu_ipc_t *pool;          /* ... and the pool's handles */
  uint32_t wait_ms;              /* ... and WORD waits' timeout (0: none) */
} stream_args_t;

static void pack_stream(msgpack_packer *pk, const void *arg) {
  const stream_args_t *a = arg;
  msgpack_pack_map(pk, a->flag ? 4 + (a->wait_ms != 0) : 2);
  PACK_STR(pk, "device");
  PACK_STR(pk, a->device);
  PACK_STR(pk, "event");
  msgpack_pack_bin(pk, 64);
  msgpack_pack_bin_body(pk, a->event->bytes, 64);
  if (a->flag) {
    PACK_STR(pk, "flag");
    msgpack_pack_true(pk);
    PACK_STR(pk, "events");
    msgpack_pack_bin(pk, 64 * OPD_STREAM_EVENTS);
    msgpack_pack_bin_body(pk, a->pool, 64 * OPD_STREAM_EVENTS);
    if (a->wait_ms != 0) {
      PACK_STR(pk, "wait_ms");
      msgpack_pack_uint32(pk, a->wait_ms);
    }
  }
}

/* The pool of e (ctx current) and its handles into h: 0, or the driver's
 * error (nothing kept). */
static cu_result pool_make(cevents_t *e, cu_ipc_t *h) {
  cu_result r = 0;
  for (int i = 0; i < OPD_STREAM_EVENTS && r == 0; i++) {
    r = cu.event_create(&e->pool[i], CU_EV_FLAGS);
    if (r == 0) r = cu.ipc_get_event(&h[i], e->pool[i]);
  }
  if (r != 0) pool_destroy(e);
  return r;
}

/* The poll path of e (ctx current): the daemon's flag word by its IPC
 * handle, the poll kernel, the pinned error words. Any failure leaves e
 * without it (enqueued runs then wait for their answers) and says why
 * under OPD_STREAM_TRACE. */
static void poll_setup(struct opd_cuda *k, cevents_t *e, const msgpack_object *fh) {
  cu_ipc_t h;
  const char *step = "the reply has no 64-byte \"flag\"";
  cu_result r = 0;
  void *p = NULL;
  if (fh != NULL && fh->type == MSGPACK_OBJECT_BIN && fh->via.bin.size == 64) {
    memcpy(h.bytes, fh->via.bin.ptr, 64);
    step = "cuIpcOpenMemHandle";
    if ((r = cu.ipc_open_mem(&e->flag, h, 1 /* LAZY_ENABLE_PEER_ACCESS */)) == 0) {
      step = "cuModuleLoadData";
      if ((r = cu.module_load_data(&e->mod, poll_ptx)) == 0) {
        step = "cuModuleGetFunction";
        if ((r = cu.module_get_function(&e->fn, e->mod, "opd_poll")) == 0) {
          if (k->stamps && cu.module_get_function(&e->fn_st, e->mod, "opd_poll_st") != 0)
            e->fn_st = NULL;
          if (cu.module_get_function(&e->fn_w, e->mod, "opd_poll_w") != 0)
            e->fn_w = NULL;
          /* not before sm_90: left NULL */
          if (cu.launch_kernel_ex != NULL &&
              cu.module_load_data(&e->mod90, poll_ptx90) == 0 &&
              cu.module_get_function(&e->fn_wp, e->mod90, "opd_poll_wp") != 0)
            e->fn_wp = NULL;
          step = "cuMemHostAlloc";
          if ((r = cu.mem_host_alloc(&p, 64, 0x1 | 0x2 /* PORTABLE|DEVICEMAP */)) == 0) {
            e->err = p;
            e->err[0] = e->err[1] = 0;
            step = "cuMemHostGetDevicePointer";
            if ((r = cu.mem_host_device_ptr(&e->err_dev, p, 0)) == 0) return;
          }
        }
      }
    }
  }
  if (k->trace)
    fprintf(stderr, "opd: no poll path, enqueued runs wait for their answers: "
            "%s%s%s\n", step, r ? ": " : "", r ? cu_str(r) : "");
  poll_release(e);
}

/* Whether device dev's runs are ordered on the GPU (events) or on the host
 * (the stream synchronized, the run answered when done). A GPU wait
 * across two processes costs a context switch each way (about 140 us on
 * an H200) unless both share their contexts through MPS, so GPU order is
 * used when this process's context and the daemon's device are both
 * under MPS; OPD_STREAM_ORDER=gpu or =host decides instead. */
static int gpu_order(opd_client_t *c, int dev) {
  const char *env = getenv("OPD_STREAM_ORDER");
  if (env != NULL && strcmp(env, "gpu") == 0) return 1;
  if (env != NULL && strcmp(env, "host") == 0) return 0;
  int cdev = -1, mps = 0;
  if (cu.ctx_get_device(&cdev) != 0 ||
      cu.device_attr(&mps, CU_ATTR_MPS_ENABLED, cdev) != 0 || !mps)
    return 0;
  /* the daemon's hello: {"device":"cuda:N",...,"uuid":"GPU-...","mps":true} */
  char key[80];
  const char *u = local_uuid(dev);
  if (u != NULL) snprintf(key, sizeof key, "\"uuid\":\"%s\"", u);
  else snprintf(key, sizeof key, "\"device\":\"cuda:%d\"", dev);
  const char *p = c->hello_json ? strstr(c->hello_json, key) : NULL;
  const char *end = p ? strchr(p, '}') : NULL;
  const char *m = p ? strstr(p, "\"mps\":true") : NULL;
  return m != NULL && end != NULL && m < end;
}

/* The event pair of device dev in context ctx (k->mu held, ctx current):
 * made, and exchanged with the daemon (STREAM), the first time. */
static int events_for(opd_client_t *c, struct opd_cuda *k, int dev, void *ctx,
                      cevents_t **out) {
  cevents_t *e = &k->ev[dev];
  *out = e;
  if (e->ctx == ctx) return 0;
  if (e->ctx != NULL) { /* the caller's context changed: a new pair */
    poll_free(e);
    cu.event_destroy(e->mine);
    cu.event_destroy(e->theirs);
    memset(e, 0, sizeof *e);
  }
  void *mine = NULL, *theirs = NULL;
  cu_ipc_t h;
  cu_result r = cu.event_create(&mine, CU_EV_FLAGS);
  if (r == 0) r = cu.ipc_get_event(&h, mine);
  if (r != 0) {
    if (mine) cu.event_destroy(mine);
    return opd__fail(OPD_EBACKEND, "opd_run_stream: an interprocess event "
                     "(cuEventCreate, cuIpcGetEventHandle): %s", cu_str(r));
  }
  char buf[16];
  int gpu = gpu_order(c, dev);
  static __thread cu_ipc_t ph[OPD_STREAM_EVENTS]; /* 4 KiB: not the stack */
  stream_args_t a = {wire_name(dev, buf), &h, gpu && cu.poll_ok && !k->no_poll, ph,
                     k->wait_ms};
  if (a.flag && (r = pool_make(e, ph)) != 0) {
    a.flag = 0;
    if (k->trace)
      fprintf(stderr, "opd: no poll path, enqueued runs wait for their "
              "answers: the event pool: %s\n", cu_str(r));
  }
  reply_t rep = {.payload = NULL};
  int rc = opd__call(c, OPD_MSG_STREAM, pack_stream, &a, -1, &rep.payload,
                     &rep.len);
  if (rc == 0) {
    const msgpack_object *body = opd__reply_decode(&rep);
    const msgpack_object *ev = body ? opd__mp_get(body, "event") : NULL;
    if (ev == NULL || ev->type != MSGPACK_OBJECT_BIN || ev->via.bin.size != 64) {
      rc = opd__fail(OPD_EPROTO, "stream: the reply has no 64-byte event");
    } else {
      cu_ipc_t th;
      memcpy(th.bytes, ev->via.bin.ptr, 64);
      if ((r = cu.ipc_open_event(&theirs, th)) != 0)
        rc = opd__fail(OPD_EBACKEND, "opd_run_stream: the daemon's event does "
                       "not open here (cuIpcOpenEventHandle: %s)", cu_str(r));
    }
    if (rc == 0 && a.flag) {
      poll_setup(k, e, opd__mp_get(body, "flag"));
      const msgpack_object *w = opd__mp_get(body, "words");
      e->words = e->flag && cu.memset_d32 != NULL && !k->no_words && w != NULL &&
                 w->type == MSGPACK_OBJECT_BOOLEAN && w->via.boolean;
    }
  }
  opd__reply_free(&rep);
  if (rc != 0) {
    cu.event_destroy(mine);
    poll_free(e); /* e->ctx is not ctx yet: only the pool goes */
    return rc;
  }
  e->ctx = ctx;
  e->mine = mine;
  e->theirs = theirs;
  e->gpu = gpu;
  return 0;
}

/* What opd_run_stream and opd_run_prepared_stream share: the events
 * around `send` (which submits the run and waits for its answer: at
 * enqueue when gpu, at completion when not; with lazy not NULL it submits
 * a FLAG run, *lazy its id, and does not wait). */
typedef int (*send_fn)(opd_client_t *c, const void *arg, int gpu,
                       const char *wire, uint64_t *lazy, uint32_t extra);

/* Reads the answers of the oldest enqueued runs until at most `keep` are
 * unread (k->mu held); the first error is kept for the next call. */
static void lazy_reap(opd_client_t *c, struct opd_cuda *k, int keep) {
  int i = 0;
  for (; k->n_lazy - i > keep; i++) {
    int rc = opd__wait_reply(c, k->lazy[i], -1, NULL, NULL, NULL);
    if (rc != 0 && k->lazy_rc == 0) {
      k->lazy_rc = rc;
      snprintf(k->lazy_msg, sizeof k->lazy_msg, "an enqueued run (request "
               "%llu) failed: %s", (unsigned long long)k->lazy[i],
               opd_last_error());
    }
  }
  memmove(k->lazy, k->lazy + i, sizeof k->lazy[0] * (size_t)(k->n_lazy - i));
  k->n_lazy -= i;
}

/* The error an enqueued run left for the next call (k->mu held), told
 * once: a refusal the daemon answered, or a poll kernel that timed out on
 * any device of the connection. */
static int lazy_error(struct opd_cuda *k) {
  if (k->lazy_rc != 0) {
    int rc = opd__fail(k->lazy_rc, "%s", k->lazy_msg);
    k->lazy_rc = 0;
    return rc;
  }
  for (int d = 0; d < DEVICES; d++) {
    cevents_t *e = &k->ev[d];
    if (e->err != NULL && e->err[0] != 0) {
      e->err[0] = 0;
      return opd__fail(OPD_ETIMEDOUT, "the GPU wait for enqueued run "
                       "(request %u, cuda:%d) gave up after %llu ms: the "
                       "daemon had not finished it (stopped, or its GPU "
                       "failed; OPD_STREAM_POLL_TIMEOUT_MS), so work queued "
                       "after it on the stream did not wait for it",
                       e->err[1], d,
                       (unsigned long long)(k->poll_ns / 1000000u));
    }
  }
  return 0;
}

static int tensor_at(opd_client_t *c, struct opd_cuda *k, int dev,
                     const char *device, const void *ptr, opd_tensor_t *t);

/* Device pointers to point descriptors at, inside ordered (k->mu held). */
typedef struct {
  void *const *ptrs;
  opd_tensor_t *t;
  uint32_t n;
} ptrs_t;

/* The WORD slot of stream in e (k->mu held): its own, a new one, or 0 when
 * all are taken (its runs wait through the pool's events). */
static int slot_for(cevents_t *e, void *stream) {
  for (int i = 1; i <= e->n_slots; i++)
    if (e->slot_stream[i] == stream) return i;
  if (e->n_slots + 1 >= OPD_RUN_WORD_SLOTS) return 0;
  e->slot_stream[++e->n_slots] = stream;
  return e->n_slots;
}

/* CUDA's legacy default stream: the handle 0, or CU_STREAM_LEGACY (what
 * torch's default stream is); CU_STREAM_PER_THREAD (0x2) is not. */
static int is_legacy(const void *stream) {
  return stream == NULL || stream == (const void *)0x1;
}

/* The stream libopd's part of a call goes on instead of the caller's
 * `stream` (e's context current, k->mu held): stream itself, or where it
 * is the legacy default stream and OPD_STREAM_LEGACY asks for it, a
 * non-blocking stream of libopd's, made (with its two events) the first
 * time. Why: under MPS, ResNet-18 with its ReLUs through opd ran 1.09x
 * torch's forward on torch's default stream and 1.03x with the whole
 * forward on a stream of its own (bench/probe_level.py); which of libopd's
 * operations on the legacy stream costs that is not known yet, and the
 * modes are there to find out (docs/async.md "The legacy default
 * stream"). Anything that fails to be made leaves the legacy stream in use
 * (said once under OPD_STREAM_TRACE). */
static void *side_for(struct opd_cuda *k, cevents_t *e, void *stream) {
  int m = legacy();
  if ((m != LEGACY_SIDE && m != LEGACY_FORK && m != LEGACY_BUSY) || !is_legacy(stream) ||
      e->side_failed || cu.stream_create == NULL || cu.stream_destroy == NULL)
    return stream;
  if (e->side != NULL) return e->side;
  cu_result r = cu.stream_create(&e->side, 0x1 /* CU_STREAM_NON_BLOCKING */);
  if (r == 0) r = cu.event_create(&e->join_ev, 0x2 /* DISABLE_TIMING */);
  if (r == 0) r = cu.event_create(&e->fork_ev, 0x2);
  if (r == 0) return e->side;
  if (k->trace)
    fprintf(stderr, "opd: calls on the legacy default stream stay on it: no "
            "stream of libopd's (cuStreamCreate, cuEventCreate: %s)\n", cu_str(r));
  if (e->side) cu.stream_destroy(e->side);
  if (e->join_ev) cu.event_destroy(e->join_ev);
  if (e->fork_ev) cu.event_destroy(e->fork_ev);
  e->side = e->join_ev = e->fork_ev = NULL;
  e->side_failed = 1;
  return stream;
}

/* Queues libopd's poll kernel on stream (e's context current, k->mu
 * held): work queued there later waits, on the GPU, until the daemon's
 * flag word reaches id (the enqueued run `id` and those before it on the
 * session's stream ended). fresh: id was just sent, its answer is read
 * later (k->lazy); else (a batch's join) it is there already, or read. If
 * the kernel does not launch, the runs' end is waited for on the host and
 * the call fails. */
static int poll_launch(opd_client_t *c, struct opd_cuda *k, cevents_t *e,
                       void *stream, uint64_t id, int fresh, int idle,
                       cu_ptr_t mine, const char *who) {
  uint32_t want = (uint32_t)id;
  unsigned long long ns = k->poll_ns;
  cu_ptr_t st = e->flag + OPD_STAMPS_OFFSET + 16u * (want % OPD_STAMPS_N);
  void *args[5] = {&e->flag, &want, &e->err_dev, &ns, mine ? &mine : &st};
  void *fn = mine ? e->fn_w : k->stamps && e->fn_st != NULL ? e->fn_st : e->fn;
  void *on = idle && legacy() == LEGACY_BUSY ? stream : side_for(k, e, stream);
  cu_result r;
  if (mine && legacy() == LEGACY_PDL && e->fn_wp != NULL) {
    cu_launch_attr_t at = {.id = CU_LAUNCH_ATTR_PROGRAMMATIC_SERIALIZATION,
                           .value.allowed = 1};
    cu_launch_config_t cfg = {{1, 1, 1}, {1, 1, 1}, 0, on, &at, 1};
    r = cu.launch_kernel_ex(&cfg, e->fn_wp, args, NULL);
  } else {
    r = cu.launch_kernel(fn, 1, 1, 1, 1, 1, 1, 0, on, args, NULL);
  }
  const char *what = on == stream ? "the poll kernel did not launch on the "
                                    "caller's stream (cuLaunchKernel"
                                  : "the poll kernel did not launch on libopd's "
                                    "stream (cuLaunchKernel";
  if (r == 0) e->polled = 1;
  /* on libopd's stream: the caller's waits for it */
  if (r == 0 && on != stream) {
    what = "the caller's stream could not be made to wait for the poll "
           "kernel (cuEventRecord, cuStreamWaitEvent";
    if ((r = cu.event_record(e->join_ev, on)) == 0)
      r = cu.stream_wait_event(stream, e->join_ev, 0);
  }
  if (r == 0) {
    if (fresh) k->lazy[k->n_lazy++] = id;
    return 0;
  }
  /* no GPU wait: the runs' end on the host, then the stream (the word the
   * kernel would have written, written so the daemon's stream goes on) */
  if (mine != 0 && on == stream) (void)cu.memset_d32(mine, want, 1, stream);
  int rc = fresh ? opd__wait_reply(c, id, -1, NULL, NULL, NULL) : 0;
  if (!fresh) lazy_reap(c, k, 0);
  if (rc == 0) rc = opd__call(c, OPD_MSG_SYNC, NULL, NULL, -1, NULL, NULL);
  if (rc == 0)
    rc = opd__fail(OPD_EBACKEND, "%s: %s: %s); the run%s completed, the "
                   "stream did not wait for %s", who, what, cu_str(r),
                   fresh ? "" : "s", fresh ? "it" : "them");
  return rc;
}

/* The batch's runs so far joined back to its stream (k->mu held, its
 * context current): one poll kernel for the last; then what was kept for
 * them is dropped (work queued on the stream after this waits for them,
 * torch's caching allocator's reuse included). */
static int batch_join(opd_client_t *c, struct opd_cuda *k, const char *who) {
  batch_t *b = &k->batch;
  int rc = 0;
  if (b->runs > 0) {
    rc = poll_launch(c, k, b->e, b->stream, b->last, 0, 0, 0, who);
    b->runs = 0;
    b->n_joins++;
  }
  for (int i = 0; i < b->n_keep; i++) b->keep[i].drop(b->keep[i].obj);
  b->n_keep = 0;
  return rc;
}

/* batch_join with the batch's context current (k->mu held) */
static int batch_join_in(opd_client_t *c, struct opd_cuda *k, const char *who) {
  int pushed = k->batch.runs > 0 ? ctx_enter(k->batch.ctx) : 0;
  int rc = batch_join(c, k, who);
  ctx_leave(pushed);
  return rc;
}

int opd_batch_begin(opd_client_t *c, void *stream) {
  int rc = opd__check_usable(c);
  if (rc == 0) rc = cu_ready("opd_batch_begin");
  struct opd_cuda *k = rc == 0 ? cuda_of(c) : NULL;
  if (rc != 0 || k == NULL) return rc ? rc : OPD_ENOMEM;
  void *ctx = NULL;
  cu_result r = cu.stream_get_ctx(stream, &ctx);
  if (r != 0 || ctx == NULL)
    return opd__fail(OPD_EINVAL, "opd_batch_begin: %p is not a CUDA stream "
                     "of this process with a context (cuStreamGetCtx: %s)",
                     stream, r ? cu_str(r) : "no context");
  pthread_mutex_lock(&k->mu);
  batch_t *b = &k->batch;
  if (b->open) {
    rc = opd__fail(OPD_ESTATE, "opd_batch_begin: a batch is already open on "
                   "this connection (stream %p); end it first (batches do not "
                   "nest)", b->stream);
  } else {
    int pushed = ctx_enter(ctx), sdev = -1;
    if (cu.ctx_get_device(&sdev) != 0 || sdev < 0 || sdev >= DEVICES)
      rc = opd__fail(OPD_EINVAL, "opd_batch_begin: the stream's device is "
                     "unknown or past cuda:%d", DEVICES - 1);
    ctx_leave(pushed);
    if (rc == 0) {
      b->open = 1, b->stream = stream, b->ctx = ctx, b->dev = sdev;
      b->runs = 0, b->n_keep = 0, b->e = NULL;
    }
  }
  pthread_mutex_unlock(&k->mu);
  return rc;
}

int opd_batch_end(opd_client_t *c) {
  int rc = opd__check_usable(c);
  if (rc) return rc;
  struct opd_cuda *k = __atomic_load_n(&c->cuda, __ATOMIC_ACQUIRE);
  if (k != NULL) pthread_mutex_lock(&k->mu);
  if (k == NULL || !k->batch.open) {
    rc = opd__fail(OPD_ESTATE, "opd_batch_end: no batch is open on this "
                   "connection (opd_batch_begin)");
  } else {
    rc = batch_join_in(c, k, "opd_batch_end");
    k->batch.open = 0;
  }
  if (k != NULL) pthread_mutex_unlock(&k->mu);
  return rc;
}

/* opd_close, before the socket closes: an open batch ends (its stream
 * waits for its runs), and where runs were enqueued the daemon finishes
 * them first: a session's runs still waiting when it ends are let go
 * (the daemon stops waiting for a departed client's stream), which would
 * run them before the work they wait for, into memory the stream's later
 * work reads. */
void opd__cuda_close(opd_client_t *c) {
  struct opd_cuda *k = c->cuda;
  if (k == NULL) return;
  pthread_mutex_lock(&k->mu);
  int open = k->batch.open, lazy = k->n_lazy > 0;
  pthread_mutex_unlock(&k->mu);
  if (open) (void)opd_batch_end(c);
  if (!open && !lazy) return;
  /* a SYNC, waited for as long as the poll kernels wait (a daemon that
   * stopped answering does not hold the close for longer) */
  fbuf_t b;
  msgpack_packer pk;
  uint64_t id = opd__new_id(c);
  opd__frame_begin(&b, &pk, OPD_MSG_SYNC, id);
  msgpack_pack_map(&pk, 0);
  int rc = opd__submit_frame(c, &b, id, 0, -1);
  opd__fbuf_free(&b);
  if (rc == 0)
    (void)opd__wait_reply(c, id, (int)(k->poll_ns / 1000000u), NULL, NULL, NULL);
}

int opd__batch_keep(opd_client_t *c, void *stream, void *obj,
                    void (*drop)(void *)) {
  struct opd_cuda *k = c != NULL ? __atomic_load_n(&c->cuda, __ATOMIC_ACQUIRE) : NULL;
  if (k == NULL) return 0;
  pthread_mutex_lock(&k->mu);
  batch_t *b = &k->batch;
  int kept = b->open && b->stream == stream;
  /* full: join, then keep on; a failed join waited for the runs on the
   * host (poll_launch's fallback): nothing to keep */
  if (kept && b->n_keep == BATCH_KEEP && batch_join_in(c, k, "opd_batch") != 0)
    kept = 0;
  if (kept) {
    b->keep[b->n_keep].obj = obj;
    b->keep[b->n_keep++].drop = drop;
  }
  pthread_mutex_unlock(&k->mu);
  return kept;
}

int opd__batch_join(opd_client_t *c, void *stream) {
  struct opd_cuda *k = c != NULL ? __atomic_load_n(&c->cuda, __ATOMIC_ACQUIRE) : NULL;
  if (k == NULL) return 0;
  pthread_mutex_lock(&k->mu);
  int rc = k->batch.open && k->batch.stream == stream
               ? batch_join_in(c, k, "opd_batch") : 0;
  pthread_mutex_unlock(&k->mu);
  return rc;
}

int opd__batch_open(opd_client_t *c, void *stream) {
  struct opd_cuda *k = c != NULL ? __atomic_load_n(&c->cuda, __ATOMIC_ACQUIRE) : NULL;
  if (k == NULL) return 0;
  pthread_mutex_lock(&k->mu);
  int open = k->batch.open && k->batch.stream == stream;
  pthread_mutex_unlock(&k->mu);
  return open;
}

static int ordered(opd_client_t *c, const char *who, const char *device,
                   void *stream, send_fn send, const void *arg,
                   const ptrs_t *at, int lazy) {
  int dev, rc = opd__check_usable(c);
  if (rc == 0) rc = cuda_index(who, device, &dev);
  if (rc == 0) rc = cu_ready(who);
  struct opd_cuda *k = rc == 0 ? cuda_of(c) : NULL;
  if (rc != 0 || k == NULL) return rc ? rc : OPD_ENOMEM;
  void *ctx = NULL;
  cu_result r = cu.stream_get_ctx(stream, &ctx);
  if (r != 0 || ctx == NULL)
    return opd__fail(OPD_EINVAL, "%s: %p is not a CUDA stream of this "
                     "process with a context (cuStreamGetCtx: %s)", who,
                     stream, r ? cu_str(r) : "no context");
  pthread_mutex_lock(&k->mu);
  int pushed = ctx_enter(ctx);
  int sdev = -1;
  if (cu.ctx_get_device(&sdev) == 0 && strcmp(device, "cuda") == 0)
    dev = sdev; /* "cuda": the stream's */
  else if (sdev >= 0 && sdev != dev) {
    ctx_leave(pushed);
    pthread_mutex_unlock(&k->mu);
    return opd__fail(OPD_EINVAL, "%s: the stream is on cuda:%d of this "
                     "process, the run names cuda:%d (\"%s\")", who, sdev,
                     dev, device);
  }
  char buf[16];
  const char *wire = wire_name(dev, buf);
  cevents_t *e;
  uint64_t t[5] = {k->trace ? opd__now_ns() : 0};
  rc = lazy_error(k);
  if (rc == 0) rc = events_for(c, k, dev, ctx, &e);
  for (uint32_t i = 0; at != NULL && rc == 0 && i < at->n; i++)
    if (at->ptrs[i] != NULL)
      rc = tensor_at(c, k, dev, device, at->ptrs[i], &at->t[i]);
  if (rc == 0 && e->gpu && lazy && e->flag) {
    /* enqueued: the stream polls the flag word the daemon writes after
     * the run; its answer is read later */
    if (k->n_lazy == LAZY) lazy_reap(c, k, LAZY / 2);
    /* this id's pool event was last recorded for an id OPD_STREAM_EVENTS
     * before: that run's answer says the daemon queued its wait on it */
    uint64_t id = opd__new_id(c);
    /* a batch's run after its first: ordered after that one on the
     * daemon's stream, the caller's stream not waited for (the batch's
     * contract, opd_batch_begin) */
    batch_t *b = &k->batch;
    int in_batch = b->open && b->stream == stream && b->dev == dev;
    int after = in_batch && b->runs > 0;
    /* a stream whose work is all done (as if synchronized): the run needs
     * no wait; else the stream's word, else an event of the pool */
    int on_legacy = is_legacy(stream);
    int idle = !after && cu.stream_query != NULL && !k->no_idle &&
               !(legacy() >= LEGACY_WORD && on_legacy) &&
               cu.stream_query(stream) == 0;
    int slot = !after && !idle && e->words ? slot_for(e, stream) : 0;
    while (!after && !idle && slot == 0 && k->n_lazy > 0 &&
           k->lazy[0] + OPD_STREAM_EVENTS <= id)
      lazy_reap(c, k, k->n_lazy - 1);
    if (k->trace) t[1] = opd__now_ns();
    /* LEGACY_KERNEL: the poll kernel writes the word (not stamped; not in
     * a batch, whose runs get their poll kernel only at the join) */
    cu_ptr_t mine = slot != 0 && !in_batch && on_legacy && legacy() >= LEGACY_KERNEL &&
                            e->fn_w != NULL && !k->stamps
                        ? e->flag + (cu_ptr_t)slot * OPD_STREAM_SLOT_BYTES
                        : 0;
    if (after) {
      b->n_runs++;
    } else if (idle) {
      k->idle++;
    } else if (mine != 0) {
      /* written by the poll kernel below, as it starts */
    } else if (slot != 0) { /* the stream's word: the daemon's stream polls it */
      /* LEGACY_FORK: written on libopd's stream once it reached here */
      void *on = legacy() == LEGACY_FORK ? side_for(k, e, stream) : stream;
      if (on != stream && ((r = cu.event_record(e->fork_ev, stream)) != 0 ||
                           (r = cu.stream_wait_event(on, e->fork_ev, 0)) != 0))
        rc = opd__fail(OPD_EBACKEND, "%s: the caller's stream's event for "
                       "libopd's (cuEventRecord, cuStreamWaitEvent): %s", who,
                       cu_str(r));
      else if ((r = cu.memset_d32(e->flag + (cu_ptr_t)slot * OPD_STREAM_SLOT_BYTES,
                                  (unsigned)id, 1, on)) != 0)
        rc = opd__fail(OPD_EBACKEND, "%s: cuMemsetD32Async on %s: %s", who,
                       on == stream ? "the caller's stream" : "libopd's stream",
                       cu_str(r));
    } else if ((r = cu.event_record(e->pool[id % OPD_STREAM_EVENTS], stream)) != 0) {
      rc = opd__fail(OPD_EBACKEND, "%s: cuEventRecord on the caller's "
                     "stream: %s", who, cu_str(r));
    }
    if (k->trace) t[2] = opd__now_ns();
    uint32_t extra = after || idle ? 0 : slot ? OPD_RUN_F_WAIT | OPD_RUN_F_WORD |
                                                    ((uint32_t)slot << OPD_RUN_SLOT_SHIFT)
                                              : OPD_RUN_F_WAIT;
    if (rc == 0) rc = send(c, arg, 1, wire, &id, extra);
    if (k->trace) t[3] = opd__now_ns();
    if (rc == 0 && in_batch) { /* the stream waits at the join */
      k->lazy[k->n_lazy++] = id;
      b->runs++;
      b->last = id;
      b->e = e;
      if (b->runs >= BATCH_RUNS) rc = batch_join(c, k, who);
    } else if (rc == 0) {
      rc = poll_launch(c, k, e, stream, id, 1, idle, mine, who);
    }
    if (k->trace && rc == 0) {
      t[4] = opd__now_ns();
      opd__steps_add(&k->steps, t);
      if (k->steps.n % 2000 == 0) trace_print(k);
    }
  } else if (rc == 0 && e->gpu) {
    if (k->trace) t[1] = opd__now_ns();
    if ((r = cu.event_record(e->mine, stream)) != 0)
      rc = opd__fail(OPD_EBACKEND, "%s: cuEventRecord on the caller's "
                     "stream: %s", who, cu_str(r));
    if (k->trace) t[2] = opd__now_ns();
    if (rc == 0) rc = send(c, arg, 1, wire, NULL, 0);
    if (k->trace) t[3] = opd__now_ns();
    /* only a run the daemon took has recorded its event */
    if (rc == 0 && (r = cu.stream_wait_event(stream, e->theirs, 0)) != 0)
      rc = opd__fail(OPD_EBACKEND, "%s: cuStreamWaitEvent on the caller's "
                     "stream: %s", who, cu_str(r));
    if (k->trace && rc == 0) {
      t[4] = opd__now_ns();
      opd__steps_add(&k->steps, t);
      if (k->steps.n % 2000 == 0) trace_print(k);
    }
  } else if (rc == 0) { /* host order: the stream's work done first */
    if ((r = cu.stream_sync(stream)) != 0)
      rc = opd__fail(OPD_EBACKEND, "%s: cuStreamSynchronize: %s", who,
                     cu_str(r));
    if (rc == 0) rc = send(c, arg, 0, wire, NULL, 0);
  }
  ctx_leave(pushed);
  pthread_mutex_unlock(&k->mu);
  return rc;
}

typedef struct {
  const char *device, *op;
  const opd_tensor_t *in, *out;
  uint32_t n_in, n_out, n_attrs;
  const opd_attr_t *attrs;
} run_args_t;

static int send_run(opd_client_t *c, const void *arg, int gpu,
                    const char *wire, uint64_t *lazy, uint32_t extra) {
  const run_args_t *a = arg;
  if (lazy != NULL) /* *lazy: the id, given */
    return opd__submit_flags_id(c, wire, OPD_RUN_F_ASYNC | OPD_RUN_F_FLAG | extra,
                                a->op, a->in, a->n_in, a->out,
                                a->n_out, a->attrs, a->n_attrs, *lazy);
  return opd__run_flags(c, wire, gpu ? OPD_RUN_F_ASYNC | OPD_RUN_F_WAIT |
                        OPD_RUN_F_SIGNAL : 0, a->op, a->in, a->n_in, a->out,
                        a->n_out, a->attrs, a->n_attrs);
}

int opd_run_stream(opd_client_t *c, const char *device, void *stream,
                   const char *op, const opd_tensor_t *in, uint32_t n_in,
                   const opd_tensor_t *out, uint32_t n_out,
                   const opd_attr_t *attrs, uint32_t n_attrs) {
  run_args_t a = {device, op, in, out, n_in, n_out, n_attrs, attrs};
  return ordered(c, "opd_run_stream", device, stream, send_run, &a, NULL, 0);
}

int opd_enqueue_stream(opd_client_t *c, const char *device, void *stream,
                       const char *op, const opd_tensor_t *in, uint32_t n_in,
                       const opd_tensor_t *out, uint32_t n_out,
                       const opd_attr_t *attrs, uint32_t n_attrs) {
  run_args_t a = {device, op, in, out, n_in, n_out, n_attrs, attrs};
  return ordered(c, "opd_enqueue_stream", device, stream, send_run, &a, NULL, 1);
}

static int stream_ptrs(opd_client_t *c, const char *who, const char *device,
                       void *stream, const char *op, void *const *ptrs,
                       opd_tensor_t *t, uint32_t n_in, uint32_t n_out,
                       const opd_attr_t *attrs, uint32_t n_attrs, int lazy) {
  if (n_in + n_out > 0 && (ptrs == NULL || t == NULL))
    return opd__fail(OPD_EINVAL, "%s: NULL ptrs or tensors with %u of them",
                     who, n_in + n_out);
  run_args_t a = {device, op, t, t + n_in, n_in, n_out, n_attrs, attrs};
  ptrs_t at = {ptrs, t, n_in + n_out};
  return ordered(c, who, device, stream, send_run, &a, &at, lazy);
}

int opd_run_stream_ptrs(opd_client_t *c, const char *device, void *stream,
                        const char *op, void *const *ptrs, opd_tensor_t *t,
                        uint32_t n_in, uint32_t n_out, const opd_attr_t *attrs,
                        uint32_t n_attrs) {
  return stream_ptrs(c, "opd_run_stream_ptrs", device, stream, op, ptrs, t,
                     n_in, n_out, attrs, n_attrs, 0);
}

int opd_enqueue_stream_ptrs(opd_client_t *c, const char *device, void *stream,
                            const char *op, void *const *ptrs, opd_tensor_t *t,
                            uint32_t n_in, uint32_t n_out,
                            const opd_attr_t *attrs, uint32_t n_attrs) {
  return stream_ptrs(c, "opd_enqueue_stream_ptrs", device, stream, op, ptrs, t,
                     n_in, n_out, attrs, n_attrs, 1);
}

static int send_prepared(opd_client_t *c, const void *arg, int gpu,
                         const char *wire, uint64_t *lazy, uint32_t extra) {
  (void)wire, (void)lazy, (void)extra; /* the prepared frame names it
                                          (opd__cuda_wire) */
  int rc = opd_run_prepared(c, arg); /* answered at enqueue */
  return rc == 0 && !gpu ? opd_synchronize(c) : rc;
}

int opd_run_prepared_stream(opd_client_t *c, const opd_prepared_t *p,
                            void *stream) {
  const char *device = opd__prepared_device(p);
  if (p != NULL && !(opd__prepared_flags(p) & OPD_RUN_F_WAIT))
    return opd__fail(OPD_EINVAL, "opd_run_prepared_stream: the run was not "
                     "prepared with OPD_RUN_STREAM");
  return ordered(c, "opd_run_prepared_stream", device, stream, send_prepared,
                 p, NULL, 0);
}

int opd_synchronize(opd_client_t *c) {
  int rc = opd__check_usable(c);
  if (rc) return rc;
  struct opd_cuda *k = __atomic_load_n(&c->cuda, __ATOMIC_ACQUIRE);
  if (k != NULL) { /* the enqueued runs' answers first */
    pthread_mutex_lock(&k->mu);
    lazy_reap(c, k, 0);
    pthread_mutex_unlock(&k->mu);
  }
  rc = opd__call(c, OPD_MSG_SYNC, NULL, NULL, -1, NULL, NULL);
  if (k != NULL) {
    pthread_mutex_lock(&k->mu);
    int lr = lazy_error(k);
    pthread_mutex_unlock(&k->mu);
    if (rc == 0) rc = lr;
  }
  return rc;
}

/* ---- device pointers as tensors ---------------------------------------- */

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
  cu_result r = cu.ipc_get_mem(&h, base);
  if (r != 0)
    return opd__fail(OPD_EINVAL, "opd_tensor_cuda: this CUDA memory cannot be "
                     "shared by IPC handle (cuIpcGetMemHandle: %s): memory of "
                     "cudaMalloc is needed (not cudaMallocAsync pools, VMM "
                     "memory such as torch's expandable_segments, managed or "
                     "host memory)", cu_str(r));
  uint64_t arena;
  char buf[16];
  const char *wire = wire_name(dev, buf); /* the daemon's device by UUID */
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
static int tensor_at(opd_client_t *c, struct opd_cuda *k, int dev,
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
  cu_result r = cu.pointer_attrs(4, attr, val, (cu_ptr_t)(uintptr_t)ptr);
  if (r != 0 || size == 0)
    return opd__fail(OPD_EINVAL, "opd_tensor_cuda: %p is not CUDA device "
                     "memory of this process (cuPointerGetAttributes: %s)",
                     ptr, r ? cu_str(r) : "no allocation there");
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
  if (rc == 0) rc = cuda_index("opd_tensor_cuda", device, &dev);
  if (rc == 0) rc = cu_ready("opd_tensor_cuda");
  struct opd_cuda *k = rc == 0 ? cuda_of(c) : NULL;
  if (rc != 0 || k == NULL) return rc ? rc : OPD_ENOMEM;
  pthread_mutex_lock(&k->mu);
  rc = tensor_at(c, k, dev, device, ptr, t);
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

/* The device string a prepared stream-ordered run sends for the caller's
 * `device` (run.c): this process's device by UUID where the driver is
 * loaded and can tell, else `device` itself (into out, cap bytes). */
void opd__cuda_wire(const char *device, char *out, size_t cap) {
  snprintf(out, cap, "%s", device);
  pthread_once(&cu_once, cu_load);
  int dev = cuda_n(device);
  const char *u = dev >= 0 ? local_uuid(dev) : NULL;
  if (u != NULL) snprintf(out, cap, "%s", u);
}
