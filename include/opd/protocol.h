/* opd wire protocol: every message, its fields, the dtypes and error codes.
 *
 * DESIGN
 * A connection is a Unix stream socket. Each message is one frame:
 *
 *     u32 little-endian payload length | payload (msgpack, <= max_frame bytes)
 *
 * Every payload is a msgpack array of fixed shape:
 *
 *     request  [type:uint, id:uint, body:map]
 *     reply    [OPD_MSG_REPLY, id:uint, code:int, body:map]
 *     goodbye  [OPD_MSG_GOODBYE, 0, code:int, {"message": str}]   (daemon -> client)
 *
 * `id` is chosen by the client and echoed in the reply, so a client may
 * pipeline any number of requests (up to limits.max_inflight) and match the
 * replies. `code` is 0 on success or a negative OPD_E* value; an error reply's
 * body is {"message": str} naming the op and what was wrong.
 *
 * Body maps use short string keys. The RUN body is self-contained (no file
 * descriptors, no reference to the frame it came in): the same bytes can be
 * carried by a shared-memory submission ring instead of the socket.
 *
 * Requests of one session are answered as they complete; RUN requests of one
 * session execute in the order they were sent (like a CUDA stream), requests
 * of different sessions run concurrently. Control requests (ping, stats, ops,
 * arena register/release) are answered immediately, never queued behind runs.
 *
 * Messages (body keys; "?" marks an optional key):
 *
 *   HELLO           {"protocol": uint, "client"?: str, "priority"?: "latency"
 *                   | "best-effort" ("high" / "normal": older names)}
 *                   -> {"protocol": uint, "version": str, "session": uint,
 *                       "backends": [str], "limits": {max_frame, max_rank,
 *                       max_tensors, max_attrs, max_arenas, max_arena_bytes,
 *                       max_session_bytes, max_inflight}, "rings": true,
 *                       "spin": bool (a spin ring would be granted now),
 *                       "spin_why"?: str}
 *                   Must be the first request; any other first request gets
 *                   OPD_ESTATE. A different major protocol gets OPD_EVERSION.
 *   ARENA_REGISTER  {"size": uint}   + exactly one memfd sent with SCM_RIGHTS
 *                   in the same sendmsg() as the frame's bytes. The memfd must
 *                   carry F_SEAL_SHRINK|F_SEAL_GROW and be exactly `size`
 *                   bytes long.  -> {"arena": uint}
 *   ARENA_RELEASE   {"arena": uint}  -> {}   (unmapped once no run uses it)
 *   RUN             {"op": str, "in": [tensor], "out": [tensor],
 *                    "attrs"?: {name: value}, "device"?: str,
 *                    "async"?: uint}  -> {"ns": uint} once it completed,
 *                   or {"queued": true} once it was checked and enqueued
 *                   (an asynchronous run, below)
 *                   tensor = [arena:uint, offset:uint, dtype:uint,
 *                             shape:[int], strides:[int] | nil]
 *                   strides are in elements; nil means C-contiguous.
 *                   attribute values: int, float, bool, str, or [int].
 *                   device: "cpu", "cuda", "cuda:N", a device's UUID
 *                   ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as
 *                   nvidia-smi -L prints it, "GPU-" optional; any request
 *                   that names a device takes it) or "auto" (default:
 *                   the device of its device tensors, else the cpu).
 *                   async: OPD_RUN_F_* flags. ASYNC: a run on a cuda device
 *                   whose tensors are all device memory is answered when
 *                   enqueued on the session's stream of that device, not
 *                   when it completes (validation errors are still its
 *                   reply); its completion and any fault are told by SYNC
 *                   or by the next run answered at completion. Other runs
 *                   (the cpu, host tensors) are answered at completion as
 *                   always. WAIT: before its work that stream waits (on the
 *                   GPU) for the client event STREAM registered for the
 *                   device. SIGNAL: after its work the daemon records the
 *                   session's event of the device (STREAM's reply), which
 *                   the client's stream waits for. WAIT and SIGNAL need a
 *                   STREAM on the run's device first (else OPD_ESTATE).
 *                   FLAG: after its work the daemon's stream writes the
 *                   request id's low 32 bits to the session's flag word of
 *                   the device (STREAM with "flag"; else OPD_ESTATE), and
 *                   a FLAG run the daemon refuses writes it too, in order
 *                   after the session's earlier runs: the client's stream
 *                   polls the word (a kernel of its own), so the client
 *                   need not wait for the reply before its stream goes on.
 *                   WORD (with WAIT and FLAG; STREAM's reply said "words":
 *                   true): WAIT polls, on the GPU, the client's word of
 *                   slot S = (async >> 8) & 63 (1..63) in the flag
 *                   allocation until it reaches the request id's low 32
 *                   bits (the client's stream writes it there before the
 *                   run, cuMemsetD32Async), not the pool event; a wait
 *                   longer than STREAM's "wait_ms" (default and most:
 *                   --stream-wait-ms) gives up, the run goes ahead and
 *                   fails with ETIMEDOUT, and the session's later WORD
 *                   waits give up at once.
 *   INFER           same body as RUN without "out" -> {"out": [[dtype,
 *                   [shape]]]}: the outputs RUN would expect. Tensors' arena
 *                   and offset are not checked.
 *   OPS             {} -> {"ops": [schema]}; see docs/protocol.md
 *   PLUGINS         {} -> {"plugins": [{"name": str, "version": str,
 *                   "path": str, "abi": uint, "ops": [str]}], "origins":
 *                   {op: "built-in" | the plugin's path}}: the operator
 *                   plugins the daemon loaded at start (include/opd/op.h)
 *   STATS           {} -> {"sessions", "sessions_total", "requests", "errors",
 *                   "arenas", "bytes_mapped", "mappings", "mapped_bytes",
 *                   "inflight", "async", "async_peak", "imports", "uids", "uptime_ns",
 *                   "healthy",
 *                   "ops": {name: {"calls", "errors", "ns"}}}: what the
 *                   daemon holds (mappings: host mmaps of client memory)
 *   PING            {} -> {}   (answered on the event loop; measures transport)
 *   ALLOC           {"device": "cuda" | "cuda:N", "size": uint,
 *                   "exportable"?: bool} -> {"arena": uint}: device memory
 *                   owned by the daemon (exportable: CUDA VMM memory that
 *                   EXPORT can share), used in
 *                   tensors like a host arena (its id), released with
 *                   ARENA_RELEASE or with the session. Zero-filled.
 *   PUBLISH         {"arena": uint, "name": str, "meta"?: str,
 *                   "readers"?: [uint | str]} -> {}: other sessions may
 *                   attach the arena (host or device) by name, read-only.
 *                   The name (at most 63 bytes, no '/') belongs to this
 *                   session's uid: names are keyed by (uid, name), so
 *                   another uid's same name never collides with it.
 *                   "readers": who else may attach it: uids, user names,
 *                   "group:NAME" / "group:GID", "*" (every client the
 *                   daemon serves); default this uid only; root and the
 *                   daemon's uid always may. OPD_EINVAL for a name this uid
 *                   has published, a '/', an unknown user or group.
 *                   "meta" (at most 255 bytes, opaque to the daemon) is
 *                   handed to attachers: e.g. dtype and shape.
 *   ATTACH          {"name": str} -> {"arena": uint, "size": uint,
 *                   "device": "cpu" | "cuda:N", "meta": str}: a read-only arena of this
 *                   session on the published memory; outputs in it are
 *                   refused (OPD_EREADONLY). "name" is one of this uid's
 *                   names, or "user/name" / "uid/name" for another uid's.
 *                   OPD_ENOENT if nothing is published under the name or
 *                   it is not shared with this uid (not told apart).
 *   UNPUBLISH       {"name": str} -> {}: by the publishing session only
 *                   (OPD_EINVAL for another, even of the same uid). The
 *                   name also ends with that session; the memory lives
 *                   until the last attachment is released.
 *   IMPORT          {"handle": bin (a 64-byte cudaIpcMemHandle_t), "offset":
 *                   uint, "size": uint, "device": "cuda:N"} -> {"arena":
 *                   uint}: the client's own device memory (e.g. a torch
 *                   CUDA tensor's storage) as a writable arena. The daemon
 *                   opens each handle once per session (closed with the
 *                   session) and checks [offset, offset+size) against the
 *                   real allocation.
 *   EXPORT          {"arena": uint} -> {"size": uint, "alloc_size": uint,
 *                   "device": "cuda:N", "fd": true} + one file descriptor
 *                   (SCM_RIGHTS) with the reply: a CUDA VMM shareable handle
 *                   of an exportable device arena of this session, which a
 *                   CUDA client maps (cuMemImportFromShareableHandle,
 *                   cuMemMap of alloc_size bytes) for a zero-copy view.
 *   STREAM          {"device": "cuda:N", "event": bin} -> {"event": bin}:
 *                   the events that order this session's runs with a
 *                   client's CUDA stream: "event" is the 64-byte
 *                   cudaIpcEventHandle_t of an interprocess event of the
 *                   client (the one WAIT waits for), the reply's that of
 *                   the daemon's event for this session on the device (the
 *                   one SIGNAL records). Again on the same device replaces
 *                   the client's event; the daemon's stays the same.
 *                   With "flag": true the reply also has "flag": the
 *                   64-byte cudaIpcMemHandle_t of the session's flag word
 *                   on the device (a 4-byte word at the start of a 2 MiB
 *                   allocation of its own, zero at first); the request then also
 *                   needs "events": 1..OPD_STREAM_EVENTS handles of the
 *                   client's interprocess events back to back (bin), and a
 *                   FLAG run with request id R waits (WAIT) for event
 *                   R mod their number instead of "event": the client does
 *                   not wait for a FLAG run's reply, so it records the next
 *                   one's event before the daemon has queued this one's
 *                   wait (which takes the event's latest record).
 *   SYNC            {} -> {} once every run this session sent before it has
 *                   completed; or the first error of an asynchronous run
 *                   since the last SYNC (its code, and a message naming the
 *                   op and its request id), which SYNC then clears.
 *   RING_SETUP      {"size": uint, "sq_slots", "sq_slot_size", "cq_slots",
 *                   "cq_slot_size": uint, "wait": "spin" | "adaptive"} + a
 *                   sealed memfd of `size` bytes and an eventfd the client
 *                   rings when the daemon sleeps (required for adaptive;
 *                   for spin it lets the daemon grant adaptive instead)
 *                   -> {"wait": granted, "why"?: str} on the socket. The memfd holds a submission ring at
 *                   offset 0 and a completion ring at the next 4096-byte
 *                   boundary (common/ring.h), both formatted by the client.
 *                   From then on the daemon takes requests from the
 *                   submission ring too (same payloads as frames, without
 *                   the length) and sends every reply to the completion
 *                   ring, except replies that carry an fd and goodbyes,
 *                   which stay on the socket.
 *
 *   GRAPH_DEFINE    {"device"?: str, "name"?: str, "class"?: "latency" |
 *                   "best-effort" (its runs' class, not the session's),
 *                   "inputs": [{"name": str, "dtype": uint, "shape": [int]}],
 *                   "consts": [{"name": str, "tensor": tensor}],
 *                   "nodes": [{"op": str, "in": [uint], "n_out"?: uint,
 *                   "attrs"?: map}], "outputs": [uint]} -> {"graph": uint,
 *                   "outputs": [[dtype, [shape]]], "nodes": uint,
 *                   "temp_bytes": uint, "device": str}: a graph of ops
 *                   checked once (docs/graphs.md). Values are numbered:
 *                   the inputs 0..I-1, the constants I..I+C-1, then each
 *                   node's outputs in node order; a node's "in" and
 *                   "outputs" name values by number. A graph RUNs with
 *                   {"graph": id, "in": [tensor], "out": [tensor],
 *                   "async"?: flags} instead of "op" (one job, one reply).
 *   GRAPH_DESTROY   {"graph": uint} -> {}: the graph ends (runs already
 *                   queued finish first). A session's graphs end with it.
 *
 * Framing errors (length over max_frame, payload that is not msgpack, counts
 * larger than the bytes left, nesting deeper than OPD_MAX_DEPTH, a payload
 * that is not the array above) close that one connection: the stream can
 * no longer be trusted. Every other error is an error reply and the session
 * goes on.
 */
