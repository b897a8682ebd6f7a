/* The server (daemon/server.c): the listening socket, signals, the drain
 * on shutdown, and the sessions' sweep timer.
 *
 * DESIGN
 * main.c builds the configuration and calls opd__server_init, runs the
 * loop, then opd__server_free; everything else the daemon holds hangs off
 * opd_server_t (daemon/types.h).
 */
#ifndef OPD_SERVER_H
#define OPD_SERVER_H

#include "daemon/types.h"

/* Sets srv up on loop with cfg (copied): the backends, the socket, the
 * signals and timers. 0, or a negative OPD_E* code (logged); then
 * opd__server_free releases what was set up. */
int opd__server_init(opd_server_t *srv, uv_loop_t *loop,
                     const opd_config_t *cfg);
void opd__server_free(opd_server_t *srv);

#endif /* OPD_SERVER_H */
