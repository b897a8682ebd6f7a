/* Shared memory for the outputs of the CPU torch kernel (client/torch/
 * hostmem.h says what it gives cpukern.c).
 *
 * DESIGN
 * The allocator of opd.torch's Python path (python/opd/memory.py) in C:
 * arenas are sealed memfds of max(16 MiB, the request rounded up to
 * 2 MiB), mapped here and owned by this file, not by a connection, so a
 * torch tensor over a block stays valid after its connection closes;
 * blocks are 64-byte aligned, taken first fit from each arena's free list
 * (sorted by offset; a freed block joins its neighbours). An arena is
 * registered with the connection a call runs on (opd_arena_register_fd,
 * then opd_arena_note so that opd_arena_find knows it) the first time a
 * block of it goes to that connection; opd__torch_host_forget drops those
 * registrations when the connection closes. When more than one arena is
 * empty, all but the largest are released and unmapped at the next
 * allocation (one spare stays, as the Python allocator keeps one); at most
 * MAX_ARENAS of them. After fork() a child allocates only
 * from arenas it made itself (the parent's blocks are the parent's to
 * reuse; frees of them in the child are dropped), as memory.py does.
 * One mutex guards every arena; torch's deleter may run on any thread.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client/libopd/internal.h"
#include "client/torch/hostmem.h"
#include "common/memfd.h"

#define ALIGN 64
#define MIN_ARENA (16ull << 20)
#define ARENA_ROUND (2ull << 20)
#define MAX_ARENAS 256

typedef struct span {
  uint64_t off, size;
} span_t;

typedef struct harena {
  void *base;        /* our mapping */
  uint64_t size;     /* bytes */
  int fd;            /* the memfd, kept to register it with a new connection */
  unsigned born;     /* the fork generation that made it */
  uint64_t used;     /* bytes in live blocks */
  span_t *free;      /* free spans, sorted by offset */
  uint32_t n_free, cap_free;
  opd_client_t *c;   /* the connection it is registered with, or NULL */
  uint64_t id;       /* its arena id there */
} harena_t;

typedef struct hblock {
  harena_t *a;
  uint64_t off, size;
} hblock_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* everything below */
static harena_t *arenas[MAX_ARENAS];
static int n_arenas;

static int new_arena(uint64_t size, harena_t **out) {
  char err[200];
  int fd = -1, rc = opd__memfd_create_sealed("opd-torch", "an output arena",
                                             size, &fd, err, sizeof err);
  if (rc != 0) return opd__fail(rc, "%s", err);
  harena_t *a = calloc(1, sizeof *a);
  span_t *f = malloc(8 * sizeof *f);
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (a == NULL || f == NULL || p == MAP_FAILED) {
    rc = opd__fail(OPD_ENOMEM, "mapping an output arena of %llu bytes: %s",
                   (unsigned long long)size,
                   p == MAP_FAILED ? strerror(errno) : "out of memory");
    if (p != MAP_FAILED) munmap(p, size);
    free(a), free(f), close(fd);
    return rc;
  }
  *a = (harena_t){.base = p, .size = size, .fd = fd, .free = f, .n_free = 1,
                  .cap_free = 8,
                  .born = __atomic_load_n(&opd__fork_gen, __ATOMIC_RELAXED)};
  f[0] = (span_t){0, size};
  *out = a;
  return 0;
}

/* span i of a, size bytes taken from its front */
static uint64_t take(harena_t *a, uint32_t i, uint64_t size) {
  uint64_t off = a->free[i].off;
  a->used += size;
  if (a->free[i].size == size) {
    memmove(&a->free[i], &a->free[i + 1], (a->n_free - i - 1) * sizeof a->free[0]);
    a->n_free--;
  } else {
    a->free[i].off += size, a->free[i].size -= size;
  }
  return off;
}

static void give_back(harena_t *a, uint64_t off, uint64_t size) {
  uint32_t i = 0;
  a->used -= size;
  while (i < a->n_free && a->free[i].off < off) i++;
  if (i > 0 && a->free[i - 1].off + a->free[i - 1].size == off) { /* join previous */
    a->free[i - 1].size += size;
    if (i < a->n_free && off + size == a->free[i].off) { /* and next */
      a->free[i - 1].size += a->free[i].size;
      memmove(&a->free[i], &a->free[i + 1], (a->n_free - i - 1) * sizeof a->free[0]);
      a->n_free--;
    }
    return;
  }
  if (i < a->n_free && off + size == a->free[i].off) { /* join next */
    a->free[i].off = off, a->free[i].size += size;
    return;
  }
  if (a->n_free == a->cap_free) {
    span_t *nf = realloc(a->free, 2 * a->cap_free * sizeof *nf);
    if (nf == NULL) return; /* the span is lost, nothing else */
    a->free = nf, a->cap_free *= 2;
  }
  memmove(&a->free[i + 1], &a->free[i], (a->n_free - i) * sizeof a->free[0]);
  a->free[i] = (span_t){off, size};
  a->n_free++;
}