#ifndef OPD_PROTOCOL_H
#define OPD_PROTOCOL_H

#include <stdint.h>

#define OPD_PROTOCOL_VERSION 1
#define OPD_VERSION "0.1.0"

/* Fixed limits of the encoding (the daemon reports its configured limits,
 * which are never larger, in the HELLO reply). */
#define OPD_FRAME_HEADER 4               /* u32 little-endian length */
#define OPD_MAX_FRAME_DEFAULT (1u << 20) /* bytes of payload per frame */
#define OPD_MAX_RANK 8                   /* dimensions of a tensor */
#define OPD_MAX_TENSORS 16               /* inputs + outputs of one run */
#define OPD_MAX_ATTRS 16                 /* attributes of one run */
#define OPD_MAX_DEPTH 8                  /* msgpack nesting of a payload */
#define OPD_MAX_NAME 64                  /* op and attribute names, strings */
#define OPD_MAX_GRAPHS 64                /* graphs of one session */
#define OPD_MAX_GRAPH_NODES 1024         /* nodes of one graph */
#define OPD_MAX_GRAPH_CONSTS 1024        /* constants of one graph */

/* Message types: X(name, value, string). */
#define OPD_MSG_MAP(X)                     \
  X(REPLY, 0, "reply")                     \
  X(HELLO, 1, "hello")                     \
  X(ARENA_REGISTER, 2, "arena_register")   \
  X(ARENA_RELEASE, 3, "arena_release")     \
  X(RUN, 4, "run")                         \
  X(INFER, 5, "infer")                     \
  X(OPS, 6, "ops")                         \
  X(STATS, 7, "stats")                     \
  X(PING, 8, "ping")                       \
  X(GOODBYE, 9, "goodbye")                 \
  X(ALLOC, 10, "alloc")                    \
  X(PUBLISH, 11, "publish")                \
  X(ATTACH, 12, "attach")                  \
  X(UNPUBLISH, 13, "unpublish")            \
  X(IMPORT, 14, "import")                  \
  X(EXPORT, 15, "export")                  \
  X(RING_SETUP, 16, "ring_setup")           \
  X(PLUGINS, 17, "plugins")                \
  X(STREAM, 18, "stream")                  \
  X(SYNC, 19, "sync")                      \
  X(GRAPH_DEFINE, 20, "graph_define")      \
  X(GRAPH_DESTROY, 21, "graph_destroy")   \
  X(STAGING, 22, "staging")

