/* Unsealed shared-memory files as host arenas: tmpfs files (POSIX shm
 * objects from /dev/shm, what torch's share_memory_() makes under both of
 * its sharing strategies) mapped under a SIGBUS guard.
 *
 * DESIGN
 * A memfd is sealed so that its owner cannot shrink it under our mapping
 * (daemon/mem/arena.c). A POSIX shm file cannot be sealed, so a client may
 * truncate it while we hold it mapped, and our next access past its new
 * end raises SIGBUS. Such mappings are kept in a fixed table of guarded
 * ranges (written on the loop thread only, read by the handler with
 * atomics); the SIGBUS handler, on a fault inside one, maps anonymous zero
 * pages over the whole range (MAP_FIXED, so the faulting access is retried
 * and succeeds) and marks it faulted, as Wayland compositors do for their
 * clients' shm pools. The run goes on over zeros: a client that truncates
 * its own memory loses its own results, never the daemon. The release
 * logs it and STATS counts it ("shm": "faults"). A fault anywhere else is
 * not ours: the handler puts back the action it replaced and returns, so
 * the access faults again and ends the daemon as it would have. Only
 * tmpfs files are taken (fstatfs: TMPFS_MAGIC): a disk file could fault
 * on I/O errors too, and would write our results through to a disk.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "daemon/mem/shm.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include "opd/protocol.h"

#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif

static struct {
  _Atomic(uintptr_t) base;       /* 0: a free slot */
  _Atomic(uint64_t) size;
  atomic_int faulted;
} guards[OPD_SHM_GUARDS];
static atomic_uint_fast64_t n_guarded, n_faults;
static struct sigaction prev;    /* the action our handler replaced */
static int installed;

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
  uintptr_t p = (uintptr_t)si->si_addr;
  (void)uc;
  for (int i = 0; i < OPD_SHM_GUARDS; i++) {
    uintptr_t b = atomic_load(&guards[i].base);
    uint64_t n = atomic_load(&guards[i].size);
    if (b == 0 || p < b || p - b >= n) continue;
    int saved = errno;
    void *q = mmap((void *)b, n, PROT_READ | PROT_WRITE,
                   MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    errno = saved;
    if (q != MAP_FAILED) {
      if (atomic_exchange(&guards[i].faulted, 1) == 0)
        atomic_fetch_add(&n_faults, 1);
      return;                    /* the access is retried over zeros */
    }
    break;
  }
  sigaction(sig, &prev, NULL);   /* not ours: fault again, as before */
}

static int install(opd_err_t *err) {
  if (installed) return 0;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGBUS, &sa, &prev) != 0)
    return opd__errf(err, OPD_EIO, "installing the SIGBUS guard: %s",
                     strerror(errno));
  installed = 1;
  return 0;
}

int opd__shm_map(int fd, uint64_t size, void **base, opd_err_t *err) {
  struct stat st;
  struct statfs fs;
  int rc;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || fstatfs(fd, &fs) != 0 ||
      fs.f_type != TMPFS_MAGIC)
    return opd__errf(err, OPD_EFD, "the file descriptor is not a shared-"
                     "memory file (a regular file on tmpfs, as /dev/shm)");
  if (size == 0 || (uint64_t)st.st_size != size)
    return opd__errf(err, OPD_EINVAL, "claimed size %llu but the shm file "
                     "holds %lld bytes", (unsigned long long)size,
                     (long long)st.st_size);
  if ((rc = install(err)) != 0) return rc;
  int slot = -1;
  for (int i = 0; i < OPD_SHM_GUARDS && slot < 0; i++)
    if (atomic_load(&guards[i].base) == 0) slot = i;
  if (slot < 0)
    return opd__errf(err, OPD_ELIMIT, "%d shm arenas are mapped, the most "
                     "the daemon guards at once", OPD_SHM_GUARDS);
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return opd__errf(err, errno == ENOMEM ? OPD_ENOMEM : OPD_EFD,
                     "mmap of the shm file failed: %s", strerror(errno));
  atomic_store(&guards[slot].faulted, 0);
  atomic_store(&guards[slot].size, size);
  atomic_store(&guards[slot].base, (uintptr_t)p);
  atomic_fetch_add(&n_guarded, 1);
  *base = p;
  return 0;
}

int opd__shm_unguard(void *base) {
  if (atomic_load(&n_guarded) == 0) return 0;
  for (int i = 0; i < OPD_SHM_GUARDS; i++) {
    if (atomic_load(&guards[i].base) != (uintptr_t)base) continue;
    int f = atomic_load(&guards[i].faulted);
    atomic_store(&guards[i].base, 0);
    atomic_fetch_sub(&n_guarded, 1);
    return f;
  }
  return 0;
}

uint64_t opd__shm_guarded(void) { return atomic_load(&n_guarded); }
uint64_t opd__shm_faults(void) { return atomic_load(&n_faults); }
