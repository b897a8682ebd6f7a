/* libopd: the C client of the opd operator daemon. The whole public API.
 *
 * DESIGN
 * A client connects to the daemon's Unix socket, creates arenas (sealed
 * memfds mapped in both processes), writes tensors into them, and asks the
 * daemon to run operators on descriptors of those tensors. No tensor byte
 * crosses the socket.
 *
 * The ABI is plain C for ctypes and other FFIs: every function returns an
 * int (0 or a negative OPD_E* code from opd/protocol.h) unless noted, no
 * struct is passed by value, every buffer comes with its size. Structs
 * passed by pointer (opd_tensor_t, opd_attr_t) have fixed layouts with
 * explicit padding-free field order.
 *
 * Threads: a connection MAY be shared by any number of threads. Requests
 * from different threads are sent whole (a send lock) and each reply is
 * routed to the thread waiting for its id (one thread reads at a time and
 * hands other threads' replies over). opd_last_error() is per thread.
 *
 * fork(): a connection must not be used in a child after fork(); connect
 * again in the child (the Python package does this automatically). Arena
 * mappings stay valid in the child but belong to the parent's session.
 *
 * Minimal use:
 *
 *     opd_client_t *c;
 *     if (opd_connect(NULL, &c)) { fprintf(stderr, "%s\n", opd_last_error()); }
 *     uint64_t arena; void *base;
 *     opd_arena_create(c, 1 << 20, &arena, &base);
 *     int64_t shape[2] = {8, 1024};
 *     opd_tensor_t x, y;
 *     opd_tensor_init(&x, arena, 0, OPD_DTYPE_FLOAT32, 2, shape);
 *     opd_tensor_init(&y, arena, 8 * 1024 * 4, OPD_DTYPE_FLOAT32, 2, shape);
 *     ... fill (float *)base ...
 *     opd_run(c, "softmax", &x, 1, &y, 1, NULL, 0);
 *     opd_close(c);
 */
#ifndef OPD_H
#define OPD_H

#include <stddef.h>
#include <stdint.h>

#include "opd/protocol.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct opd_client opd_client_t;

/* A tensor descriptor. Set strided = 0 for C-contiguous (strides are then
 * ignored and computed by the daemon), 1 to send `strides` (in elements). */
typedef struct opd_tensor {
  uint64_t arena;                  /* id from opd_arena_create */
  uint64_t offset;                 /* byte offset of element 0 */
  int32_t dtype;                   /* OPD_DTYPE_* */
  int32_t rank;                    /* 0..OPD_MAX_RANK */
  int64_t shape[OPD_MAX_RANK];
  int64_t strides[OPD_MAX_RANK];   /* in elements, used when strided */
  int32_t strided;                 /* 0: contiguous */
  int32_t reserved;                /* 0 */
} opd_tensor_t;

/* An operator attribute. `type` (OPD_ATTR_*) says which field is read:
 * INT and BOOL read i, FLOAT reads f, STR reads s, INTS reads ints[0..n). */
typedef struct opd_attr {
  const char *name;
  int32_t type;
  int32_t n;
  int64_t i;
  double f;
  const char *s;
  int64_t ints[OPD_MAX_RANK];
} opd_attr_t;

/* ---- connections -------------------------------------------------------- */

/* Connects and says hello. socket_path NULL or "" means $OPD_SOCKET, else
 * /run/opd/opd.sock when that socket exists (the system service), else
 * /run/opd/opd.sock for root, else $XDG_RUNTIME_DIR/opd.sock (else
 * /tmp/opd-<uid>/opd.sock). Before sending anything it checks who serves
 * the socket (SO_PEERCRED, the uid that listen()ed on it): root, this
 * process's effective uid, or the daemon user $OPD_DAEMON_USER (a user
 * name, or digits for a numeric uid; unset or empty: "opd"; a name that
 * does not exist matches no one). Anyone else is refused with OPD_EPERM
 * and a message naming the socket, the uid serving it and who would have
 * been trusted: a connection carries the caller's memory (memfds), and
 * another local user could otherwise serve a socket path it squatted.
 * A socket in the /tmp/opd-<uid> fallback is refused (OPD_EPERM) unless
 * that directory is this uid's own with no group or other write.
 * On failure *out is NULL and opd_last_error() says which socket was
 * tried and why: nobody serves it (OPD_ECONNECT, with how to start the
 * daemon) or this user may not open it (OPD_EPERM, "permission denied
 * (not in group opd? ...)"). Returns 0, OPD_ECONNECT, OPD_EPERM,
 * OPD_EVERSION, OPD_ECLOSED (no hello reply) or OPD_ENOMEM. */
