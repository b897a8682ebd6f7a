/* Classes of service (daemon/sched.c): who may ask for the latency class,
 * the CPU runs' dispatch to the kernel threads by class, and each class's
 * queue-wait and run-time histograms.
 *
 * DESIGN
 * A session is in the latency or the best-effort class (HELLO "priority");
 * a graph may name its own class at GRAPH_DEFINE, which its runs take
 * instead of the session's (docs/scheduling.md). The state is sched.c's
 * alone (srv->sched); the CPU backend hands it the runs that leave the
 * loop thread (opd__sched_submit) and their completions (opd__sched_done);
 * jobs.c counts every run's wait and time into it (opd__sched_count).
 */
#ifndef OPD_SCHED_H
#define OPD_SCHED_H

#include <stdio.h>

#include "daemon/types.h"

enum { OPD_CLASS_BE = 0, OPD_CLASS_LATENCY = 1, OPD_N_CLASSES = 2 };

/* "latency" (or its older name "high") and "best-effort" (or "normal") to
 * their class; -1 for anything else. */
int opd__class_parse(const char *name);
/* "latency" or "best-effort". */
const char *opd__class_name(int cls);

/* Resolves --latency-users / --latency-groups and sets up the dispatch
 * (0; -1 logged: a name that does not resolve, no memory); freed by
 * opd__sched_free (safe when init failed or never ran). */
int opd__sched_init(opd_server_t *srv);
void opd__sched_free(opd_server_t *srv);

/* 1 when the peer of s may ask for the latency class: root, the daemon's
 * own user, or one named by --latency-users / --latency-groups. */
int opd__sched_may_latency(const opd_server_t *srv, const opd_session_t *s);

/* The class a run is served in: its graph's, else its session's. */
int opd__job_class(const opd_job_t *job);

/* A CPU run for the kernel threads: handed to libuv's pool now, or kept in
 * its class's queue until a thread is free for it (latency first; at most
 * all but one thread per class, when there are several). Returns 0, or a
 * libuv error (nothing queued). work and after are uv_queue_work's. */
int opd__sched_submit(opd_server_t *srv, opd_job_t *job, uv_work_cb work,
                      uv_after_work_cb after);
/* A submitted run's thread came back (in its after callback): the next
 * runs waiting are handed over. */
void opd__sched_done(opd_server_t *srv, opd_job_t *job);

/* A finished run's queue wait (request to kernel start) and run time into
 * its class's histograms (the loop thread). */
void opd__sched_count(opd_server_t *srv, const opd_job_t *job);

/* The histograms in the Prometheus text format; the STATS "classes"
 * entry (one map key and its value). */
void opd__sched_render(const opd_server_t *srv, FILE *f);
void opd__sched_pack(const opd_server_t *srv, msgpack_packer *pk);

#endif /* OPD_SCHED_H */
