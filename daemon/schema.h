/* The OPS reply (daemon/schema.c): every operator's schema. */
#ifndef OPD_SCHEMA_H
#define OPD_SCHEMA_H

#include "daemon/types.h"

/* Packs the OPS reply body into srv->ops_body once at start: 0, or
 * OPD_ELIMIT (it would not fit a frame). */
int opd__ops_pack(opd_server_t *srv);

#endif /* OPD_SCHEMA_H */
