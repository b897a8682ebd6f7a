/* Sealed memfds: creation (client) and the seal check (daemon); see
 * memfd.h for the DESIGN. */
#include "common/memfd.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "opd/protocol.h"

int opd__memfd_create_sealed(const char *name, const char *what, uint64_t size,
                             int *fd, char *err, size_t errlen) {
  int rc = 0, e;
  int f = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  *fd = -1;
  if (f < 0) {
    snprintf(err, errlen, "memfd_create: %s", strerror(errno));
    return OPD_EIO;
  }
  if (ftruncate(f, (off_t)size) != 0) {
    e = errno;
    snprintf(err, errlen, "cannot size %s of %llu bytes: %s", what,
             (unsigned long long)size, strerror(e));
    rc = e == EFBIG || e == EINVAL ? OPD_EINVAL : OPD_ENOMEM;
    goto out;
  }
  if (fcntl(f, F_ADD_SEALS, OPD_MEMFD_SEALS | F_SEAL_SEAL) != 0) {
    e = errno;
    snprintf(err, errlen, "sealing %s: %s", what, strerror(e));
    rc = OPD_EIO;
    goto out;
  }
  *fd = f;
  return 0;
out:
  close(f);
  errno = e;
  return rc;
}

/* 1 if /proc names fd a memfd, or there is no /proc to ask (the seal check
 * still applies). */
static int is_memfd(int fd) {
  char path[64], target[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(path, target, sizeof target - 1);
  if (n < 0) return 1;
  target[n] = '\0';
  return strncmp(target, "/memfd:", 7) == 0;
}

int opd__memfd_check(int fd, uint64_t size, char *err, size_t errlen) {
  struct stat st;
  int seals;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || !is_memfd(fd) ||
      (seals = fcntl(fd, F_GET_SEALS)) < 0) {
    snprintf(err, errlen, "the file descriptor is not a memfd");
    return OPD_EFD;
  }
  if ((seals & OPD_MEMFD_SEALS) != OPD_MEMFD_SEALS) {
    snprintf(err, errlen,
             "the memfd lacks F_SEAL_SHRINK|F_SEAL_GROW (seals 0x%x)", seals);
    return OPD_EFD;
  }
  if (size == 0 || (uint64_t)st.st_size != size) {
    snprintf(err, errlen, "claimed size %llu but the memfd holds %lld bytes",
             (unsigned long long)size, (long long)st.st_size);
    return OPD_EINVAL;
  }
  return 0;
}

/* Checks fd (opd__memfd_check: a memfd sealed against shrinking and growing,
 * exactly `size` bytes long, so that a mapping of it can never fault) and
 * maps it shared read-write. Returns 0 with *base set, or OPD_EFD /
 * OPD_EINVAL / OPD_ENOMEM with a reason in err. fd stays open. */
int opd__memfd_map(int fd, uint64_t size, void **base, opd_err_t *err) {
  int rc = opd__memfd_check(fd, size, err->msg, sizeof err->msg);
  if (rc != 0) return rc;
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return opd__errf(err, errno == ENOMEM ? OPD_ENOMEM : OPD_EFD,
                     "mmap of the memfd failed: %s", strerror(errno));
  }
  *base = p;
  return 0;
}
