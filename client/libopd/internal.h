/* libopd's internal header: the connection struct and the functions its
 * files share. Not installed; include/opd/opd.h is the public API.
 *
 * DESIGN
 * libopd is split by layer, each file one concern, lowest first:
 *   errors.c     the thread's last error (opd__fail), strerror/errname,
 *                dtype names and sizes, version
 *   frame.c      request encoding: the frame buffer (fbuf_t), msgpack
 *                written in place, RUN/INFER bodies (opd__build_run)
 *   transport.c  bytes and replies: socket and ring I/O, the reader
 *                (leader/follower), reply routing to slots, send,
 *                submit/wait (opd__submit_frame, opd__wait_reply, opd__call)
 *   conn.c       connect (peer check, hello, ring setup), close, fork
 *                handling (opd__check_usable), the transport's name
 *   control.c    control messages: arenas, alloc, publish/attach,
 *                import/export, ping, ops/stats as JSON
 *   json.c       msgpack to JSON (hello, ops, stats; json.h)
 *   cuda.c       the CUDA driver (loaded at first use), this process's
 *                devices named for the daemon, exported arenas mapped
 *                here (cuda.h)
 *   run.c        runs: submit/wait/run, prepared runs, infer
 *   ptx.c, poll.c, cudaconn.c, batch.c, imports.c, stream.c
 *                runs ordered with a CUDA stream, batches, device
 *                pointers as tensors (stream.h)
 * The core (errors, frame, transport, conn, control, json, run) names
 * nothing of the CUDA side but opd__cuda_wire (cuda.c, itself on the
 * core only): conn.c ends a connection's CUDA state through the hooks
 * that state was made with (opd__conn_hooks_t).
 * Built in with TORCH=1, client/torch/ holds the C kernels for torch's
 * dispatcher (opd_torch_*), over opd_infer and opd_run_stream_ptrs.
 * Every function here is hidden (not exported from libopd.so): the ABI is
 * include/opd/opd.h's functions and nothing else of the client.
 */
#ifndef OPD_CLIENT_INTERNAL_H
#define OPD_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "common/ring.h"
#include "common/wire.h"
#include "opd/opd.h"

#pragma GCC visibility push(hidden)

/* One request waiting for its reply (transport.c). */
typedef struct slot {
  uint64_t id;                   /* the request's id */
  int done;                      /* its reply arrived */
  int want_body;                 /* keep the reply payload */
  int code;                      /* the reply's code */
  char *msg;                     /* error message (malloc) */
  char *payload;                 /* whole reply payload (malloc) */
  size_t payload_len;            /* bytes of payload */
  int fd;                        /* passed with the reply, or -1 */
} slot_t;

/* An arena this connection created and maps (control.c). */
typedef struct carena {
  uint64_t id;                   /* the daemon's id for it */
  void *base;                    /* our mapping */
  uint64_t size;                 /* bytes */
  int fd;                        /* the memfd, kept for sharing */
} carena_t;

struct opd_client {
  int fd;                        /* the socket */
  pid_t pid;                     /* process that connected */
  unsigned fork_gen;             /* fork_gen when it connected */
  char path[108];                /* the socket's path */
  pthread_mutex_t mu;            /* everything below but rbuf */
  pthread_cond_t cv;             /* a slot completed or the reader left */
  pthread_mutex_t send_mu;       /* one frame on the wire at a time */
  int reading;                   /* a thread is reading the socket */
  int broken;                    /* 0, or why the connection is unusable */
  char broken_msg[480];          /* what broke it */
  uint64_t next_id;              /* the last request id given out */
  slot_t *slots;                 /* requests waiting for replies */
  size_t n_slots, cap_slots;     /* used, allocated */
  size_t n_pending;              /* slots not done */
  unsigned char *rbuf;           /* owned by the reading thread */
  size_t rlen, rcap;             /* bytes in rbuf, its size */
  int rfds[8];                   /* fds received, not yet claimed (mu) */
  int n_rfds;                    /* how many */
  opd_mp_arena_t arena;          /* decodes one reply (under mu) */
  uint32_t max_frame;            /* the daemon's frame limit (hello) */
  uint32_t max_inflight;         /* the daemon's in-flight limit (hello) */
  carena_t *arenas;              /* arenas opd_arena_create made */
  size_t n_arenas, cap_arenas;   /* used, allocated */
  char *hello_json;              /* the hello reply as JSON */
  size_t hello_len;              /* its length */
  int ring;                      /* 0: socket; OPD_RING_SPIN/_ADAPTIVE */
  char wait_why[240];            /* why the transport is not the one asked
                                    for ("" if it is) */
  opd_ring_t sq, cq;             /* we produce sq, consume cq */
  void *ring_base;               /* the rings' mapping */
  size_t ring_size;              /* its bytes */
  int ring_efd;                  /* adaptive: the daemon's doorbell */
  struct opd_cuda *cuda;         /* stream events, imports (stream.h), made
                                    on first use */
  const struct opd__conn_hooks *cuda_hooks; /* how conn.c ends it (set
                                    with it; NULL before) */
};

