/* The request handlers (daemon/handlers.c): one per message type, from
 * one dispatch table. */
#ifndef OPD_HANDLERS_H
#define OPD_HANDLERS_H

#include <msgpack.h>

#include "daemon/types.h"

/* Handles req ([type, id, body-map], checked) of r's session: its reply,
 * or a run queued on the session. */
void opd__handle(opd_req_t *r, const msgpack_object *req);

#endif /* OPD_HANDLERS_H */
