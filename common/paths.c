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
 * exists, must be a real directory of that uid alone.
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
    n = snprintf(buf, cap, "/run/opd/opd.sock");
  else if (xdg != NULL && xdg[0] != '\0')
    n = snprintf(buf, cap, "%s/opd.sock", xdg);
  else
    n = snprintf(buf, cap, "/tmp/opd-%u/opd.sock", (unsigned)geteuid());
  if (n < 0 || (size_t)n >= cap ||
      (size_t)n >= sizeof(((struct sockaddr_un *)0)->sun_path))
    return OPD_EINVAL;
  return 0;
}

void opd__fallback_dir(char *buf, size_t cap) {
  snprintf(buf, cap, "/tmp/opd-%u", (unsigned)geteuid());
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
  return 0;
}

int opd__dir_make(const char *dir, mode_t mode, uid_t owner, int flags,
                  char *err, size_t errlen) {
  if (mkdir(dir, mode) != 0 && errno != EEXIST) {
    snprintf(err, errlen, "cannot create the socket directory %s: %s", dir,
             strerror(errno));
    return OPD_EIO;
  }
  return opd__dir_check(dir, owner, flags, err, errlen);
}
