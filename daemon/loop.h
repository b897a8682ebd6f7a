/* The loop scheduler: one owner for the libuv check, prepare and idle
 * handles, with which the transports and backends register watchers.
 *
 * DESIGN
 * As libuv's own loop-watcher.c keeps the check/prepare/idle phases apart
 * from what runs in them, the rings (daemon/ringsvc.c), the GPU
 * completion poller (daemon/backend/cuda/poller.c) and the sessions'
 * throttle (daemon/session.c) each register one opd_watcher_t. The loop
 * calls them; they never call each other: ring code does not know that
 * a GPU exists, and the GPU code does not know rings exist.
 *
 * Spin windows: while any watcher wants_spin, the idle handle keeps the
 * loop from blocking, and each idle turn is a window of up to
 * --spin-window-us in which every watcher's poll runs back to back, so a
 * spinning client or a tiny GPU kernel is answered without an epoll_wait
 * per request. Sockets and timers wait at most one window. While CPU runs
 * are on the kernel threads (srv->pool_jobs) the window naps instead of
 * spinning: those threads need the core.
 */
#ifndef OPD_LOOP_H
#define OPD_LOOP_H

#include <stdint.h>

typedef struct opd_server opd_server_t;

typedef struct opd_watcher {
  const char *name;
  /* after every poll phase (uv_check): serve what is there (may be NULL) */
  void (*check)(opd_server_t *srv);
  /* in a spin window, every turn: serve what is ready; non-zero if it
   * served something (may be NULL) */
  int (*poll)(opd_server_t *srv);
  /* whether the loop must not block; now == 0: ignoring deadlines (a
   * cheap look between clock reads) */
  int (*wants_spin)(const opd_server_t *srv, uint64_t now);
  /* the loop starts (1) or stops (0) spinning (may be NULL) */
  void (*spinning)(opd_server_t *srv, int on);
  /* before the loop blocks: non-zero when work arrived meanwhile, and the
   * loop does not block (may be NULL) */
  int (*arm)(opd_server_t *srv);
} opd_watcher_t;

#define OPD_MAX_WATCHERS 8

void opd__loop_init(opd_server_t *srv);
/* Adds w (static storage) to the watchers, called in the order added. */
void opd__loop_watch(opd_server_t *srv, const opd_watcher_t *w);
/* Work is left over: run the watchers again before blocking. */
void opd__loop_kick(opd_server_t *srv);
/* The watchers' wants changed: start or stop spinning. */
void opd__loop_update(opd_server_t *srv);
/* Logs the gaps between spin windows (at shutdown). */
void opd__loop_report(opd_server_t *srv);

#endif /* OPD_LOOP_H */
