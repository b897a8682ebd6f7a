/* opd as a system service: pid file, log file, systemd notify and
 * watchdog, SIGHUP reload, drain deadline; see service.h.
 *
 * DESIGN
 * systemd learns the daemon's state through sd_notify (libsystemd, when
 * the build found it; without it these calls do nothing and Type=simple
 * is the unit to use): READY=1 once the socket accepts, RELOADING=1 ...
 * READY=1 around a reload, STOPPING=1 when a drain begins, STATUS= with
 * the sessions and health, refreshed by a timer when they change, and
 * WATCHDOG=1 from a loop timer at half of WatchdogSec: the ping comes
 * from the event loop itself, so a wedged loop stops pinging and systemd
 * restarts the daemon. Those timers are unref'ed: they never keep the
 * loop alive.
 *
 * A reload builds a whole new configuration (options.c: defaults, file,
 * command line) and applies it only if it has no error: first the
 * allow-lists (they resolve names, so they can fail), then the log file,
 * then the plain values. What cannot change under open sessions (the
 * socket, threads, devices, the loop's CPU, the per-session arena table
 * and frame size, the metrics address, the pid file) keeps its old value
 * and is logged as needing a restart.
 */
#include "daemon/access.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/options.h"
#include "daemon/optparse.h"
#include "daemon/service.h"
#include "daemon/types.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef OPD_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif


#define STATUS_EVERY_MS 1000

static struct {
  uv_timer_t watchdog;           /* WATCHDOG=1 at half WatchdogSec */
  uv_timer_t status;             /* STATUS= when it changed */
  int timers;                    /* the two timers were initialized */
  int pid_written;               /* we wrote cfg.svc.pid_file */
  char pid_file[256];            /* the one we wrote */
  char status_sent[160];
} svc;

/* systemd's notify protocol: sends `msg` ("READY=1", "STATUS=...") when
 * $NOTIFY_SOCKET is set and opd was built with libsystemd; else nothing. */
static void notify(const char *msg) {
#ifdef OPD_HAVE_SYSTEMD
  int rc = sd_notify(0, msg);
  if (rc < 0) LOG_DEBUG("sd_notify \"%s\": %s", msg, strerror(-rc));
#else
  (void)msg;
#endif
}

static void send_status(opd_server_t *srv) {
  char st[160];
  snprintf(st, sizeof st, "STATUS=%s; %u session(s), %u run(s) in flight%s",
           srv->healthy ? "healthy" : "UNHEALTHY (GPU context poisoned)",
           srv->n_sessions, srv->inflight,
           srv->stopping ? "; draining" : "");
  if (strcmp(st, svc.status_sent) == 0) return;
  notify(st);
  strcpy(svc.status_sent, st);
}

#ifdef OPD_HAVE_SYSTEMD
static void on_status(uv_timer_t *t) { send_status(t->data); }
static void on_watchdog(uv_timer_t *t) {
  (void)t;
  notify("WATCHDOG=1");
}
#endif

/* Writes our pid to path (through a temporary file, renamed: a reader
 * never sees it half written). Returns 0 or -1 (logged). */
static int write_pid(const char *path) {
  char tmp[300];
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    LOG_ERROR("--pid-file %s: %s", path, strerror(errno));
    return -1;
  }
  char buf[24];
  int n = snprintf(buf, sizeof buf, "%d\n", (int)getpid());
  int ok = write(fd, buf, (size_t)n) == n;
  int err = errno;
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) {
    LOG_ERROR("--pid-file %s: %s", path, strerror(ok ? errno : err));
    unlink(tmp);
    return -1;
  }
  return 0;
}

