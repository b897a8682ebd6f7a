/* Unit: the checks a plugin's row and results go through (kernels/
 * runtime/opcheck.c) — every built-in row passes the schema check the plugin
 * loader applies, each kind of malformed row is refused with a message
 * naming the field, the registry grows and shrinks at start-up only, and
 * a shape rule's or kernel's bad results become errors. */
#include <criterion/criterion.h>
#include <string.h>

#include "kernels/kernel.h"
#include "kernels/runtime/exec.h"
#include "kernels/runtime/opcheck.h"
#include "kernels/runtime/registry.h"

Test(opcheck, every_builtin_row_is_valid) {
  char err[300];
  cr_assert_eq(opd__n_ops, opd__n_builtin_ops);
  for (int i = 0; i < opd__n_ops; i++)
    cr_assert_eq(opd__op_validate(opd__ops[i], err, sizeof err), 0, "%s: %s",
                 opd__ops[i]->name, err);
}

static int same(opd_kcall_t *call, opd_tshape_t *out) {
  out[0].dtype = call->in[0].dtype;
  out[0].rank = call->in[0].rank;
  memcpy(out[0].shape, call->in[0].shape, sizeof out[0].shape);
  return 0;
}
static int nothing(opd_kcall_t *call) { (void)call; return 0; }

static opd_op_def_t good(void) {
  opd_op_def_t op = {.name = "t_good", .n_in_min = 1, .n_in_max = 2, .n_out = 1,
                     .in = {{"x", OPD_DT(FLOAT32), ""}, {"y", OPD_DT_ANY, ""}},
                     .out = {{"z", OPD_DT(FLOAT32), ""}},
                     .n_attrs = 1,
                     .attrs = {{.name = "mode", .type = OPD_ATTR_STR,
                                .choices = "a|bb",
                                .def = {.type = OPD_ATTR_STR, .s = "bb"}}},
                     .shape = same, .cpu_ref = nothing};
  return op;
}

static void refused(const opd_op_def_t *op, const char *needle) {
  char err[300] = "";
  cr_assert_eq(opd__op_validate(op, err, sizeof err), OPD_EINVAL,
               "accepted (wanted \"%s\")", needle);
  cr_assert(strstr(err, needle) != NULL, "\"%s\" lacks \"%s\"", err, needle);
}

Test(opcheck, malformed_rows_are_refused_naming_the_field) {
  char err[300];
  opd_op_def_t op = good();
  cr_assert_eq(opd__op_validate(&op, err, sizeof err), 0, "%s", err);
  refused(NULL, "a row is NULL");
  op = good(), op.name = "9lives";
  refused(&op, "op name \"9lives\" is invalid");
  op = good(), op.name = NULL;
  refused(&op, "op name \"(null)\" is invalid");
  op = good(), op.n_in_min = 3;
  refused(&op, "t_good: n_in_min 3 and n_in_max 2");
  op = good(), op.n_in_max = OPD_MAX_TENSORS + 1;
  refused(&op, "max <= 16");
  op = good(), op.n_out = -1;
  refused(&op, "n_out -1 is outside 0..16");
  op = good(), op.out[0].name = NULL;
  refused(&op, "output 0 has no name");
  op = good(), op.in[0].dtypes = 0;
  refused(&op, "input 0 (x) accepts no dtype");
  op = good(), op.n_attrs = OPD_MAX_ATTRS + 1;
  refused(&op, "n_attrs 17");
  op = good(), op.attrs[0].type = 42;
  refused(&op, "attribute \"mode\" has unknown type 42");
  op = good(), op.attrs[0].def.type = OPD_ATTR_INT;
  refused(&op, "its default has type 1, not the attribute's type 4");
  op = good(), strcpy(op.attrs[0].def.s, "c");
  refused(&op, "its default \"c\" is not one of a|bb");
  op = good(), op.attrs[0].required = 1, op.attrs[0].type = OPD_ATTR_INT;
  refused(&op, "choices are for str attributes only");
  op = good(), op.n_attrs = 2, op.attrs[1] = op.attrs[0];
  refused(&op, "attribute \"mode\" is listed twice");
  op = good(), op.flags = 0x100;
  refused(&op, "unknown flags 0x100");
  op = good(), op.shape = NULL;
  refused(&op, "no shape rule");
  op = good(), op.cpu_ref = NULL;
  refused(&op, "no CPU reference kernel");
  op = good(), op.cuda = (opd_cuda_fn)(void (*)(void))nothing;
  refused(&op, "a CUDA kernel that takes no dtype");
}

