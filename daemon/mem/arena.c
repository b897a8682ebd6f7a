/* Shared-memory arenas: checking, mapping and releasing client memfds.
 *
 * DESIGN
 * A client's arena is a memfd it sealed with F_SEAL_SHRINK|F_SEAL_GROW.
 * The seals are what make mapping it safe: a client that could shrink the
 * file after we mapped it would turn our next access into SIGBUS. So we
 * refuse any fd that is not a memfd, lacks either seal, or whose size
 * differs from the size the client claimed (the check, shared with the
 * client that makes them, is common/memfd.c). The one other kind of host
 * fd taken is a POSIX shm file (tmpfs, unsealable: torch's shared
 * tensors), registered with "shm": its mapping is guarded against SIGBUS
 * instead (daemon/mem/shm.c). Ids are daemon-wide and never reused, so a
 * stale or foreign id is always "unknown", never someone else's arena.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/memfd.h"
#include "common/wire.h"
#include "daemon/backend/backend.h"
#include "daemon/limits.h"
#include "daemon/log.h"
#include "daemon/mem/arena.h"
#include "daemon/mem/shm.h"

/* a, filled and in s's table (its one reference, counted against s's
 * limits with `counted` bytes): its new id. */
static uint64_t arena_add(opd_session_t *s, opd_arena_t *a, void *base,
                          uint64_t size, int device, uint64_t counted) {
  a->id = ++s->srv->next_arena_id;
  a->base = base;
  a->size = size;
  a->refs = 1;
  a->srv = s->srv;
  a->device = device;
  s->arenas[s->n_arenas++] = a;
  opd__acct_arena(s, 1, (int64_t)counted);
  s->srv->arenas++;
  return a->id;
}

/* Takes ownership of fd (closed in every case). On success the arena is in
 * s's table and *id names it. */
int opd__arena_register(opd_session_t *s, int fd, uint64_t size, int shm,
                        uint64_t *id, opd_err_t *err) {
  opd_arena_t *a = NULL;
  void *base = MAP_FAILED;
  int rc = 0;

  if ((rc = opd__limit_arena(s, size, err)) != 0) goto out;
  if ((rc = shm ? opd__shm_map(fd, size, &base, err)
                : opd__memfd_map(fd, size, &base, err)) != 0) {
    base = MAP_FAILED;
    goto out;
  }
  if ((a = calloc(1, sizeof *a)) == NULL) {
    rc = opd__errf(err, OPD_ENOMEM, "out of memory");
    goto out;
  }
  *id = arena_add(s, a, base, size, -1, size);
  opd__backend_dev.pin(s->srv, a); /* pinned: copies at full speed */
  s->srv->bytes_mapped += size;
  s->srv->mappings++;
  s->srv->host_bytes += size;
  base = MAP_FAILED;
  LOG_DEBUG("session %llu: arena %llu mapped, %llu bytes",
            (unsigned long long)s->id, (unsigned long long)a->id,
            (unsigned long long)size);
out:
  if (base != MAP_FAILED) {
    opd__shm_unguard(base);
    munmap(base, size);
  }
  close(fd);
  return rc;
}

opd_arena_t *opd__arena_find(opd_session_t *s, uint64_t id) {
  for (uint32_t i = 0; i < s->n_arenas; i++)
    if (s->arenas[i]->id == id) return s->arenas[i];
  return NULL;
}

/* Allocates device memory on CUDA device `dev` as an arena of s. */
int opd__arena_alloc_device(opd_session_t *s, int dev, uint64_t size,
                            int exportable, uint64_t *id, opd_err_t *err) {
  opd_arena_t *a;
  void *ptr;
  int rc;

  if (size == 0) {
    return opd__errf(err, OPD_EINVAL, "size must be at least 1 byte");
  }
  if ((rc = opd__limit_arena(s, size, err)) != 0) return rc;
  if ((a = calloc(1, sizeof *a)) == NULL) {
    return opd__errf(err, OPD_ENOMEM, "out of memory");
  }
  void *vmm = NULL;
  rc = opd__backend_dev.alloc(s->srv, dev, size, exportable, &ptr, &vmm, err);
  if (rc != 0) {
    free(a);
    return rc;
  }
  a->vmm = vmm;
  *id = arena_add(s, a, ptr, size, dev, size);
  s->srv->bytes_mapped += size;
  return 0;
}

