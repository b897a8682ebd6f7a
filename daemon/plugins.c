/* The daemon's side of plugins: loading the ones the options name, before
 * anything else starts, and the PLUGINS reply.
 *
 * DESIGN
 * kernels/runtime/plugin.c does the loading and every check; this file only walks
 * the options (--plugin-dir first, then each --plugin in order), logs what
 * was loaded, and turns the first refusal into a failed start (main.c
 * exits 1). It runs before opd__server_init, which sizes the per-op
 * statistics and packs the OPS reply from the registry as it then is.
 */
#include <msgpack.h>
#include <string.h>

#include "common/wire.h"
#include "daemon/log.h"
#include "daemon/plugins.h"
#include "kernels/kernel.h"
#include "kernels/runtime/plugin.h"
#include "kernels/runtime/registry.h"

static void log_loaded(const opd_plugin_rec_t *p) {
  char ops[512];
  size_t len = 0;
  ops[0] = '\0';
  for (int i = 0; i < p->n_ops && len < sizeof ops; i++)
    len += (size_t)snprintf(ops + len, sizeof ops - len, "%s%s", i ? ", " : "",
                            opd__ops[p->first_op + i]->name);
  LOG_INFO("plugin %s %s loaded from %s: %s", p->name, p->version, p->path,
           ops);
}

int opd__plugins_start(const opd_config_t *cfg) {
  char err[1024];
  int before = opd__n_plugins;
  if (cfg->plugin_dir[0]) {
    int n = 0;
    if (opd__plugin_load_dir(cfg->plugin_dir, &n, err, sizeof err) != 0) {
      LOG_ERROR("%s", err);
      return OPD_EINVAL;
    }
    if (n == 0) LOG_INFO("plugin directory %s holds no *.so", cfg->plugin_dir);
  }
  for (int i = 0; i < cfg->n_plugins; i++)
    if (opd__plugin_load(cfg->plugins[i], err, sizeof err) != 0) {
      LOG_ERROR("%s", err);
      return OPD_EINVAL;
    }
  for (int i = before; i < opd__n_plugins; i++) log_loaded(&opd__plugins[i]);
  return 0;
}

void opd__plugins_pack(msgpack_packer *pk) {
  msgpack_pack_map(pk, 2);
  PACK_STR(pk, "plugins");
  msgpack_pack_array(pk, (size_t)opd__n_plugins);
  for (int i = 0; i < opd__n_plugins; i++) {
    const opd_plugin_rec_t *p = &opd__plugins[i];
    msgpack_pack_map(pk, 5);
    PACK_STR(pk, "name");
    PACK_STR(pk, p->name);
    PACK_STR(pk, "version");
    PACK_STR(pk, p->version);
    PACK_STR(pk, "path");
    PACK_STR(pk, p->path);
    PACK_STR(pk, "abi");
    msgpack_pack_uint32(pk, p->abi_version);
    PACK_STR(pk, "ops");
    msgpack_pack_array(pk, (size_t)p->n_ops);
    for (int k = 0; k < p->n_ops; k++) PACK_STR(pk, opd__ops[p->first_op + k]->name);
  }
  PACK_STR(pk, "origins");
  msgpack_pack_map(pk, (size_t)opd__n_ops);
  for (int i = 0; i < opd__n_ops; i++) {
    const opd_plugin_rec_t *p = opd__op_plugin(i);
    PACK_STR(pk, opd__ops[i]->name);
    PACK_STR(pk, p ? p->path : "built-in");
  }
}