int opd_connect(const char *socket_path, opd_client_t **out);

/* opd_connect with flags: OPD_CONNECT_LATENCY (its older name:
 * OPD_CONNECT_HIGH_PRIORITY) asks for the latency class of service:
 * high-priority CUDA streams, and CPU runs ahead of best-effort ones
 * (docs/scheduling.md); a uid the daemon does not grant it to
 * (--latency-users / --latency-groups) gets OPD_EPERM. */
#define OPD_CONNECT_HIGH_PRIORITY 0x1u
#define OPD_CONNECT_LATENCY OPD_CONNECT_HIGH_PRIORITY
/* The transport (see docs/protocol.md, RING_SETUP). Without one of these
 * flags, $OPD_WAIT ("spin", "adaptive" or "socket") decides, else adaptive
 * (when the daemon offers rings; the socket otherwise). spin: requests and replies through shared-memory rings, both
 * sides spinning (lowest latency, a busy core on each side); adaptive:
 * the rings, spinning briefly then sleeping on a futex (the daemon on an
 * eventfd); socket: no rings. */
#define OPD_CONNECT_WAIT_SPIN 0x2u
#define OPD_CONNECT_WAIT_ADAPTIVE 0x4u
#define OPD_CONNECT_WAIT_SOCKET 0x8u
int opd_connect_flags(const char *socket_path, uint32_t flags,
                      opd_client_t **out);

/* Closes the connection and unmaps every arena made through it. Waits for
 * nothing (the daemon finishes what it was running and drops the rest),
 * except where runs were enqueued on a CUDA stream (opd_enqueue_stream*,
 * an open batch): those are finished first, since the stream's later work
 * waits for them (for at most OPD_STREAM_POLL_TIMEOUT_MS, 10 s). */
void opd_close(opd_client_t *c);

/* The hello reply (daemon version, session id, backends, limits) as JSON.
 * *json is allocated; free it with opd_free. */
int opd_server_info(opd_client_t *c, char **json, size_t *len);

/* The socket path opd_connect would use for `given` (NULL: the default). */
int opd_socket_path(const char *given, char *buf, size_t cap);

/* ---- arenas ------------------------------------------------------------- */

/* Creates a sealed memfd of `size` bytes, maps it here and registers it
 * with the daemon. On success *arena is its id and *base its address here
 * (zero-filled, page-aligned). On failure nothing is left mapped. */
int opd_arena_create(opd_client_t *c, uint64_t size, uint64_t *arena,
                     void **base);

/* Unregisters and unmaps an arena. Tensors in it must not be used again. */
int opd_arena_release(opd_client_t *c, uint64_t arena);

/* The memfd behind an arena made by opd_arena_create (owned by the
 * connection: do not close it). Another process of the same user can open
 * /proc/<pid>/fd/<fd>, map it, and register it with its own connection
 * through opd_arena_register_fd: both then share the same memory. */
int opd_arena_fd(opd_client_t *c, uint64_t arena, int *fd);

/* Registers an fd the caller made (for tests and custom allocators): the
 * caller keeps its fd and mapping. */
int opd_arena_register_fd(opd_client_t *c, int fd, uint64_t size,
                          uint64_t *arena);
/* note: arena is mapped here at base (size bytes; NULL: no more), so that
 * find gives the arena and offset of [p, p + n) in one made or noted. */
int opd_arena_note(opd_client_t *c, uint64_t arena, void *base, uint64_t size);
int opd_arena_find(opd_client_t *c, const void *p, uint64_t n, uint64_t *arena,
                   uint64_t *offset); /* 0 or OPD_ENOENT */

/* Registers a POSIX shm file (a tmpfs file, as shm_open and torch's
 * share_memory_() make) of exactly `size` bytes as a host arena. It cannot
 * be sealed: if it shrinks while registered, the daemon reads zeros past
 * its end (docs/protocol.md, arena_register). The caller keeps its fd and
 * mapping. Returns 0, OPD_EFD (not tmpfs), OPD_EINVAL (size), OPD_ELIMIT. */
int opd_arena_register_shm(opd_client_t *c, int fd, uint64_t size,
                           uint64_t *arena);

/* Tells the daemon this client copied `copies` tensors (`bytes` in all)
 * into shared memory for its runs (staging); STATS sums them ("staging"). */
