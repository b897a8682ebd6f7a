/* Access control: who may connect (--allow-users / --allow-groups) and the
 * readers lists of published names; see access.h.
 *
 * DESIGN
 * The socket's file mode (0660, server.c) is the first gate: only the
 * daemon's user and group can connect at all. --allow-users and
 * --allow-groups narrow that further, checked once per connection with
 * SO_PEERCRED: names are resolved to ids when the daemon starts (an
 * unknown one is a startup error, so a typo cannot silently let nobody or
 * everybody in), and the check at accept is a scan of two short arrays plus
 * one read of /proc/PID/status when a groups list is given. Root and the
 * daemon's own uid are always let in: they can read the daemon's memory
 * anyway, and the operator's opctl must reach it.
 */
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/access.h"
#include "daemon/log.h"

/* A decimal id below (id_t)-1, the "no change" value of chown & co. */
static int parse_id(const char *s, unsigned long *v) {
  if (*s == '\0') return -1;
  for (const char *p = s; *p; p++)
    if (!isdigit((unsigned char)*p)) return -1;
  errno = 0;
  unsigned long long x = strtoull(s, NULL, 10);
  if (errno != 0 || x >= (unsigned long long)(uid_t)-1) return -2;
  *v = (unsigned long)x;
  return 0;
}

/* A user (group) name or decimal id to its id: 0, OPD_EINVAL (empty, out
 * of range), OPD_ENOENT (no such name), OPD_ENOMEM. */
static int id_parse(const char *s, int group, unsigned long *id) {
  int r = parse_id(s, id);
  if (r == 0) return 0;
  if (r == -2 || *s == '\0') return OPD_EINVAL;
  for (size_t cap = 1024;; cap *= 4) {
    char *buf = malloc(cap);
    if (buf == NULL) return OPD_ENOMEM;
    struct passwd pw, *pr = NULL;
    struct group gr, *gres = NULL;
    int e = group ? getgrnam_r(s, &gr, buf, cap, &gres)
                  : getpwnam_r(s, &pw, buf, cap, &pr);
    int found = group ? gres != NULL : pr != NULL;
    if (found) *id = group ? (unsigned long)gr.gr_gid : (unsigned long)pw.pw_uid;
    free(buf);
    if (e == ERANGE && cap < (1u << 20)) continue;
    return found ? 0 : OPD_ENOENT;
  }
}

int opd__uid_parse(const char *s, uid_t *uid) {
  unsigned long v;
  int rc = id_parse(s, 0, &v);
  if (rc == 0) *uid = (uid_t)v;
  return rc;
}

int opd__gid_parse(const char *s, gid_t *gid) {
  unsigned long v;
  int rc = id_parse(s, 1, &v);
  if (rc == 0) *gid = (gid_t)v;
  return rc;
}

static int has_gid(const gid_t *gids, int n, gid_t g) {
  for (int i = 0; i < n; i++)
    if (gids[i] == g) return 1;
  return 0;
}

/* From /proc/PID/status: 1 (in a group), 0 (in none), -1 when /proc cannot
 * answer for this peer (unreadable, or the pid now runs as another uid: it
 * was reused, and its groups are not the peer's). */
static int proc_in_groups(uid_t uid, pid_t pid, const gid_t *gids, int n) {
  char path[64], *line = NULL;
  size_t cap = 0;
  int uid_ok = 0, found = -1;
  if (pid <= 0) return -1;
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "re");
  if (f == NULL) return -1;
  while (getline(&line, &cap, f) > 0) {
    unsigned long r, e;
    if (strncmp(line, "Uid:", 4) == 0) {
      /* real, effective, saved, fs: SO_PEERCRED has the effective one */
      uid_ok = sscanf(line + 4, "%lu %lu", &r, &e) == 2 && e == uid;
    } else if (strncmp(line, "Groups:", 7) == 0) {
      found = 0;
      char *p = line + 7, *end;
      for (;;) {
        errno = 0;
        unsigned long g = strtoul(p, &end, 10);
        if (end == p || errno != 0) break;
        if (has_gid(gids, n, (gid_t)g)) found = 1;
        p = end;
      }
    }
  }
  free(line);
  fclose(f);
  return uid_ok ? found : -1;
}

