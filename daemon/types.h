/* The daemon's shared types: server, sessions, arenas, jobs, requests.
 *
 * DESIGN
 * Forward typedefs come first (as uv.h opens), so that a module's header
 * names these types without including another module's header; then the
 * structures more than one module reads. Each structure's fields are
 * changed by the module its comment names (the run queue by jobs.c, the
 * socket transport's buffers by sock.c, ...); the others go through that
 * module's functions (its header beside it: daemon/<module>.h, or under
 * daemon/run/ for a run's checks, queue and cache, daemon/mem/ for arenas
 * and published names).
 *
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
#ifndef OPD_TYPES_H
#define OPD_TYPES_H

#include <stdint.h>
#include <sys/types.h>
#include <msgpack.h>
#include <uv.h>

typedef struct opd_server opd_server_t;
typedef struct opd_session opd_session_t;
typedef struct opd_arena opd_arena_t;
typedef struct opd_job opd_job_t;
typedef struct opd_req opd_req_t;
typedef struct opd_pub opd_pub_t;
typedef struct opd_acct opd_acct_t;
typedef struct opd_graph opd_graph_t;
struct opd_readers;
struct opd_run_cache;

#include "common/err.h"
#include "common/ring.h"
#include "daemon/backend/backend.h"
#include "daemon/config.h"
#include "daemon/loop.h"
#include "kernels/kernel.h"

struct opd_arena {
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
};

/* A name under which a session published one of its arenas. */
struct opd_pub {
  char name[OPD_MAX_NAME];
  char meta[256];                /* opaque, for attachers */
  opd_arena_t *arena;            /* a reference held */
  uint64_t owner;                /* publishing session's id */
  uid_t owner_uid;               /* its uid: the name belongs to that uid */
  struct opd_readers *readers;   /* other uids that may attach (access.h);
                                    NULL: the owner uid only */
};

/* What the sessions of one uid hold together (daemon/limits.c): kept while
 * the uid has a session or a published name. */
struct opd_acct {
  struct opd_acct *next;         /* server list */
  uid_t uid;
  uint32_t clients;              /* sessions open */
  uint32_t arenas;               /* arenas in their tables */
  uint64_t bytes;                /* bytes those arenas map */
  uint32_t inflight;             /* runs queued or running */
  uint32_t names;                /* names published */
};

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

#define OPD_MAX_PENDING_FDS 8
#define OPD_MAX_SYNCS 8 /* SYNC requests of one session waiting at once */

/* Where a reply goes: the transport its request came by (a ring session's
 * requests are answered on its completion ring; fds travel only on the
 * socket). */
enum { OPD_VIA_SOCKET = 0, OPD_VIA_RING = 1 };

/* One request being handled: what its handler and its reply need, passed
 * down the call path (never left in the session for another file). */
struct opd_req {
  opd_session_t *s;
  uint64_t id;
  int via;                       /* OPD_VIA_*: where its reply goes */
  const unsigned char *body;     /* a RUN's body bytes (the run cache) */
  uint32_t body_len;
  int fds[OPD_MAX_PENDING_FDS];  /* fds that came with it (socket) */
  int n_fds;
  int fd_lost;                   /* errno (EMFILE, ENFILE) when the kernel
                                    could not give us its fds */
};

/* How a transport hands what it received up to its session, and how a
 * run's completion moves the session on (the session sets them; the
 * transports and jobs.c never call session code). */
typedef struct opd_transport_cb {
  /* one complete payload: a request (r: s, via and fds set) */
  void (*payload)(opd_req_t *r, const unsigned char *p, uint32_t len);
  /* the transport cannot go on: code 0, the peer is gone (close now);
   * else a goodbye with that code and why */
  void (*fail)(opd_session_t *s, int code, const char *why);
  /* the session moves on: its socket was serviced, a ring's replies
   * drained, or a run it launched completed (daemon/run/jobs.c) */
  void (*ready)(opd_session_t *s);
} opd_transport_cb_t;

