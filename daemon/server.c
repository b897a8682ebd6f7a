/* The listening socket, signals and graceful shutdown.
 *
 * DESIGN
 * The socket is created with umask 0117 and chmod'ed to 0660 so that only
 * the daemon's user and group can connect. A stale socket file (left by a
 * crash) is replaced; a live one (another daemon answers) is an error.
 * SIGINT/SIGTERM start a drain: the listener closes and the socket file is
 * removed at once, every session stops reading, queued runs fail with
 * OPD_ESHUTDOWN, running ones finish and reply, each client gets a goodbye,
 * and the loop ends when the last session is gone, or at the drain
 * deadline (--drain-timeout-ms), when lingering sessions are dropped and,
 * if runs still hold any of them, the process exits there and then.
 * SIGHUP reloads the configuration (daemon/service.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h" /* opd__now_ns */
#include "common/paths.h"
#include "common/wire.h"
#include "daemon/access.h"
#include "daemon/backend/backend.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/mem/publish.h"
#include "daemon/ringsvc.h"
#include "daemon/devq.h"
#include "daemon/sched.h"
#include "daemon/schema.h"
#include "daemon/server.h"
#include "daemon/service.h"
#include "daemon/session.h"
#include "daemon/ticks.h"
#include "kernels/runtime/exec.h"
#include "kernels/runtime/registry.h"

#define OPD_POISON_GRACE_MS 2000
#define OPD_EXIT_POISONED 3

/* Out of fds (EMFILE: ours; ENFILE: the system's): accept would fail at
 * once again, and a listener left armed makes the loop spin. So the
 * listener pauses for FD_SHORT_PAUSE_MS and then tries again; connected
 * clients are not touched, and waiting ones stay in the backlog. Logged
 * once per FD_SHORT_LOG_MS with the number of pauses since. */
#define FD_SHORT_PAUSE_MS 100
#define FD_SHORT_LOG_MS 10000

static void on_listen(uv_poll_t *h, int status, int events);

/* Fds: the soft RLIMIT_NOFILE is raised to the hard one at start, and the
 * sessions are capped below it, as Redis sizes maxclients: a session holds
 * up to FDS_PER_SESSION (its socket; two more for adaptive rings) and
 * FD_RESERVE stay free for the listener, the loop, the log, the CUDA
 * driver's own and the fds clients pass in (an arena's memfd is held from
 * its message to its mmap), so a flood of connections is refused by name
 * ("too many clients") before it can take the fds that the clients
 * already served need to register arenas. */
#define FD_RESERVE 64
#define FDS_PER_SESSION 3

static void fd_budget(opd_server_t *srv) {
  const opd_limits_t *l = &srv->cfg.limits;
  struct rlimit rl;
  srv->max_clients = l->max_clients;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  if (rl.rlim_cur < rl.rlim_max) {
    rlim_t was = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
      LOG_INFO("fd limit raised from %llu to the hard limit %llu",
               (unsigned long long)was, (unsigned long long)rl.rlim_cur);
    else
      rl.rlim_cur = was;
  }
  uint64_t n = rl.rlim_cur == RLIM_INFINITY ? UINT32_MAX : (uint64_t)rl.rlim_cur;
  uint64_t reserve = FD_RESERVE + (uint64_t)FDS_PER_SESSION * l->reserved_clients;
  uint64_t cap = n > reserve + FDS_PER_SESSION ? (n - reserve) / FDS_PER_SESSION : 1;
  srv->fd_limit = n;
  if (cap < srv->max_clients) {
    srv->max_clients = (uint32_t)cap;
    LOG_WARN("--max-clients %u lowered to %u: the fd limit is %llu (ulimit -n, "
             "LimitNOFILE=), %u kept for the daemon and %u per session",
             l->max_clients, srv->max_clients, (unsigned long long)n,
             (unsigned)reserve, FDS_PER_SESSION);
  }
}

static void on_accept_resume(uv_timer_t *t) {
  opd_server_t *srv = t->data;
  if (srv->listen_fd >= 0 && !srv->stopping)
    uv_poll_start(&srv->listen_poll, UV_READABLE, on_listen);
}

