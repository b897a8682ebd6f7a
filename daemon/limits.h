/* Limits and accounting (daemon/limits.c): per session, per uid and
 * daemon-wide. */
#ifndef OPD_LIMITS_H
#define OPD_LIMITS_H

#include <stdint.h>
#include <sys/types.h>

#include "daemon/types.h"

opd_acct_t *opd__acct_get(opd_server_t *srv, uid_t uid); /* NULL: no memory */
void opd__acct_put(opd_server_t *srv, opd_acct_t *a);   /* frees if unused */
/* Whether s may map one more arena of `bytes` bytes: 0, or OPD_ELIMIT with
 * a message naming the scope and the option that sets it. */
int opd__limit_arena(const opd_session_t *s, uint64_t bytes, opd_err_t *err);
void opd__acct_arena(opd_session_t *s, int64_t n, int64_t bytes);
/* Whether s may publish one more name (session, uid, daemon). */
int opd__limit_name(const opd_session_t *s, opd_err_t *err);
void opd__acct_name(opd_session_t *s, int n);
/* Whether s may queue one more run: 0, or 1 when its session, its uid or
 * the daemon is at its limit (the session is then not read until a run
 * ends). */
int opd__limit_inflight(const opd_session_t *s);
/* Whether s is not read now: its runs are at a limit, or its unread
 * replies (socket buffer and completion-ring overflow) pass
 * --max-reply-bytes. */
int opd__limit_read(const opd_session_t *s);
/* n more (or fewer) runs of s queued or running. */
void opd__acct_inflight(opd_session_t *s, int n);

#endif /* OPD_LIMITS_H */
