/* opd: the operator daemon's entry point (loop, exit status; the options
 * are daemon/options.c's table).
 *
 * DESIGN
 * opd runs in the foreground and logs to stderr (or --log-file), which is
 * what systemd (Type=notify: daemon/service.c) and a SysV script with a
 * pid file both want. It
 * exits 0 after a clean drain on SIGINT/SIGTERM, 1 when it cannot start
 * (bad option, socket in use), so an init system can tell the two apart.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/log.h"
#include "daemon/optparse.h"
#include "daemon/plugins.h"
#include "daemon/server.h"
#include "daemon/service.h"

static void noop_work(uv_work_t *w) { (void)w; }
static void noop_after(uv_work_t *w, int status) { (void)w, (void)status; }

/* --loop-cpu: pins this (the loop) thread. Threads inherit their
 * creator's affinity and libuv starts its pool on first use, so the pool
 * is started first, unpinned (the kernel pool and the CUDA threads exist
 * already). */
static int pin_loop(uv_loop_t *loop, int cpu) {
  static uv_work_t w;
  uv_queue_work(loop, &w, noop_work, noop_after);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  if (rc != 0) {
    LOG_ERROR("--loop-cpu %d: %s", cpu, strerror(rc));
    return -1;
  }
  LOG_INFO("event loop pinned to CPU %d", cpu);
  return 0;
}

int main(int argc, char **argv) {
  opd_config_t cfg;
  int rc = opd__options_parse(argc, argv, &cfg);
  if (rc != 0) return rc == 2 ? 0 : 1;
  opd__log_level = cfg.log_level;
  if (opd__service_log_start(&cfg) != 0) return 1;
  signal(SIGPIPE, SIG_IGN);
  /* libuv's pool runs the sessions' ops: at least as many as kernel
   * threads, so that concurrent clients' ops really run concurrently */
  if (getenv("UV_THREADPOOL_SIZE") == NULL) {
    char n[24];
    long cpus = cfg.threads ? cfg.threads : sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(n, sizeof n, "%ld", cpus > 4 ? cpus : 4);
    setenv("UV_THREADPOOL_SIZE", n, 1);
  }

  if (opd__plugins_start(&cfg) != 0) {
    LOG_ERROR("could not start; exiting");
    return 1;
  }
  uv_loop_t *loop = uv_default_loop();
  static opd_server_t srv;
  if (opd__server_init(&srv, loop, &cfg) != 0) {
    LOG_ERROR("could not start; exiting");
    opd__server_free(&srv);
    return 1;
  }
  if ((cfg.loop_cpu >= 0 && pin_loop(loop, cfg.loop_cpu) != 0) ||
      opd__service_start(&srv) != 0) {
    opd__service_stop(&srv);
    opd__server_free(&srv);
    return 1;
  }
  uv_run(loop, UV_RUN_DEFAULT);
  opd__service_stop(&srv);
  opd__server_free(&srv);
  /* EBUSY: the signal handles stay open until exit (see server.c) */
  (void)uv_loop_close(loop);
  LOG_INFO("stopped (exit status %d)", srv.exit_code);
  return srv.exit_code;
}
