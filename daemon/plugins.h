/* Operator plugins (daemon/plugins.c): loaded at start, listed by
 * PLUGINS. */
#ifndef OPD_PLUGINS_H
#define OPD_PLUGINS_H

#include <msgpack.h>

#include "daemon/config.h"

/* Loads the plugins cfg names (0, or the first refusal, logged). */
int opd__plugins_start(const opd_config_t *cfg);
/* Packs the PLUGINS reply body. */
void opd__plugins_pack(msgpack_packer *pk);

#endif /* OPD_PLUGINS_H */