int opd_note_staging(opd_client_t *c, uint64_t copies, uint64_t bytes);

/* Allocates `size` bytes of device memory owned by the daemon on `device`
 * ("cuda" or "cuda:N"), zero-filled; *arena names it in tensors like a host
 * arena (it is not mapped here). Freed by opd_arena_release or when the
 * connection closes. No CUDA library is needed here. Returns 0, OPD_EDEVICE
 * (no such device), OPD_ENOMEM (device memory exhausted) or OPD_ELIMIT. */
int opd_alloc(opd_client_t *c, const char *device, uint64_t size,
              uint64_t *arena);

/* opd_alloc with flags: OPD_ALLOC_EXPORTABLE makes CUDA VMM memory that
 * opd_export_cuda can hand to a CUDA client for a zero-copy view (sizes
 * round up to the driver's granularity, 2 MiB on current GPUs). */
#define OPD_ALLOC_EXPORTABLE 0x1u
int opd_alloc_flags(opd_client_t *c, const char *device, uint64_t size,
                    uint32_t flags, uint64_t *arena);

/* Exports an exportable device arena of this connection: *fd (the caller's
 * to close) is a CUDA VMM POSIX-fd shareable handle received over this
 * authenticated socket, *alloc_size the bytes to map. A CUDA client maps it
 * with opd_cuda_map_export (or itself: cuMemImportFromShareableHandle,
 * cuMemAddressReserve, cuMemMap and cuMemSetAccess, docs/gpu.md), and sees
 * the daemon's writes with no copy.
 * Returns 0, OPD_EARENA, OPD_EINVAL (not exportable) or OPD_EREADONLY. */
int opd_export_cuda(opd_client_t *c, uint64_t arena, int *fd,
                    uint64_t *alloc_size);

/* Publishes one of this connection's arenas (host or device) under `name`
 * (at most 63 bytes, no '/') so that other connections can attach it
 * read-only — e.g. model weights loaded once and used by every worker. The
 * name belongs to this connection's uid: other uids' names never collide
 * with it, and connections of other uids may attach it only if listed in
 * opd_publish2's readers (root and the daemon's own uid always may). The
 * name lasts until opd_unpublish or until this connection closes; the
 * memory lasts while any attachment does. `meta` (NULL, or at most 255
 * bytes) is handed to attachers as is (e.g. the tensor's dtype, shape and
 * offset). Returns 0, OPD_EARENA, OPD_EINVAL (name taken by this uid,
 * empty, too long or with a '/') or OPD_ELIMIT. */
int opd_publish(opd_client_t *c, uint64_t arena, const char *name,
                const char *meta);
/* opd_publish, and other uids that may attach the name: each of the
 * n_readers entries is a uid ("1001"), a user name, "group:NAME" or
 * "group:GID" (members of the group, by the attaching process's primary or
 * supplementary groups), or "*" (every client the daemon serves).
 * readers may be NULL when n_readers is 0 (the same as opd_publish).
 * Returns opd_publish's codes; OPD_EINVAL also for an unknown user or
 * group (named in opd_last_error). */
int opd_publish2(opd_client_t *c, uint64_t arena, const char *name,
                 const char *meta, const char *const *readers, int n_readers);
/* Withdraws a name published by this connection ("name", or "user/name"
 * of this uid). Returns 0, OPD_ENOENT (no such name of this uid) or
 * OPD_EINVAL (another connection published it: only it can unpublish). */
int opd_unpublish(opd_client_t *c, const char *name);

/* Attaches a published arena: *arena is a read-only arena id of this
 * connection for the same memory (outputs in it get OPD_EREADONLY), *size
 * its bytes, `device` (cap bytes, may be NULL) "cpu" or "cuda:N". `name`
 * is looked up among this connection's uid's names; another uid's name is
 * "user/name" or "uid/name" ("alice/weights", "1000/weights"). Release it
 * with opd_arena_release. Returns 0 or OPD_ENOENT: nothing is published
 * under that name, or it is another uid's and not shared with this one
 * (the two are not told apart, so names do not leak across uids). */
int opd_attach(opd_client_t *c, const char *name, uint64_t *arena,
               uint64_t *size, char *device, size_t device_cap, char *meta,
               size_t meta_cap);