typedef enum {
#define X(name, val, str) OPD_MSG_##name = val,
  OPD_MSG_MAP(X)
#undef X
  OPD_MSG_COUNT_
} opd_msg_t;

/* RUN "async" flags (see RUN above). */
#define OPD_RUN_F_ASYNC 0x1u   /* answered when enqueued (device runs) */
#define OPD_RUN_F_WAIT 0x2u    /* wait for the client's STREAM event first */
#define OPD_RUN_F_SIGNAL 0x4u  /* record the daemon's STREAM event after */
#define OPD_RUN_F_FLAG 0x8u    /* write the request id to the STREAM flag */
#define OPD_RUN_F_WORD 0x10u   /* WAIT polls the client's word of a slot */
#define OPD_STREAM_EVENTS 64   /* STREAM "events": at most this many */
#define OPD_RUN_F_ALL 0x1fu
/* A WORD run's slot (1..OPD_RUN_WORD_SLOTS-1) in bits 8..13 of "async" */
#define OPD_RUN_SLOT_SHIFT 8
#define OPD_RUN_WORD_SLOTS 64
#define OPD_RUN_SLOT_MASK (0x3fu << OPD_RUN_SLOT_SHIFT)
/* ... whose word (32 bits) is at byte slot * OPD_STREAM_SLOT_BYTES of the
 * session's flag allocation (the daemon's own word is at byte 0) */
