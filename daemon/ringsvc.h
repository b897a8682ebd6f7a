/* The shared-memory transport (daemon/ringsvc.c): a session's
 * submission and completion rings, and the loop's service of them.
 *
 * DESIGN
 * The ring modes (OPD_RING_ADAPTIVE, OPD_RING_SPIN) are common/ring.h's.
 * The rings hand payloads up through the session's callbacks, as the
 * socket does.
 */
#ifndef OPD_RINGSVC_H
#define OPD_RINGSVC_H

#include <stddef.h>
#include <msgpack.h>

#include "daemon/types.h"

/* registers the rings' watcher */
void opd__ring_init_server(opd_server_t *srv);
void opd__ring_report(opd_server_t *srv); /* logs ring service times */
/* Sets up s's rings; *mode gets the wait strategy granted (a spin asked
 * for where cores are short is given adaptive, with why[] saying so). */
int opd__ring_setup(opd_req_t *r, const msgpack_object *body, int *mode,
                    char *why, size_t whylen, opd_err_t *err);
/* 1 when one more spinning session would still leave cores for the work
 * (--spin); else 0 with why[] saying so. */
int opd__spin_grant(const opd_server_t *srv, char *why, size_t cap);
/* An asynchronous GPU run of session s was enqueued: an adaptive session
 * keeps the loop serving the rings for --linger-us (its next run comes
 * within microseconds, and would otherwise wait for a wake-up). */
void opd__ring_linger(opd_session_t *s);
/* 1 when the reply went to (or waits for) the completion ring, 0 when it
 * must go to the socket. */
int opd__ring_reply(opd_session_t *s, const void *head, size_t hlen,
                    const void *body, size_t blen);
void opd__ring_close(opd_session_t *s);
void opd__ring_free(opd_session_t *s);

#endif /* OPD_RINGSVC_H */
