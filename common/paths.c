/* Socket path resolution and the runtime directory's checks; see paths.h.
 *
 * DESIGN
 * Whoever can write the directory that holds the socket can replace the
 * socket with their own and receive every client's tensors (memfds), so
 * the daemon serves only from a directory that it (or root) owns and that
 * its group and others cannot write. The checks use lstat, never stat: a
 * symbolic link in the last component is refused rather than followed,
 * since its target is whatever the link's owner chose. The per-user
 * fallback /tmp/opd-<uid> sits in a world-writable directory where anyone
 * may create that name first; so it is made 0700 and, when it already
 * exists, must be a real directory of that uid alone. The directories
 * above count too: whoever may rename an entry of one could swap the
 * socket's directory for their own, so each must be root's or ours and
 * writable by nobody else unless sticky (/tmp).
 */
#include "common/paths.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "opd/protocol.h"

int opd__socket_path(const char *given, char *buf, size_t cap) {
  const char *env = getenv("OPD_SOCKET");
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  int n;

  if (given != NULL && given[0] != '\0')
    n = snprintf(buf, cap, "%s", given);
  else if (env != NULL && env[0] != '\0')
    n = snprintf(buf, cap, "%s", env);
  else if (geteuid() == 0)
    n = snprintf(buf, cap, "%s", OPD_SYSTEM_SOCKET);
  else if (xdg != NULL && xdg[0] != '\0')
    n = snprintf(buf, cap, "%s/opd.sock", xdg);
  else
    n = snprintf(buf, cap, "/tmp/opd-%u/opd.sock", (unsigned)geteuid());
  if (n < 0 || (size_t)n >= cap ||
      (size_t)n >= sizeof(((struct sockaddr_un *)0)->sun_path))
    return OPD_EINVAL;
  return 0;
}

int opd__socket_path_client(const char *given, char *buf, size_t cap) {
  const char *env = getenv("OPD_SOCKET");
  struct stat st;
  if ((given == NULL || given[0] == '\0') && (env == NULL || env[0] == '\0') &&
      ((lstat(OPD_SYSTEM_SOCKET, &st) == 0 && S_ISSOCK(st.st_mode)) ||
       errno == EACCES)) {
    /* EACCES: /run/opd is there but closed to this user (not in group
     * opd): connecting tells them so, where the per-user path would say
     * "not running" */
    snprintf(buf, cap, "%s", OPD_SYSTEM_SOCKET);
    return cap > sizeof OPD_SYSTEM_SOCKET - 1 ? 0 : OPD_EINVAL;
  }
  return opd__socket_path(given, buf, cap);
}

void opd__fallback_dir(char *buf, size_t cap) {
  snprintf(buf, cap, "/tmp/opd-%u", (unsigned)geteuid());
}

/* The directories above `dir`: each must be owned by root or `owner`,
 * and writable by nobody else unless it is sticky (then others cannot
 * rename what is in it); a symbolic link on the way must be root's or
 * owner's too, and its target is checked. Else whoever may rename an
 * ancestor could swap in a directory of their own. */
