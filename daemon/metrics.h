/* Prometheus metrics over HTTP (daemon/metrics.c): off unless
 * --metrics-listen is set. */
#ifndef OPD_METRICS_H
#define OPD_METRICS_H

#include <stdint.h>

struct opd_server;

/* Starts the HTTP endpoint on cfg.svc.metrics_listen (its own thread).
 * Returns 0, or -1 with the reason logged (address in use, built without
 * libmicrohttpd). */
int opd__metrics_start(struct opd_server *srv);
/* Stops it (joins its thread); nothing when it is not running. */
void opd__metrics_stop(struct opd_server *srv);

extern int opd__metrics_on;     /* the endpoint runs: count and time */

/* A run replied (loop thread): op index, the session's transport (0
 * socket, OPD_RING_*), its status (0 or OPD_E*), request-to-reply ns. */
void opd__metrics_run(int op, int transport, int status, uint64_t ns);
/* A run refused by its checks before it was queued (loop thread). */
void opd__metrics_rejected(int op, int status);
/* A connection refused at accept (limits, allow-lists). */
void opd__metrics_refused(void);

#endif /* OPD_METRICS_H */
