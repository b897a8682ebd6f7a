/* The outbox (daemon/outbox.c): every message the daemon sends.
 *
 * DESIGN
 * `via` (OPD_VIA_RING or OPD_VIA_SOCKET) picks the transport; a body is a
 * packed msgpack map (NULL for {}); an error's is {"message": fmt...}.
 * Messages to a closed session are dropped here.
 */
#ifndef OPD_OUTBOX_H
#define OPD_OUTBOX_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/types.h"

void opd__out_reply(opd_session_t *s, int via, uint64_t id, const char *body,
                    size_t body_len);
void opd__out_error(opd_session_t *s, int via, uint64_t id, int code,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* The session's one goodbye (on the socket): it stops reading and closes
 * once the goodbye is out and its running job is done. */
void opd__out_goodbye(opd_session_t *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A reply with a file descriptor (SCM_RIGHTS, on the socket); fd is closed
 * here once sent or when the session goes. 0, or OPD_ELIMIT when too many
 * fds are queued (fd then closed, nothing sent). */
int opd__reply_fd(const opd_req_t *r, const char *body, size_t body_len,
                  int fd);
/* The reply to r, a success or an error. */
static inline void opd__reply(const opd_req_t *r, const char *body,
                              size_t body_len) {
  opd__out_reply(r->s, r->via, r->id, body, body_len);
}
#define opd__reply_error(r, code, ...) \
  opd__out_error((r)->s, (r)->via, (r)->id, (code), __VA_ARGS__)

#endif /* OPD_OUTBOX_H */
