/* Plugins: operators from shared objects, loaded at start.
 *
 * DESIGN
 * A plugin is a .so exporting `opd_plugin_init` (include/opd/op.h), which
 * returns its ABI version, name, version and rows. Loading one (redis
 * module.c's moduleLoad in miniature) is: resolve the path, refuse a file
 * anyone but root or the daemon's user could have written (the file and
 * every directory above it, as OpenSSH's StrictModes does; a sticky
 * directory such as /tmp may be world-writable, since nobody else can
 * replace what is in it), dlopen with RTLD_NOW (an unresolved symbol is a
 * refusal now, not a crash at the first call) and RTLD_LOCAL (plugins do
 * not see each other's symbols), find the init symbol, check the ABI
 * version before reading any other field, then check each row as a
 * built-in is checked (opd__op_validate) and against the names already in
 * the registry, and append it there. Any refusal names the file, undoes
 * the registrations of that file and dlcloses it; the daemon then does
 * not start (daemon/main.c). All of it runs before the first session, so
 * the registry is read-only once clients are served.
 *
 * Plugins are trusted: they run in the daemon's process with its rights.
 * These checks stop a mistake (a stale build, a clashing name) or a file
 * another user could swap, not a hostile plugin.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/runtime/plugin.h"

#include "kernels/runtime/opcheck.h"
#include "kernels/runtime/registry.h"

int opd__n_plugins;
opd_plugin_rec_t opd__plugins[OPD_MAX_PLUGINS];

#define ERR(code, ...) (snprintf(err, errlen, __VA_ARGS__), (code))

/* Whether st (of `what`) could have been written by someone other than
 * root or this process's user; fills why. */
static int unsafe(const struct stat *st, int dir, char *why, size_t cap) {
  uid_t me = geteuid();
  if (st->st_uid != 0 && st->st_uid != me) {
    snprintf(why, cap, "is owned by uid %u, not root or the daemon's user "
             "(uid %u)", (unsigned)st->st_uid, (unsigned)me);
    return 1;
  }
  if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(dir && (st->st_mode & S_ISVTX))) {
    snprintf(why, cap, "is writable by %s (mode %04o); chmod go-w it",
             (st->st_mode & S_IWOTH) ? "anyone" : "its group",
             (unsigned)(st->st_mode & 07777));
    return 1;
  }
  return 0;
}

/* Checks `real` (an absolute path without symlinks: realpath's) and every
 * directory above it. `is_dir`: real is itself a directory. */
