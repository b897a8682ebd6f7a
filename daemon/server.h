/* The daemon's internal types: server, sessions, arenas, jobs.
 *
 * DESIGN
 * One libuv loop thread owns every structure here; only a job's kernel call
 * runs elsewhere (libuv's thread pool), and it touches nothing but its own
 * opd_job_t and the arena memory its views point into. So counters,
 * reference counts and lists need no locks.
 *
 * Connections are driven with uv_poll_t on the raw socket rather than a
 * uv_pipe_t: arenas arrive as memfds over SCM_RIGHTS, and libuv's stream
 * API accepts only sockets and pipes as passed handles. We read with
 * recvmsg() (checking MSG_CTRUNC) and write with send(), queueing what the
 * socket does not take and waiting for UV_WRITABLE.
 *
 * Lifetimes: an arena is reference counted (the session's table holds one
 * reference, each queued or running job one per arena it uses); it is
 * unmapped when the count reaches zero. A session is freed when its socket
 * is closed and its running job, if any, has finished.
 */
#ifndef OPD_SERVER_H
#define OPD_SERVER_H

#include <stdint.h>
#include <sys/types.h>
#include <msgpack.h>
#include <uv.h>

#include "common/clock.h" /* opd__now_ns */
#include "common/err.h"
#include "common/ring.h"
#include "daemon/backend/backend.h"
#include "daemon/loop.h"
#include "daemon/service.h"
#include "kernels/kernel.h"
#include "kernels/runtime/exec.h"
#include "kernels/runtime/opcheck.h"
#include "kernels/runtime/registry.h"

/* Every limit has up to three scopes: one session, all sessions of one
 * uid, the whole daemon (docs/operations.md, "Limits"). 0 never means
 * unlimited: each has a default (daemon/main.c). */
typedef struct opd_limits {
  uint32_t max_frame;            /* payload bytes per frame */
  uint32_t max_arenas;           /* arenas per session */
  uint32_t max_uid_arenas;       /* arenas of one uid's sessions */
  uint32_t max_total_arenas;     /* arenas (host mappings) of the daemon */
  uint64_t max_arena_bytes;      /* bytes of one arena */
  uint64_t max_session_bytes;    /* bytes mapped by one session */
  uint64_t max_uid_bytes;        /* bytes mapped by one uid's sessions */
  uint64_t max_total_bytes;      /* bytes mapped by the daemon */
  uint32_t max_inflight;         /* runs queued or running per session */
  uint32_t max_uid_inflight;     /* ... of one uid's sessions */
  uint32_t max_total_inflight;   /* ... of the daemon */
  uint32_t max_async;            /* runs enqueued on a GPU and not yet
                                    complete, per session */
  uint32_t word_ahead;           /* a WORD run starts only while fewer of
                                    the session's async runs are incomplete
                                    (0: no such limit; docs/async.md) */
  uint32_t stream_wait_ms;       /* a WORD run's GPU wait for its client's
                                    stream gives up after this (most) */
  uint32_t max_clients;          /* sessions at once */
  uint32_t max_uid_clients;      /* sessions of one uid at once */
  uint32_t reserved_clients;     /* past max_clients / max_uid_clients,
                                    kept for root and the daemon's uid */
  uint32_t max_names;            /* published names, daemon-wide */
  uint32_t max_session_names;    /* ... by one session */
  uint32_t max_uid_names;        /* ... by one uid */
  uint32_t max_wbuf;             /* unsent reply bytes (socket + completion
                                    ring overflow) before we stop reading a
                                    session */
  uint32_t handshake_ms;         /* a connection without hello after this
                                    long is closed */
  uint32_t frame_ms;             /* a frame begun and not finished after
                                    this long closes the connection */
  uint32_t inline_bytes;         /* runs touching at most this many bytes
                                    execute on the loop thread */
  uint32_t inline_us;            /* and larger runs of one-pass ops whose
                                    measured time says they take at most
                                    this long (0: only inline_bytes) */
} opd_limits_t;