#define OPD_STREAM_SLOT_BYTES 128
/* GPU timestamps of ordered runs, for diagnosis only (off unless the
 * daemon runs with OPD_GPU_STAMPS=DIR and the client with
 * OPD_STREAM_STAMPS=1; docs/async.md "Timestamps"): %globaltimer values
 * in the session's flag allocation from byte OPD_STAMPS_OFFSET, entry
 * (request id mod OPD_STAMPS_N): the client's poll kernel writes
 * {start, seen} (16 bytes each), then the daemon's kernels write
 * {wait start, word seen, flag store, request id} (32 bytes each). */
#define OPD_STAMPS_OFFSET (1u << 20)
#define OPD_STAMPS_N 16384u
#define OPD_STAMPS_DAEMON (OPD_STAMPS_OFFSET + 16u * OPD_STAMPS_N)
#define OPD_STAMPS_END (OPD_STAMPS_DAEMON + 32u * OPD_STAMPS_N)

/* Error codes: X(name, value, default message). 0 is success. */
#define OPD_ERRNO_MAP(X)                                          \
  X(EINVAL, -1, "invalid argument")                               \
  X(EPROTO, -2, "malformed message")                              \
  X(EVERSION, -3, "protocol version mismatch")                    \
  X(ESTATE, -4, "request not valid in this state")                \
  X(ENOOP, -5, "unknown operator")                                \
  X(EARITY, -6, "wrong number of tensors")                        \
  X(EDTYPE, -7, "unsupported dtype")                              \
  X(ESHAPE, -8, "shapes do not fit the operator")                 \
  X(ELAYOUT, -9, "unsupported tensor layout")                     \
  X(EBOUNDS, -10, "tensor extends outside its arena")             \
  X(EOVERFLOW, -11, "size computation overflows")                 \
  X(EARENA, -12, "unknown arena")                                 \
  X(EFD, -13, "file descriptor is not a sealed memfd")            \
  X(EATTR, -14, "bad attribute")                                  \
  X(ELIMIT, -15, "limit exceeded")                                \
  X(ENOMEM, -16, "out of memory")                                 \
  X(ETOOBIG, -17, "frame larger than the limit")                  \
  X(ECONNECT, -18, "cannot connect to the daemon")                \
  X(ECLOSED, -19, "connection closed")                            \
  X(ESHUTDOWN, -20, "daemon is shutting down")                    \
  X(EIO, -21, "I/O error")                                        \
  X(EDEVICE, -22, "no such device")                               \
  X(EBACKEND, -23, "backend failure")                             \
  X(ETIMEDOUT, -24, "timed out")                                  \
  X(EINTERNAL, -25, "internal error")                             \
  X(EALIAS, -26, "output overlaps an input")                     \
  X(EREADONLY, -27, "tensor is read-only")                         \
  X(ENOENT, -28, "no tensor is published under that name")       \
  X(EPERM, -29, "permission denied")

