/* The daemon's configuration: its limits and every option's value, as
 * the options table (daemon/options.c) builds them.
 *
 * DESIGN
 * Plain data, filled at start (and again on SIGHUP) and read by every
 * module through srv->cfg; it depends on nothing of the loop, so the
 * options and service code include this header alone.
 */
#ifndef OPD_CONFIG_H
#define OPD_CONFIG_H

#include <stdint.h>

#include "daemon/service.h"

/* Every limit has up to three scopes: one session, all sessions of one
 * uid, the whole daemon (docs/operations.md, "Limits"). 0 never means
 * unlimited: each has a default (daemon/options.c). */
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
  uint32_t dev_be_inflight;      /* --device-be-inflight: best-effort runs
                                    in flight per device while a latency
                                    client is there (daemon/devq.c; 0: no
                                    bound) */
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
  uint32_t graph_inline_us;      /* a CPU graph run learnt to take at most
                                    this runs on the loop (graphs.md) */
  uint32_t idle_inline_us;       /* while the kernel threads are idle and
                                    no latency-class client is connected,
                                    a CPU run learnt to hold the loop at
                                    most this long runs on it, the kernel
                                    threads helping (0: off) */
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
  char latency_users[512];       /* --latency-users: may ask for the
                                    latency class (daemon/sched.c) */
  char latency_groups[512];      /* --latency-groups */
  char plugins[32][1024];        /* --plugin PATHs, in order */
  int n_plugins;                 /* used in plugins */
  char plugin_dir[4096];         /* --plugin-dir: every *.so ("" if none) */
  opd_limits_t limits;
  opd_service_config_t svc;      /* pid/log file, drain, metrics */
} opd_config_t;

#endif /* OPD_CONFIG_H */
