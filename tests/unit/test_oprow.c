/* Unit: the operator rows are the only op table. The daemon's CUDA backend
 * takes an op's kernel from its row (opd__cuda_kernel, daemon/backend/:
 * the row's `cuda`
 * and `cuda_dtypes`, no name-keyed lookup), a build with the CUDA backend
 * links the rows' CUDA kernels (their weak references resolve), and the
 * generic code (daemon/, kernels/runtime/exec.c,
 * kernels/runtime/registry.c outside its list) names no op: what differs between ops is a field or flag of the
 * row. Run from the repository root (make test does). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/types.h"
#include "kernels/runtime/registry.h"

Test(oprow, cuda_kernel_comes_from_the_row) {
  opd_err_t e;
  int with_cuda = 0;
  for (int i = 0; i < opd__n_ops; i++) {
    const opd_op_def_t *op = opd__ops[i];
    with_cuda += op->cuda != NULL;
    for (int dt = 0; dt < OPD_DTYPE_COUNT_; dt++) {
      int want = op->cuda != NULL &&
                 (dt == 0 || ((op->cuda_dtypes >> dt) & 1));
      e.msg[0] = '\0';
      const void *got = opd__cuda_kernel(op, dt, &e);
      cr_assert_eq(got != NULL, want, "%s dtype %d: kernel %p, want %d (%s)",
                   op->name, dt, got, want, e.msg);
      if (got) cr_assert_eq(got, op, "%s: not its own row", op->name);
      else cr_assert(e.msg[0], "%s dtype %d: no kernel and no reason",
                     op->name, dt);
    }
  }
  /* a daemon with the CUDA backend has its kernels linked; one without
   * has none (the weak references stay NULL) */
  const void *k = opd__cuda_kernel(opd__ops[0], 0, &e);
  int backend = k != NULL || strstr(e.msg, "built without CUDA") == NULL;
  if (backend)
    cr_assert_gt(with_cuda, 0, "CUDA backend, but no row has a CUDA kernel");
  else
    cr_assert_eq(with_cuda, 0, "a build without CUDA has CUDA kernels");
  cr_assert_null(opd__cuda_kernel(NULL, 0, &e));
}

/* Appends `path`'s text to *buf; returns 0, or -1 if unreadable. */
static int slurp(const char *path, char **buf, size_t *len) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char chunk[4096];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
    *buf = realloc(*buf, *len + n + 1);
    cr_assert(*buf);
    memcpy(*buf + *len, chunk, n);
    *len += n;
    (*buf)[*len] = '\0';
  }
  fclose(f);
  return 0;
}

/* Fails if `text` (from `path`) holds an op's name as a string literal. */
static void no_op_names(const char *path, const char *text) {
  for (int i = 0; i < opd__n_ops; i++) {
    char lit[OPD_MAX_NAME + 2];
    snprintf(lit, sizeof lit, "\"%s\"", opd__ops[i]->name);
    cr_expect(strstr(text, lit) == NULL,
              "%s names op %s: make it a field or flag of the op's row",
              path, lit);
  }
}

Test(oprow, no_op_names_in_generic_code) {
  int files = 0;
  DIR *d = opendir("daemon");
  cr_assert(d, "daemon/: run the tests from the repository root");
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    size_t n = strlen(e->d_name);
    if (n < 3 || e->d_name[0] == '.' ||
        (strcmp(e->d_name + n - 2, ".c") && strcmp(e->d_name + n - 2, ".h")))
      continue;
    char path[300], *text = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "daemon/%s", e->d_name);
    if (slurp(path, &text, &len) == 0 && text) {
      no_op_names(path, text);
      files++;
    }
    free(text);
  }
  closedir(d);
  cr_assert_gt(files, 5, "read only %d daemon sources", files);

  char *text = NULL;
  size_t len = 0;
  cr_assert_eq(slurp("kernels/runtime/exec.c", &text, &len), 0);
  no_op_names("kernels/runtime/exec.c", text);
  free(text);

  /* kernels/runtime/registry.c names ops only in its X(<op>) lines */
  text = NULL, len = 0;
  cr_assert_eq(slurp("kernels/runtime/registry.c", &text, &len), 0);
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    if (strstr(line, "X(")) continue;
    no_op_names("kernels/runtime/registry.c", line);
  }
  free(text);
}