static int check_path(const char *label, const char *real, int is_dir,
                      char *err, size_t errlen) {
  char p[PATH_MAX], why[160];
  struct stat st;
  if (stat(real, &st) != 0)
    return ERR(OPD_EINVAL, "plugin %s: %s", label, strerror(errno));
  if (is_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
    return ERR(OPD_EINVAL, "plugin %s: not a %s", label,
               is_dir ? "directory" : "regular file");
  if (unsafe(&st, is_dir, why, sizeof why))
    return ERR(OPD_EINVAL, "plugin %s: refused: the %s %s %s", label,
               is_dir ? "directory" : "file", real, why);
  snprintf(p, sizeof p, "%s", real);
  for (;;) {
    char *slash = strrchr(p, '/');
    if (slash == NULL) break;
    if (slash == p) slash[1] = '\0';
    else *slash = '\0';
    if (stat(p, &st) != 0)
      return ERR(OPD_EINVAL, "plugin %s: %s: %s", label, p, strerror(errno));
    if (unsafe(&st, 1, why, sizeof why))
      return ERR(OPD_EINVAL, "plugin %s: refused: its directory %s %s", label,
                 p, why);
    if (strcmp(p, "/") == 0) break;
  }
  return 0;
}

static const char *origin_of(int idx) {
  const opd_plugin_rec_t *p = opd__op_plugin(idx);
  return p ? p->path : "built-in";
}

/* Copies s into buf (cap) if it is a NUL-terminated string shorter than
 * cap; returns 0 or -1. */
static int copy_str(char *buf, size_t cap, const char *s) {
  if (s == NULL || memchr(s, '\0', cap) == NULL) return -1;
  strcpy(buf, s);
  return 0;
}

int opd__plugin_load(const char *path, char *err, size_t errlen) {
  char real[PATH_MAX], sub[300];
  int rc;
  if (opd__n_plugins >= OPD_MAX_PLUGINS)
    return ERR(OPD_ELIMIT, "plugin %s: more than %d plugins", path,
               OPD_MAX_PLUGINS);
  if (realpath(path, real) == NULL)
    return ERR(OPD_EINVAL, "plugin %s: %s", path, strerror(errno));
  for (int i = 0; i < opd__n_plugins; i++)
    if (strcmp(opd__plugins[i].path, real) == 0)
      return ERR(OPD_EINVAL, "plugin %s: already loaded (as %s)", path, real);
  if ((rc = check_path(path, real, 0, err, errlen)) != 0) return rc;

  dlerror();
  void *dl = dlopen(real, RTLD_NOW | RTLD_LOCAL);
  if (dl == NULL) {
    const char *why = dlerror();
    return ERR(OPD_EINVAL, "plugin %s: cannot load: %s", path,
               why ? why : "dlopen failed");
  }
  opd_plugin_rec_t *rec = &opd__plugins[opd__n_plugins];
  memset(rec, 0, sizeof *rec);
  snprintf(rec->path, sizeof rec->path, "%s", real);
  rec->dl = dl;
  rec->first_op = opd__n_ops;
  int first = opd__n_ops;

  opd_plugin_init_fn init;
  *(void **)&init = dlsym(dl, OPD_PLUGIN_INIT_SYMBOL);
  if (init == NULL) {
    rc = ERR(OPD_EINVAL, "plugin %s: no %s symbol: not an opd plugin (define "
             "it with OPD_PLUGIN(...) of opd/op.h)", path,
             OPD_PLUGIN_INIT_SYMBOL);
    goto fail;
  }
  const opd_plugin_t *p = init();
  if (p == NULL) {
    rc = ERR(OPD_EINVAL, "plugin %s: %s() returned NULL (the plugin refused "
             "to load)", path, OPD_PLUGIN_INIT_SYMBOL);
    goto fail;
  }
  if (p->abi_version != OPD_OP_ABI_VERSION) {
    rc = ERR(OPD_EINVAL, "plugin %s: built for operator ABI version %u; this "
             "daemon speaks version %d (rebuild it against this opd's "
             "opd/op.h)", path, (unsigned)p->abi_version, OPD_OP_ABI_VERSION);
    goto fail;
  }
  rec->abi_version = p->abi_version;
  if (copy_str(rec->name, sizeof rec->name, p->name) != 0 ||
      rec->name[0] == '\0') {
    rc = ERR(OPD_EINVAL, "plugin %s: its name is missing or %d bytes or "
             "longer", path, OPD_MAX_NAME);
    goto fail;
  }
  if (copy_str(rec->version, sizeof rec->version, p->version) != 0) {
    rc = ERR(OPD_EINVAL, "plugin %s: its version is missing or %d bytes or "
             "longer", path, OPD_MAX_NAME);
    goto fail;
  }
  if (p->n_ops < 1 || p->ops == NULL) {
    rc = ERR(OPD_EINVAL, "plugin %s: declares %d ops; expected at least one",
             path, p->n_ops);
    goto fail;
  }
  for (int i = 0; i < p->n_ops; i++) {
    const opd_op_def_t *op = p->ops[i];
    if ((rc = opd__op_validate(op, sub, sizeof sub)) != 0) {
      rc = ERR(OPD_EINVAL, "plugin %s: op %d: invalid schema: %s", path, i,
               sub);
      goto fail;
    }
    int dup = opd__op_index(op->name);
    if (dup >= 0) {
      rc = ERR(OPD_EINVAL, "plugin %s: op \"%s\" already exists (%s)", path,
               op->name, dup >= first ? "earlier in this plugin"
                                      : origin_of(dup));
      goto fail;
    }
    if (opd__op_register(op) < 0) {
      rc = ERR(OPD_ELIMIT, "plugin %s: op \"%s\": the daemon holds at most %d "
               "ops", path, op->name, OPD_MAX_OPS);
      goto fail;
    }
  }
  rec->n_ops = opd__n_ops - first;
  opd__n_plugins++;
  return 0;
fail:
  opd__ops_truncate(first);
  dlclose(dl);
  memset(rec, 0, sizeof *rec);
  return rc;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int opd__plugin_load_dir(const char *dir, int *n_loaded, char *err,
                         size_t errlen) {
  char real[PATH_MAX], file[PATH_MAX + 256];
  char **names = NULL;
  size_t n = 0, cap = 0;
  int rc = 0, loaded = 0;
  if (n_loaded) *n_loaded = 0;
  if (realpath(dir, real) == NULL)
    return ERR(OPD_EINVAL, "plugin directory %s: %s", dir, strerror(errno));
  if ((rc = check_path(dir, real, 1, err, errlen)) != 0) return rc;
  DIR *d = opendir(real);
  if (d == NULL)
    return ERR(OPD_EINVAL, "plugin directory %s: %s", dir, strerror(errno));
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (len < 4 || e->d_name[0] == '.' ||
        strcmp(e->d_name + len - 3, ".so") != 0)
      continue;
    if (n == cap) {
      char **grown = realloc(names, (cap = cap ? 2 * cap : 16) * sizeof *names);
      if (grown == NULL) {
        rc = ERR(OPD_ENOMEM, "plugin directory %s: out of memory", dir);
        goto done;
      }
      names = grown;
    }
    if ((names[n] = strdup(e->d_name)) == NULL) {
      rc = ERR(OPD_ENOMEM, "plugin directory %s: out of memory", dir);
      goto done;
    }
    n++;
  }
  qsort(names, n, sizeof *names, by_name);
  for (size_t i = 0; i < n && rc == 0; i++) {
    snprintf(file, sizeof file, "%s/%s", real, names[i]);
    if ((rc = opd__plugin_load(file, err, errlen)) == 0) loaded++;
  }
done:
  closedir(d);
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
  if (n_loaded) *n_loaded = loaded;
  return rc;
}

const opd_plugin_rec_t *opd__op_plugin(int op_index) {
  for (int i = 0; i < opd__n_plugins; i++) {
    const opd_plugin_rec_t *p = &opd__plugins[i];
    if (op_index >= p->first_op && op_index < p->first_op + p->n_ops) return p;
  }
  return NULL;
}