/* What conn.c calls of a layer that keeps state per connection (the CUDA
 * side: cudaconn.c), so that conn.c names none of its symbols. */
typedef struct opd__conn_hooks {
  void (*close)(opd_client_t *c); /* opd_close, before the socket closes:
                                    an open batch ended, enqueued runs
                                    finished (not in a fork()'s child) */
  void (*free)(opd_client_t *c);  /* after it closed: the state released */
} opd__conn_hooks_t;

/* ---- errors.c ---------------------------------------------------------- */

#define OPD_ERRMSG_CAP 512 /* bytes of the thread's last error message */

/* Sets the thread's last error (opd_last_error) from fmt and returns code.
 * The arguments may point into the last error itself. */
int opd__fail(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- frame.c ----------------------------------------------------------- */

/* A growable buffer with room on the stack for the common small frame;
 * a frame starts with OPD_FRAME_HEADER bytes kept for its length. */
typedef struct fbuf {
  char *data;                    /* local, or malloc once it outgrew it */
  size_t size, cap;              /* bytes used, bytes there */
  int oom;                       /* a grow failed: the frame is incomplete */
  char local[1024];              /* the common case */
} fbuf_t;

/* Starts a request frame [type, id, body...] in b (any previous content is
 * dropped, nothing allocated); the caller packs the body map next, with pk
 * (msgpack-c's packer into b, initialized here when not NULL) or in place. */
void opd__frame_begin(fbuf_t *b, msgpack_packer *pk, int type, uint64_t id);
void opd__fbuf_free(fbuf_t *b);
/* Builds a RUN or INFER frame for id into b. Returns 0, or OPD_EINVAL /
 * OPD_ELIMIT (the last error says which argument) with b freed. */
/* A graph's RUN (graph.c); the pieces a GRAPH_DEFINE is packed with. */
int opd__build_graph_run(fbuf_t *b, uint64_t id, uint64_t graph, uint32_t flags,
                         const opd_tensor_t *in, uint32_t n_in,
                         const opd_tensor_t *out, uint32_t n_out);
int opd__pack_tensor(fbuf_t *b, const opd_tensor_t *t);
int opd__pack_tensors(fbuf_t *b, const opd_tensor_t *t, uint32_t n,
                      const char *what);
int opd__pack_attrs(fbuf_t *b, const opd_attr_t *a, uint32_t n);
int opd__build_run(fbuf_t *b, int type, uint64_t id, const char *device,
                   uint32_t flags, const char *op, const opd_tensor_t *in,
                   uint32_t n_in, const opd_tensor_t *out, uint32_t n_out,
                   const opd_attr_t *attrs, uint32_t n_attrs);

/* PACK_STR(pk, s): common/wire.h */

/* ---- transport.c ------------------------------------------------------- */

/* A control request's reply payload and its decoded form: opd__call() or
 * opd__wait_reply() fills payload and len, opd__reply_decode() decodes it
 * with the same decoder as every other reply (strings point into payload),
 * and opd__reply_free() releases both. */
typedef struct reply {
  char *payload;                 /* the whole reply payload (malloc) */
  size_t len;                    /* its bytes */
  opd_mp_arena_t arena;          /* the decoded objects */
  msgpack_object obj;            /* [type, id, code, body] */
} reply_t;

/* A new request id of c. */
static inline uint64_t opd__new_id(opd_client_t *c) {
  return __atomic_add_fetch(&c->next_id, 1, __ATOMIC_RELAXED);
}
/* Adds a pending slot for id; caller holds mu. 0 or OPD_ENOMEM. */
int opd__slot_add(opd_client_t *c, uint64_t id, int want_body);
/* Sends b (a whole frame) on the socket with nfds fds; 0 or an error. */
int opd__send_frame_fds(opd_client_t *c, fbuf_t *b, const int *fds, int nfds);
/* Registers slot `id` and sends the frame (ring or socket; pass_fd >= 0
 * goes with it on the socket). On failure the slot is gone. */
int opd__submit_frame(opd_client_t *c, fbuf_t *b, uint64_t id, int want_body,
                      int pass_fd);
/* Waits for request id (timeout_ms < 0: forever); on success with a body,
 * *payload (malloc) is the whole reply payload, *fd the fd passed with it. */
int opd__wait_reply(opd_client_t *c, uint64_t id, int timeout_ms,
                    char **payload, size_t *len, int *fd);
/* A request with a body packed by `pack` (NULL: {}); *payload gets the
 * reply when payload is not NULL. */
int opd__call(opd_client_t *c, int type,
              void (*pack)(msgpack_packer *, const void *), const void *arg,
              int pass_fd, char **payload, size_t *len);
/* The body map of the reply, or NULL if it is malformed. */
const msgpack_object *opd__reply_decode(reply_t *r);
void opd__reply_free(reply_t *r);

/* ---- run.c ------------------------------------------------------------- */

/* A RUN with OPD_RUN_F_* flags and the id given (opd__new_id) submitted,
 * not waited for. */
int opd__submit_flags_id(opd_client_t *c, const char *device, uint32_t flags,
                         const char *op, const opd_tensor_t *in, uint32_t n_in,
                         const opd_tensor_t *out, uint32_t n_out,
                         const opd_attr_t *attrs, uint32_t n_attrs, uint64_t id);
/* A run with OPD_RUN_F_* flags, submitted and waited for. */
int opd__run_flags(opd_client_t *c, const char *device, uint32_t flags,
                   const char *op, const opd_tensor_t *in, uint32_t n_in,
                   const opd_tensor_t *out, uint32_t n_out,
                   const opd_attr_t *attrs, uint32_t n_attrs);
/* A prepared run's device (NULL: auto) and OPD_RUN_F_* flags. */
const char *opd__prepared_device(const opd_prepared_t *p);
/* A prepared run from a frame packed with id UINT64_MAX (its id slot) and
 * wire flags; 0 or OPD_ENOMEM (b is the caller's to free). */
int opd__prepared_from(opd_client_t *c, const fbuf_t *b, uint32_t flags,
                       opd_prepared_t **p);
uint32_t opd__prepared_flags(const opd_prepared_t *p);

/* ---- batch.c (stream.h declares the rest of the CUDA side) -------------- */

/* opd__batch_keep: obj is dropped with drop(obj) once the batch's runs so
 * far are joined back to `stream` (1: kept; 0: no batch is open on
 * stream, nothing kept). opd__batch_open: 1 while one is. opd__batch_join:
 * the open batch on stream, if any, joined to it now (its later runs wait
 * for the stream again, as a first run does): 0 or the join's error. */
int opd__batch_keep(opd_client_t *c, void *stream, void *obj,
                    void (*drop)(void *));
int opd__batch_open(opd_client_t *c, void *stream);
int opd__batch_join(opd_client_t *c, void *stream);

/* ---- conn.c ------------------------------------------------------------ */

/* Bumped in the child of every fork(): a connection made before it is not
 * the child's. Cheaper than getpid() (a system call) on every request. */
extern unsigned opd__fork_gen;

/* 0 when c may be used by this process: OPD_EINVAL for NULL, OPD_ESTATE
 * in the child of a fork() after c was made. Inline: every call checks. */
static inline int opd__check_usable(opd_client_t *c) {
  if (c == NULL) return opd__fail(OPD_EINVAL, "no connection (NULL)");
  if (c->fork_gen != __atomic_load_n(&opd__fork_gen, __ATOMIC_RELAXED))
    return opd__fail(OPD_ESTATE,
                     "this connection was made in process %d; after fork() "
                     "connect again in the child",
                     (int)c->pid);
  return 0;
}

#pragma GCC visibility pop

#endif
