/* Sealed memfds: made by the client, checked by the daemon.
 *
 * DESIGN
 * Tensors and rings travel as memfds mapped in both processes. The seals
 * are what make the daemon's mapping safe: a file the client could shrink
 * after the daemon mapped it would turn the daemon's next access into
 * SIGBUS. So the rule lives here once: the client creates memfds sealed
 * with OPD_MEMFD_SEALS (and F_SEAL_SEAL, so no seal can be added or
 * removed later), and the daemon accepts an fd only if it is a memfd
 * carrying OPD_MEMFD_SEALS and exactly the size claimed.
 */
#ifndef OPD_COMMON_MEMFD_H
#define OPD_COMMON_MEMFD_H

#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* The seals a memfd must carry to be mapped by the daemon. */
#define OPD_MEMFD_SEALS (F_SEAL_SHRINK | F_SEAL_GROW)

#if defined(__GNUC__)
#define OPD_COMMON_HIDDEN __attribute__((visibility("hidden")))
#else
#define OPD_COMMON_HIDDEN
#endif

/* Creates a close-on-exec memfd named `name` of `size` bytes sealed with
 * OPD_MEMFD_SEALS | F_SEAL_SEAL into *fd. Returns 0, or OPD_EIO (no memfd,
 * or it could not be sealed), OPD_EINVAL (a size the file cannot have) or
 * OPD_ENOMEM (no room for it), with the reason in err (naming `what`, e.g.
 * "an arena") and errno as the failing call left it; nothing stays open on
 * failure. */
OPD_COMMON_HIDDEN int opd__memfd_create_sealed(const char *name,
                                               const char *what, uint64_t size,
                                               int *fd, char *err,
                                               size_t errlen);

/* Checks that fd is a memfd (a regular file that /proc names "/memfd:..."
 * and that has seals) sealed with OPD_MEMFD_SEALS and exactly `size` (> 0)
 * bytes long, so that a mapping of all of it can never fault. Returns 0,
 * or OPD_EFD (not a memfd, or a seal missing) / OPD_EINVAL (the size) with
 * the reason in err. fd stays open. */
OPD_COMMON_HIDDEN int opd__memfd_check(int fd, uint64_t size, char *err,
                                       size_t errlen);

/* Checks fd as opd__memfd_check does and maps it shared read-write:
 * 0 with *base set, or OPD_EFD / OPD_EINVAL / OPD_ENOMEM with a reason in
 * err. fd stays open. (The daemon's arenas and rings.) */
int opd__memfd_map(int fd, uint64_t size, void **base, opd_err_t *err);

#endif
