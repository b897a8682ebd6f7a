/* Published arenas: one session's memory, attached read-only by others.
 *
 * DESIGN
 * A publication is a name and a reference to an arena (host or device).
 * Attaching it gives the attaching session a new arena id of its own: a
 * small opd_arena_t with readonly set that points at the same memory and
 * holds a reference on the published arena, so the memory lives as long as
 * the publication or any attachment does (e.g. model weights loaded once
 * by one process and read by every worker). A name ends when its publisher
 * unpublishes it or the publisher's session closes; attachments made
 * before keep working until they are released. Outputs in a read-only
 * arena are refused (run.c) with OPD_EREADONLY.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/log.h"
#include "daemon/server.h"

#define MAX_PUBS 4096

static opd_pub_t *find(opd_server_t *srv, const char *name) {
  for (uint32_t i = 0; i < srv->n_pubs; i++)
    if (strcmp(srv->pubs[i].name, name) == 0) return &srv->pubs[i];
  return NULL;
}

static void drop(opd_server_t *srv, opd_pub_t *p) {
  LOG_INFO("unpublished \"%s\"", p->name);
  opd__arena_unref(p->arena);
  *p = srv->pubs[--srv->n_pubs];
}

int opd__publish(opd_session_t *s, uint64_t arena, const char *name,
                 const char *meta, char *err, size_t errlen) {
  opd_server_t *srv = s->srv;
  opd_arena_t *a = opd__arena_find(s, arena);
  if (name[0] == '\0') {
    snprintf(err, errlen, "the name is empty");
    return OPD_EINVAL;
  }
  if (a == NULL) {
    snprintf(err, errlen, "unknown arena %llu (not registered by this session)",
             (unsigned long long)arena);
    return OPD_EARENA;
  }
  if (a->readonly) {
    snprintf(err, errlen, "arena %llu is itself an attachment; publish the "
             "original", (unsigned long long)arena);
    return OPD_EREADONLY;
  }
  if (a->import != NULL) {
    snprintf(err, errlen, "arena %llu is client memory imported by IPC; "
             "publish daemon-owned memory (alloc) instead",
             (unsigned long long)arena);
    return OPD_EINVAL;
  }
  if (find(srv, name) != NULL) {
    snprintf(err, errlen, "\"%s\" is already published", name);
    return OPD_EINVAL;
  }
  if (srv->n_pubs >= MAX_PUBS) {
    snprintf(err, errlen, "%d names are published, the limit", MAX_PUBS);
    return OPD_ELIMIT;
  }
  if (srv->n_pubs == srv->cap_pubs) {
    uint32_t cap = srv->cap_pubs ? srv->cap_pubs * 2 : 16;
    opd_pub_t *np = realloc(srv->pubs, cap * sizeof *np);
    if (np == NULL) {
      snprintf(err, errlen, "out of memory");
      return OPD_ENOMEM;
    }
    srv->pubs = np;
    srv->cap_pubs = cap;
  }
  opd_pub_t *p = &srv->pubs[srv->n_pubs++];
  snprintf(p->name, sizeof p->name, "%s", name);
  snprintf(p->meta, sizeof p->meta, "%s", meta ? meta : "");
  p->arena = a;
  p->owner = s->id;
  a->refs++;
  LOG_INFO("session %llu: published arena %llu (%llu bytes, %s) as \"%s\"",
           (unsigned long long)s->id, (unsigned long long)a->id,
           (unsigned long long)a->size, a->device < 0 ? "host" : "device",
           name);
  return 0;
}

int opd__unpublish(opd_session_t *s, const char *name, char *err,
                   size_t errlen) {
  opd_pub_t *p = find(s->srv, name);
  if (p == NULL) {
    snprintf(err, errlen, "nothing is published as \"%s\"", name);
    return OPD_ENOENT;
  }
  if (p->owner != s->id) {
    snprintf(err, errlen, "\"%s\" was published by another session", name);
    return OPD_EINVAL;
  }
  drop(s->srv, p);
  return 0;
}

int opd__attach(opd_session_t *s, const char *name, opd_arena_t **out,
                const char **meta, char *err, size_t errlen) {
  opd_server_t *srv = s->srv;
  opd_pub_t *p = find(srv, name);
  if (p == NULL) {
    snprintf(err, errlen, "nothing is published as \"%s\"", name);
    return OPD_ENOENT;
  }
  if (s->n_arenas >= srv->cfg.limits.max_arenas) {
    snprintf(err, errlen, "session has %u arenas, the limit", s->n_arenas);
    return OPD_ELIMIT;
  }
  opd_arena_t *a = calloc(1, sizeof *a);
  if (a == NULL) {
    snprintf(err, errlen, "out of memory");
    return OPD_ENOMEM;
  }
  *a = *p->arena;
  a->id = ++srv->next_arena_id;
  a->refs = 1;
  a->readonly = 1;
  a->pinned = 0; /* the parent owns the registration */
  a->parent = p->arena;
  p->arena->refs++;
  s->arenas[s->n_arenas++] = a;
  *out = a;
  *meta = p->meta;
  return 0;
}

void opd__unpublish_all(opd_session_t *s) {
  opd_server_t *srv = s->srv;
  for (uint32_t i = 0; i < srv->n_pubs;) {
    if (srv->pubs[i].owner == s->id) drop(srv, &srv->pubs[i]);
    else i++;
  }
}

void opd__publish_free(opd_server_t *srv) {
  while (srv->n_pubs > 0) drop(srv, &srv->pubs[srv->n_pubs - 1]);
  free(srv->pubs);
  srv->pubs = NULL;
  srv->cap_pubs = 0;
}