#define OPD_MAX_DEVICES 16
enum { OPD_SPIN_AUTO = 0, OPD_SPIN_ALWAYS = 1, OPD_SPIN_NEVER = 2 };

typedef struct opd_config {
  char socket_path[108];         /* resolved (common/paths.c) */
  char socket_given[108];        /* --socket as given ("" if none) */
  char devices[128];             /* --devices: "all", "none", "0,1" */
  int threads;                   /* kernel threads (0: number of CPUs) */
  int log_level;
  int loop_cpu;                  /* --loop-cpu: pin the loop thread (-1: no) */
  uint32_t spin_window_ns;       /* --spin-window-us: how long the loop
                                    serves spinning rings between looks at
                                    sockets and timers */
  int spin;                      /* --spin: OPD_SPIN_AUTO / _ALWAYS / _NEVER */
  uint32_t linger_ns;            /* --linger-us: how long the loop keeps
                                    serving rings after an asynchronous
                                    GPU run of an adaptive client (0: no) */
  char allow_users[512];         /* --allow-users: names or uids, commas;
                                    "" = anyone who can open the socket */
  char allow_groups[512];        /* --allow-groups: names or gids, commas */
  char plugins[32][1024];        /* --plugin PATHs, in order */
  int n_plugins;                 /* used in plugins */
  char plugin_dir[4096];         /* --plugin-dir: every *.so ("" if none) */
  opd_limits_t limits;
  opd_service_config_t svc;      /* pid/log file, drain, metrics */
} opd_config_t;

typedef struct opd_arena {
  uint64_t id;                   /* daemon-wide, never reused */
  void *base;                    /* host: mmap'ed MAP_SHARED; device:
                                    device pointer */
  uint64_t size;                 /* bytes */
  int device;                    /* -1: host memory; else CUDA device */
  int pinned;                    /* host arena registered with CUDA */
  int readonly;                  /* an attachment: outputs refused */
  struct opd_arena *parent;      /* an attachment's published arena (a
                                    reference held); NULL otherwise */
  void *import;                  /* imported client memory: the backend's
                                    record of the opened IPC handle */
  void *vmm;                     /* exportable device memory (VMM) */
  int refs;                      /* table + jobs */
  struct opd_server *srv;
} opd_arena_t;

/* A name under which a session published one of its arenas. */
typedef struct opd_pub {
  char name[OPD_MAX_NAME];
  char meta[256];                /* opaque, for attachers */
  opd_arena_t *arena;            /* a reference held */
  uint64_t owner;                /* publishing session's id */
  uid_t owner_uid;               /* its uid: the name belongs to that uid */
  struct opd_readers *readers;   /* other uids that may attach (access.h);
                                    NULL: the owner uid only */
} opd_pub_t;

/* What the sessions of one uid hold together (daemon/limits.c): kept while
 * the uid has a session or a published name. */
typedef struct opd_acct {
  struct opd_acct *next;         /* server list */
  uid_t uid;
  uint32_t clients;              /* sessions open */
  uint32_t arenas;               /* arenas in their tables */
  uint64_t bytes;                /* bytes those arenas map */
  uint32_t inflight;             /* runs queued or running */
  uint32_t names;                /* names published */
} opd_acct_t;

typedef struct opd_op_stats {
  uint64_t calls, errors, ns;
  uint64_t inlined;              /* of the calls, run on the loop thread */
} opd_op_stats_t;

/* The learnt kernel time of CPU runs of one signature (op, dtypes, shapes,
 * attributes: daemon/backend/cpu.c), in a direct-mapped table. */
#define OPD_COST_SLOTS 1024
typedef struct opd_cost {
  uint64_t sig;                  /* the signature's hash; 0: empty */
  uint64_t ns;                   /* serial kernel time, a moving mean */
} opd_cost_t;

typedef struct opd_job opd_job_t;
typedef struct opd_session opd_session_t;

#define OPD_MAX_PENDING_FDS 8
#define OPD_MAX_SYNCS 8 /* SYNC requests of one session waiting at once */

