/* Who a peer is and whom it may read: users, groups and readers lists.
 *
 * DESIGN
 * The connect check (--allow-users / --allow-groups, session.c) and the
 * readers of a published name (publish.c) ask the same two questions: is
 * this uid one of a list, and is the peer in one of these groups. A peer's
 * groups are those of the process that connected (SO_PEERCRED's pid), read
 * from /proc/PID/status ("Groups:"): what the kernel checks file access
 * with, and no NSS lookup on the loop thread. Only when /proc cannot tell
 * (no such pid in our namespace, or it now runs as another uid) do we fall
 * back to the group database (getgrouplist on the uid's name).
 */
#ifndef OPD_ACCESS_H
#define OPD_ACCESS_H

#include <stddef.h>
#include <sys/types.h>
#include <msgpack.h>

#include "common/err.h"
#include "daemon/types.h"

#define OPD_MAX_READERS 64 /* entries in one PUBLISH "readers" list */

/* Who besides the owner uid may attach a published name. */
typedef struct opd_readers {
  int any;                       /* "*": every client the daemon serves */
  int n_uids, n_gids;
  uid_t uids[OPD_MAX_READERS];   /* users, resolved at publish */
  gid_t gids[OPD_MAX_READERS];   /* groups ("group:NAME" / "group:GID") */
} opd_readers_t;

/* A user (a name, or a uid in decimal) to its uid: 0, OPD_ENOENT when no
 * user has that name, OPD_EINVAL when it is empty or out of range. The
 * group form is the same for groups. Names go through NSS (may block). */
int opd__uid_parse(const char *s, uid_t *uid);
int opd__gid_parse(const char *s, gid_t *gid);

/* Reads PUBLISH's "readers" (an array of uids, user names, "group:NAME",
 * "group:GID" or "*") into r. Returns 0, or OPD_EINVAL / OPD_EPROTO with a
 * message naming the entry (err); r is then partly filled. */
int opd__readers_parse(const msgpack_object *arr, opd_readers_t *r, opd_err_t *err);

/* 1 when a peer with these credentials is one of r's readers. */
int opd__readers_allow(const opd_readers_t *r, uid_t uid, gid_t gid,
                       pid_t pid);

/* Who may connect (--allow-users / --allow-groups): the lists resolved
 * into srv at start (0; -1 logged), and freed. */
int opd__access_init(opd_server_t *srv);
void opd__access_free(opd_server_t *srv);
/* 1 when a peer with these credentials may be served. */
int opd__access_allowed(const opd_server_t *srv, uid_t uid, gid_t gid,
                        pid_t pid);
/* A comma-separated list of user (groups: group) names or ids, resolved
 * into a malloc'd array *out (free it); empty entries and blanks around
 * them are skipped. Returns the count, or -1 (logged, naming opt). */
int opd__ids_resolve(const char *opt, const char *list, int groups,
                     unsigned **out);
/* 1 when the peer (uid, primary gid, pid from SO_PEERCRED) is in one of
 * the n groups of `gids`, by its primary group or a supplementary one. */
int opd__peer_in_groups(uid_t uid, gid_t gid, pid_t pid, const gid_t *gids,
                        int n);
/* root or the daemon's own uid */
static inline int opd__is_admin(const opd_server_t *srv, uid_t uid) {
  return uid == 0 || uid == srv->self_uid;
}

#endif /* OPD_ACCESS_H */