/* Empty arenas of this generation beyond the largest one: released (on
 * the connection they are registered with, which forgets where they lay)
 * and unmapped. Under mu. */
static void trim(unsigned gen) {
  int keep = -1;
  for (int j = 0; j < n_arenas; j++)
    if (arenas[j]->born == gen && arenas[j]->used == 0 &&
        (keep < 0 || arenas[j]->size > arenas[keep]->size))
      keep = j;
  for (int j = n_arenas - 1; keep >= 0 && j >= 0; j--) {
    harena_t *a = arenas[j];
    if (j == keep || a->born != gen || a->used != 0) continue;
    if (a->c != NULL) opd_arena_release(a->c, a->id);
    munmap(a->base, a->size);
    close(a->fd);
    free(a->free);
    free(a);
    arenas[j] = arenas[--n_arenas];
    if (keep == n_arenas) keep = j; /* the kept one moved into slot j */
  }
}

int opd__torch_host_alloc(opd_client_t *c, uint64_t nbytes, void **ptr,
                          uint64_t *arena, uint64_t *offset, void **ctx) {
  uint64_t size = ((nbytes ? nbytes : 1) + ALIGN - 1) & ~(uint64_t)(ALIGN - 1);
  unsigned gen = __atomic_load_n(&opd__fork_gen, __ATOMIC_RELAXED);
  hblock_t *b = malloc(sizeof *b);
  if (b == NULL) return opd__fail(OPD_ENOMEM, "out of memory");
  int rc = 0;
  harena_t *a = NULL;
  uint64_t off = 0;
  pthread_mutex_lock(&mu);
  trim(gen);
  for (int j = 0; j < n_arenas && a == NULL; j++) {
    if (arenas[j]->born != gen) continue;
    for (uint32_t i = 0; i < arenas[j]->n_free; i++)
      if (arenas[j]->free[i].size >= size) {
        a = arenas[j];
        off = take(a, i, size);
        break;
      }
  }
  if (a == NULL) {
    uint64_t as = (size + ARENA_ROUND - 1) & ~(ARENA_ROUND - 1);
    if (n_arenas == MAX_ARENAS) {
      rc = opd__fail(OPD_ELIMIT, "the CPU torch kernel's outputs fill %d "
                     "arenas already", MAX_ARENAS);
      goto out;
    }
    if ((rc = new_arena(as > MIN_ARENA ? as : MIN_ARENA, &a)) != 0) goto out;
    arenas[n_arenas++] = a;
    off = take(a, 0, size);
  }
  if (a->c != c) { /* registered with another connection (or none) */
    uint64_t id = 0;
    if ((rc = opd_arena_register_fd(c, a->fd, a->size, &id)) != 0 ||
        (rc = opd_arena_note(c, id, a->base, a->size)) != 0) {
      give_back(a, off, size);
      goto out;
    }
    a->c = c, a->id = id;
  }
  *b = (hblock_t){a, off, size};
  *ptr = (char *)a->base + off;
  *arena = a->id, *offset = off, *ctx = b;
  b = NULL;
out:
  pthread_mutex_unlock(&mu);
  free(b);
  return rc;
}

void opd__torch_host_free(void *data, void *ctx) {
  hblock_t *b = ctx;
  (void)data;
  if (b == NULL) return;
  pthread_mutex_lock(&mu);
  if (b->a->born == __atomic_load_n(&opd__fork_gen, __ATOMIC_RELAXED))
    give_back(b->a, b->off, b->size);
  pthread_mutex_unlock(&mu);
  free(b);
}

void opd__torch_host_forget(opd_client_t *c) {
  pthread_mutex_lock(&mu);
  for (int j = 0; j < n_arenas; j++)
    if (arenas[j]->c == c) arenas[j]->c = NULL;
  pthread_mutex_unlock(&mu);
}