/* Where a reply goes: the transport its request came by (a ring session's
 * requests are answered on its completion ring; fds travel only on the
 * socket). */
enum { OPD_VIA_SOCKET = 0, OPD_VIA_RING = 1 };

/* One request being handled: what its handler and its reply need, passed
 * down the call path (never left in the session for another file). */
typedef struct opd_req {
  opd_session_t *s;
  uint64_t id;
  int via;                       /* OPD_VIA_*: where its reply goes */
  const unsigned char *body;     /* a RUN's body bytes (the run cache) */
  uint32_t body_len;
  int fds[OPD_MAX_PENDING_FDS];  /* fds that came with it (socket) */
  int n_fds;
  int fd_lost;                   /* errno (EMFILE, ENFILE) when the kernel
                                    could not give us its fds */
} opd_req_t;

/* How a transport hands what it received up to its session (the session
 * sets them; the transports never call session code). */
typedef struct opd_transport_cb {
  /* one complete payload: a request (r: s, via and fds set) */
  void (*payload)(opd_req_t *r, const unsigned char *p, uint32_t len);
  /* the transport cannot go on: code 0, the peer is gone (close now);
   * else a goodbye with that code and why */
  void (*fail)(opd_session_t *s, int code, const char *why);
  /* the socket was serviced, or a ring's replies drained: move on */
  void (*ready)(opd_session_t *s);
} opd_transport_cb_t;

typedef struct opd_server {
  uv_loop_t *loop;
  opd_config_t cfg;
  int listen_fd;
  uv_poll_t listen_poll;
  uv_signal_t sig_int, sig_term, sig_hup;
  uv_timer_t drain_timer;        /* bounds how long a shutdown waits */
  int stopping;                  /* a signal asked us to stop */
  int exit_code;                 /* main's exit status (3: poisoned GPU) */
  int goodbye_code;              /* what sessions are told when stopping */
  char goodbye_why[128];
  uv_timer_t poison_timer;       /* grace before a poisoned daemon stops */
  uv_timer_t sweep_timer;        /* handshake and partial-frame timeouts */
  uv_timer_t accept_timer;       /* resumes a listener paused on EMFILE */
  uint64_t fd_short_logged;      /* when "out of fds" was last logged */
  uint64_t fd_short_count;       /* pauses since that line */
  uint32_t n_reserved;           /* sessions on reserved slots */
  int unthrottle;                /* a uid's or the daemon's run limit came
                                    free: look at the throttled sessions */
  size_t trim_pending;           /* bytes freed since the last malloc_trim */
  opd_session_t *sessions;       /* doubly linked list */
  uint32_t n_sessions;
  uint64_t next_session_id, next_arena_id;
  opd_exec_t exec;               /* kernel thread pool */
  uint64_t start_ns;
  /* stats */
  uint64_t sessions_total, requests, errors, bytes_mapped, arenas;
  uint64_t run_cache_hits;       /* runs that skipped decode and checks */
  opd_op_stats_t *op_stats;      /* one per registry entry */
  opd_cost_t *cost;              /* OPD_COST_SLOTS (cpu.c, --inline-us) */
  /* the OPS reply body, packed once */
  char *ops_body;
  size_t ops_body_len;
  opd_job_t *job_free;           /* recycled jobs (jobs.c: at most
                                    JOB_POOL_MAX) */
  uint32_t n_job_free;
  /* the loop scheduler (daemon/loop.c) */
  uv_check_t loop_check;         /* runs the watchers after each poll */
  uv_prepare_t loop_prepare;     /* arms them before the loop blocks */
  uv_idle_t loop_idle;           /* active: the loop must not block */
  const opd_watcher_t *watchers[OPD_MAX_WATCHERS];
  int n_watchers;
  int loop_kick;                 /* work left for the next iteration */
  int n_ring, n_spin;            /* ring sessions, spinning ones */
  int n_cpus;                    /* CPUs the daemon may run on */
  int pool_jobs;                 /* CPU runs on the kernel threads now: the
                                    loop naps instead of spinning */
  _Atomic unsigned pool_done;    /* bumped by a kernel thread when one of
                                    them finished (ends the nap window) */
  /* spin windows (loop.c on_idle): the gaps between them, for the
   * shutdown report */
  uint64_t win_left_at, win_gaps, win_gap_ns, win_gap_max, win_gaps_long;
  uint64_t linger_until;         /* the loop spins on the rings until then
                                    (ns; 0: not lingering), see --linger-us */
  uint64_t lingers;              /* asynchronous runs that extended it */
  int auto_last;                 /* the GPU "auto" placement picked last */
  uint32_t *svc_hist;            /* ring services in a window: 10 ns buckets
                                    (ringsvc.c), for the shutdown report */
  uint64_t svc_n, svc_seen;
  uint64_t arena_epoch;          /* bumped when an arena is released:
                                    cached run requests are checked anew */
  opd_acct_t *accts;             /* one per uid with sessions or names */
  uint32_t inflight;             /* runs queued or running, all sessions */
  uint32_t async_now;            /* runs answered at enqueue, incomplete */
  uint32_t async_peak;           /* the most one session had at once */
  uint64_t imports_total;        /* CUDA IPC imports made (IMPORT) */
  char dev_uuid[OPD_MAX_DEVICES][48]; /* each device's UUID ("GPU-..."),
                                    set by the device backend at init */
  uint64_t mappings;             /* host mappings held: arenas + rings */
  uint64_t host_bytes;           /* bytes of those mappings */
  uid_t self_uid;                /* the daemon's own uid */
  uid_t *allow_uids;             /* --allow-users, resolved (daemon/access.c) */
  gid_t *allow_gids;             /* --allow-groups, resolved */
  int n_allow_uids, n_allow_gids;
  opd_pub_t *pubs;               /* published arenas */
  uint32_t n_pubs, cap_pubs;
  int n_devices;                 /* CUDA devices in use (0: cpu only) */
  int healthy;                   /* 0 once a CUDA context is poisoned */
  /* the device backend reports a poisoned context here (server.c) */
  void (*poisoned)(opd_server_t *srv, const char *why);
  void *backend_state;           /* the device backend's (backend/) */
  msgpack_sbuffer scratch;       /* packs one reply body at a time */
} opd_server_t;

