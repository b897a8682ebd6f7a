/* Device admission by class of service (daemon/devq.c): while a latency
 * client is connected, the best-effort runs in flight on each device are
 * bounded, so that a latency run never queues on the GPU behind a flood of
 * them (docs/scheduling.md, "The GPU").
 *
 * DESIGN
 * A device run is launched from its session's queue (daemon/run/jobs.c,
 * opd__runq_start). A best-effort one first takes one of its device's
 * --device-be-inflight slots, which it holds until it completes; a
 * session holds at most half of them (at least one), so one flooding
 * session leaves slots to the others. With no slot free the session stops
 * launching (its runs stay in order in its own queue, as with
 * --max-async) and waits in its device's FIFO of sessions; a freed slot
 * wakes the first one through its ready callback, from this file's loop
 * watcher (never from inside another session's calls). Latency runs take
 * no slot and never wait here. With no latency session and no latency
 * graph alive the bound is off: best-effort work alone runs as before.
 * The state is the loop thread's alone.
 */
#ifndef OPD_DEVQ_H
#define OPD_DEVQ_H

#include "daemon/types.h"

/* Sets up the admission state and its loop watcher: 0, or -1 logged. */
int opd__devq_init(opd_server_t *srv);
void opd__devq_free(opd_server_t *srv);

/* Whether device run j of session s may launch now: 1 (a best-effort run
 * under the bound took a slot, j->devq_slot set), or 0: s waits and is
 * woken through s->cb->ready once a slot frees. */
int opd__devq_admit(opd_session_t *s, opd_job_t *j);
/* A run that held a slot finished (answered or failed): the slot back. */
void opd__devq_release(opd_server_t *srv, opd_job_t *j);
/* The session goes: out of any device's waiting FIFO. */
void opd__devq_session_end(opd_session_t *s);
/* A latency user came (+1) or went (-1): a latency-class session, or a
 * graph defined with class latency. The bound holds while any is alive. */
void opd__devq_latency(opd_server_t *srv, int delta);

/* Sets the session's class at hello (s->priority), keeping the count of
 * latency users right when a second hello changes it. */
void opd__devq_class(opd_session_t *s, int latency);

/* The latency users alive (sessions of the class, latency graphs): 0
 * when the latency class has no one to serve first. */
int opd__devq_latency_users(const opd_server_t *srv);

/* STATS' "device_queue" entry (one map key and its value). */
void opd__devq_pack(const opd_server_t *srv, msgpack_packer *pk);

#endif /* OPD_DEVQ_H */
