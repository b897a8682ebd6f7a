/* Published arenas: one session's memory, attached read-only by others.
 *
 * DESIGN
 * A publication is a name and a reference to an arena (host or device).
 * Attaching it gives the attaching session a new arena id of its own: a
 * small opd_arena_t with readonly set that points at the same memory and
 * holds a reference on the published arena, so the memory lives as long as
 * the publication or any attachment does (e.g. model weights loaded once
 * by one process and read by every worker). A name ends when its publisher
 * unpublishes it or the publisher's session closes; attachments made
 * before keep working until they are released. Outputs in a read-only
 * arena are refused (validate.c) with OPD_EREADONLY.
 *
 * Names belong to the publisher's uid: the key is (owner uid, name), so
 * one uid cannot take another's name, and a bare name in ATTACH or
 * UNPUBLISH is looked up among the caller's own uid's names; another
 * uid's name is written "user/name" or "uid/name" (hence no '/' in a
 * published name). Other uids may attach only when the publisher listed
 * them as readers (uids, groups or "*"); root and the daemon's own uid may
 * attach anything. A name a caller may not read is answered exactly like
 * one that does not exist (OPD_ENOENT), so that names and their existence
 * do not leak to other uids (docs/operations.md, "Security").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/access.h"
#include "daemon/limits.h"
#include "daemon/log.h"
#include "daemon/mem/arena.h"
#include "daemon/mem/publish.h"

static opd_pub_t *find(opd_server_t *srv, uid_t uid, const char *name) {
  for (uint32_t i = 0; i < srv->n_pubs; i++)
    if (srv->pubs[i].owner_uid == uid && strcmp(srv->pubs[i].name, name) == 0)
      return &srv->pubs[i];
  return NULL;
}

/* Ends a name (no session accounting: the caller does it). */
static void drop(opd_server_t *srv, opd_pub_t *p) {
  char esc[4 * OPD_MAX_NAME];
  LOG_INFO("unpublished \"%s\" of uid %u",
           opd__log_escape(p->name, esc, sizeof esc), (unsigned)p->owner_uid);
  opd__arena_unref(p->arena);
  free(p->readers);
  *p = srv->pubs[--srv->n_pubs];
}

/* May session s attach p? Its owner uid, root, the daemon's uid, and the
 * readers the publisher named. */
static int may_read(const opd_session_t *s, const opd_pub_t *p) {
  return p->owner_uid == s->uid || opd__is_admin(s->srv, s->uid) ||
         opd__readers_allow(p->readers, s->uid, s->gid, s->pid);
}

/* Finds what "name" or "user/name" names for session s and whether s may
 * read it. Returns the publication, or NULL with *rc OPD_ENOENT (the same
 * message whether nothing is published or s may not read it) or OPD_EINVAL
 * (not a name of either form) and a message in err. */
static opd_pub_t *lookup(opd_session_t *s, const char *given, int *rc,
                         opd_err_t *err) {
  opd_server_t *srv = s->srv;
  const char *slash = strchr(given, '/');
  uid_t uid = s->uid;
  const char *name = given;
  opd_pub_t *p = NULL;
  *rc = OPD_ENOENT;
  if (slash != NULL) {
    char owner[OPD_MAX_NAME];
    size_t n = (size_t)(slash - given);
    name = slash + 1;
    if (n == 0 || n >= sizeof owner || *name == '\0' ||
        strchr(name, '/') != NULL) {
      *rc = opd__errf(err, OPD_EINVAL, "\"%s\" is not \"name\" or "
                      "\"user/name\"", given);
      return NULL;
    }
    memcpy(owner, given, n);
    owner[n] = '\0';
    if (opd__uid_parse(owner, &uid) != 0) {
      opd__errf(err, *rc, "nothing is published as \"%s\" (no user is "
                "named \"%s\")", given, owner);
      return NULL;
    }
  }
  p = find(srv, uid, name);
  if (p != NULL && may_read(s, p)) return p;
  if (p != NULL) {
    char esc[4 * OPD_MAX_NAME];
    LOG_INFO("session %llu: uid %u may not read \"%s\" of uid %u (not among "
             "its readers)", (unsigned long long)s->id, (unsigned)s->uid,
             opd__log_escape(name, esc, sizeof esc), (unsigned)uid);
  }
  if (uid == s->uid)
    opd__errf(err, *rc, "nothing is published as \"%s\" by uid %u (another "
              "user's name is attached as \"user/name\")", name, (unsigned)uid);
  else
    opd__errf(err, *rc, "nothing that uid %u may read is published as "
              "\"%s\"", (unsigned)s->uid, given);
  return NULL;
}

