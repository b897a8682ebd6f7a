/* File descriptors over a unix socket (SCM_RIGHTS), both directions.
 *
 * DESIGN
 * Arenas, rings and exported CUDA memory cross the socket as fds attached
 * to the first byte of a frame: the client sends memfds with its requests,
 * the daemon sends exported fds with its replies. Both sides build and
 * parse the control message here, so the cmsg layout, the truncation rule
 * (a control buffer for at most max_fds; more set *ctrunc and the kernel
 * closes them) and the order of received fds are written once. No
 * allocation: the control buffer is on the stack, at most OPD_SOCK_MAX_FDS.
 */
#ifndef OPD_COMMON_UNIXSOCK_H
#define OPD_COMMON_UNIXSOCK_H

#include <stddef.h>
#include <sys/types.h>

#include "common/memfd.h" /* OPD_COMMON_HIDDEN */

#define OPD_SOCK_MAX_FDS 16 /* fds one sendmsg or recvmsg may carry here */

/* One sendmsg() of buf[len] on sock with nfds (0..OPD_SOCK_MAX_FDS) fds
 * attached as SCM_RIGHTS, flags passed to sendmsg (MSG_NOSIGNAL,
 * MSG_DONTWAIT...). Returns what sendmsg returned (bytes sent, or -1 with
 * errno); the fds stay open here either way. */
OPD_COMMON_HIDDEN ssize_t opd__send_fds(int sock, const void *buf, size_t len,
                                        const int *fds, int nfds, int flags);

/* One recvmsg() into buf[len] on sock (flags: MSG_CMSG_CLOEXEC,
 * MSG_DONTWAIT...), with room for max_fds (<= OPD_SOCK_MAX_FDS) fds: those
 * received go into fds[] in arrival order and their count into *nfds (any
 * beyond max_fds are closed); *ctrunc is set when the kernel truncated the
 * control data (more fds than room, or this process is out of fds).
 * Returns what recvmsg returned (bytes, 0 at EOF, -1 with errno; *nfds is
 * 0 then). */
OPD_COMMON_HIDDEN ssize_t opd__recv_fds(int sock, void *buf, size_t len,
                                        int *fds, int max_fds, int *nfds,
                                        int *ctrunc, int flags);

#endif
