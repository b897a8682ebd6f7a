/* libopd's stream-ordered runs: a connection's CUDA state and the
 * functions the files of the stream-ordering module share. Not installed.
 *
 * DESIGN
 * The module sits above libopd's core (internal.h) and its CUDA driver
 * (cuda.h), in layers, each calling only those below it:
 *   ptx.c      the poll kernel's PTX text
 *   poll.c     a device's poll path (the flag word, the poll kernel, its
 *              launch), OPD_STREAM_LEGACY's placements, the enqueued runs'
 *              answers, a batch's join
 *   cudaconn.c a connection's CUDA state (struct opd_cuda): made at first
 *              use with the environment's knobs, the hooks conn.c calls
 *              at close
 *   batch.c    batches (opd_batch_begin/end, opd__batch_*)
 *   imports.c  device pointers as tensors: the IPC import cache
 *   stream.c   runs ordered with a caller's stream (opd_run_stream*,
 *              opd_enqueue_stream*, opd_synchronize)
 * Everything in struct opd_cuda is changed under its mu, by these files.
 */
#ifndef OPD_CLIENT_STREAM_H
#define OPD_CLIENT_STREAM_H

#include "client/libopd/cuda.h"
#include "client/libopd/internal.h"
#include "common/clock.h"

#pragma GCC visibility push(hidden)

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
  cevents_t ev[OPD_CUDA_DEVICES]; /* per device of this process */
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
                                    stamp their start and end (diagnosis;
                                    bench builds) */
  uint32_t wait_ms;              /* OPD_STREAM_WAIT_MS: the daemon's wait for
                                    a word gives up after this (0: its own) */
  /* OPD_STREAM_TRACE (bench builds): where ordered calls spend their
   * time (tensors, record, the run's round trip, the wait), printed at
   * close */
  int trace;
  opd_steps_t steps;
  uint64_t idle;                 /* enqueued runs whose stream was idle */
  batch_t batch;
};

/* OPD_STREAM_LEGACY: where a call whose stream is CUDA's legacy default
 * stream (torch's default stream) puts libopd's part of it */
enum {
  /* the two of every build: the default and the escape hatch */
  LEGACY_DIRECT = 0,             /* "direct": everything on the caller's */
  /* side to kernel: compared in bench builds only (make BENCH=1,
   * OPD_BENCH); kernel's steps are pdl's where there is no sm_90 */
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
  LEGACY_DEFAULT = LEGACY_PDL,   /* never behind direct in one process,
                                    ahead where the host is the bound
                                    (2026-12-05, bench/results/2026-12-05-
                                    h200-legacy-pdl.txt); as kernel where
                                    there is no sm_90 or cuLaunchKernelEx */
};

/* OPD_STREAM_TRACE and OPD_STREAM_STAMPS (diagnosis) are read in bench
 * builds only (make BENCH=1): elsewhere these are 0 and their code goes. */
#ifdef OPD_BENCH
#define TRACING(k) ((k)->trace)
#define STAMPING(k) ((k)->stamps)
#else
#define TRACING(k) ((void)(k), 0)
#define STAMPING(k) ((void)(k), 0)
#endif

/* ---- ptx.c ------------------------------------------------------------- */

/* The poll kernels' PTX: opd_poll, opd_poll_st, opd_poll_w (sm_70), and
 * opd_poll_wp (sm_90, a programmatic dependent launch's). */
extern const char opd__poll_ptx[], opd__poll_ptx90[];

/* ---- poll.c ------------------------------------------------------------ */

/* The process's LEGACY_* mode (OPD_STREAM_LEGACY, read once). */
int opd__legacy(void);
#ifdef OPD_BENCH
/* Sets the mode for the whole process from now on: one of the names of
 * the LEGACY_* list; 0, or OPD_EINVAL for another word; NULL: the mode
 * now, as its index. Exported for the benchmarks that compare the modes
 * in one process (bench/_torchbench.py, docs/records/2026-12-01-stream-ordered-cost/probe_level.py). */
__attribute__((visibility("default"))) int opd__stream_legacy(const char *mode);
#endif
/* CUDA's legacy default stream: the handle 0, or CU_STREAM_LEGACY. */
static inline int opd__is_legacy(const void *stream) {
  return stream == NULL || stream == (const void *)0x1;
}
/* e's pool of interprocess events made, their handles into h (ctx
 * current): 0, or the driver's error (nothing kept). */
cu_result opd__pool_make(cevents_t *e, cu_ipc_t *h);
/* The poll path of e (ctx current) from the daemon's flag handle fh; a
 * failure leaves e without it (enqueued runs then wait for answers). */
void opd__poll_setup(struct opd_cuda *k, cevents_t *e, const msgpack_object *fh);
/* What e's poll path holds, released in its own context (best effort). */
void opd__poll_free(cevents_t *e);
/* The WORD slot of stream in e, or 0 when all are taken. */
int opd__slot_for(cevents_t *e, void *stream);
/* The stream libopd's part of a call goes on instead of `stream`: stream
 * itself but in the comparison modes (side, fork, busy). */
void *opd__side_for(struct opd_cuda *k, cevents_t *e, void *stream);
/* Queues the poll kernel for run `id` on stream (see poll.c). */
int opd__poll_launch(opd_client_t *c, struct opd_cuda *k, cevents_t *e,
                     void *stream, uint64_t id, int fresh, int idle,
                     cu_ptr_t mine, const char *who);
/* Reads enqueued runs' answers until at most `keep` are unread. */
void opd__lazy_reap(opd_client_t *c, struct opd_cuda *k, int keep);
/* The error an enqueued run left for the next call, told once; or 0. */
int opd__lazy_error(struct opd_cuda *k);
/* The batch's runs so far joined back to its stream (k->mu held): _in
 * with the batch's context made current. 0 or the join's error. */
int opd__batch_join_locked(opd_client_t *c, struct opd_cuda *k, const char *who);
int opd__batch_join_in(opd_client_t *c, struct opd_cuda *k, const char *who);

/* ---- cudaconn.c -------------------------------------------------------- */

/* c's CUDA state, made (with conn.c's hooks) the first time; NULL and
 * OPD_ENOMEM as the last error when it cannot be. */
struct opd_cuda *opd__cuda_of(opd_client_t *c);
/* OPD_STREAM_TRACE's lines (bench builds; elsewhere nothing). */
#ifdef OPD_BENCH
void opd__trace_print(const struct opd_cuda *k);
#else
static inline void opd__trace_print(const struct opd_cuda *k) { (void)k; }
#endif

/* ---- imports.c --------------------------------------------------------- */

/* Points t at ptr, device memory of this process's device dev (k->mu
 * held, the driver loaded): the allocation imported or found in the
 * cache. 0 or an error naming opd_tensor_cuda. */
int opd__tensor_at(opd_client_t *c, struct opd_cuda *k, int dev,
                   const char *device, const void *ptr, opd_tensor_t *t);

#pragma GCC visibility pop

#endif
