/* The backend interface: where a run executes and where device memory
 * comes from.
 *
 * DESIGN
 * Two backends serve every daemon: the CPU backend (daemon/backend/cpu.c:
 * the loop thread for tiny runs, libuv's thread pool and the kernel pool
 * for the rest) and the device backend, which a build picks at compile
 * time as redis's ae.c picks ae_epoll.c or ae_kqueue.c: the CUDA backend
 * (daemon/backend/cuda/) or, in a build without CUDA, the none backend
 * (daemon/backend/none.c), which refuses every device request with a
 * reason. Generic code calls only these operations; it never sees a CUDA
 * type, and the job carries the backend's per-run state as opaque bytes
 * (opd_job_t.backend_job), so staging, streams and events are the
 * backend's own business.
 *
 * A launched run ends by its backend calling job->done(job) on the loop
 * thread (the completion callback its session set, as uv_queue_work's
 * after_work_cb), or at once: launch returns OPD_LAUNCH_DONE when the run
 * already finished (inline), and then nothing calls back. A device run
 * asked to be asynchronous (OPD_RUN_F_ASYNC) whose tensors are all device
 * memory returns OPD_LAUNCH_ENQUEUED: the session answers it then, and
 * its job->done still comes at completion (the job and the references on
 * its arenas live until then).
 */
#ifndef OPD_BACKEND_H
#define OPD_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

typedef struct opd_server opd_server_t;
typedef struct opd_session opd_session_t;
typedef struct opd_arena opd_arena_t;
typedef struct opd_job opd_job_t;
typedef struct msgpack_packer msgpack_packer;
typedef struct opd_op_def opd_op_def_t;
typedef struct opd_graph opd_graph_t;

/* Where one tensor of a run lives, for a backend's plan. */
typedef struct opd_tplace {
  int host;                      /* in a host arena (else device memory) */
  uint64_t bytes;                /* the bytes the run touches */
} opd_tplace_t;

/* launch's answers: QUEUED, job->done comes when it completes; DONE, it
 * completed now; ENQUEUED, its work is queued on the device and the run
 * may be answered now (OPD_RUN_F_ASYNC): job->done still comes at its
 * completion. */
enum { OPD_LAUNCH_QUEUED = 0, OPD_LAUNCH_DONE = 1, OPD_LAUNCH_ENQUEUED = 2,
       OPD_LAUNCH_LATER = 3 };

/* The per-run state a backend keeps in the job (plain data: a job's plan
 * is copied with memcpy by the run cache). */
#define OPD_BACKEND_JOB_BYTES 576

/* STREAM's request: the client's interprocess event (64-byte handle);
 * with flag, the pool FLAG runs wait on (n_events handles back to back)
 * and the session's flag word asked for */
typedef struct opd_stream_req {
  const void *event;
  const void *events;
  uint32_t n_events;
  int flag;
  uint32_t wait_ms;              /* WORD waits give up after this; 0: the
                                    daemon's --stream-wait-ms */
} opd_stream_req_t;

/* ... and its reply: the daemon's event's handle; with flag, the flag
 * word's allocation's IPC handle */
typedef struct opd_stream_rep {
  unsigned char event[64];
  unsigned char flag[64];
  int words;                     /* WORD runs can wait on the client's words */
} opd_stream_rep_t;

typedef struct opd_backend {
  const char *name;              /* "cpu", "cuda", "none" */
  /* at start, after the loop scheduler: 0, or a logged error */
  int (*init)(opd_server_t *srv);
  void (*shutdown)(opd_server_t *srv);
  /* the devices, as a msgpack array (hello, stats) */
  void (*describe)(opd_server_t *srv, msgpack_packer *pk);
  /* Whether job (op, tensors, job->device set) can run here, and how:
   * fills job->backend_job. 0, or an error code with err set. */
  int (*plan)(opd_job_t *job, const opd_tplace_t *in, const opd_tplace_t *out,
              opd_err_t *err);
  /* Starts a planned run: OPD_LAUNCH_DONE (finished now: job->rc set),
   * OPD_LAUNCH_QUEUED (job->done is called later), or an error code
   * (nothing started, job->call.err set). A job with job->now set lives
   * on its caller's stack: the backend finishes it now or answers
   * OPD_LAUNCH_LATER having touched nothing (the caller queues it). */
  int (*launch)(opd_job_t *job);
  /* the events that order a session's runs on device dev with a
   * client's stream (STREAM, include/opd/protocol.h) */
  int (*stream)(opd_session_t *s, int dev, const opd_stream_req_t *rq,
                opd_stream_rep_t *rp, opd_err_t *err);
  /* writes value to the session's flag word of device dev on its stream,
   * after its earlier work (a FLAG run refused; nothing if it has none) */
  void (*signal)(opd_session_t *s, int dev, uint32_t value);
  /* a session's backend resources (streams), at its end */
  void (*session_end)(opd_session_t *s);
  /* device memory: zeroed, on device dev, exportable (an fd) or not;
   * *ptr its address, *token the backend's record */
  int (*alloc)(opd_server_t *srv, int dev, uint64_t size, int exportable,
               void **ptr, void **token, opd_err_t *err);
  /* a client's device memory by IPC handle (64 bytes): [offset,
   * offset+size) checked against its allocation */
  int (*import)(opd_server_t *srv, uint64_t session, int dev,
                const void *handle, uint64_t offset, uint64_t size, void **ptr,
                void **token, opd_err_t *err);
  /* a new fd for an exportable allocation, and the bytes it maps */
  int (*export)(opd_server_t *srv, void *token, int *fd, uint64_t *bytes,
                opd_err_t *err);
  /* a host arena the device will copy from: pinned when it can be */
  void (*pin)(opd_server_t *srv, opd_arena_t *a);
  /* what the backend holds for an arena (pin, memory, import) goes */
  void (*release)(opd_arena_t *a);
  /* a graph defined to run here (daemon/graph/graph.h; device set, nodes
   * checked and in order, temp_bytes planned): whether every node can run
   * here (err names the node), and its memory (g->temp, the backend's
   * state in g->backend). 0, or an error code with err set. */
  int (*graph_prepare)(opd_graph_t *g, opd_err_t *err);
  /* ... and what graph_prepare made goes (the graph's last reference) */
  void (*graph_release)(opd_graph_t *g);
  /* the runs launched on device dev and not yet seen complete: its queue
   * depth, for "auto" placement (the loop's thread) */
  int (*load)(const opd_server_t *srv, int dev);
} opd_backend_t;

extern const opd_backend_t opd__backend_cpu;
/* the device backend of this build: CUDA, or none */
extern const opd_backend_t opd__backend_dev;

/* The backend of a job placed on device (-1: the CPU). */
static inline const opd_backend_t *opd__backend_for(int device) {
  return device < 0 ? &opd__backend_cpu : &opd__backend_dev;
}

/* The row of op when the device backend's kernels take dtype (the dtype
 * of in[0]; 0: no input), or NULL with err saying why (tests). */
const void *opd__cuda_kernel(const opd_op_def_t *op, int dtype, opd_err_t *err);

#endif /* OPD_BACKEND_H */