static int check_above(const char *dir, uid_t owner, char *err,
                       size_t errlen) {
  char path[4096];
  size_t n = 0;
  if (dir[0] != '/') {
    if (getcwd(path, sizeof path - 1) == NULL) return 0; /* cannot tell */
    n = strlen(path);
  }
  int w = snprintf(path + n, sizeof path - n, "%s%s", n ? "/" : "", dir);
  if (w < 0 || (size_t)w >= sizeof path - n) return 0;
  char *last = strrchr(path, '/'); /* dir itself is checked by the caller */
  for (char *p = strchr(path + 1, '/'); p != NULL && p <= last;
       p = strchr(p + 1, '/')) {
    *p = '\0'; /* the prefix before this '/': "/run", "/run/user" */
    struct stat st;
    int bad = 0;
    if (lstat(path, &st) != 0) { /* missing: making dir will fail */
      *p = '/';
      return 0;
    }
    if (S_ISLNK(st.st_mode)) {
      if (st.st_uid != 0 && st.st_uid != owner) bad = 1;
      else if (stat(path, &st) != 0) bad = -1; /* dangling: mkdir will say */
    }
    if (!bad && st.st_uid != 0 && st.st_uid != owner) bad = 2;
    if (!bad && (st.st_mode & 022) && !(st.st_mode & S_ISVTX)) bad = 3;
    if (bad > 0) {
      snprintf(err, errlen, "socket directory %s: %s above it, %s, is owned "
               "by uid %u (mode %04o)%s: %s", dir,
               bad == 1 ? "the symbolic link" : "the directory", path,
               (unsigned)st.st_uid, (unsigned)st.st_mode & 07777,
               bad == 3 ? " and writable by its group or others"
                        : ", not by root or the daemon's uid",
               bad == 1 ? "its owner can point it elsewhere"
                        : "whoever can rename entries there can replace "
                          "the socket's directory");
      *p = '/';
      return OPD_EPERM;
    }
    *p = '/';
  }
  return 0;
}

int opd__dir_check(const char *dir, uid_t owner, int flags, char *err,
                   size_t errlen) {
  struct stat st;
  if (lstat(dir, &st) != 0) {
    snprintf(err, errlen, "socket directory %s: %s", dir, strerror(errno));
    return OPD_EIO;
  }
  unsigned mode = (unsigned)st.st_mode & 07777;
  unsigned uid = (unsigned)st.st_uid;
  if (S_ISLNK(st.st_mode)) {
    char to[256];
    ssize_t n = readlink(dir, to, sizeof to - 1);
    to[n > 0 ? n : 0] = '\0';
    snprintf(err, errlen, "socket directory %s is a symbolic link (to %s, "
             "owned by uid %u): refusing to follow it; give the real "
             "directory", dir, n > 0 ? to : "?", uid);
    return OPD_EPERM;
  }
  if (!S_ISDIR(st.st_mode)) {
    snprintf(err, errlen, "socket directory %s is not a directory (owner "
             "uid %u, mode %04o)", dir, uid, mode);
    return OPD_EPERM;
  }
  int root = st.st_uid == 0;
  if (st.st_uid != owner && !(root && (flags & OPD_DIR_ROOT_OK))) {
    char want[48];
    if (owner == 0) snprintf(want, sizeof want, "root");
    else snprintf(want, sizeof want, "uid %u%s", (unsigned)owner,
                  flags & OPD_DIR_ROOT_OK ? " or root" : "");
    snprintf(err, errlen, "socket directory %s is owned by uid %u (mode "
             "%04o), not by %s: whoever owns it can replace the socket",
             dir, uid, mode, want);
    return OPD_EPERM;
  }
  if ((mode & 022) &&
      !(root && (mode & S_ISVTX) && (flags & OPD_DIR_STICKY_OK))) {
    snprintf(err, errlen, "socket directory %s (owner uid %u) has mode %04o: "
             "its %s can write it and replace the socket (chmod go-w it)",
             dir, uid, mode,
             (mode & 022) == 022 ? "group and others"
             : (mode & 020)      ? "group"
                                 : "others");
    return OPD_EPERM;
  }
  return check_above(dir, owner, err, errlen);
}

int opd__dir_make(const char *dir, mode_t mode, uid_t owner, int flags,
                  char *err, size_t errlen) {
  int rc = check_above(dir, owner, err, errlen); /* before making it */
  if (rc != 0) return rc;
  if (mkdir(dir, mode) != 0 && errno != EEXIST) {
    snprintf(err, errlen, "cannot create the socket directory %s: %s", dir,
             strerror(errno));
    return OPD_EIO;
  }
  return opd__dir_check(dir, owner, flags, err, errlen);
}