int opd__service_start(opd_server_t *srv) {
  const opd_service_config_t *c = &srv->cfg.svc;
  if (c->pid_file[0]) {
    if (write_pid(c->pid_file) != 0) return -1;
    svc.pid_written = 1;
    strcpy(svc.pid_file, c->pid_file);
  }
  if (c->metrics_listen[0] && opd__metrics_start(srv) != 0) return -1;
  uv_timer_init(srv->loop, &svc.status);
  uv_timer_init(srv->loop, &svc.watchdog);
  svc.status.data = svc.watchdog.data = srv;
  svc.timers = 1;
#ifdef OPD_HAVE_SYSTEMD
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
    uint64_t ms = usec / 2000 ? usec / 2000 : 1;
    uv_timer_start(&svc.watchdog, on_watchdog, ms, ms);
    uv_unref((uv_handle_t *)&svc.watchdog);
    LOG_INFO("systemd watchdog: pinging every %llu ms", (unsigned long long)ms);
  }
  if (getenv("NOTIFY_SOCKET") != NULL) {
    uv_timer_start(&svc.status, on_status, STATUS_EVERY_MS, STATUS_EVERY_MS);
    uv_unref((uv_handle_t *)&svc.status);
  }
#endif
  send_status(srv);
  notify("READY=1");
  return 0;
}

/* ---- reload ------------------------------------------------------------------ */

/* The keys whose printed values differ between a and b, into out. */
static void changed_keys(const opd_config_t *a, const opd_config_t *b,
                         char *out, size_t cap) {
  char *ta = NULL, *tb = NULL;
  size_t na = 0, nb = 0;
  FILE *fa = open_memstream(&ta, &na), *fb = open_memstream(&tb, &nb);
  out[0] = '\0';
  if (fa && fb) {
    opd__options_print(fa, a);
    opd__options_print(fb, b);
  }
  if (fa) fclose(fa);
  if (fb) fclose(fb);
  if (ta && tb) {
    size_t used = 0;
    char *sa = NULL, *sb = NULL;
    char *la = strtok_r(ta, "\n", &sa), *lb = strtok_r(tb, "\n", &sb);
    for (; la && lb; la = strtok_r(NULL, "\n", &sa), lb = strtok_r(NULL, "\n", &sb)) {
      if (la[0] == '#' && lb[0] == '#' && strncmp(la, "# opd ", 6) == 0) continue;
      if (strcmp(la, lb) == 0) continue;
      const char *k = la[0] == '#' ? la + 2 : la;
      size_t kn = strcspn(k, " :=");
      int w = snprintf(out + used, cap - used, "%s%.*s", used ? ", " : "",
                       (int)kn, k);
      if (w < 0 || (size_t)w >= cap - used) break;
      used += (size_t)w;
    }
  }
  free(ta);
  free(tb);
}

/* Opens `path` as the log (or goes back to the original stderr for ""). */
static int saved_stderr = -1;
static int log_to(const char *path) {
  char err[512];
  if (path[0] == '\0') {
    if (saved_stderr >= 0) dup2(saved_stderr, 2);
    return 0;
  }
  if (saved_stderr < 0) saved_stderr = fcntl(2, F_DUPFD_CLOEXEC, 3);
  if (opd__log_open(path, err, sizeof err) != 0) {
    LOG_ERROR("%s", err);
    return -1;
  }
  return 0;
}

int opd__service_log_start(const opd_config_t *cfg) {
  opd__log_init();
  if (cfg->svc.log_file[0] == '\0') return 0;
  return log_to(cfg->svc.log_file);
}

#define KEEP(field, key)                                                    \
  do {                                                                      \
    if (memcmp(&next->field, &cur->field, sizeof cur->field) != 0) {        \
      LOG_WARN("SIGHUP: %s changed; it takes effect at the next start", key); \
      memcpy(&next->field, &cur->field, sizeof cur->field);                 \
    }                                                                       \
  } while (0)