struct opd_job {
  uv_work_t work;                /* pool request; work.data unused */
  opd_session_t *s;
  /* the completion callback (the session's): called on the loop by the
   * backend of a run it launched (OPD_LAUNCH_QUEUED) */
  void (*done)(opd_job_t *job);
  int via;                       /* where its reply goes (OPD_VIA_*) */
  opd_job_t *next;               /* session queue / free list */
  uint64_t req_id;
  int op_index;                  /* into opd__ops */
  int rc;                        /* kernel result */
  uint64_t ns;                   /* kernel time */
  uint64_t bytes;                /* bytes of all its tensors */
  int device;                    /* -1: cpu; else the device backend's */
  int by_load;                   /* placed on a GPU by its load ("auto"):
                                    not kept by the run cache */
  uint32_t flags;                /* the request's OPD_RUN_F_* */
  uint64_t flag_after;           /* FLAG: a later refused FLAG run's id to
                                    write after this one's (0: none) */
  uint64_t t_recv;               /* when its request was taken */
  uint64_t t_start;              /* when it was launched */
  int n_arenas;
  opd_arena_t *arenas[OPD_MAX_TENSORS]; /* references held */
  opd_kcall_t call;
  /* the backend's plan and progress (plain data; backend/backend.h) */
  _Alignas(16) unsigned char backend_job[OPD_BACKEND_JOB_BYTES];
};

/* A session's socket transport: its buffers and the fds in flight, owned
 * by daemon/sock.c (others read them through the accessors below). */
