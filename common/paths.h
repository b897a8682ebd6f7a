/* Where the daemon's socket is, for the daemon, libopd and opctl alike, and
 * the checks on the directory that holds it. */
#ifndef OPD_PATHS_H
#define OPD_PATHS_H

#include <stddef.h>
#include <sys/types.h>

#define OPD_SYSTEM_SOCKET "/run/opd/opd.sock" /* the system service's */

/* The daemon's socket path: `given` if non-NULL and non-empty, else
 * $OPD_SOCKET, else /run/opd/opd.sock for root, else
 * $XDG_RUNTIME_DIR/opd.sock, else /tmp/opd-<uid>/opd.sock. Writes it to buf
 * and returns 0, or OPD_EINVAL when it does not fit in cap or in a
 * sockaddr_un. */
int opd__socket_path(const char *given, char *buf, size_t cap);

/* A client's socket path (libopd, opctl, Python): `given`, else
 * $OPD_SOCKET, else /run/opd/opd.sock when that socket exists or its
 * directory is closed to the caller (whoever the caller is: a member of
 * group opd finds the system daemon, anyone else is told "permission
 * denied" when connecting), else as opd__socket_path. Same returns. */
int opd__socket_path_client(const char *given, char *buf, size_t cap);

/* The per-user fallback directory of that list, /tmp/opd-<euid>, into buf
 * (at least 32 bytes). */
void opd__fallback_dir(char *buf, size_t cap);

/* Who may own a socket directory (opd__dir_check flags). */
#define OPD_DIR_ROOT_OK 1   /* root as well as `owner` */
#define OPD_DIR_STICKY_OK 2 /* a root-owned sticky directory (/tmp) even if
                               anyone may write it: only its owner can
                               remove or replace a file there */

/* Checks, without following a symbolic link, that `dir` is a directory
 * owned by `owner` (or root, with OPD_DIR_ROOT_OK) that neither its group
 * nor others can write, under directories owned by root or `owner` that
 * nobody else may write unless they are sticky (a symbolic link on the
 * way: root's or owner's, its target checked). Returns 0, or OPD_EPERM
 * with a message naming the directory, its owner and mode and what is
 * wrong (err). */
int opd__dir_check(const char *dir, uid_t owner, int flags, char *err,
                   size_t errlen);

/* Creates `dir` with `mode` when it is missing (mkdir does not follow a
 * symbolic link in the last component) and checks it as opd__dir_check
 * does. Returns 0, OPD_EPERM (as opd__dir_check) or OPD_EIO (it could not
 * be made: a missing parent, no permission), with a message in err. */
int opd__dir_make(const char *dir, mode_t mode, uid_t owner, int flags,
                  char *err, size_t errlen);

#endif /* OPD_PATHS_H */