/* From the group database: the groups of uid's user name. */
static int db_in_groups(uid_t uid, gid_t gid, const gid_t *gids, int n) {
  size_t cap = 1024;
  struct passwd pw, *res = NULL;
  char *buf = NULL;
  for (;;) {
    buf = malloc(cap);
    if (buf == NULL) return 0;
    int e = getpwuid_r(uid, &pw, buf, cap, &res);
    if (e == ERANGE && cap < (1u << 20)) {
      free(buf);
      cap *= 4;
      continue;
    }
    break;
  }
  int found = 0;
  if (res != NULL) {
    int ng = 64;
    gid_t *list = NULL;
    for (int tries = 0; tries < 4; tries++) {
      gid_t *nl = realloc(list, (size_t)ng * sizeof *nl);
      if (nl == NULL) break;
      list = nl;
      int want = ng;
      if (getgrouplist(pw.pw_name, gid, list, &want) >= 0) {
        for (int i = 0; i < want && !found; i++)
          found = has_gid(gids, n, list[i]);
        break;
      }
      ng = want > ng ? want : ng * 4; /* want: the number it needs */
    }
    free(list);
  }
  free(buf);
  return found;
}

int opd__peer_in_groups(uid_t uid, gid_t gid, pid_t pid, const gid_t *gids,
                        int n) {
  if (n <= 0) return 0;
  if (has_gid(gids, n, gid)) return 1;
  int r = proc_in_groups(uid, pid, gids, n);
  return r >= 0 ? r : db_in_groups(uid, gid, gids, n);
}

int opd__ids_resolve(const char *opt, const char *list, int groups,
                     unsigned **out) {
  size_t len = strlen(list);
  char *copy = malloc(len + 1);
  unsigned *ids = calloc(len / 2 + 1, sizeof *ids); /* >= entries */
  int n = 0, rc = 0;
  if (copy == NULL || ids == NULL) {
    LOG_ERROR("%s: out of memory", opt);
    rc = -1;
    goto out;
  }
  memcpy(copy, list, len + 1);
  for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok != NULL;
       tok = strtok_r(NULL, ",", &save)) {
    while (isspace((unsigned char)*tok)) tok++;
    char *end = tok + strlen(tok);
    while (end > tok && isspace((unsigned char)end[-1])) *--end = '\0';
    if (*tok == '\0') continue;
    uid_t u = 0;
    gid_t g = 0;
    int r = groups ? opd__gid_parse(tok, &g) : opd__uid_parse(tok, &u);
    if (r != 0) {
      LOG_ERROR("%s: %s \"%s\"", opt,
                r == OPD_ENOENT ? (groups ? "no group is named"
                                          : "no user is named")
                                : "not a name or an id:",
                tok);
      rc = -1;
      goto out;
    }
    ids[n++] = groups ? (unsigned)g : (unsigned)u;
  }
out:
  free(copy);
  if (rc != 0) {
    free(ids);
    return -1;
  }
  *out = ids;
  return n;
}

int opd__access_init(opd_server_t *srv) {
  unsigned *u = NULL, *g = NULL;
  int nu = opd__ids_resolve("--allow-users", srv->cfg.allow_users, 0, &u);
  if (nu < 0) return -1;
  int ng = opd__ids_resolve("--allow-groups", srv->cfg.allow_groups, 1, &g);
  if (ng < 0) {
    free(u);
    return -1;
  }
  /* the arrays are unsigned; uid_t and gid_t are too, of the same size */
  _Static_assert(sizeof(uid_t) == sizeof(unsigned) &&
                     sizeof(gid_t) == sizeof(unsigned),
                 "uid_t and gid_t are 32-bit");
  srv->allow_uids = (uid_t *)u;
  srv->allow_gids = (gid_t *)g;
  srv->n_allow_uids = nu;
  srv->n_allow_gids = ng;
  if (nu || ng)
    LOG_INFO("access: %d user(s) and %d group(s) may connect (--allow-users "
             "\"%s\", --allow-groups \"%s\"), and root and uid %u",
             nu, ng, srv->cfg.allow_users, srv->cfg.allow_groups,
             (unsigned)srv->self_uid);
  return 0;
}