typedef struct opd_sock {
  int poll_events;               /* UV_READABLE | UV_WRITABLE now armed */
  uint64_t t_partial;            /* since when rbuf holds a partial frame
                                    (0: none) */
  unsigned char *rbuf;           /* received, not yet parsed */
  size_t rlen, rcap;
  unsigned char *wbuf;           /* replies not yet taken by the socket */
  size_t woff, wlen, wcap;
  int wfd[OPD_MAX_PENDING_FDS];  /* fds to send with the byte at wfd_at */
  size_t wfd_at[OPD_MAX_PENDING_FDS];
  int n_wfds;
  int later[OPD_MAX_PENDING_FDS]; /* fds received for frames not yet
                                    handled ... */
  size_t later_at[OPD_MAX_PENDING_FDS]; /* ... the rbuf offset of the frame
                                    each belongs to */
  int n_later;
  int lost_err;                  /* fd_lost of the frame at lost_at */
  size_t lost_at;
} opd_sock_t;

struct opd_session {
  opd_server_t *srv;
  opd_session_t *prev, *next;    /* server list */
  const opd_transport_cb_t *cb;  /* what the transports call (session.c) */
  uint64_t id;
  int fd;                        /* -1 once closed */
  uv_poll_t poll;
  int poll_closed;               /* uv_close finished */
  pid_t pid;                     /* SO_PEERCRED at accept */
  uid_t uid;
  gid_t gid;
  opd_acct_t *acct;              /* this uid's totals (daemon/limits.c) */
  int reserved;                  /* admitted on a reserved slot */
  int quiet;                     /* refused at accept: logged once */
  uint32_t n_names;              /* names this session published */
  uint64_t t_accept;             /* when accepted (handshake timeout) */
  uint32_t over_bytes;           /* replies waiting for completion-ring
                                    room (bytes) */
  char client[OPD_MAX_NAME];     /* name given at hello */
  int hello;                     /* hello done */
  int closing;                   /* no more requests are read */
  int goodbye;                   /* send goodbye, then close, once idle */
  opd_sock_t sock;               /* the socket transport's (sock.c) */
  int cq_corrupt;                /* the completion ring is unusable */
  uint64_t t_goodbye;            /* when the goodbye was queued */
  opd_arena_t **arenas;          /* table, limits.max_arenas slots */
  uint32_t n_arenas;
  uint64_t bytes_mapped;
  opd_job_t *q_head, *q_tail;    /* runs waiting, in order */
  uint32_t n_queued;             /* waiting + running */
  opd_job_t *running;            /* at most one per session */
  uint32_t n_async;              /* runs answered when enqueued, not yet
                                    complete (jobs.c) */
  int async_rc;                  /* the first failure of one of them since
                                    the last SYNC (0: none) ... */
  char async_err[300];           /* ... and its message */
  struct {                       /* SYNCs waiting for the runs before
                                    them: transport and id */
    int via;
    uint64_t id;
  } sync[OPD_MAX_SYNCS];
  int n_sync;
  int priority;                  /* 1: asked for high-priority streams */
  int ring;                      /* 0: socket only; OPD_RING_* */
  opd_ring_t sq, cq;             /* submission (we consume), completion */
  void *ring_base;               /* the mapped region */
  size_t ring_size;
  int ring_doorbell;             /* adaptive: eventfd, else -1 */
  uv_poll_t *ring_poll;          /* on the doorbell */
  unsigned char *ring_buf;       /* one submission, copied out */
  void *ring_over;               /* replies waiting for completion room */
  void *ring_over_tail;          /* its last entry (appends are O(1)) */
  void *backend_session[OPD_MAX_DEVICES]; /* the device backend's, per
                                    device (CUDA: the session's stream) */
  struct opd_run_cache *run_cache; /* the last validated run (jobs.c) */
};

/* server.c */
int opd__server_init(opd_server_t *srv, uv_loop_t *loop,
                     const opd_config_t *cfg);
void opd__server_free(opd_server_t *srv);
/* Histograms of `buckets` buckets `width` wide, the last one taking the
 * rest (the shutdown reports): add a value; the q-quantile of n values,
 * as its bucket's middle. */