/* Imports the caller's own device memory (e.g. a torch CUDA tensor's
 * storage) by its legacy CUDA IPC handle (a cudaIpcMemHandle_t, 64 bytes):
 * *arena then names bytes [offset, offset+size) of that allocation,
 * writable, on `device` (the daemon's name: "cuda:N" of the daemon, or
 * the UUID of the memory's GPU, opd_cuda_device_name, which stays right
 * when the two processes see different CUDA_VISIBLE_DEVICES). The daemon
 * opens each handle once per
 * connection, checks the range against the real allocation, and closes the
 * handle when its last arena is released or the connection ends. Returns
 * 0, OPD_EINVAL (the handle does not open), OPD_EBOUNDS (the range exceeds
 * the allocation) or OPD_EDEVICE. See docs/gpu.md for why the export
 * direction will use CUDA VMM file descriptors instead. */
int opd_import_cuda(opd_client_t *c, const void *handle, size_t handle_len,
                    uint64_t offset, uint64_t size, const char *device,
                    uint64_t *arena);

/* ---- running operators ------------------------------------------------- */

/* Fills a contiguous descriptor. Returns OPD_EINVAL if rank is out of range. */
int opd_tensor_init(opd_tensor_t *t, uint64_t arena, uint64_t offset,
                    int32_t dtype, int32_t rank, const int64_t *shape);

/* Runs `op` and waits for it. The outputs must already have the shapes and
 * dtypes the op writes (opd_infer tells them). On an error the outputs may
 * be partly written. */
int opd_run(opd_client_t *c, const char *op, const opd_tensor_t *in,
            uint32_t n_in, const opd_tensor_t *out, uint32_t n_out,
            const opd_attr_t *attrs, uint32_t n_attrs);

/* Sends a run without waiting; *req identifies it for opd_wait. Runs of
 * one connection execute in the order they were submitted. */
int opd_submit(opd_client_t *c, const char *op, const opd_tensor_t *in,
               uint32_t n_in, const opd_tensor_t *out, uint32_t n_out,
               const opd_attr_t *attrs, uint32_t n_attrs, uint64_t *req);

/* The same on a named device: "cpu", "cuda", "cuda:N", a device UUID
 * ("GPU-xxxxxxxx-...", the daemon's card with that UUID) or "auto" (where
 * the device tensors are; with host tensors only, the least-loaded GPU
 * that takes the run, else the cpu). NULL: where the device tensors are,
 * else on the cpu. Host tensors used on a cuda device are staged through
 * device memory. */
int opd_run_on(opd_client_t *c, const char *device, const char *op,
               const opd_tensor_t *in, uint32_t n_in, const opd_tensor_t *out,
               uint32_t n_out, const opd_attr_t *attrs, uint32_t n_attrs);
int opd_submit_on(opd_client_t *c, const char *device, const char *op,
                  const opd_tensor_t *in, uint32_t n_in,
                  const opd_tensor_t *out, uint32_t n_out,
                  const opd_attr_t *attrs, uint32_t n_attrs, uint64_t *req);

/* Waits for a submitted run; returns its result. timeout_ms < 0 waits
 * forever; on OPD_ETIMEDOUT the request is still pending and may be waited
 * for again. Each request is waited for once. */
int opd_wait(opd_client_t *c, uint64_t req, int timeout_ms);

/* A run encoded once and sent many times: the lowest-latency way to repeat
 * the same op on the same tensors (a trading loop, a tiny GPU op). The
 * arguments are those of opd_submit_on, checked the same way; the request
 * bytes are built here and each opd_run_prepared / opd_submit_prepared
 * only stamps a new request id on a copy of them. A prepared run belongs
 * to the connection it was made on (its arena ids are that connection's);
 * another connection gets OPD_EINVAL. Free it with opd_prepared_free (at
 * any time, also after opd_close). */
typedef struct opd_prepared opd_prepared_t;
int opd_prepare(opd_client_t *c, const char *device, const char *op,
                const opd_tensor_t *in, uint32_t n_in, const opd_tensor_t *out,
                uint32_t n_out, const opd_attr_t *attrs, uint32_t n_attrs,
                opd_prepared_t **p);
int opd_run_prepared(opd_client_t *c, const opd_prepared_t *p);
/* A prepared run with flags: OPD_RUN_ASYNC (opd_run_prepared and
 * opd_submit_prepared then return at enqueue, as opd_run_async) or
 * OPD_RUN_STREAM (run it with opd_run_prepared_stream; device must be
 * "cuda" or "cuda:N"). */
#define OPD_RUN_ASYNC 0x1u
#define OPD_RUN_STREAM 0x2u
int opd_prepare_flags(opd_client_t *c, const char *device, const char *op,
                      const opd_tensor_t *in, uint32_t n_in,
                      const opd_tensor_t *out, uint32_t n_out,
                      const opd_attr_t *attrs, uint32_t n_attrs,
                      uint32_t flags, opd_prepared_t **p);