Test(opcheck, registry_grows_at_start_and_shrinks_back) {
  static opd_op_def_t op;
  op = good();
  int n = opd__n_ops;
  int idx = opd__op_register(&op);
  cr_assert_eq(idx, n);
  cr_assert_eq(opd__op_find("t_good"), &op);
  opd__ops_truncate(0); /* never below the built-ins */
  cr_assert_eq(opd__n_ops, opd__n_builtin_ops);
  cr_assert_null(opd__op_find("t_good"));
}

static int64_t bad_dim;
static int bad_rank, bad_dtype, rule_rc;
static int odd_rule(opd_kcall_t *call, opd_tshape_t *out) {
  same(call, out);
  out[0].shape[0] = bad_dim;
  if (bad_rank) out[0].rank = bad_rank;
  if (bad_dtype) out[0].dtype = bad_dtype;
  return rule_rc;
}

Test(opcheck, shape_results_and_kernel_codes_are_checked) {
  opd_op_def_t op = good();
  op.shape = odd_rule;
  opd_kcall_t call = {.op = &op, .n_in = 1, .n_out = 1};
  call.in[0] = (opd_tview_t){.dtype = OPD_DTYPE_FLOAT32, .rank = 2,
                             .shape = {4, 5}, .numel = 20};
  opd_tshape_t out[OPD_MAX_TENSORS];
  bad_dim = 4;
  cr_assert_eq(opd__op_shape(&call, out), 0, "%s", call.err);
  cr_assert_eq(out[0].shape[1], 5);
  bad_dim = -1;
  cr_assert_eq(opd__op_shape(&call, out), OPD_EINTERNAL);
  cr_assert(strstr(call.err, "the negative extent -1 in dim 0") != NULL, "%s",
            call.err);
  bad_dim = INT64_MAX / 2;
  cr_assert_eq(opd__op_shape(&call, out), OPD_EOVERFLOW);
  cr_assert(strstr(call.err, "overflows 64 bits") != NULL, "%s", call.err);
  bad_dim = 4, bad_rank = OPD_MAX_RANK + 1;
  cr_assert_eq(opd__op_shape(&call, out), OPD_EINTERNAL);
  cr_assert(strstr(call.err, "rank 9, outside 0..8") != NULL, "%s", call.err);
  bad_rank = 0, bad_dtype = 77;
  cr_assert_eq(opd__op_shape(&call, out), OPD_EINTERNAL);
  cr_assert(strstr(call.err, "dtype 77, which is not a dtype") != NULL, "%s",
            call.err);
  bad_dtype = 0, rule_rc = 3;
  cr_assert_eq(opd__op_shape(&call, out), OPD_EBACKEND);
  cr_assert(strstr(call.err, "returned 3, which is not an OPD_E* code") != NULL,
            "%s", call.err);
  rule_rc = OPD_ESHAPE;
  opd__kerr(&call, 0, "x");
  cr_assert_eq(opd__op_shape(&call, out), OPD_ESHAPE);
  rule_rc = 0;
  /* kernel results */
  cr_assert_eq(opd__kernel_rc(&call, 0), 0);
  cr_assert_eq(opd__kernel_rc(&call, OPD_EDTYPE), OPD_EDTYPE);
  opd__kerr(&call, 0, "boom");
  cr_assert_eq(opd__kernel_rc(&call, -1000), OPD_EBACKEND);
  cr_assert_str_eq(call.err, "returned -1000, which is not an OPD_E* code: boom");
  memset(call.err, 'x', sizeof call.err); /* not terminated */
  cr_assert_eq(opd__kernel_rc(&call, OPD_EINVAL), OPD_EINVAL);
  cr_assert_eq(strlen(call.err), sizeof call.err - 1);
}