int opd__publish(opd_session_t *s, uint64_t arena, const char *name,
                 const char *meta, const opd_readers_t *readers, opd_err_t *err) {
  opd_server_t *srv = s->srv;
  opd_arena_t *a = opd__arena_find(s, arena);
  if (name[0] == '\0') {
    return opd__errf(err, OPD_EINVAL, "the name is empty");
  }
  if (strlen(name) >= OPD_MAX_NAME) {
    return opd__errf(err, OPD_EINVAL,
                     "the name has %zu bytes, at most %d", strlen(name),
                     OPD_MAX_NAME - 1);
  }
  if (strchr(name, '/') != NULL) {
    return opd__errf(err, OPD_EINVAL,
                     "\"%s\": a published name may not contain '/' "
                     "(\"user/name\" names another user's name in attach)", name);
  }
  if (a == NULL) {
    return opd__errf(err, OPD_EARENA,
                     "unknown arena %llu (not registered by this session)",
                     (unsigned long long)arena);
  }
  if (a->readonly) {
    return opd__errf(err, OPD_EREADONLY,
                     "arena %llu is itself an attachment; publish the "
                     "original", (unsigned long long)arena);
  }
  if (a->import != NULL) {
    return opd__errf(err, OPD_EINVAL,
                     "arena %llu is client memory imported by IPC; "
                     "publish daemon-owned memory (alloc) instead",
                     (unsigned long long)arena);
  }
  const opd_pub_t *old = find(srv, s->uid, name);
  if (old != NULL) {
    return opd__errf(err, OPD_EINVAL,
                     "\"%s\" is already published by uid %u (session "
                     "%llu)", name, (unsigned)s->uid, (unsigned long long)old->owner);
  }
  int rc = opd__limit_name(s, err);
  if (rc != 0) return rc;
  opd_readers_t *rd = NULL;
  if (readers != NULL && (readers->any || readers->n_uids || readers->n_gids)) {
    if ((rd = malloc(sizeof *rd)) == NULL) {
      return opd__errf(err, OPD_ENOMEM, "out of memory");
    }
    *rd = *readers;
  }
  if (srv->n_pubs == srv->cap_pubs) {
    uint32_t cap = srv->cap_pubs ? srv->cap_pubs * 2 : 16;
    opd_pub_t *np = realloc(srv->pubs, cap * sizeof *np);
    if (np == NULL) {
      free(rd);
      return opd__errf(err, OPD_ENOMEM, "out of memory");
    }
    srv->pubs = np;
    srv->cap_pubs = cap;
  }
  opd_pub_t *p = &srv->pubs[srv->n_pubs++];
  snprintf(p->name, sizeof p->name, "%s", name);
  snprintf(p->meta, sizeof p->meta, "%s", meta ? meta : "");
  p->arena = a;
  p->owner = s->id;
  p->owner_uid = s->uid;
  p->readers = rd;
  a->refs++;
  opd__acct_name(s, +1);
  char esc[4 * OPD_MAX_NAME];
  LOG_INFO("session %llu: published arena %llu (%llu bytes, %s) as \"%s\" of "
           "uid %u (readers: %s)",
           (unsigned long long)s->id, (unsigned long long)a->id,
           (unsigned long long)a->size, a->device < 0 ? "host" : "device",
           opd__log_escape(name, esc, sizeof esc), (unsigned)s->uid,
           rd == NULL ? "that uid only" : rd->any ? "any client" : "listed");
  return 0;
}

int opd__unpublish(opd_session_t *s, const char *name, opd_err_t *err) {
  int rc;
  opd_pub_t *p = lookup(s, name, &rc, err);
  if (p == NULL) return rc;
  if (p->owner != s->id) {
    return opd__errf(err, OPD_EINVAL,
                     "\"%s\" was published by another session (session "
                     "%llu); only it can unpublish the name", name,
                     (unsigned long long)p->owner);
  }
  drop(s->srv, p);
  opd__acct_name(s, -1);
  return 0;
}

int opd__attach(opd_session_t *s, const char *name, opd_arena_t **out,
                const char **meta, opd_err_t *err) {
  opd_server_t *srv = s->srv;
  int rc;
  opd_pub_t *p = lookup(s, name, &rc, err);
  if (p == NULL) return rc;
  rc = opd__limit_arena(s, 0, err); /* no bytes of its own */
  if (rc != 0) return rc;
  opd_arena_t *a = calloc(1, sizeof *a);
  if (a == NULL) {
    return opd__errf(err, OPD_ENOMEM, "out of memory");
  }
  *a = *p->arena;
  a->id = ++srv->next_arena_id;
  a->refs = 1;
  a->readonly = 1;
  a->pinned = 0; /* the parent owns the registration */
  a->parent = p->arena;
  p->arena->refs++;
  s->arenas[s->n_arenas++] = a;
  opd__acct_arena(s, 1, 0);
  *out = a;
  *meta = p->meta;
  return 0;
}

void opd__unpublish_all(opd_session_t *s) {
  opd_server_t *srv = s->srv;
  for (uint32_t i = 0; i < srv->n_pubs;) {
    if (srv->pubs[i].owner == s->id) {
      drop(srv, &srv->pubs[i]);
      opd__acct_name(s, -1);
    } else {
      i++;
    }
  }
}

void opd__publish_free(opd_server_t *srv) {
  while (srv->n_pubs > 0) drop(srv, &srv->pubs[srv->n_pubs - 1]);
  free(srv->pubs);
  srv->pubs = NULL;
  srv->cap_pubs = 0;
}
