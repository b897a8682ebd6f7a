/* SCM_RIGHTS send and receive; see unixsock.h for the DESIGN. */
#include "common/unixsock.h"

#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef union cbuf {
  char b[CMSG_SPACE(sizeof(int) * OPD_SOCK_MAX_FDS)];
  struct cmsghdr align;          /* cmsghdr alignment for the buffer */
} cbuf_t;

ssize_t opd__send_fds(int sock, const void *buf, size_t len, const int *fds,
                      int nfds, int flags) {
  cbuf_t cbuf;
  struct iovec iov = {(void *)buf, len};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
  if (nfds > OPD_SOCK_MAX_FDS) nfds = OPD_SOCK_MAX_FDS;
  if (nfds > 0) {
    memset(&cbuf, 0, CMSG_SPACE(sizeof(int) * (size_t)nfds));
    msg.msg_control = cbuf.b;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
    memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
  }
  return sendmsg(sock, &msg, flags);
}

ssize_t opd__recv_fds(int sock, void *buf, size_t len, int *fds, int max_fds,
                      int *nfds, int *ctrunc, int flags) {
  cbuf_t cbuf;
  if (max_fds > OPD_SOCK_MAX_FDS) max_fds = OPD_SOCK_MAX_FDS;
  if (max_fds < 0) max_fds = 0;
  struct iovec iov = {buf, len};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
                       .msg_control = max_fds ? cbuf.b : NULL,
                       .msg_controllen =
                           max_fds ? CMSG_SPACE(sizeof(int) * (size_t)max_fds)
                                   : 0};
  *nfds = 0;
  *ctrunc = 0;
  ssize_t n = recvmsg(sock, &msg, flags);
  if (n < 0) return n;
  *ctrunc = (msg.msg_flags & MSG_CTRUNC) != 0;
  if (msg.msg_controllen == 0) return n;
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < k; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
      if (*nfds < max_fds) fds[(*nfds)++] = fd;
      else close(fd);
    }
  }
  return n;
}