/* Runs a run prepared with OPD_RUN_STREAM in order with `stream`, as
 * opd_run_stream does. */
int opd_run_prepared_stream(opd_client_t *c, const opd_prepared_t *p,
                            void *stream);
int opd_submit_prepared(opd_client_t *c, const opd_prepared_t *p,
                        uint64_t *req);
void opd_prepared_free(opd_prepared_t *p);

/* ---- asynchronous runs on CUDA devices (docs/async.md) ------------------ *
 *
 * opd_run and opd_run_on return when the run has completed. The calls
 * below return when the daemon has CHECKED and ENQUEUED a run on a CUDA
 * device: a bad argument is still this call's error, but the kernel runs
 * later, on the session's stream of that device, after the session's
 * earlier runs there. Its completion and any fault on the GPU are told at
 * the next synchronization: opd_synchronize, or a run that touches host
 * memory (those are always answered at completion, e.g. the copy that
 * reads a result back), which then fails with "an earlier asynchronous
 * run failed: <op> (request N): ...", as CUDA reports a kernel's fault at
 * the next synchronizing call. A run on the cpu, or one with host tensors,
 * is answered at completion whichever call sent it. The tensors of an
 * enqueued run stay valid until it has finished even if the client
 * releases their arenas at once (the daemon holds them). At most the
 * daemon's max_async runs of a connection are enqueued and incomplete
 * (the hello's limits; --max-async): the next call waits for a slot. */

/* Runs op asynchronously (above). */
int opd_run_async(opd_client_t *c, const char *device, const char *op,
                  const opd_tensor_t *in, uint32_t n_in,
                  const opd_tensor_t *out, uint32_t n_out,
                  const opd_attr_t *attrs, uint32_t n_attrs);
/* Sends an asynchronous run without waiting for even its enqueueing;
 * opd_wait(req) returns once it is enqueued (or its error). */
int opd_submit_async(opd_client_t *c, const char *device, const char *op,
                     const opd_tensor_t *in, uint32_t n_in,
                     const opd_tensor_t *out, uint32_t n_out,
                     const opd_attr_t *attrs, uint32_t n_attrs, uint64_t *req);

/* Runs op asynchronously, ORDERED WITH the caller's CUDA stream `stream`
 * (a cudaStream_t / CUstream of this process; cudaStreamLegacy (0x1) or
 * cudaStreamPerThread (0x2) for the default streams) on device "cuda" or
 * "cuda:N" (THIS PROCESS's numbering, as cudaSetDevice and torch count;
 * or the device's UUID: libopd sends the daemon the UUID, see
 * opd_cuda_device_name; a stream of another device is OPD_EINVAL): the
 * run waits, on the GPU, for the
 * work queued on `stream` before this call, and work queued on `stream`
 * after it waits, on the GPU, for the run. No thread waits for a kernel:
 * the call returns once the daemon enqueued the run. Needs the CUDA
 * driver in this process (libcuda.so.1, loaded on first use: OPD_EBACKEND
 * without it) and a daemon with that device. The first call per device
 * and connection also exchanges interprocess events with the daemon. A
 * connection's stream-ordered calls on one device are serialized. Memory
 * the run uses may be freed right after the call in stream order (work
 * queued on `stream` later, or cudaFree, which waits for the device).
 * The order is kept on the GPU when this process's context and the
 * daemon's device are both under MPS (the hello's "mps"); otherwise each
 * GPU wait across the two processes would cost a context switch (about
 * 140 us each way, measured 2026-12-01,
 * bench/results/2026-12-01-h200-async.txt), so the call synchronizes
 * `stream` instead and returns when the run is done. OPD_STREAM_ORDER=gpu or =host in the
 * environment decides instead (docs/async.md). */
int opd_run_stream(opd_client_t *c, const char *device, void *stream,
                   const char *op, const opd_tensor_t *in, uint32_t n_in,
                   const opd_tensor_t *out, uint32_t n_out,
                   const opd_attr_t *attrs, uint32_t n_attrs);

/* opd_run_stream on this process's device memory, in one call: t holds
 * the n_in inputs then the n_out outputs with dtype, rank and shape set;
 * each one whose ptrs[i] is not NULL is pointed at ptrs[i] first, as
 * opd_tensor_cuda does (the others are used as they are: daemon device
 * arenas). The lowest-cost way to run on a caching allocator's tensors
 * (what opd's torch.ops.opd does). */