static void fds_short(opd_server_t *srv, int err) {
  uint64_t now = opd__now_ns();
  srv->fd_short_count++;
  if (srv->fd_short_logged == 0 ||
      now - srv->fd_short_logged >= (uint64_t)FD_SHORT_LOG_MS * 1000000u) {
    LOG_WARN("accept: out of file descriptors (%s): not accepting for %d ms "
             "at a time (%llu pauses so far; %u sessions; raise LimitNOFILE "
             "/ ulimit -n)", err == ENFILE ? "ENFILE, the system's limit"
                                          : "EMFILE, opd's limit",
             FD_SHORT_PAUSE_MS, (unsigned long long)srv->fd_short_count,
             srv->n_sessions);
    srv->fd_short_logged = now;
  }
  uv_poll_stop(&srv->listen_poll);
  uv_timer_start(&srv->accept_timer, on_accept_resume, FD_SHORT_PAUSE_MS, 0);
}

static void on_listen(uv_poll_t *h, int status, int events) {
  opd_server_t *srv = h->data;
  (void)events;
  if (status < 0) {
    LOG_ERROR("listener: %s", uv_strerror(status));
    return;
  }
  for (int i = 0; i < 64; i++) { /* bounded: let other events run */
    int fd = accept4(srv->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE)
        fds_short(srv, errno);
      else if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
        LOG_WARN("accept: %s", strerror(errno));
      return;
    }
    opd__session_accept(srv, fd);
  }
}

/* Handshake and partial-frame deadlines: looked at a few times per the
 * shorter of the two, never more often than every 10 ms. */
static void on_sweep(uv_timer_t *t) {
  opd_server_t *srv = t->data;
  opd__sessions_sweep(srv, opd__now_ns());
}

static uint64_t sweep_every_ms(const opd_limits_t *l) {
  uint64_t ms = (l->handshake_ms < l->frame_ms ? l->handshake_ms : l->frame_ms) / 4;
  return ms < 10 ? 10 : ms > 1000 ? 1000 : ms;
}

/* Returns a listening fd, or -1 with a logged reason. */
static int listen_on(const char *path) {
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  int fd = -1;

  if (strlen(path) >= sizeof addr.sun_path) {
    LOG_ERROR("socket path too long: %s", path);
    return -1;
  }
  strcpy(addr.sun_path, path);
  /* the runtime directory: created if it is missing (e.g. /run/opd), and
   * served from only if nobody but us (or root) can replace the socket in
   * it; the per-user fallback /tmp/opd-<uid> must be ours alone, 0700 */
  char dir[sizeof addr.sun_path], fallback[64], why[512];
  strcpy(dir, path);
  char *slash = strrchr(dir, '/');
  if (slash == NULL) strcpy(dir, ".");
  else if (slash == dir) strcpy(dir, "/");
  else *slash = '\0';
  opd__fallback_dir(fallback, sizeof fallback);
  int own = strcmp(dir, fallback) == 0;
  if (opd__dir_make(dir, own ? 0700 : 0750, geteuid(),
                    own ? 0 : OPD_DIR_ROOT_OK | OPD_DIR_STICKY_OK, why,
                    sizeof why) != 0) {
    LOG_ERROR("%s; not serving %s", why, path);
    return -1;
  }
  for (int attempt = 0; attempt < 2; attempt++) {
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      LOG_ERROR("socket: %s", strerror(errno));
      return -1;
    }
    mode_t old = umask(0117);
    int rc = bind(fd, (struct sockaddr *)&addr, sizeof addr);
    umask(old);
    if (rc == 0) break;
    int err = errno;
    close(fd);
    fd = -1;
    if (err != EADDRINUSE || attempt > 0) {
      LOG_ERROR("bind %s: %s", path, strerror(err));
      return -1;
    }
    /* in use: a live daemon, or a stale file left by a crash? */
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe >= 0 &&
        connect(probe, (struct sockaddr *)&addr, sizeof addr) == 0) {
      close(probe);
      LOG_ERROR("another opd is already serving %s", path);
      return -1;
    }
    if (probe >= 0) close(probe);
    LOG_WARN("removing stale socket %s", path);
    unlink(path);
  }
  if (chmod(path, 0660) != 0)
    LOG_WARN("chmod %s: %s", path, strerror(errno));
  if (listen(fd, 128) != 0) {
    LOG_ERROR("listen %s: %s", path, strerror(errno));
    close(fd);
    unlink(path);
    return -1;
  }
  return fd;
}

/* After the drain deadline dropped the sessions: what still holds one is
 * a run executing; the deadline is the deadline. */
#define DRAIN_FINAL_MS 100
static void on_drain_final(uv_timer_t *t) {
  opd_server_t *srv = t->data;
  LOG_WARN("shutdown: %u run(s) still executing at the drain deadline; "
           "exiting now with status %d", srv->inflight, srv->exit_code);
  opd__service_exit(srv, srv->exit_code);
}

