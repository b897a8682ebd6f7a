/* Limits and accounting: per session, per uid, daemon-wide.
 *
 * DESIGN
 * A shared host has several users, so a limit per session alone lets one
 * user open many sessions and take everything, and a global limit alone
 * lets one user lock the others out. Every resource a client can make the
 * daemon hold (sessions, arenas and the bytes they map, queued runs,
 * published names) is therefore counted three times: in the session, in
 * the session's uid (opd_acct_t, one per uid with a session or a name),
 * and in the server. A request over any of the three is refused with
 * OPD_ELIMIT and a message naming the scope and the option that sets it;
 * runs over the limit are not refused but not read (back-pressure).
 * Root and the daemon's own uid are limited the same way, except that
 * --reserved-clients sessions past the client limits are kept for them, so
 * that an operator's `opctl` reaches a daemon under attack.
 *
 * The uid records live in a short list: a host has few distinct users
 * with sessions at once, and the list is walked only at accept.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/limits.h"
#include "daemon/sock.h"

opd_acct_t *opd__acct_get(opd_server_t *srv, uid_t uid) {
  for (opd_acct_t *a = srv->accts; a; a = a->next)
    if (a->uid == uid) return a;
  opd_acct_t *a = calloc(1, sizeof *a);
  if (a == NULL) return NULL;
  a->uid = uid;
  a->next = srv->accts;
  srv->accts = a;
  return a;
}

void opd__acct_put(opd_server_t *srv, opd_acct_t *a) {
  if (a == NULL || a->clients || a->arenas || a->bytes || a->inflight ||
      a->names)
    return;
  for (opd_acct_t **pp = &srv->accts; *pp; pp = &(*pp)->next)
    if (*pp == a) {
      *pp = a->next;
      free(a);
      return;
    }
}

int opd__limit_arena(const opd_session_t *s, uint64_t bytes, opd_err_t *err) {
  const opd_server_t *srv = s->srv;
  const opd_limits_t *l = &srv->cfg.limits;
  const opd_acct_t *a = s->acct;
  unsigned uid = (unsigned)s->uid;
  if (s->n_arenas >= l->max_arenas) {
    return opd__errf(err, OPD_ELIMIT,
                     "session has %u arenas, the limit (--max-arenas)",
                     s->n_arenas);
  }
  if (a->arenas >= l->max_uid_arenas) {
    return opd__errf(err, OPD_ELIMIT,
                     "uid %u has %u arenas, the limit (--max-uid-arenas)",
                     uid, a->arenas);
  }
  if (srv->arenas >= l->max_total_arenas) {
    return opd__errf(err, OPD_ELIMIT, "the daemon holds %llu arenas, the limit "
                     "(--max-total-arenas)", (unsigned long long)srv->arenas);
  }
  if (bytes > l->max_arena_bytes) {
    return opd__errf(err, OPD_ELIMIT,
                     "arena of %llu bytes exceeds the limit of %llu "
                     "(--max-arena-bytes)", (unsigned long long)bytes,
                     (unsigned long long)l->max_arena_bytes);
  }
  if (s->bytes_mapped + bytes > l->max_session_bytes) {
    return opd__errf(err, OPD_ELIMIT,
                     "session would map %llu bytes, over the limit of "
                     "%llu (--max-session-bytes)",
                     (unsigned long long)(s->bytes_mapped + bytes),
                     (unsigned long long)l->max_session_bytes);
  }
  if (a->bytes + bytes > l->max_uid_bytes) {
    return opd__errf(err, OPD_ELIMIT,
                     "uid %u would map %llu bytes, over the limit of "
                     "%llu (--max-uid-bytes)", uid,
                     (unsigned long long)(a->bytes + bytes),
                     (unsigned long long)l->max_uid_bytes);
  }
  if (srv->bytes_mapped + bytes > l->max_total_bytes) {
    return opd__errf(err, OPD_ELIMIT,
                     "the daemon would map %llu bytes, over the limit "
                     "of %llu (--max-total-bytes)",
                     (unsigned long long)(srv->bytes_mapped + bytes),
                     (unsigned long long)l->max_total_bytes);
  }
  return 0;
}

void opd__acct_arena(opd_session_t *s, int64_t n, int64_t bytes) {
  s->acct->arenas = (uint32_t)((int64_t)s->acct->arenas + n);
  s->acct->bytes = (uint64_t)((int64_t)s->acct->bytes + bytes);
  s->bytes_mapped = (uint64_t)((int64_t)s->bytes_mapped + bytes);
}

int opd__limit_name(const opd_session_t *s, opd_err_t *err) {
  const opd_server_t *srv = s->srv;
  const opd_limits_t *l = &srv->cfg.limits;
  if (s->n_names >= l->max_session_names) {
    return opd__errf(err, OPD_ELIMIT,
                     "session has published %u names, the limit "
                     "(--max-session-names)", s->n_names);
  }
  if (s->acct->names >= l->max_uid_names) {
    return opd__errf(err, OPD_ELIMIT,
                     "uid %u has published %u names, the limit "
                     "(--max-uid-names)", (unsigned)s->uid, s->acct->names);
  }
  if (srv->n_pubs >= l->max_names) {
    return opd__errf(err, OPD_ELIMIT,
                     "%u names are published, the limit (--max-names)",
                     srv->n_pubs);
  }
  return 0;
}

void opd__acct_name(opd_session_t *s, int n) {
  s->n_names = (uint32_t)((int)s->n_names + n);
  s->acct->names = (uint32_t)((int)s->acct->names + n);
}

int opd__limit_inflight(const opd_session_t *s) {
  const opd_limits_t *l = &s->srv->cfg.limits;
  return s->n_queued >= l->max_inflight ||
         s->acct->inflight >= l->max_uid_inflight ||
         s->srv->inflight >= l->max_total_inflight;
}

int opd__limit_read(const opd_session_t *s) {
  const opd_limits_t *l = &s->srv->cfg.limits;
  return opd__limit_inflight(s) ||
         opd__sock_unsent(s) + s->over_bytes >= l->max_wbuf;
}

void opd__acct_inflight(opd_session_t *s, int n) {
  opd_server_t *srv = s->srv;
  const opd_limits_t *l = &srv->cfg.limits;
  /* a run ends while its uid or the daemon is at the limit: sessions of
   * others may have stopped being read for it (session.c, sessions_check) */
  if (n < 0 && (s->acct->inflight >= l->max_uid_inflight ||
                srv->inflight >= l->max_total_inflight)) {
    srv->unthrottle = 1; /* the sessions' watcher looks (session.c) */
    srv->loop_kick = 1;
  }
  s->n_queued = (uint32_t)((int)s->n_queued + n);
  s->acct->inflight = (uint32_t)((int)s->acct->inflight + n);
  s->srv->inflight = (uint32_t)((int)s->srv->inflight + n);
}