struct opd_server {
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
  uv_timer_t over_timer;         /* looks again at completion rings too
                                    full for their waiting replies
                                    (daemon/ringsvc.c) */
  uint64_t fd_short_logged;      /* when "out of fds" was last logged */
  uint64_t fd_short_count;       /* pauses since that line */
  uint32_t n_reserved;           /* sessions on reserved slots */
  uint32_t max_clients;          /* --max-clients, lowered to what the fd
                                    limit allows (server.c, fd_budget) */
  uint64_t fd_limit;             /* RLIMIT_NOFILE (soft, after raising) */
  int unthrottle;                /* a uid's or the daemon's run limit came
                                    free: look at the throttled sessions */
  size_t trim_pending;           /* bytes freed since the last malloc_trim */
  opd_session_t *sessions;       /* doubly linked list */
  uint32_t n_sessions;
  uint64_t next_session_id, next_arena_id;
  opd_exec_t exec;               /* kernel thread pool */
  opd_exec_t exec_be;            /* ... its best-effort view (exec.h) */
  opd_exec_t exec_loop;          /* ... a copy at another address: the runs
                                    the loop thread executes with the
                                    kernel threads helping (backend/cpu.c,
                                    --idle-inline-us) */
  struct opd_sched *sched;       /* classes of service (daemon/sched.c) */
  struct opd_devq *devq;         /* device admission by class (devq.c) */
  uint64_t start_ns;
  /* stats */
  uint64_t sessions_total, requests, errors, bytes_mapped, arenas;
  uint64_t run_cache_hits;       /* runs that skipped decode and checks */
  uint64_t strided_copies;       /* contiguous copies of strided tensors
                                    made around kernels (run/strided.c) */
  uint64_t strided_bytes;        /* ... and their bytes */
  uint64_t staged_copies, staged_bytes; /* clients' staging (STAGING) */
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
  uint64_t turn_ns;              /* when the loop's current turn began
                                    (its prepare, before it looks at I/O) */
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
  opd_graph_t *graphs;           /* every live graph (daemon/graph/) */
  uint64_t next_graph_id;
  uint64_t graphs_defined;       /* graphs defined since start */
  uint32_t n_graphs;             /* live now */
  opd_pub_t *pubs;               /* published arenas */
  uint32_t n_pubs, cap_pubs;
  int n_devices;                 /* CUDA devices in use (0: cpu only) */
  int healthy;                   /* 0 once a CUDA context is poisoned */
  /* the device backend reports a poisoned context here (server.c) */
  void (*poisoned)(opd_server_t *srv, const char *why);
  void *backend_state;           /* the device backend's (backend/) */
  msgpack_sbuffer scratch;       /* packs one reply body at a time */
};

struct opd_job {
  uv_work_t work;                /* pool request; work.data unused */
  opd_session_t *s;
  /* the completion callback (the session's): called on the loop by the
   * backend of a run it launched (OPD_LAUNCH_QUEUED) */
  void (*done)(opd_job_t *job);
  int via;                       /* where its reply goes (OPD_VIA_*) */
  opd_job_t *next;               /* session queue / free list */
  uint64_t req_id;
  int op_index;                  /* into opd__ops; a graph run's:
                                    opd__n_ops (its stats slot) */
  opd_graph_t *graph;            /* a graph run: the graph (a reference
                                    held; call.op is opd__graph_op and call
                                    holds the run's tensors) */
  int rc;                        /* kernel result */
  uint64_t ns;                   /* kernel time */
  uint64_t bytes;                /* bytes of all its tensors */
  uint32_t strided;              /* tensors copied around the kernel
                                    (daemon/run/strided.h bits) */
  int device;                    /* -1: cpu; else the device backend's */
  int devq_slot;                 /* holds a best-effort slot of its device
                                    (daemon/devq.c) */
  int by_load;                   /* placed on a GPU by its load ("auto"):
                                    not kept by the run cache */
  uint32_t flags;                /* the request's OPD_RUN_F_* */
  uint64_t flag_after;           /* FLAG: a later refused FLAG run's id to
                                    write after this one's (0: none) */
  uint64_t t_recv;               /* when its request was taken */
  uint64_t t_start;              /* when it was launched */
  int now;                       /* a job on the stack (opd__runq_now):
                                    finish it now or not at all */
  int n_arenas;
  opd_arena_t *arenas[OPD_MAX_TENSORS]; /* references held */
  opd_kcall_t call;
  /* the backend's plan and progress (plain data; backend/backend.h) */
  _Alignas(16) unsigned char backend_job[OPD_BACKEND_JOB_BYTES];
};

/* A session's socket transport: its buffers and the fds in flight, owned
 * by daemon/sock.c (others read them through the accessors of daemon/sock.h). */
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

/* A session's runs, owned by daemon/run/jobs.c (the others reach them
 * through daemon/run/jobs.h): the queue, the one running, the asynchronous
 * ones not yet complete, their first error, and the SYNCs waiting. */
typedef struct opd_runq {
  opd_job_t *head, *tail;        /* runs waiting, in order */
  opd_job_t *running;            /* at most one per session */
  uint32_t n_async;              /* runs answered when enqueued, not yet
                                    complete */
  int async_rc;                  /* the first failure of one of them since
                                    the last SYNC (0: none) ... */
  char async_err[300];           /* ... and its message */
  struct {                       /* SYNCs waiting for the runs before
                                    them: transport and id */
    int via;
    uint64_t id;
  } sync[OPD_MAX_SYNCS];
  int n_sync;
} opd_runq_t;

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
  uint32_t n_queued;             /* runs waiting + running (limits.c) */
  opd_runq_t runq;               /* its runs (jobs.c) */
  int priority;                  /* 1: the latency class (high-priority
                                    streams; daemon/sched.h) */
  opd_session_t *devq_next;      /* in a device's FIFO of sessions waiting
                                    for a best-effort slot (devq.c) */
  int devq_wait;                 /* that device + 1; 0: not waiting */
  uint16_t devq_held[OPD_MAX_DEVICES]; /* best-effort slots it holds */
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
  opd_graph_t **graphs;          /* its graphs (daemon/graph/), a
                                    reference each */
  uint32_t n_graphs;
  struct opd_run_cache *run_cache; /* the last validated run
                                    (runcache.c) */
};

#endif /* OPD_TYPES_H */