/* Imports client device memory by CUDA IPC handle as an arena of s. */
int opd__arena_import(opd_session_t *s, int dev, const void *handle,
                      uint64_t offset, uint64_t size, uint64_t *id, opd_err_t *err) {
  opd_arena_t *a;
  void *ptr, *token;
  int rc;
  if (size == 0) {
    return opd__errf(err, OPD_EINVAL, "size must be at least 1 byte");
  }
  /* the client's own memory: counted as an arena, its bytes are not ours */
  if ((rc = opd__limit_arena(s, 0, err)) != 0) return rc;
  if ((a = calloc(1, sizeof *a)) == NULL) {
    return opd__errf(err, OPD_ENOMEM, "out of memory");
  }
  rc = opd__backend_dev.import(s->srv, s->id, dev, handle, offset, size, &ptr,
                               &token, err);
  if (rc != 0) {
    free(a);
    return rc;
  }
  a->import = token;
  *id = arena_add(s, a, ptr, size, dev, 0);
  s->srv->imports_total++;
  return 0;
}

void opd__arena_unref(opd_arena_t *a) {
  if (--a->refs > 0) return;
  if (a->parent != NULL) { /* an attachment: the memory is the parent's */
    opd__arena_unref(a->parent);
    free(a);
    return;
  }
  a->srv->arenas--;
  if (a->import != NULL) { /* the client's own memory */
    opd__backend_dev.release(a);
    free(a);
    return;
  }
  a->srv->bytes_mapped -= a->size;
  if (a->device >= 0) {
    opd__backend_dev.release(a); /* device memory */
    free(a);
    return;
  }
  /* host memory: unregistered from CUDA, then unmapped; nothing of it is
   * kept once its last reference (table, job, publication) goes */
  opd__backend_dev.release(a);
  if (opd__shm_unguard(a->base))
    LOG_WARN("arena %llu: its shm file was truncated while mapped; runs "
             "on it read zeros since", (unsigned long long)a->id);
  if (munmap(a->base, a->size) != 0)
    LOG_ERROR("munmap of arena %llu (%llu bytes) failed: %s",
              (unsigned long long)a->id, (unsigned long long)a->size,
              strerror(errno));
  a->srv->mappings--;
  a->srv->host_bytes -= a->size;
  free(a);
}

/* Removes the arena from the table; memory stays mapped while jobs use it.
 * Returns 0 or OPD_EARENA. */
int opd__arena_release(opd_session_t *s, uint64_t id) {
  for (uint32_t i = 0; i < s->n_arenas; i++) {
    opd_arena_t *a = s->arenas[i];
    if (a->id != id) continue;
    s->arenas[i] = s->arenas[--s->n_arenas];
    opd__acct_arena(s, -1, a->parent == NULL && a->import == NULL
                               ? -(int64_t)a->size : 0);
    s->srv->arena_epoch++; /* cached runs may name it (daemon/run/runcache.c) */
    opd__arena_unref(a);
    return 0;
  }
  return OPD_EARENA;
}

void opd__arena_release_all(opd_session_t *s) {
  if (s->n_arenas > 0) s->srv->arena_epoch++;
  while (s->n_arenas > 0) {
    opd_arena_t *a = s->arenas[--s->n_arenas];
    opd__acct_arena(s, -1, a->parent == NULL && a->import == NULL
                               ? -(int64_t)a->size : 0);
    opd__arena_unref(a);
  }
}