static void on_drain_timeout(uv_timer_t *t) {
  opd_server_t *srv = t->data;
  uint32_t ms = srv->cfg.svc.drain_ms;
  if (!srv->healthy) {
    /* a poisoned context may never complete the jobs still queued on it:
     * nothing left to drain cleanly, let the init system restart us */
    LOG_ERROR("shutdown: GPU work did not finish in %u ms; exiting with "
              "status %d", ms, srv->exit_code);
    opd__service_exit(srv, srv->exit_code);
  }
  LOG_WARN("shutdown: %u sessions did not finish in %u ms (drain-timeout-ms); "
           "dropping them", srv->n_sessions, ms);
  for (opd_session_t *s = srv->sessions, *next; s; s = next) {
    next = s->next; /* close may free s */
    opd__session_close(s);
  }
  /* the sessions go once their sockets' close callbacks ran, or once
   * their running runs finish: the loop ends by then, or we exit here */
  uv_timer_start(&srv->drain_timer, on_drain_final, DRAIN_FINAL_MS, 0);
}

static void stop(opd_server_t *srv, const char *why) {
  if (srv->stopping) {
    LOG_WARN("%s again: still draining %u sessions", why, srv->n_sessions);
    return;
  }
  srv->stopping = 1;
  LOG_INFO("%s: stopping; draining %u sessions", why, srv->n_sessions);
  uv_timer_stop(&srv->accept_timer);
  uv_close((uv_handle_t *)&srv->listen_poll, NULL);
  close(srv->listen_fd);
  srv->listen_fd = -1;
  unlink(srv->cfg.socket_path);
  opd__service_stopping(srv);
  uv_timer_start(&srv->drain_timer, on_drain_timeout, srv->cfg.svc.drain_ms, 0);
  uv_unref((uv_handle_t *)&srv->drain_timer);
  for (opd_session_t *s = srv->sessions, *next; s; s = next) {
    next = s->next; /* shutdown may free s */
    opd__session_shutdown(s);
  }
  if (srv->n_sessions == 0) uv_stop(srv->loop);
}

static void on_poison_timer(uv_timer_t *t) {
  opd_server_t *srv = t->data;
  stop(srv, "GPU context poisoned");
}

/* srv->poisoned: the device backend found its context unusable. */
static void server_poisoned(opd_server_t *srv, const char *why) {
  if (!srv->healthy) return;
  srv->healthy = 0;
  srv->exit_code = OPD_EXIT_POISONED;
  srv->goodbye_code = OPD_EBACKEND;
  snprintf(srv->goodbye_why, sizeof srv->goodbye_why,
           "the GPU context is poisoned (%s); opd is restarting", why);
  LOG_ERROR("%s: CUDA work is refused from now on; stopping in %d ms with "
            "exit status %d for the init system to restart opd",
            srv->goodbye_why, OPD_POISON_GRACE_MS, OPD_EXIT_POISONED);
  uv_timer_start(&srv->poison_timer, on_poison_timer, OPD_POISON_GRACE_MS, 0);
}

static void on_signal(uv_signal_t *h, int signum) {
  opd_server_t *srv = h->data;
  if (signum == SIGHUP) {
    if (srv->stopping) return;
    opd__service_reload(srv);
    uint64_t every = sweep_every_ms(&srv->cfg.limits); /* may have changed */
    uv_timer_start(&srv->sweep_timer, on_sweep, every, every);
    return;
  }
  stop(srv, signum == SIGINT ? "SIGINT" : "SIGTERM");
}