void opd__service_reload(opd_server_t *srv) {
  opd_config_t *cur = &srv->cfg, *next = malloc(sizeof *next);
  notify("RELOADING=1");
  if (next == NULL || opd__options_reload(next) != 0) {
    LOG_ERROR("SIGHUP: the configuration%s%s has errors (above): nothing "
              "changed, the one in use stays", cur->svc.config[0] ? " " : "",
              cur->svc.config);
    log_to(cur->svc.log_file); /* logrotate's SIGHUP all the same */
    goto done;
  }
  KEEP(socket_path, "socket");
  KEEP(threads, "threads");
  KEEP(devices, "devices");
  KEEP(loop_cpu, "loop-cpu");
  KEEP(latency_users, "latency-users"); /* resolved at start (sched.c) */
  KEEP(latency_groups, "latency-groups");
  KEEP(limits.max_arenas, "max-arenas");
  KEEP(limits.max_frame, "max-frame");
  KEEP(svc.metrics_listen, "metrics-listen");
  KEEP(svc.pid_file, "pid-file");
  /* plugins load once, before anyone is served (kernels/runtime/plugin.c) */
  KEEP(plugin_dir, "plugin-dir");
  int same = next->n_plugins == cur->n_plugins;
  for (int i = 0; same && i < cur->n_plugins; i++)
    same = strcmp(next->plugins[i], cur->plugins[i]) == 0;
  if (!same)
    LOG_WARN("SIGHUP: plugin changed; it takes effect at the next start");
  memcpy(next->plugins, cur->plugins, sizeof cur->plugins);
  next->n_plugins = cur->n_plugins;
  memcpy(next->socket_given, cur->socket_given, sizeof cur->socket_given);
  char changed[512];
  changed_keys(cur, next, changed, sizeof changed);

  /* the allow-lists: resolved anew; on failure the old ones stay */
  if (strcmp(next->allow_users, cur->allow_users) != 0 ||
      strcmp(next->allow_groups, cur->allow_groups) != 0) {
    opd_config_t old = *cur;
    uid_t *ou = srv->allow_uids;
    gid_t *og = srv->allow_gids;
    int nou = srv->n_allow_uids, nog = srv->n_allow_gids;
    strcpy(cur->allow_users, next->allow_users);
    strcpy(cur->allow_groups, next->allow_groups);
    if (opd__access_init(srv) != 0) {
      strcpy(cur->allow_users, old.allow_users);
      strcpy(cur->allow_groups, old.allow_groups);
      srv->allow_uids = ou, srv->allow_gids = og;
      srv->n_allow_uids = nou, srv->n_allow_gids = nog;
      LOG_ERROR("SIGHUP: allow-users/allow-groups do not resolve (above): "
                "nothing changed, the configuration in use stays");
      log_to(cur->svc.log_file);
      goto done;
    }
    free(ou);
    free(og);
  }
  if (log_to(next->svc.log_file) != 0) {
    LOG_ERROR("SIGHUP: log-file: still logging to %s",
              cur->svc.log_file[0] ? cur->svc.log_file : "stderr");
    memcpy(next->svc.log_file, cur->svc.log_file, sizeof cur->svc.log_file);
  }
  *cur = *next;
  opd__log_level = cur->log_level;
  LOG_INFO("SIGHUP: configuration reloaded%s%s; %s%s", cur->svc.config[0] ? " from " : "",
           cur->svc.config, changed[0] ? "changed: " : "nothing changed",
           changed);
done:
  free(next);
  notify("READY=1");
  svc.status_sent[0] = '\0';
  send_status(srv);
}

/* ---- stopping ---------------------------------------------------------------- */

void opd__service_stopping(opd_server_t *srv) {
  notify("STOPPING=1");
  send_status(srv);
}

static void remove_pid(void) {
  if (!svc.pid_written) return;
  unlink(svc.pid_file);
  svc.pid_written = 0;
}

void opd__service_stop(opd_server_t *srv) {
  if (svc.timers) {
    uv_close((uv_handle_t *)&svc.watchdog, NULL);
    uv_close((uv_handle_t *)&svc.status, NULL);
    svc.timers = 0;
  }
  opd__metrics_stop(srv);
  remove_pid();
}

_Noreturn void opd__service_exit(opd_server_t *srv, int code) {
  (void)srv;
  remove_pid();
  unlink(srv->cfg.socket_path);
  fflush(stderr);
  _exit(code);
}
