/* Published arenas (daemon/mem/publish.c): names under which a session
 * shares an arena with other sessions.
 *
 * DESIGN
 * Names are (owner uid, name); ATTACH and UNPUBLISH take "name" (the
 * caller's uid) or "user/name". A name holds a reference on its arena.
 */
#ifndef OPD_PUBLISH_H
#define OPD_PUBLISH_H

#include "daemon/types.h"

/* Publishes s's arena under name; `readers` (may be NULL: the owner uid
 * only) says who else may attach. 0, or an error. */
int opd__publish(opd_session_t *s, uint64_t arena, const char *name,
                 const char *meta, const struct opd_readers *readers,
                 opd_err_t *err);
int opd__unpublish(opd_session_t *s, const char *name, opd_err_t *err);
/* The arena published under name, for s to map read-only: 0 with *out
 * (a reference held) and *meta, or an error. */
int opd__attach(opd_session_t *s, const char *name, opd_arena_t **out,
                const char **meta, opd_err_t *err);
void opd__unpublish_all(opd_session_t *s); /* s's names, at its end */
void opd__publish_free(opd_server_t *srv); /* every name, at shutdown */

#endif /* OPD_PUBLISH_H */
