/* The op table: every op is findable and documented, and every op folder
 * and every row of a family's table under kernels/ is registered (the
 * registry is iterated, never listed here: adding an op must not need an
 * edit of this file). */
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "tests/ops/optest.h"

/* The X(<op>) lines of OPD_OPS in kernels/runtime/registry.c, in order: the
 * registry as its source states it. Returns how many. */
static int registry_lines(char names[][OPD_MAX_NAME], int max) {
  FILE *f = fopen("kernels/runtime/registry.c", "r");
  cr_assert(f, "kernels/runtime/registry.c: run the tests from the repository root");
  char line[256];
  int n = 0, in = 0;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "#define OPD_OPS(X)", 18) == 0) {
      in = 1;
      continue;
    }
    if (!in) continue;
    char name[OPD_MAX_NAME];
    if (sscanf(line, " X(%63[a-z0-9_])", name) == 1 && n < max)
      snprintf(names[n++], OPD_MAX_NAME, "%s", name);
    if (!strstr(line, "\\")) break; /* the macro's last line */
  }
  fclose(f);
  return n;
}

/* The rows defined in kernels/<dir>/<file> (op.c: the op of its folder;
 * ops.c: the table of a family), by their C names opd__op_<name>: fills
 * names, returns how many (0 when the file is not there); *test_only is 1
 * when the file is compiled only in test builds. */
static int row_file(const char *dir, const char *file,
                    char names[][OPD_MAX_NAME], int max, int *test_only) {
  char path[512], line[256];
  snprintf(path, sizeof path, "kernels/%s/%s", dir, file);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  *test_only = 0;
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "#ifdef OPD_TEST_OPS", 19) == 0) *test_only = 1;
    char name[OPD_MAX_NAME];
    if (sscanf(line, "const opd_op_def_t opd__op_%63[a-z0-9_]", name) == 1 &&
        n < max)
      snprintf(names[n++], OPD_MAX_NAME, "%s", name);
  }
  fclose(f);
  return n;
}

Test(registry, all_ops_present_and_documented) {
  char want[64][OPD_MAX_NAME];
  int n_want = registry_lines(want, 64);
  cr_assert_geq(n_want, 1, "no X lines in OPD_OPS of kernels/runtime/registry.c");
#ifdef OPD_TEST_OPS
  cr_assert_eq(opd__n_ops, n_want + 3, "OPD_OPS plus the test ops (fault, hostsync, "
               "hostsync_nocap)");
#else
  cr_assert_eq(opd__n_ops, n_want);
#endif
  for (int i = 0; i < n_want; i++) /* the table keeps the listed order */
    cr_assert_str_eq(opd__ops[i]->name, want[i]);
  for (int i = 0; i < opd__n_ops; i++) {
    const opd_op_def_t *op = opd__op_find(opd__ops[i]->name);
    cr_assert(op == opd__ops[i], "%s: not found by its name",
              opd__ops[i]->name);
    cr_assert_eq(opd__op_index(op->name), i);
    cr_assert(op->summary && op->summary[0], "%s: no summary", op->name);
    cr_assert(op->shape_doc && op->shape_doc[0], "%s: no shape_doc",
              op->name);
    cr_assert(op->shape && op->cpu_ref, "%s: no rule or ref", op->name);
    cr_assert(op->n_in_min <= op->n_in_max && op->n_in_max <= OPD_MAX_TENSORS);
    for (int k = 0; k < op->n_in_max; k++)
      cr_assert(op->in[k].name && op->in[k].doc && op->in[k].dtypes,
                "%s: input %d undocumented", op->name, k);
    for (int k = 0; k < op->n_out; k++)
      cr_assert(op->out[k].name && op->out[k].doc && op->out[k].dtypes,
                "%s: output %d undocumented", op->name, k);
    for (int k = 0; k < op->n_attrs; k++) {
      cr_assert(op->attrs[k].name && op->attrs[k].doc,
                "%s: attr %d undocumented", op->name, k);
      cr_assert(op->attrs[k].required ||
                    op->attrs[k].def.type == op->attrs[k].type,
                "%s: attr %s default has the wrong type", op->name,
                op->attrs[k].name);
    }
    /* a CUDA kernel states the dtypes it takes */
    cr_assert(!op->cuda || op->cuda_dtypes, "%s: cuda without cuda_dtypes",
              op->name);
    cr_assert(!op->cuda_workspace || op->cuda,
              "%s: cuda_workspace without a cuda kernel", op->name);
  }
  /* every op folder (op.c: one row, under its folder's name) and every
   * row of a family's table (ops.c) is registered (test-only ops only in
   * test builds); every listed op has its folder or family row */
  DIR *d = opendir("kernels");
  cr_assert(d, "kernels/: run the tests from the repository root");
  int folders = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.') continue;
    static const char *const files[] = {"op.c", "ops.c"};
    for (int fi = 0; fi < 2; fi++) {
      char rows[64][OPD_MAX_NAME];
      int test_only = 0;
      int n = row_file(e->d_name, files[fi], rows, 64, &test_only);
      if (fi == 0 && n > 0) { /* an op folder: its row has its name */
        cr_assert_eq(n, 1, "kernels/%s/op.c defines %d rows", e->d_name, n);
        snprintf(rows[0], OPD_MAX_NAME, "%.63s", e->d_name);
      }
#ifdef OPD_TEST_OPS
      test_only = 0;
#endif
      for (int k = 0; k < n; k++) {
        const opd_op_def_t *op = opd__op_find(rows[k]);
        if (test_only) {
          cr_assert_null(op, "%s: a test-only op in a normal build", rows[k]);
          continue;
        }
        cr_assert(op, "kernels/%s/%s: %s is not registered in "
                  "kernels/runtime/registry.c", e->d_name, files[fi], rows[k]);
        folders++;
      }
    }
  }
  closedir(d);
  cr_assert_eq(folders, opd__n_ops, "ops without a folder under kernels/");
  for (int i = 0; i < opd__n_ops; i++)
    for (int j = i + 1; j < opd__n_ops; j++)
      cr_assert(strcmp(opd__ops[i]->name, opd__ops[j]->name) != 0);
  cr_assert_null(opd__op_find("nope"));
  cr_assert_null(opd__op_find(NULL));
}

Test(registry, kerr_formats) {
  opd_kcall_t c = {0};
  cr_assert_eq(opd__kerr(&c, OPD_ESHAPE, "x=%d", 5), OPD_ESHAPE);
  cr_assert_str_eq(c.err, "x=5");
}

Test(noop, takes_anything) {
  opd_kcall_t *c = ot_new("noop");
  int64_t v = 7;
  ot_in(c, 0, OPD_DTYPE_INT64, 0, NULL, &v);
  ot_in(c, 1, OPD_DTYPE_BOOL, 1, OT_SHAPE(0), NULL);
  ot_ready(c);
  cr_assert_eq(ot_run(c, 0, &opd__exec_serial), 0);
  cr_assert_eq(ot_run(c, 1, ot_pool(2)), 0);
  cr_assert_eq(c->op->n_in_max, OPD_MAX_TENSORS);
  cr_assert_eq(c->op->in[OPD_MAX_TENSORS - 1].dtypes, OPD_DT_ANY);
}