static inline void opd__hist_add(uint32_t *h, int buckets, uint64_t v,
                                 uint64_t width) {
  uint64_t b = v / width;
  h[b < (uint64_t)buckets ? b : (uint64_t)buckets - 1]++;
}
double opd__hist_pct(const uint32_t *h, int buckets, uint64_t n, double q,
                     double width);
/* cheap timestamps for durations (server.c): opd__ticks_ns(t1 - t0) */
void opd__ticks_init(void);
uint64_t opd__ticks(void);
uint64_t opd__ticks_ns(uint64_t ticks);

/* jobs.c: a run request whose body equals the session's last validated one
 * (and no arena released since) is queued without decoding; returns 1 if
 * it was, 0 to take the full path. */
int opd__run_cached(const opd_req_t *r, const unsigned char *body,
                    uint32_t len);
void opd__run_cache_free(opd_session_t *s);

/* session.c */
void opd__session_accept(opd_server_t *srv, int fd);
void opd__session_shutdown(opd_session_t *s); /* graceful: drain, goodbye */
void opd__session_close(opd_session_t *s);    /* now: drop the socket */
/* The session moves on: runs, frames left unread, a close it is due. */
void opd__session_pump(opd_session_t *s);

/* sock.c: the socket transport. */
/* Queues a frame (header and body) and sends what the socket takes. */
void opd__sock_write(opd_session_t *s, const void *hdr, size_t hlen,
                     const void *body, size_t blen);
/* fd goes with the next frame written; 0, or OPD_ELIMIT (fd closed) */
int opd__sock_queue_fd(opd_session_t *s, int fd);
/* Hands every complete frame in rbuf to s->cb->payload while the session
 * reads; returns how many. */
int opd__sock_frames(opd_session_t *s);
void opd__sock_update(opd_session_t *s); /* arms the poll for what's due */
void opd__sock_close(opd_session_t *s);  /* closes the fds it holds */
void opd__sock_free(opd_session_t *s);   /* frees its buffers */
/* Claims `need` fds sent with the request: 0 with fds[] (the caller owns
 * them), or OPD_EFD with err naming why there are none (not sent, or the
 * daemon was out of fds when they came). */
int opd__req_take_fds(opd_req_t *r, int need, int *fds, opd_err_t *err);
/* What the socket transport holds: reply bytes not yet sent, request
 * bytes not yet handled, whether its poll is armed at all, since when a
 * frame has been left unfinished (0: none). */
static inline size_t opd__sock_unsent(const opd_session_t *s) {
  return s->sock.wlen - s->sock.woff;
}
static inline size_t opd__sock_unread(const opd_session_t *s) {
  return s->sock.rlen;
}
static inline int opd__sock_armed(const opd_session_t *s, int events) {
  return (s->sock.poll_events & events) != 0;
}
static inline uint64_t opd__sock_partial_since(const opd_session_t *s) {
  return s->sock.t_partial;
}

/* outbox.c: every message sent. `via`: OPD_VIA_RING or OPD_VIA_SOCKET.
 * `body` is a packed msgpack map (NULL for {}); an error's is
 * {"message": fmt...}. */
void opd__out_reply(opd_session_t *s, int via, uint64_t id, const char *body,
                    size_t body_len);
