/* The socket transport (daemon/sock.c): frames in and out of a
 * session's Unix socket, with the fds that travel beside them.
 *
 * DESIGN
 * Its state is the session's opd_sock_t (daemon/types.h), changed only
 * here; others read it through the accessors below.
 */
#ifndef OPD_SOCK_H
#define OPD_SOCK_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/types.h"

/* Queues a frame (header and body) and sends what the socket takes. */
void opd__sock_write(opd_session_t *s, const void *hdr, size_t hlen,
                     const void *body, size_t blen);
/* fd goes with the next frame written; 0, or OPD_ELIMIT (fd closed) */
int opd__sock_queue_fd(opd_session_t *s, int fd);
/* Hands every complete frame in rbuf to s->cb->payload while the session
 * reads; returns how many. */
int opd__sock_frames(opd_session_t *s);
void opd__sock_update(opd_session_t *s); /* arms the poll for what's due */
void opd__sock_close(opd_session_t *s);  /* closes the fds it holds */
void opd__sock_free(opd_session_t *s);   /* frees its buffers */
/* Claims `need` fds sent with the request: 0 with fds[] (the caller owns
 * them), or OPD_EFD with err naming why there are none (not sent, or the
 * daemon was out of fds when they came). */
int opd__req_take_fds(opd_req_t *r, int need, int *fds, opd_err_t *err);
/* What the socket transport holds: reply bytes not yet sent, request
 * bytes not yet handled, whether its poll is armed at all, since when a
 * frame has been left unfinished (0: none). */
static inline size_t opd__sock_unsent(const opd_session_t *s) {
  return s->sock.wlen - s->sock.woff;
}
static inline size_t opd__sock_unread(const opd_session_t *s) {
  return s->sock.rlen;
}
static inline int opd__sock_armed(const opd_session_t *s, int events) {
  return (s->sock.poll_events & events) != 0;
}
static inline uint64_t opd__sock_partial_since(const opd_session_t *s) {
  return s->sock.t_partial;
}

#endif /* OPD_SOCK_H */
