/* Where the daemon's socket is, for the daemon, libopd and opctl alike. */
#ifndef OPD_PATHS_H
#define OPD_PATHS_H

#include <stddef.h>

/* Resolves the socket path: `given` if non-NULL and non-empty, else
 * $OPD_SOCKET, else /run/opd/opd.sock for root, else
 * $XDG_RUNTIME_DIR/opd.sock, else /tmp/opd-<uid>/opd.sock. Writes it to buf
 * and returns 0, or OPD_EINVAL when it does not fit in cap or in a
 * sockaddr_un. */
int opd__socket_path(const char *given, char *buf, size_t cap);

#endif /* OPD_PATHS_H */
