/* The run cache (daemon/run/runcache.c): a session's last validated run
 * request, queued again without decoding when its body comes again. */
#ifndef OPD_RUNCACHE_H
#define OPD_RUNCACHE_H

#include <stdint.h>

#include "daemon/types.h"

/* Remembers r's body and the job validate.c made of it (job's plan is
 * copied; nothing of it is kept). Nothing when the body is too big. */
void opd__run_cache_store(const opd_req_t *r, const opd_job_t *job);
/* A run request whose body equals the session's last validated one (and
 * no arena released since) is queued without decoding; returns 1 if it
 * was, 0 to take the full path (r->id set by the caller). */
int opd__run_cached(const opd_req_t *r, const unsigned char *body,
                    uint32_t len);
void opd__run_cache_free(opd_session_t *s); /* at the session's end */

#endif /* OPD_RUNCACHE_H */
