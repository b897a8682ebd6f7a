/* Plugins: operators from shared objects, loaded at start (kernels/
 * runtime/plugin.c). The ABI a plugin implements is include/opd/op.h. */
#ifndef OPD_KERNELS_PLUGIN_H
#define OPD_KERNELS_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "opd/op.h"

#define OPD_MAX_PLUGINS 64

/* A loaded plugin. */
typedef struct opd_plugin_rec {
  char path[4096];                 /* the file, symlinks resolved */
  char name[OPD_MAX_NAME];         /* its opd_plugin_t.name */
  char version[OPD_MAX_NAME];      /* its opd_plugin_t.version */
  uint32_t abi_version;            /* the ABI it was built against */
  int first_op;                    /* its rows: opd__ops[first_op ..     */
  int n_ops;                       /*            first_op + n_ops)       */
  void *dl;                        /* dlopen handle */
} opd_plugin_rec_t;

extern int opd__n_plugins;                       /* loaded, in load order */
extern opd_plugin_rec_t opd__plugins[OPD_MAX_PLUGINS];

/* Loads the plugin at `path` and registers its ops. Refuses, with err
 * naming the file and the problem ("plugin /x/y.so: ..."), and leaving the
 * registry as it was: a file that is not there or not a regular file, a
 * file or a directory above it that anyone but root or the daemon's user
 * can write (a directory with the sticky bit, like /tmp, may be
 * world-writable), a file already loaded, one dlopen refuses, no
 * opd_plugin_init symbol, an init that returns NULL, another ABI version,
 * a bad name, version or op count, an op row that fails opd__op_validate,
 * an op name that already exists. Returns 0 or OPD_EINVAL (OPD_ELIMIT when
 * the tables are full). Only at start-up: not thread-safe. */
int opd__plugin_load(const char *path, char *err, size_t errlen);
/* Loads every "*.so" of `dir` (in name order) as opd__plugin_load does,
 * after checking the directory as it checks a plugin's directories. Stops
 * at the first refusal (err names the file). *n_loaded (may be NULL) gets
 * the number loaded from it. */
int opd__plugin_load_dir(const char *dir, int *n_loaded, char *err,
                         size_t errlen);
/* The plugin that registered opd__ops[op_index], or NULL for a built-in. */
const opd_plugin_rec_t *opd__op_plugin(int op_index);

#endif /* OPD_KERNELS_PLUGIN_H */
