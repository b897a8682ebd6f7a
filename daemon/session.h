/* A client's session (daemon/session.c): admission, requests, closing.
 *
 * DESIGN
 * The transports hand payloads up through the callbacks the session sets
 * (opd_transport_cb_t, daemon/types.h); the server calls these.
 */
#ifndef OPD_SESSION_H
#define OPD_SESSION_H

#include <stdint.h>

#include "daemon/types.h"

/* A new connection's session: admitted, or refused with a goodbye. */
void opd__session_accept(opd_server_t *srv, int fd);
void opd__session_shutdown(opd_session_t *s); /* graceful: drain, goodbye */
void opd__session_close(opd_session_t *s);    /* now: drop the socket */
/* Sweeps sessions past their handshake / frame / goodbye deadlines. */
void opd__sessions_sweep(opd_server_t *srv, uint64_t now);
/* Registers the sessions' watcher: the throttled sessions are read again
 * once limits came free. */
void opd__sessions_init(opd_server_t *srv);

#endif /* OPD_SESSION_H */