void opd__access_free(opd_server_t *srv) {
  free(srv->allow_uids);
  free(srv->allow_gids);
  srv->allow_uids = NULL;
  srv->allow_gids = NULL;
  srv->n_allow_uids = srv->n_allow_gids = 0;
}

int opd__access_allowed(const opd_server_t *srv, uid_t uid, gid_t gid,
                        pid_t pid) {
  if (opd__is_admin(srv, uid)) return 1;
  if (srv->n_allow_uids == 0 && srv->n_allow_gids == 0) return 1;
  for (int i = 0; i < srv->n_allow_uids; i++)
    if (srv->allow_uids[i] == uid) return 1;
  return opd__peer_in_groups(uid, gid, pid, srv->allow_gids,
                       srv->n_allow_gids);
}

/* ---- readers of a published name ---------------------------------------- */

static int add_reader(opd_readers_t *r, const char *e, opd_err_t *err) {
  if (strcmp(e, "*") == 0) {
    r->any = 1;
    return 0;
  }
  int group = strncmp(e, "group:", 6) == 0;
  const char *id = group ? e + 6 : e;
  uid_t u = 0;
  gid_t g = 0;
  int rc = group ? opd__gid_parse(id, &g) : opd__uid_parse(id, &u);
  if (rc == OPD_ENOENT) {
    return opd__errf(err, OPD_EINVAL, "\"readers\": no %s is named \"%s\"",
                     group ? "group" : "user", id);
  }
  if (rc != 0) {
    return opd__errf(err, rc == OPD_ENOMEM ? rc : OPD_EINVAL,
                     "\"readers\": \"%s\" is not a user, \"group:NAME\", "
                     "\"group:GID\" or \"*\"", e);
  }
  if (group) r->gids[r->n_gids++] = g;
  else r->uids[r->n_uids++] = u;
  return 0;
}

int opd__readers_parse(const msgpack_object *arr, opd_readers_t *r, opd_err_t *err) {
  memset(r, 0, sizeof *r);
  if (arr->type != MSGPACK_OBJECT_ARRAY) {
    return opd__errf(err, OPD_EPROTO,
                     "\"readers\" must be an array of uids, user names, "
                     "\"group:NAME\" or \"*\"");
  }
  if (arr->via.array.size > OPD_MAX_READERS) {
    return opd__errf(err, OPD_EINVAL,
                     "\"readers\" has %u entries, at most %d (name a "
                     "group instead)", arr->via.array.size, OPD_MAX_READERS);
  }
  for (uint32_t i = 0; i < arr->via.array.size; i++) {
    const msgpack_object *o = &arr->via.array.ptr[i];
    char e[OPD_MAX_NAME + 8];
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
      if (o->via.u64 >= (uint64_t)(uid_t)-1) {
        return opd__errf(err, OPD_EINVAL,
                         "\"readers\" entry %u: uid %llu is out of range",
                         i, (unsigned long long)o->via.u64);
      }
      r->uids[r->n_uids++] = (uid_t)o->via.u64;
      continue;
    }
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size >= sizeof e) {
      return opd__errf(err, OPD_EINVAL,
                       "\"readers\" entry %u must be a uid or a string "
                       "of at most %zu bytes", i, sizeof e - 1);
    }
    memcpy(e, o->via.str.ptr, o->via.str.size);
    e[o->via.str.size] = '\0';
    if (strlen(e) != o->via.str.size) {
      return opd__errf(err, OPD_EINVAL,
                       "\"readers\" entry %u holds a NUL byte", i);
    }
    int rc = add_reader(r, e, err);
    if (rc != 0) return rc;
  }
  return 0;
}

int opd__readers_allow(const opd_readers_t *r, uid_t uid, gid_t gid,
                       pid_t pid) {
  if (r == NULL) return 0;
  if (r->any) return 1;
  for (int i = 0; i < r->n_uids; i++)
    if (r->uids[i] == uid) return 1;
  return opd__peer_in_groups(uid, gid, pid, r->gids, r->n_gids);
}
