/* Arenas (daemon/mem/arena.c): a session's table of mapped client memory,
 * host memfds and device allocations, reference counted.
 *
 * DESIGN
 * The session's table holds one reference, each queued or running job one
 * per arena it uses, a published name one; the memory goes when the last
 * goes (opd__arena_unref). Releasing any arena bumps srv->arena_epoch,
 * which the run cache checks.
 */
#ifndef OPD_ARENA_H
#define OPD_ARENA_H

#include <stdint.h>

#include "daemon/types.h"

/* Maps a sealed memfd of size bytes: 0 with *base, or an error. */
/* A client's memfd (shm: a tmpfs file, daemon/mem/shm.c) as a host arena
 * of s: 0 with *id, or an error (fd is closed either way). */
int opd__arena_register(opd_session_t *s, int fd, uint64_t size, int shm,
                        uint64_t *id, opd_err_t *err);
/* Drops s's reference on arena id: 0, or OPD_EARENA (no such arena). */
int opd__arena_release(opd_session_t *s, uint64_t id);
/* Device memory of device dev as an arena of s (exportable: EXPORT can
 * give an fd for it). */
int opd__arena_alloc_device(opd_session_t *s, int dev, uint64_t size,
                            int exportable, uint64_t *id, opd_err_t *err);
/* A client's device memory by IPC handle as an arena of s. */
int opd__arena_import(opd_session_t *s, int dev, const void *handle,
                      uint64_t offset, uint64_t size, uint64_t *id, opd_err_t *err);
/* Arena id of s's table, or NULL. */
opd_arena_t *opd__arena_find(opd_session_t *s, uint64_t id);
/* One reference less; the arena goes with its last. */
void opd__arena_unref(opd_arena_t *a);
/* Every arena of s's table released (its end). */
void opd__arena_release_all(opd_session_t *s);

#endif /* OPD_ARENA_H */