int opd_run_stream_ptrs(opd_client_t *c, const char *device, void *stream,
                        const char *op, void *const *ptrs, opd_tensor_t *t,
                        uint32_t n_in, uint32_t n_out, const opd_attr_t *attrs,
                        uint32_t n_attrs);

/* opd_run_stream and opd_run_stream_ptrs WITHOUT WAITING FOR THE DAEMON'S
 * ANSWER: the call marks its place on `stream` (nothing when the stream is
 * idle; else a 4-byte cuMemsetD32Async of the run's id into the stream's
 * word of the session's flag allocation, which the daemon's stream polls
 * before the run, or for a connection's 64th stream and later an
 * interprocess event), sends the run, and puts a one-thread kernel of
 * libopd's on `stream` that waits, on the GPU, for the daemon's stream to
 * write the run's request id to the daemon's word (device memory of the
 * daemon, mapped here by IPC handle), so work queued on `stream` later
 * still waits for the run. When `stream` is the legacy default stream
 * (OPD_STREAM_LEGACY, docs/async.md) the default, pdl, neither queries it
 * nor memsets: that kernel writes the word as it starts, launched as a
 * programmatic dependent launch on sm_90; direct treats it as any other
 * stream; in a bench build (make BENCH=1) side|fork|busy put the kernel
 * (fork the memset too) on a stream of libopd's, word and kernel are
 * pdl's steps one at a time. The call
 * costs the caller about a kernel launch instead of a round trip to the
 * daemon. If `stream` does not
 * reach the run within the session's wait (OPD_STREAM_WAIT_MS, default and
 * most the daemon's --stream-wait-ms, 60 s) the daemon's wait gives up,
 * the run goes ahead, and opd_synchronize fails with OPD_ETIMEDOUT.
 * What the daemon refuses (an unknown op, a bad shape) is then NOT this
 * call's error: it is told by a later ordered call of the connection
 * (that call then fails with "an enqueued run (request N) failed: ..."
 * and does nothing) or by opd_synchronize; the flag word is written for a
 * refused run too, so the stream does not stall. Use it for runs that
 * were answered once before with the same op, shapes and attributes
 * (what torch.ops.opd's C kernels do: their plan cache). If the daemon
 * never writes the word (it stopped, its GPU failed) the kernel gives up
 * after OPD_STREAM_POLL_TIMEOUT_MS (default 10000) and the next call
 * fails with OPD_ETIMEDOUT. Only where runs are ordered on the GPU (MPS,
 * or OPD_STREAM_ORDER=gpu) and the driver has what the kernel needs;
 * elsewhere, or with OPD_STREAM_POLL=0, these calls are opd_run_stream /
 * opd_run_stream_ptrs. Answers of up to 64 enqueued runs are left unread;
 * at 64 the older half is read (the daemon's max_async bounds the runs
 * in flight). A connection with enqueued runs whose answers are unread
 * waits for the daemon to finish them at opd_close (a SYNC), then
 * synchronizes its contexts (the kernels read the daemon's memory). */
int opd_enqueue_stream(opd_client_t *c, const char *device, void *stream,
                       const char *op, const opd_tensor_t *in, uint32_t n_in,
                       const opd_tensor_t *out, uint32_t n_out,
                       const opd_attr_t *attrs, uint32_t n_attrs);
int opd_enqueue_stream_ptrs(opd_client_t *c, const char *device, void *stream,
                            const char *op, void *const *ptrs, opd_tensor_t *t,
                            uint32_t n_in, uint32_t n_out,
                            const opd_attr_t *attrs, uint32_t n_attrs);

