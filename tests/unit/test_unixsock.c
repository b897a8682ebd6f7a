/* Unit: what daemon and client share in common/: fd
 * passing over a unix socket (common/unixsock.c: order, truncation to the
 * room given, fds only where asked) and sealed memfds (common/memfd.c: the
 * client's creation passes the daemon's check; a plain file, a memfd
 * without seals and a size mismatch do not). */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/memfd.h"
#include "common/unixsock.h"
#include "opd/protocol.h"

/* The inode of fd, to tell that a received fd is the one sent. */
static ino_t ino(int fd) {
  struct stat st;
  cr_assert_eq(fstat(fd, &st), 0);
  return st.st_ino;
}

Test(unixsock, fds_arrive_in_order_with_the_bytes) {
  int sv[2], p1[2], p2[2];
  cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  cr_assert_eq(pipe(p1), 0);
  cr_assert_eq(pipe(p2), 0);
  int send[3] = {p1[0], p2[1], p1[1]};
  cr_assert_eq(opd__send_fds(sv[0], "hello", 5, send, 3, MSG_NOSIGNAL), 5);
  cr_assert_eq(opd__send_fds(sv[0], "plain", 5, NULL, 0, MSG_NOSIGNAL), 5);
  char buf[16];
  int got[8], n = -1, trunc = -1;
  cr_assert_eq(opd__recv_fds(sv[1], buf, sizeof buf, got, 8, &n, &trunc,
                             MSG_CMSG_CLOEXEC), 5, "the read ends at the fds' sendmsg");
  cr_assert_eq(memcmp(buf, "hello", 5), 0);
  cr_assert_eq(n, 3);
  cr_assert_eq(trunc, 0);
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(ino(got[i]), ino(send[i]), "fd %d out of order", i);
    cr_assert(fcntl(got[i], F_GETFD) & FD_CLOEXEC);
    close(got[i]);
  }
  cr_assert_eq(opd__recv_fds(sv[1], buf, sizeof buf, got, 8, &n, &trunc, 0), 5);
  cr_assert_eq(n, 0, "no fds with a plain send");
  close(sv[0]);
  cr_assert_eq(opd__recv_fds(sv[1], buf, sizeof buf, got, 8, &n, &trunc, 0), 0,
               "EOF");
  close(sv[1]), close(p1[0]), close(p1[1]), close(p2[0]), close(p2[1]);
}

Test(unixsock, more_fds_than_room_truncate) {
  int sv[2], p[2];
  cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  cr_assert_eq(pipe(p), 0);
  int send[4] = {p[0], p[1], p[0], p[1]};
  cr_assert_eq(opd__send_fds(sv[0], "x", 1, send, 4, MSG_NOSIGNAL), 1);
  char buf[4];
  int got[2], n = -1, trunc = -1;
  cr_assert_eq(opd__recv_fds(sv[1], buf, sizeof buf, got, 2, &n, &trunc, 0), 1);
  cr_assert(trunc, "room for 2 of 4 fds: MSG_CTRUNC");
  cr_assert_leq(n, 2);
  for (int i = 0; i < n; i++) close(got[i]);
  close(sv[0]), close(sv[1]), close(p[0]), close(p[1]);
}

Test(memfd, created_sealed_passes_the_check) {
  char err[200];
  int fd = -1;
  cr_assert_eq(opd__memfd_create_sealed("t", "a test", 8192, &fd, err, sizeof err), 0, "%s", err);
  int seals = fcntl(fd, F_GET_SEALS);
  cr_assert_eq(seals & (OPD_MEMFD_SEALS | F_SEAL_SEAL), OPD_MEMFD_SEALS | F_SEAL_SEAL);
  cr_assert(fcntl(fd, F_GETFD) & FD_CLOEXEC);
  cr_assert_eq(opd__memfd_check(fd, 8192, err, sizeof err), 0, "%s", err);
  cr_assert_eq(opd__memfd_check(fd, 4096, err, sizeof err), OPD_EINVAL);
  cr_assert_str_eq(err, "claimed size 4096 but the memfd holds 8192 bytes");
  cr_assert_eq(opd__memfd_check(fd, 0, err, sizeof err), OPD_EINVAL);
  cr_assert_neq(ftruncate(fd, 4096), 0, "sealed against shrinking");
  close(fd);
}

Test(memfd, unsealed_and_non_memfds_fail_the_check) {
  char err[200];
  int fd = memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  cr_assert_geq(fd, 0);
  cr_assert_eq(ftruncate(fd, 4096), 0);
  cr_assert_eq(opd__memfd_check(fd, 4096, err, sizeof err), OPD_EFD);
  cr_assert(strstr(err, "lacks F_SEAL_SHRINK|F_SEAL_GROW") != NULL, "%s", err);
  close(fd);
  int p[2];
  cr_assert_eq(pipe(p), 0);
  cr_assert_eq(opd__memfd_check(p[0], 4096, err, sizeof err), OPD_EFD);
  cr_assert_str_eq(err, "the file descriptor is not a memfd");
  close(p[0]), close(p[1]);
}

Test(memfd, an_impossible_size_is_einval) {
  char err[200];
  int fd = 7777;
  cr_assert_eq(opd__memfd_create_sealed("t", "an arena", UINT64_MAX, &fd, err,
                                        sizeof err), OPD_EINVAL);
  cr_assert_eq(fd, -1);
  cr_assert(strstr(err, "cannot size an arena of") != NULL, "%s", err);
}
