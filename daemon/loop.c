/* The loop scheduler: check, prepare and idle handles calling the
 * registered watchers (see daemon/loop.h for the design). */
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "common/clock.h" /* opd__now_ns */
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/types.h"

#define CLOCK_TURNS 32  /* a clock read every this many turns of a window */
#define NAP_NS 20000    /* while CPU runs are on the kernel threads */
#define WINDOW_GAP_LONG_NS 2000 /* a gap this long shows in a spin tail */

/* --spin-window-us, or by default: short while a socket-only client is
 * connected (its requests wait for the gap between windows), long when
 * every session uses rings (then only new connections, control messages
 * and signals wait, and a spinning request meets a gap ten times less
 * often). */
#define WINDOW_SOCKETS_NS 20000
#define WINDOW_RINGS_NS 200000

static uint64_t window_ns(const opd_server_t *srv) {
  if (srv->cfg.spin_window_ns != 0) return srv->cfg.spin_window_ns;
  return srv->n_sessions > (uint32_t)srv->n_ring ? WINDOW_SOCKETS_NS
                                                 : WINDOW_RINGS_NS;
}

static int wants_spin(const opd_server_t *srv, uint64_t now) {
  for (int i = 0; i < srv->n_watchers; i++)
    if (srv->watchers[i]->wants_spin != NULL &&
        srv->watchers[i]->wants_spin(srv, now))
      return 1;
  return 0;
}

static void set_spinning(opd_server_t *srv, int on) {
  for (int i = 0; i < srv->n_watchers; i++)
    if (srv->watchers[i]->spinning != NULL) srv->watchers[i]->spinning(srv, on);
}

static void on_idle(uv_idle_t *h) {
  opd_server_t *srv = h->data;
  uint64_t now = opd__now_ns(), until = now + window_ns(srv);
  if (srv->win_left_at != 0) {
    uint64_t gap = now - srv->win_left_at;
    srv->win_gaps++;
    srv->win_gap_ns += gap;
    if (gap > srv->win_gap_max) srv->win_gap_max = gap;
    if (gap >= WINDOW_GAP_LONG_NS) srv->win_gaps_long++;
  }
  set_spinning(srv, 1);
  unsigned done0 = atomic_load_explicit(&srv->pool_done, memory_order_relaxed);
  for (unsigned turn = 1;; turn++) {
    int served = 0;
    for (int i = 0; i < srv->n_watchers; i++)
      if (srv->watchers[i]->poll != NULL && srv->watchers[i]->poll(srv) > 0)
        served = 1;
    if (srv->loop_kick) break;
    /* the clock every CLOCK_TURNS looks: a look is then a few loads */
    if (turn % CLOCK_TURNS == 0) {
      uint64_t t = opd__now_ns();
      if (t >= until || !wants_spin(srv, t)) break;
    } else if (!wants_spin(srv, 0)) {
      break; /* nothing left to spin for */
    }
    if (!served && srv->pool_jobs > 0) {
      /* runs on the kernel threads: the loop's core is theirs; look
       * every NAP_NS instead of spinning, and leave the window as soon as
       * one of those runs is done (its reply waits for the loop's turn) */
      if (atomic_load_explicit(&srv->pool_done, memory_order_relaxed) != done0)
        break;
      struct timespec nap = {0, NAP_NS};
      nanosleep(&nap, NULL);
      if (opd__now_ns() >= until) break;
      continue;
    }
#if defined(__x86_64__) || defined(__i386__)
    if (!served) __builtin_ia32_pause();
#endif
  }
  /* back within microseconds (the idle handle stays active): a watcher's
   * helper thread sleeps on; otherwise it takes over */
  if (wants_spin(srv, opd__now_ns())) {
    srv->win_left_at = opd__now_ns();
  } else {
    srv->win_left_at = 0;
    set_spinning(srv, 0);
  }
}

void opd__loop_update(opd_server_t *srv) {
  int want = srv->loop_kick || wants_spin(srv, opd__now_ns());
  int on = uv_is_active((uv_handle_t *)&srv->loop_idle);
  if (want && !on) uv_idle_start(&srv->loop_idle, on_idle);
  else if (!want && on) uv_idle_stop(&srv->loop_idle);
  if (!want) {
    srv->win_left_at = 0; /* a stop, not a gap between windows */
    set_spinning(srv, 0); /* the loop may block now */
  }
}

void opd__loop_kick(opd_server_t *srv) {
  srv->loop_kick = 1;
  opd__loop_update(srv);
}

static void on_check(uv_check_t *h) {
  opd_server_t *srv = h->data;
  srv->loop_kick = 0;
  for (int i = 0; i < srv->n_watchers; i++)
    if (srv->watchers[i]->check != NULL) srv->watchers[i]->check(srv);
  opd__loop_update(srv);
}

/* Before the loop blocks: watchers whose peers must be told to wake us. */
static void on_prepare(uv_prepare_t *h) {
  opd_server_t *srv = h->data;
  srv->turn_ns = opd__now_ns();
  if (srv->loop_kick || uv_is_active((uv_handle_t *)&srv->loop_idle))
    return; /* the loop will not block */
  for (int i = 0; i < srv->n_watchers; i++)
    if (srv->watchers[i]->arm != NULL && srv->watchers[i]->arm(srv))
      srv->loop_kick = 1;
  opd__loop_update(srv); /* work arrived meanwhile: do not block */
}

void opd__loop_init(opd_server_t *srv) {
  srv->n_watchers = 0;
  uv_check_init(srv->loop, &srv->loop_check);
  srv->loop_check.data = srv;
  uv_check_start(&srv->loop_check, on_check);
  uv_unref((uv_handle_t *)&srv->loop_check);
  uv_prepare_init(srv->loop, &srv->loop_prepare);
  srv->loop_prepare.data = srv;
  uv_prepare_start(&srv->loop_prepare, on_prepare);
  uv_unref((uv_handle_t *)&srv->loop_prepare);
  uv_idle_init(srv->loop, &srv->loop_idle);
  srv->loop_idle.data = srv;
  uv_unref((uv_handle_t *)&srv->loop_idle);
}

void opd__loop_watch(opd_server_t *srv, const opd_watcher_t *w) {
  if (srv->n_watchers < OPD_MAX_WATCHERS) srv->watchers[srv->n_watchers++] = w;
  else LOG_ERROR("loop: more than %d watchers (%s not added)", OPD_MAX_WATCHERS,
                 w->name);
}

void opd__loop_report(opd_server_t *srv) {
  if (srv->win_gaps == 0) return;
  char win[32];
  if (srv->cfg.spin_window_ns != 0)
    snprintf(win, sizeof win, "%u us", srv->cfg.spin_window_ns / 1000);
  else
    snprintf(win, sizeof win, "%d or %d us", WINDOW_SOCKETS_NS / 1000,
             WINDOW_RINGS_NS / 1000);
  LOG_INFO("spin: %llu gaps between %s windows, mean %.2f us, max %.1f us, "
           "%llu of them %.0f us or longer",
           (unsigned long long)srv->win_gaps, win,
           (double)srv->win_gap_ns / (double)srv->win_gaps / 1e3,
           (double)srv->win_gap_max / 1e3,
           (unsigned long long)srv->win_gaps_long, WINDOW_GAP_LONG_NS / 1e3);
}