/* A BATCH of enqueued runs on `stream`: from opd_batch_begin to
 * opd_batch_end, this connection's opd_enqueue_stream / _ptrs calls on
 * `stream` (and torch.ops.opd's C kernels on it) are ordered with each
 * other on the daemon's stream only. The first waits, on the GPU, for the
 * work queued on `stream` before it, as any enqueued run does; the later
 * ones do not wait for `stream` at all, and `stream` does not wait for
 * them until opd_batch_end, which queues one poll kernel on it for the
 * last (work queued on `stream` after opd_batch_end waits for every run
 * of the batch). A chain of dependent opd runs then costs the caller one
 * frame per run, and the daemon one launch, instead of a hand-off through
 * the caller's stream in each direction per run.
 * The contract, as for a second CUDA stream forked at the first run and
 * joined at the end: between begin and end, work the caller queues on
 * `stream` itself (its own kernels, copies, torch's ops) is NOT ordered
 * with the batch's runs, so it must not touch their tensors, and memory
 * the runs use must stay valid until opd_batch_end in stream order
 * (torch.ops.opd's C kernels keep their tensors alive for that themselves).
 * Runs on other streams, opd_run_stream* calls and synchronous runs keep
 * their ordering. After BATCH_RUNS (64) runs the batch joins by itself (a
 * poll kernel) and goes on, so what it holds stays bounded. One batch per
 * connection at a time (begin again: OPD_ESTATE); opd_close ends an open
 * one and waits for the daemon to finish its runs (a session's runs not
 * yet launched when it closes are otherwise discarded). Where enqueued
 * runs are not available (see above) calls in a batch are ordered as
 * outside it. Returns 0 or an error (opd_batch_end
 * without a batch: OPD_ESTATE; a stream that is not one of this
 * process's: OPD_EINVAL; no CUDA driver: OPD_EBACKEND). */
int opd_batch_begin(opd_client_t *c, void *stream);
int opd_batch_end(opd_client_t *c);

/* Waits until every run this connection sent before it has completed.
 * Returns 0, or the error of the first asynchronous run that failed
 * since the last opd_synchronize (then cleared). */
int opd_synchronize(opd_client_t *c);

/* Points t at CUDA memory of this process: ptr from cudaMalloc, or inside
 * one of its allocations (a block of a caching allocator such as torch's).
 * t's dtype, rank, shape (and strides, with strided = 1) must be set; its
 * arena and offset are set here. The allocation ptr lies in is imported
 * into the daemon once per connection (CUDA IPC; cached by the driver's
 * buffer id, so a freed and re-made allocation is imported again) and
 * nothing of it is held alive. Returns OPD_EINVAL for a pointer that is
 * not device memory of this process or memory without a legacy IPC
 * handle (cudaMallocAsync pools, VMM, managed) or memory of another device
 * than `device` ("cuda", "cuda:N" in this process's numbering, or a
 * UUID; imported on the daemon's device of that UUID), OPD_EBOUNDS for a
 * tensor past its allocation's end, OPD_EBACKEND without the CUDA
 * driver. */
int opd_tensor_cuda(opd_client_t *c, const char *device, const void *ptr,
                    opd_tensor_t *t);
/* Releases every allocation opd_tensor_cuda imported on c. */
int opd_cuda_forget(opd_client_t *c);

/* The device string libopd sends the daemon for this process's CUDA
 * device dev: its UUID, "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" as
 * nvidia-smi -L prints it, where the driver is loaded and initialized in
 * this process, else "cuda:N". Any request that names a device takes
 * it; the daemon maps a UUID to its own device or refuses it (OPD_EDEVICE,
 * naming it), so a client whose CUDA_VISIBLE_DEVICES differs from the
 * daemon's still names the right GPU. buf: at least 41 bytes. */
int opd_cuda_device_name(int dev, char *buf, size_t cap);

/* Maps an exported device arena here (no connection needed): fd is
 * opd_export_cuda's (not closed here), size its alloc_size, device this
 * process's ordinal of the arena's GPU. The memory is imported
 * (cuMemImportFromShareableHandle), given addresses (cuMemAddressReserve,
 * cuMemMap) and made read-write for the device (cuMemSetAccess), all in
 * the device's primary context (the CUDA runtime's and torch's), so *ptr
 * is a device address torch can view; *handle keeps the memory alive
 * after the daemon frees its side. Undo with opd_cuda_unmap. Returns 0,
 * or OPD_EBACKEND naming the driver call that failed (nothing is left
 * mapped) or that the driver or its VMM calls are not here. */
int opd_cuda_map_export(int fd, uint64_t size, int device, uint64_t *ptr,
                        uint64_t *handle);
/* Unmaps what opd_cuda_map_export mapped (cuMemUnmap, cuMemAddressFree,
 * cuMemRelease): 0 or OPD_EBACKEND. */
int opd_cuda_unmap(uint64_t ptr, uint64_t size, uint64_t handle, int device);