void opd__out_error(opd_session_t *s, int via, uint64_t id, int code,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* The session's one goodbye (on the socket): it stops reading and closes
 * once the goodbye is out and its running job is done. */
void opd__out_goodbye(opd_session_t *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A reply with a file descriptor (SCM_RIGHTS, on the socket); fd is closed
 * here once sent or when the session goes. 0, or OPD_ELIMIT when too many
 * fds are queued (fd then closed, nothing sent). */
int opd__reply_fd(const opd_req_t *r, const char *body, size_t body_len,
                  int fd);
/* The reply to r, a success or an error. */
static inline void opd__reply(const opd_req_t *r, const char *body,
                              size_t body_len) {
  opd__out_reply(r->s, r->via, r->id, body, body_len);
}
#define opd__reply_error(r, code, ...) \
  opd__out_error((r)->s, (r)->via, (r)->id, (code), __VA_ARGS__)

/* arena.c */
int opd__memfd_map(int fd, uint64_t size, void **base, opd_err_t *err);
int opd__arena_register(opd_session_t *s, int fd, uint64_t size,
                        uint64_t *id, opd_err_t *err);
int opd__arena_release(opd_session_t *s, uint64_t id);
int opd__arena_alloc_device(opd_session_t *s, int dev, uint64_t size,
                            int exportable, uint64_t *id, opd_err_t *err);
int opd__arena_import(opd_session_t *s, int dev, const void *handle,
                      uint64_t offset, uint64_t size, uint64_t *id, opd_err_t *err);
opd_arena_t *opd__arena_find(opd_session_t *s, uint64_t id);
/* publish.c: names are (owner uid, name); ATTACH and UNPUBLISH take
 * "name" (the caller's uid) or "user/name". `readers` may be NULL. */
int opd__publish(opd_session_t *s, uint64_t arena, const char *name,
                 const char *meta, const struct opd_readers *readers,
                 opd_err_t *err);
int opd__unpublish(opd_session_t *s, const char *name, opd_err_t *err);
int opd__attach(opd_session_t *s, const char *name, opd_arena_t **out,
                const char **meta, opd_err_t *err);
void opd__unpublish_all(opd_session_t *s);
void opd__publish_free(opd_server_t *srv);
void opd__arena_unref(opd_arena_t *a);
void opd__arena_release_all(opd_session_t *s);

/* limits.c: accounting per session, per uid and daemon-wide. */
opd_acct_t *opd__acct_get(opd_server_t *srv, uid_t uid); /* NULL: no memory */
void opd__acct_put(opd_server_t *srv, opd_acct_t *a);   /* frees if unused */
/* Whether s may map one more arena of `bytes` bytes: 0, or OPD_ELIMIT with
 * a message naming the scope and the option that sets it. */
int opd__limit_arena(const opd_session_t *s, uint64_t bytes, opd_err_t *err);
void opd__acct_arena(opd_session_t *s, int64_t n, int64_t bytes);
/* Whether s may publish one more name (session, uid, daemon). */
int opd__limit_name(const opd_session_t *s, opd_err_t *err);
void opd__acct_name(opd_session_t *s, int n);
/* Whether s may queue one more run: 0, or 1 when its session, its uid or
 * the daemon is at its limit (the session is then not read until a run
 * ends). */
int opd__limit_inflight(const opd_session_t *s);
/* Whether s is not read now: its runs are at a limit, or its unread
 * replies (socket buffer and completion-ring overflow) pass
 * --max-reply-bytes. */
int opd__limit_read(const opd_session_t *s);
void opd__acct_inflight(opd_session_t *s, int n);
/* Strings for control characters in client-supplied text: writes at most
 * cap-1 bytes of s with bytes < 0x20, 0x7f and non-UTF-8 escaped as \xNN
 * and returns buf. */
const char *opd__log_escape(const char *s, char *buf, size_t cap);

/* access.c: who may connect (--allow-users / --allow-groups). */
int opd__access_init(opd_server_t *srv); /* resolves names; -1: logged */
void opd__access_free(opd_server_t *srv);
/* 1 when a peer with these credentials may be served. */
int opd__access_allowed(const opd_server_t *srv, uid_t uid, gid_t gid,
                        pid_t pid);
/* root or the daemon's own uid */
static inline int opd__is_admin(const opd_server_t *srv, uid_t uid) {
  return uid == 0 || uid == srv->self_uid;
}

/* ringsvc.c: the shared-memory transport */
/* the ring modes (OPD_RING_ADAPTIVE, OPD_RING_SPIN): common/ring.h */
void opd__ring_init_server(opd_server_t *srv);
void opd__ring_report(opd_server_t *srv); /* logs ring service times */
/* Sets up s's rings; *mode gets the wait strategy granted (a spin asked
 * for where cores are short is given adaptive, with why[] saying so). */
int opd__ring_setup(opd_req_t *r, const msgpack_object *body, int *mode,
                    char *why, size_t whylen, opd_err_t *err);
/* 1 when one more spinning session would still leave cores for the work
 * (--spin); else 0 with why[] saying so. */
int opd__spin_grant(const opd_server_t *srv, char *why, size_t cap);
/* An asynchronous GPU run of session s was enqueued: an adaptive session
 * keeps the loop serving the rings for --linger-us (its next run comes
 * within microseconds, and would otherwise wait for a wake-up). */
void opd__ring_linger(opd_session_t *s);
/* 1 when the reply went to (or waits for) the completion ring, 0 when it
 * must go to the socket. */
int opd__ring_reply(opd_session_t *s, const void *head, size_t hlen,
                    const void *body, size_t blen);
void opd__ring_close(opd_session_t *s);
void opd__ring_free(opd_session_t *s);
/* Sweeps sessions past their handshake / frame / goodbye deadlines, and
 * reads the throttled sessions again once limits came free. */
void opd__sessions_sweep(opd_server_t *srv, uint64_t now);
void opd__sessions_unthrottle(opd_server_t *srv);
/* registers the sessions' watcher (limits that came free) */
void opd__sessions_init(opd_server_t *srv);

/* handlers.c: every request type */
void opd__handle(opd_req_t *r, const msgpack_object *req);
/* schema.c: the OPS reply body (srv->ops_body), packed once at start */
int opd__ops_pack(opd_server_t *srv);
/* daemon/plugins.c: loads the plugins cfg names (0, or the first refusal,
 * logged); packs the PLUGINS reply body. */
int opd__plugins_start(const opd_config_t *cfg);
void opd__plugins_pack(msgpack_packer *pk);

/* validate.c: the request */
#define OPD_DEV_ANY (-3)  /* "auto": as no device, but a run of host
                             tensors goes to the least-loaded GPU */
#define OPD_DEV_CPU (-2)
#define OPD_DEV_AUTO (-1) /* none given: where the tensors are, else cpu */
/* Parses a device name ("cpu", "auto", "cuda", "cuda:N", a UUID) into
 * *req: OPD_DEV_CPU, OPD_DEV_ANY or a CUDA device index of this daemon.
 * Returns 0 or OPD_EDEVICE with err set. */
int opd__device_parse(opd_server_t *srv, const char *dev, int *req, opd_err_t *err);
void opd__run_request(const opd_req_t *r, const msgpack_object *body,
                      int infer);
/* jobs.c: a job from the pool (NULL: no memory), back to it (its arena
 * references dropped), queued on its session (the session starts it),
 * remembered as the session's last validated run (the run cache), dropped
 * with an error. */
opd_job_t *opd__job_alloc(opd_server_t *srv);
void opd__job_recycle(opd_server_t *srv, opd_job_t *j);
void opd__job_enqueue(opd_session_t *s, opd_job_t *job);
void opd__run_cache_store(const opd_req_t *r, const opd_job_t *job);
void opd__job_drop(opd_job_t *job, int code, const char *msg);
/* Starts a run through its backend: OPD_LAUNCH_QUEUED (job->done is called
 * later), OPD_LAUNCH_ENQUEUED (answer it now; job->done is called at its
 * completion) or OPD_LAUNCH_DONE (finished now, or failed to start:
 * job->rc). */
int opd__job_start(opd_job_t *job);
/* A run's end: its reply, its counts, the job back to the pool. */
void opd__job_finish(opd_job_t *job);
/* An asynchronous run: answered when enqueued ({"queued": true}; the job
 * lives on), then at its completion counted, its error kept for the
 * session's next SYNC, the job back to the pool. */
void opd__job_enqueued(opd_job_t *job);
void opd__job_async_done(opd_job_t *job);
/* The session's async error as request id's error reply, and cleared:
 * 1, or 0 when it had none. */
int opd__async_error_report(opd_session_t *s, int via, uint64_t id);

#endif /* OPD_SERVER_H */