int opd__server_init(opd_server_t *srv, uv_loop_t *loop,
                     const opd_config_t *cfg) {
  memset(srv, 0, sizeof *srv);
  srv->loop = loop;
  srv->cfg = *cfg;
  srv->listen_fd = -1;
  srv->start_ns = opd__now_ns();
  opd__ticks_init();
  srv->self_uid = geteuid();
  srv->goodbye_code = OPD_ESHUTDOWN;
  snprintf(srv->goodbye_why, sizeof srv->goodbye_why,
           "daemon is shutting down");
  msgpack_sbuffer_init(&srv->scratch);
  srv->op_stats = calloc((size_t)opd__n_ops + 1, sizeof *srv->op_stats); /* + graphs */
  if (srv->op_stats == NULL) return OPD_ENOMEM;
  srv->cost = calloc(OPD_COST_SLOTS, sizeof *srv->cost);
  if (srv->cost == NULL) return OPD_ENOMEM;
  if (opd__ops_pack(srv) != 0) return OPD_EINTERNAL;
  if (opd__access_init(srv) != 0) return OPD_EINVAL;
  if (opd__sched_init(srv) != 0) return OPD_EINVAL;
  fd_budget(srv);
  srv->healthy = 1;
  srv->poisoned = server_poisoned;
  /* the scheduler first: the sessions, the backend and the rings register
   * their watchers with it */
  opd__loop_init(srv);
  opd__sessions_init(srv);
  if (opd__devq_init(srv) != 0) return OPD_ENOMEM;
  if (opd__backend_dev.init(srv) != 0) return OPD_EDEVICE;
  cpu_set_t cpus;
  srv->n_cpus = sched_getaffinity(0, sizeof cpus, &cpus) == 0
                    ? CPU_COUNT(&cpus) : (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (srv->n_cpus < 1) srv->n_cpus = 1;
  int threads = cfg->threads > 0 ? cfg->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (threads < 1) threads = 1;
  if (opd__exec_pool_create(&srv->exec, threads) != 0) {
    LOG_ERROR("cannot start %d kernel threads", threads);
    return OPD_ENOMEM;
  }
  (void)opd__exec_pool_view(&srv->exec, &srv->exec_be); /* a pool: 0 */
  srv->exec_loop = srv->exec;

  srv->listen_fd = listen_on(cfg->socket_path);
  if (srv->listen_fd < 0) return OPD_EIO;
  uv_poll_init(loop, &srv->listen_poll, srv->listen_fd);
  srv->listen_poll.data = srv;
  uv_poll_start(&srv->listen_poll, UV_READABLE, on_listen);

  uv_signal_t *sigs[] = {&srv->sig_int, &srv->sig_term, &srv->sig_hup};
  int nums[] = {SIGINT, SIGTERM, SIGHUP};
  for (int i = 0; i < 3; i++) {
    uv_signal_init(loop, sigs[i]);
    sigs[i]->data = srv;
    uv_signal_start(sigs[i], on_signal, nums[i]);
    uv_unref((uv_handle_t *)sigs[i]); /* signals alone keep nothing alive */
  }
  uv_timer_init(loop, &srv->drain_timer);
  srv->drain_timer.data = srv;
  uv_timer_init(loop, &srv->poison_timer);
  srv->poison_timer.data = srv;
  uv_timer_init(loop, &srv->accept_timer);
  srv->accept_timer.data = srv;
  uv_unref((uv_handle_t *)&srv->accept_timer);
  uv_timer_init(loop, &srv->sweep_timer);
  srv->sweep_timer.data = srv;
  uint64_t every = sweep_every_ms(&cfg->limits);
  uv_timer_start(&srv->sweep_timer, on_sweep, every, every);
  uv_unref((uv_handle_t *)&srv->sweep_timer);
  opd__ring_init_server(srv);
  LOG_INFO("opd %s listening on %s (protocol %d, %d CUDA device(s), %d "
           "kernel threads, %d operators)",
           OPD_VERSION, cfg->socket_path, OPD_PROTOCOL_VERSION, srv->n_devices,
           threads, opd__n_ops);
  return 0;
}

static void close_cb(uv_handle_t *h, void *arg) {
  (void)arg;
  /* signal handles stay: closing them restores the default actions, and a
   * late SIGTERM would then kill us mid-teardown with a signal status */
  if (h->type == UV_SIGNAL) return;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

void opd__server_free(opd_server_t *srv) {
  if (srv->listen_fd >= 0) {
    close(srv->listen_fd);
    unlink(srv->cfg.socket_path);
  }
  opd__loop_report(srv);
  opd__ring_report(srv);
  uv_walk(srv->loop, close_cb, NULL);
  uv_run(srv->loop, UV_RUN_DEFAULT);
  while (srv->job_free) {
    opd_job_t *j = srv->job_free;
    srv->job_free = j->next;
    free(j);
  }
  opd__exec_pool_destroy(&srv->exec);
  opd__publish_free(srv);
  opd__access_free(srv);
  opd__sched_free(srv);
  opd__devq_free(srv);
  while (srv->accts) {
    opd_acct_t *a = srv->accts;
    srv->accts = a->next;
    free(a);
  }
  opd__backend_dev.shutdown(srv);
  free(srv->op_stats);
  free(srv->cost);
  free(srv->ops_body);
  msgpack_sbuffer_destroy(&srv->scratch);
}