/* ---- torch's dispatcher (used by the Python package's opd.torch) --------
 * C kernels for torch's dispatcher: torch.ops.opd.<op> with no Python in
 * the call (client/torch/, TORCH=1; docs/python.md), over torch's stable C
 * ABI (torch >= 2.10) looked up in this process, never linked against.
 * available: 1 when torch's shims are here, else 0 and why[cap].
 * kernel: registers the CUDA kernel of a form of ns::op whose defined
 *   schema has n_in Tensor inputs (`Tensor?` from min_in; VARIADIC: one
 *   `Tensor[]`, n_in 1), the out= tensors (OUT: n_out), the attributes
 *   (OPD_ATTR_*), and returns n_out Tensors or nothing. form: FUNCTIONAL
 *   (ns::op), INPLACE (ns::op_, over input 0), OUT (ns::op_out).
 * bind: the connection the kernels use, and a function they call to have
 *   one bound again (none, or the parent's after fork()); unbind: c closes.
 * cpu_kernels: on (1) registers every kernel for torch's CPU key too, 0
 *   drops them (torch >= 2.11): a call whose tensors lie in arenas the
 *   connection knows runs there; others go to fb, which takes in[], out[]
 *   (NULL: None), sets ret[] and returns 0 (2: keep its kind), or 1, msg. */
#define OPD_TORCH_FUNCTIONAL 0
#define OPD_TORCH_INPLACE 1
#define OPD_TORCH_OUT 2
#define OPD_TORCH_VARIADIC 0x10
typedef int (*opd_torch_fallback_fn)(const char *op, int form, void **in,
    uint32_t n_in, void **out, uint32_t n_out, const opd_attr_t *attrs,
    uint32_t n_attrs, void **ret, char *msg, size_t cap);
int opd_torch_available(char *why, size_t cap);
int opd_torch_kernel(const char *ns, const char *op, int form,
                     uint32_t n_in, uint32_t min_in, uint32_t n_out,
                     uint32_t n_attrs, const char *const *attr_names,
                     const int32_t *attr_types);
void opd_torch_bind(opd_client_t *c, void *(*again)(void));
void opd_torch_unbind(opd_client_t *c);
int opd_torch_cpu_kernels(const char *ns, int on, opd_torch_fallback_fn fb);

/* Asks which outputs `op` would write for these inputs (only dtype, rank
 * and shape of the inputs are used). Fills out[0..*n_out) (dtype, rank,
 * shape; arena and offset 0). cap is the room in out. */
int opd_infer(opd_client_t *c, const char *op, const opd_tensor_t *in,
              uint32_t n_in, const opd_attr_t *attrs, uint32_t n_attrs,
              opd_tensor_t *out, uint32_t cap, uint32_t *n_out);

/* A round trip that runs nothing (answered by the daemon's event loop). */
int opd_ping(opd_client_t *c);

/* ---- introspection ----------------------------------------------------- */

/* The operator list with schemas, as JSON: {"ops": [{"name", "summary",
 * "inputs", "outputs", "attrs", "shape", "inplace", "strided"}]}. */
int opd_ops_json(opd_client_t *c, char **json, size_t *len);

/* The operator plugins the daemon loaded, as JSON: {"plugins": [{"name",
 * "version", "path", "abi", "ops": [str]}], "origins": {op: "built-in" or
 * the plugin's path}} (see docs/operators.md). */
int opd_plugins_json(opd_client_t *c, char **json, size_t *len);

/* Daemon statistics as JSON (see docs/protocol.md). */
int opd_stats_json(opd_client_t *c, char **json, size_t *len);

/* Frees memory returned by this library. */
void opd_free(void *p);

/* ---- errors and names -------------------------------------------------- */

/* The message of the last failed call on this thread: the daemon's own
 * words for a rejected request ("softmax: input 0 (x) has dtype int32,
 * expected float32"), or what went wrong locally. */
/* The transport c uses: "spin", "adaptive" or "socket". A spin asked for
 * on a host whose cores are short is given adaptive by the daemon (its
 * --spin); opd_transport_why() then says why ("" otherwise). */
const char *opd_transport(opd_client_t *c);
const char *opd_transport_why(opd_client_t *c);

const char *opd_last_error(void);
const char *opd_strerror(int code);   /* "unsupported dtype" */
const char *opd_errname(int code);    /* "EDTYPE" */
const char *opd_dtype_name(int32_t dtype);    /* "float32" */
int32_t opd_dtype_size(int32_t dtype);        /* bytes; 0 if unknown */
int32_t opd_dtype_from_name(const char *name); /* 0 if unknown */
const char *opd_version(void);                /* library version */

#ifdef __cplusplus
}
#endif

#include "opd/graph.h" /* graphs: a model in one request */

#endif /* OPD_H */
