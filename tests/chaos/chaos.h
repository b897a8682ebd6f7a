/* Chaos and exhaustion tests: what the daemon holds, measured from outside.
 *
 * DESIGN
 * Each case starts its own daemon (tests/integration/harness.h), takes a
 * baseline of what the daemon process holds after a warm-up (open fds,
 * mappings of client memfds and their bytes, VmSize, VmRSS, RssShmem, all
 * read from /proc/<pid>/), abuses it (clients SIGKILLed mid-work, loops,
 * floods, unread replies, half frames, a low fd limit) and compares again.
 * A snapshot is taken while exactly one socket-only client (the one asking
 * for stats) is connected, so the two sides of a comparison hold the same
 * sessions; the daemon's own stats ("mappings", "mapped_bytes", ...) are
 * compared with /proc in the same snapshot.
 *
 * Every case is bounded in count and time for `make test` (the whole
 * binary well under 2 minutes on a 2-core machine). OPD_CHAOS_SOAK=1 turns
 * the kill and register/release cases into soak runs (10,000 kills,
 * 200,000 loops) that print their figures (bench/soak_chaos.sh).
 */
#ifndef OPD_TEST_CHAOS_H
#define OPD_TEST_CHAOS_H

#include <stdint.h>
#include <sys/types.h>

#include "tests/integration/harness.h"

/* What the daemon process holds, from /proc/<pid>/. */
typedef struct ch_proc {
  long fds;                  /* entries of /proc/PID/fd */
  long memfd_maps;           /* lines of /proc/PID/maps naming "/memfd:" */
  uint64_t memfd_bytes;      /* the bytes those lines span */
  uint64_t vm_size;          /* VmSize (address space), bytes */
  uint64_t vm_rss;           /* VmRSS, bytes */
  uint64_t rss_shmem;        /* RssShmem (resident shared memory), bytes */
} ch_proc_t;

/* The daemon's own view (STATS); -1 for a field it does not report. */
typedef struct ch_stats {
  int64_t sessions;          /* includes the client asking */
  int64_t arenas;
  int64_t bytes_mapped;
  int64_t mappings;          /* host mappings: arenas + ring regions */
  int64_t mapped_bytes;
  int64_t inflight;          /* runs queued or running */
} ch_stats_t;

typedef struct ch_snap {
  ch_proc_t proc;
  ch_stats_t st;
} ch_snap_t;

void ch_proc_read(pid_t pid, ch_proc_t *p);
/* CPU time (utime + stime) of the process so far, seconds. */
double ch_cpu_seconds(pid_t pid);
/* Whether the daemon under test is an ASan build (libasan in its maps). */
int ch_daemon_asan(void);

/* Connects one socket-only client; retries while the daemon refuses. */
opd_client_t *ch_connect_socket(int timeout_ms);
/* The daemon's stats through c. */
void ch_stats_read(opd_client_t *c, ch_stats_t *st);

/* Waits (up to timeout_ms) until the daemon serves no session but the one
 * asking and, if it reports "inflight", has no run left; then fills *sn
 * with its stats and /proc figures read while that one client is
 * connected. Fails the test on timeout, naming what stayed. */
void ch_snapshot(ch_snap_t *sn, int timeout_ms);

/* Warms the daemon up (every kernel thread and the BLAS threads started,
 * an arena, rings of both kinds) so that the baseline holds what any
 * later run holds, then takes the baseline. */
void ch_baseline(ch_snap_t *base);

/* Tolerances for ch_expect_near, in bytes. */
typedef struct ch_tol {
  uint64_t rss;              /* VmRSS */
  uint64_t shmem;            /* RssShmem */
  uint64_t vm;               /* VmSize */
} ch_tol_t;
/* The defaults (see chaos.c for why each is what it is). */
ch_tol_t ch_tol_default(void);

/* Asserts that `now` holds what `base` held: fds and memfd mappings
 * exactly, memory within tol, stats back to idle; and that the daemon's
 * stats equal what /proc shows. `what` names the case in messages. */
void ch_expect_near(const char *what, const ch_snap_t *base,
                    const ch_snap_t *now, const ch_tol_t *tol);
/* Asserts stats "mappings"/"mapped_bytes" equal /proc's memfd figures. */
void ch_expect_stats_true(const char *what, const ch_snap_t *sn);

/* Prints both snapshots (soak figures) to stdout. */
void ch_print(const char *what, const ch_snap_t *base, const ch_snap_t *now,
              double seconds);

/* OPD_CHAOS_SOAK=1: the long runs. */
int ch_soak(void);
/* OPD_CHAOS_SOAK=1 or OPD_CHAOS_VERBOSE=1: each case prints its figures. */
int ch_verbose(void);

double ch_now(void);         /* CLOCK_MONOTONIC seconds */
void ch_sleep_ms(int ms);

/* A raw connection that said hello and set up adaptive rings of its own
 * geometry (a memfd and an eventfd), for clients libopd would never be:
 * one that never reads its completion ring. */
typedef struct ch_ring_client {
  int fd;                    /* the socket */
  int memfd, efd;
  void *base;                /* the ring region here */
  size_t size;
} ch_ring_client_t;
/* Returns 0, or -1 with a reason in err (no criterion assertion: usable
 * in a forked child). */
int ch_ring_client_open(ch_ring_client_t *rc, uint32_t cq_slots,
                        uint32_t cq_slot_size, char *err, size_t errlen);
void ch_ring_client_close(ch_ring_client_t *rc);

/* A framed request [type, id, {}] (an empty body) in buf; returns its
 * length. */
size_t ch_frame_empty(unsigned char *buf, int type, uint64_t id);
/* A framed hello [HELLO, 1, {"protocol": N}] in buf (32 bytes): length. */
size_t ch_frame_hello(unsigned char *buf);

/* Without criterion assertions (for forked children): a connection to the
 * daemon's socket or -1; one frame read within timeout_ms: 0 with its
 * type, code and message (cap bytes, may be 0), or -1 on EOF, timeout or
 * a frame that is not [type, id, code, body]. */
int ch_raw_connect_nc(void);
int ch_read_frame(int fd, int timeout_ms, int *type, int *code, char *msg,
                  size_t cap);

#endif
