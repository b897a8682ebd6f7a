/* The op table: every op is findable and documented. */
#include <string.h>

#include "tests/ops/optest.h"

Test(registry, all_ops_present_and_documented) {
  const char *want[] = {"noop", "copy", "add", "mul", "relu", "gelu",
                        "softmax", "layernorm", "rmsnorm", "matmul",
                        "conv2d", "nms"};
  cr_assert_eq(opd__n_ops, 12);
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    const opd_op_def_t *op = opd__op_find(want[i]);
    cr_assert(op, "%s missing", want[i]);
    cr_assert_str_eq(op->name, want[i]);
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
  }
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
