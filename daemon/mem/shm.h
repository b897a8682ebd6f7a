/* Unsealed shared-memory files as host arenas (daemon/mem/shm.c): the
 * tmpfs check, the mapping and its SIGBUS guard.
 *
 * DESIGN
 * A POSIX shm object (a file of /dev/shm, as torch's share_memory_()
 * makes) cannot be sealed like a memfd, so its owner may shrink it under
 * our mapping. shm.c owns a table of such mappings and the daemon's SIGBUS
 * handler, which turns a fault inside one into zero pages instead of the
 * daemon's death. arena.c maps through it and unguards before munmap.
 */
#ifndef OPD_SHM_H
#define OPD_SHM_H

#include <stdint.h>

#include "common/err.h"

/* Capacity of the guard table: shm arenas mapped at once, daemon-wide. */
#define OPD_SHM_GUARDS 4096

/* Checks fd (a regular file on tmpfs of exactly `size` bytes), maps it
 * shared read-write and guards the mapping. 0 with *base, or OPD_EFD
 * (not a tmpfs file), OPD_EINVAL (size), OPD_ELIMIT (table full),
 * OPD_ENOMEM with a reason in err. fd stays open. */
int opd__shm_map(int fd, uint64_t size, void **base, opd_err_t *err);
/* Drops the guard of the mapping at base, if it has one (before munmap).
 * Returns 1 when a truncation was caught in it, else 0. */
int opd__shm_unguard(void *base);
/* Guarded mappings now, and faults caught since start (STATS). */
uint64_t opd__shm_guarded(void);
uint64_t opd__shm_faults(void);

#endif /* OPD_SHM_H */
