/* opd as a system service (daemon/service.c): the pid file, the log file,
 * systemd's notify protocol and watchdog, reloading the configuration on
 * SIGHUP, and the drain deadline.
 *
 * DESIGN
 * Everything an init system sees of opd beyond the socket lives here, so
 * that the core (session, handlers, rings, backends) knows nothing of it:
 * main.c calls opd__service_start once the socket accepts, server.c calls
 * opd__service_reload on SIGHUP and opd__service_stopping when a drain
 * begins, and main.c calls opd__service_stop at the end. The options of
 * this file are rows of daemon/options.c's table like any other, so a
 * config file and the command line set them the same way.
 */
#ifndef OPD_SERVICE_H
#define OPD_SERVICE_H

#include <stdint.h>

/* The service's options (fields of opd_config_t, daemon/options.c). */
typedef struct opd_service_config {
  char config[256];              /* --config: the file read ("" if none) */
  char pid_file[256];            /* --pid-file ("" : none) */
  char log_file[256];            /* --log-file ("" : stderr) */
  char metrics_listen[64];       /* --metrics-listen ADDR:PORT ("" : off) */
  uint32_t drain_ms;             /* --drain-timeout-ms: the process exits
                                    this long after SIGTERM at the latest */
} opd_service_config_t;

struct opd_server;
struct opd_config;

/* Before anything is logged: looks whether stderr is the journal, and
 * sends the log to cfg's --log-file if it has one. Returns 0, or -1 with
 * the reason logged to stderr. */
int opd__service_log_start(const struct opd_config *cfg);

/* Once the socket accepts: writes the pid file, starts the metrics
 * endpoint, tells systemd READY=1 and starts the watchdog and status
 * timers. Returns 0, or -1 with the reason logged (the pid file cannot be
 * written, the metrics address is taken): the daemon must not start. */
int opd__service_start(struct opd_server *srv);

/* SIGHUP: re-reads the configuration (the file the daemon started with,
 * under the same command line, which still wins) and applies what can
 * change while sessions are open: log level and file, limits, allow-lists,
 * the drain deadline. Reopens the log file either way. A configuration
 * that does not parse or resolve changes nothing: the reason is logged and
 * the old one stays. */
void opd__service_reload(struct opd_server *srv);

/* A drain began: tells systemd STOPPING=1. */
void opd__service_stopping(struct opd_server *srv);

/* The end: stops the timers and the metrics endpoint, removes the pid
 * file. Safe to call after a failed or no opd__service_start. */
void opd__service_stop(struct opd_server *srv);

/* The drain deadline passed with work still running: removes the pid file
 * and exits the process with `code` at once. */
_Noreturn void opd__service_exit(struct opd_server *srv, int code);

#endif /* OPD_SERVICE_H */
