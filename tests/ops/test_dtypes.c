/* Dtypes in the shape rules: outputs follow the input dtype, mixed dtypes
 * are refused, and the schema says what the CPU takes (cpu_dtypes): the
 * element-wise, row-wise, reduce and matmul families every float dtype
 * (float16 and bfloat16 computed in float32), conv2d float32 only. */
#include "tests/ops/optest.h"

#define F3 (OPD_DT(FLOAT32) | OPD_DT(FLOAT16) | OPD_DT(BFLOAT16))
#define F4 (F3 | OPD_DT(FLOAT64))

static const char *const float_ops[] = {"div",       "relu",   "gelu",
                                        "softmax",   "layernorm", "rmsnorm", "matmul",
                                        "linear",    "mean",    "amax"};

Test(dtypes, schema_lists_every_float_dtype_on_the_cpu) {
  for (size_t i = 0; i < sizeof float_ops / sizeof float_ops[0]; i++) {
    const opd_op_def_t *op = opd__op_find(float_ops[i]);
    cr_assert(op, "%s", float_ops[i]);
    cr_assert_eq(op->cpu_dtypes, F4, "%s", float_ops[i]);
    for (int k = 0; k < op->n_in_max; k++)
      cr_assert_eq(op->in[k].dtypes, F4, "%s input %d", float_ops[i], k);
    cr_assert_eq(op->out[0].dtypes, F4, "%s", float_ops[i]);
  }
  /* add, sub, mul: the float dtypes and the integer ones (kernels/binary/int.h) */
  const char *int_ops[] = {"add", "sub", "mul"};
  uint32_t ints = OPD_DT(INT8) | OPD_DT(UINT8) | OPD_DT(INT32) | OPD_DT(INT64);
  for (int i = 0; i < 3; i++) {
    const opd_op_def_t *op = opd__op_find(int_ops[i]);
    cr_assert_eq(op->cpu_dtypes, F4 | ints, "%s", int_ops[i]);
    cr_assert_eq(op->out[0].dtypes, F4 | ints, "%s", int_ops[i]);
  }
  const opd_op_def_t *conv = opd__op_find("conv2d");
  cr_assert_eq(conv->cpu_dtypes, OPD_DT_FLOAT);
  cr_assert_eq(conv->in[0].dtypes, F3);
  cr_assert_eq(opd__op_find("nms")->in[0].dtypes, OPD_DT_FLOAT);
}

Test(dtypes, unary_and_rows_follow_input) {
  const char *ops[] = {"relu", "gelu", "softmax", "layernorm", "rmsnorm"};
  int32_t dts[] = {OPD_DTYPE_FLOAT32, OPD_DTYPE_FLOAT16, OPD_DTYPE_BFLOAT16};
  for (size_t o = 0; o < 5; o++)
    for (int d = 0; d < 3; d++) {
      opd_kcall_t *c = ot_new(ops[o]);
      ot_in(c, 0, dts[d], 2, OT_SHAPE(3, 5), NULL);
      cr_assert_eq(ot_shape(c), 0, "%s: %s", ops[o], c->err);
      cr_assert_eq(c->out[0].dtype, dts[d], "%s", ops[o]);
      ot_free(c);
    }
}

Test(dtypes, binary_follows_and_refuses_mixed) {
  opd_kcall_t *c = ot_new("add");
  ot_in(c, 0, OPD_DTYPE_BFLOAT16, 2, OT_SHAPE(4, 3), NULL);
  ot_in(c, 1, OPD_DTYPE_BFLOAT16, 1, OT_SHAPE(3), NULL);
  cr_assert_eq(ot_shape(c), 0, "%s", c->err);
  cr_assert_eq(c->out[0].dtype, OPD_DTYPE_BFLOAT16);
  ot_free(c);
  const char *ops[] = {"add", "mul"};
  for (int o = 0; o < 2; o++) {
    c = ot_new(ops[o]);
    ot_in(c, 0, OPD_DTYPE_FLOAT16, 2, OT_SHAPE(4, 3), NULL);
    ot_in(c, 1, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(3), NULL);
    ot_expect_err(c, OPD_EDTYPE, "a is float16 but b is float32", NULL);
    ot_free(c);
  }
}

Test(dtypes, norm_params_must_match_x) {
  opd_kcall_t *c = ot_new("layernorm");
  ot_in(c, 0, OPD_DTYPE_BFLOAT16, 2, OT_SHAPE(4, 3), NULL);
  ot_in(c, 1, OPD_DTYPE_BFLOAT16, 1, OT_SHAPE(3), NULL);
  ot_in(c, 2, OPD_DTYPE_FLOAT32, 1, OT_SHAPE(3), NULL);
  ot_expect_err(c, OPD_EDTYPE, "x is bfloat16 but bias is float32", NULL);
  ot_free(c);
  c = ot_new("rmsnorm");
  ot_in(c, 0, OPD_DTYPE_FLOAT16, 2, OT_SHAPE(4, 3), NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT16, 1, OT_SHAPE(3), NULL);
  cr_assert_eq(ot_shape(c), 0, "%s", c->err);
  cr_assert_eq(c->out[0].dtype, OPD_DTYPE_FLOAT16);
  ot_free(c);
}

Test(dtypes, matmul_and_conv2d) {
  opd_kcall_t *c = ot_new("matmul");
  ot_in(c, 0, OPD_DTYPE_BFLOAT16, 3, OT_SHAPE(2, 4, 8), NULL);
  ot_in(c, 1, OPD_DTYPE_BFLOAT16, 2, OT_SHAPE(8, 5), NULL);
  cr_assert_eq(ot_shape(c), 0, "%s", c->err);
  cr_assert_eq(c->out[0].dtype, OPD_DTYPE_BFLOAT16);
  ot_free(c);
  c = ot_new("matmul");
  ot_in(c, 0, OPD_DTYPE_FLOAT32, 2, OT_SHAPE(4, 8), NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT16, 2, OT_SHAPE(8, 5), NULL);
  ot_expect_err(c, OPD_EDTYPE, "a is float32 but b is float16", NULL);
  ot_free(c);
  c = ot_new("conv2d");
  ot_in(c, 0, OPD_DTYPE_FLOAT16, 4, OT_SHAPE(1, 3, 8, 8), NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT16, 4, OT_SHAPE(4, 3, 3, 3), NULL);
  cr_assert_eq(ot_shape(c), 0, "%s", c->err);
  cr_assert_eq(c->out[0].dtype, OPD_DTYPE_FLOAT16);
  ot_free(c);
  c = ot_new("conv2d");
  ot_in(c, 0, OPD_DTYPE_FLOAT16, 4, OT_SHAPE(1, 3, 8, 8), NULL);
  ot_in(c, 1, OPD_DTYPE_FLOAT16, 4, OT_SHAPE(4, 3, 3, 3), NULL);
  ot_in(c, 2, OPD_DTYPE_BFLOAT16, 1, OT_SHAPE(4), NULL);
  ot_expect_err(c, OPD_EDTYPE, "x is float16 but bias is bfloat16", NULL);
  ot_free(c);
}