typedef enum {
  OPD_OK = 0,
#define X(name, val, str) OPD_##name = val,
  OPD_ERRNO_MAP(X)
#undef X
  OPD_ERRNO_LAST_ = -29
} opd_errno_t;

/* Element types: X(name, value, size in bytes, string). 0 is invalid. */
#define OPD_DTYPE_MAP(X)            \
  X(FLOAT32, 1, 4, "float32")       \
  X(FLOAT16, 2, 2, "float16")       \
  X(BFLOAT16, 3, 2, "bfloat16")     \
  X(FLOAT64, 4, 8, "float64")       \
  X(INT8, 5, 1, "int8")             \
  X(UINT8, 6, 1, "uint8")           \
  X(INT32, 7, 4, "int32")           \
  X(INT64, 8, 8, "int64")           \
  X(BOOL, 9, 1, "bool")

typedef enum {
  OPD_DTYPE_INVALID = 0,
#define X(name, val, size, str) OPD_DTYPE_##name = val,
  OPD_DTYPE_MAP(X)
#undef X
  OPD_DTYPE_COUNT_
} opd_dtype_t;

/* Attribute value types, as they appear in schemas ("type" of an attr). */
#define OPD_ATTR_TYPE_MAP(X) \
  X(INT, 1, "int")           \
  X(FLOAT, 2, "float")       \
  X(BOOL, 3, "bool")         \
  X(STR, 4, "str")           \
  X(INTS, 5, "ints")

typedef enum {
  OPD_ATTR_NONE = 0,
#define X(name, val, str) OPD_ATTR_##name = val,
  OPD_ATTR_TYPE_MAP(X)
#undef X
} opd_attr_type_t;

#endif /* OPD_PROTOCOL_H */
