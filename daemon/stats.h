/* The STATS reply body (daemon/stats.c). */
#ifndef OPD_STATS_H
#define OPD_STATS_H

#include <msgpack.h>

#include "daemon/types.h"

/* Packs srv's counters as the STATS reply body (a map) into pk. */
void opd__stats_pack(opd_server_t *srv, msgpack_packer *pk);

#endif /* OPD_STATS_H */
