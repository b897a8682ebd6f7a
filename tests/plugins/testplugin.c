/* Plugins for tests/integration/test_plugins.c, one per -DVARIANT_<name>
 * (Makefile: build/plugins/test/<name>.so):
 *
 *   testops     loads; ops whose shape rules or kernels misbehave, so that
 *               the daemon's refusals at run time can be checked:
 *                 t_negshape  shape rule gives y a negative extent
 *                 t_overflow  shape rule gives y 2^40 x 2^40 elements
 *                 t_badrank   shape rule gives y rank 99
 *                 t_fail      kernel fails with OPD_EINVAL and a message
 *                 t_badrc     kernel returns 7, not an OPD_E* code
 *   bad_abi     built for operator ABI version 999
 *   no_init     exports no opd_plugin_init
 *   dup         an op named "relu", which is built in
 *   bad_schema  an op named "Bad-Name"
 *   bad_attr    an attribute whose default is not one of its choices
 */
#include <opd/op.h>

__attribute__((unused)) static int same(opd_kcall_t *call, opd_tshape_t *out) {
  out[0].dtype = call->in[0].dtype;
  out[0].rank = call->in[0].rank;
  for (int d = 0; d < call->in[0].rank; d++) out[0].shape[d] = call->in[0].shape[d];
  return 0;
}

__attribute__((unused)) static int ok_kernel(opd_kcall_t *call) {
  (void)call;
  return 0;
}

#define ROW(opname, shape_fn, kernel)                                   \
  {.name = opname, .summary = "test op", .n_in_min = 1, .n_in_max = 1, \
   .n_out = 1, .in = {{"x", OPD_DT(FLOAT32), "(...)"}},                 \
   .out = {{"y", OPD_DT(FLOAT32), "(...)"}}, .shape = shape_fn,         \
   .cpu_ref = kernel}

#if defined(VARIANT_testops)
static int negshape(opd_kcall_t *call, opd_tshape_t *out) {
  same(call, out);
  out[0].shape[0] = -3;
  return 0;
}
static int overflow(opd_kcall_t *call, opd_tshape_t *out) {
  (void)call;
  out[0].dtype = OPD_DTYPE_FLOAT32;
  out[0].rank = 2;
  out[0].shape[0] = out[0].shape[1] = (int64_t)1 << 40;
  return 0;
}
static int badrank(opd_kcall_t *call, opd_tshape_t *out) {
  (void)call;
  out[0].dtype = OPD_DTYPE_FLOAT32;
  out[0].rank = 99;
  return 0;
}
static int fail_kernel(opd_kcall_t *call) {
  return opd_kerr(call, OPD_EINVAL, "the kernel said no (x[0] = %g)",
                  (double)((const float *)call->in[0].data)[0]);
}
static int badrc_kernel(opd_kcall_t *call) {
  (void)call;
  return 7;
}
static const opd_op_def_t t1 = ROW("t_negshape", negshape, ok_kernel);
static const opd_op_def_t t2 = ROW("t_overflow", overflow, ok_kernel);
static const opd_op_def_t t3 = ROW("t_badrank", badrank, ok_kernel);
static const opd_op_def_t t4 = ROW("t_fail", same, fail_kernel);
static const opd_op_def_t t5 = ROW("t_badrc", same, badrc_kernel);
OPD_PLUGIN("testops", "0.3", &t1, &t2, &t3, &t4, &t5)

#elif defined(VARIANT_bad_abi)
static const opd_op_def_t t1 = ROW("t_abi", same, ok_kernel);
static const opd_op_def_t *const ops[] = {&t1};
static const opd_plugin_t desc = {999, "bad_abi", "1", 1, ops};
OPD_PLUGIN_EXPORT const opd_plugin_t *opd_plugin_init(void) { return &desc; }

#elif defined(VARIANT_no_init)
OPD_PLUGIN_EXPORT int not_an_opd_plugin(void) { return 0; }

#elif defined(VARIANT_dup)
static const opd_op_def_t t1 = ROW("relu", same, ok_kernel);
OPD_PLUGIN("dup", "1", &t1)

#elif defined(VARIANT_bad_schema)
static const opd_op_def_t t1 = ROW("Bad-Name", same, ok_kernel);
OPD_PLUGIN("bad_schema", "1", &t1)

#elif defined(VARIANT_bad_attr)
static const opd_op_def_t t1 = {
    .name = "t_attr", .n_in_min = 1, .n_in_max = 1, .n_out = 1,
    .in = {{"x", OPD_DT(FLOAT32), "(...)"}},
    .out = {{"y", OPD_DT(FLOAT32), "(...)"}},
    .n_attrs = 1,
    .attrs = {{.name = "mode", .type = OPD_ATTR_STR, .choices = "fast|exact",
               .def = {.type = OPD_ATTR_STR, .s = "sloppy"}}},
    .shape = same, .cpu_ref = ok_kernel};
OPD_PLUGIN("bad_attr", "1", &t1)

#else
#error "define one VARIANT_<name> (see the comment above)"
#endif
