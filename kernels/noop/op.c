/* noop: takes any tensors, does nothing. Measures the round trip of a run.
 *
 * DESIGN
 * Accepts 0..OPD_MAX_TENSORS inputs of any dtype and no outputs, so a
 * client can time the daemon's validation and dispatch alone.
 */
#include "kernels/common/cpu.h"

OPD_OP_DECLARE(noop);

#define ANY_IN {"x", OPD_DT_ANY, "any shape"}

static int noop_shape(opd_kcall_t *call, opd_tshape_t *out) {
  (void)call;
  (void)out;
  return 0;
}

const opd_op_def_t opd__op_noop = {
    .name = "noop",
    .summary = "does nothing (measures round-trip latency)",
    .n_in_min = 0,
    .n_in_max = OPD_MAX_TENSORS,
    .n_out = 0,
    .in = {ANY_IN, ANY_IN, ANY_IN, ANY_IN, ANY_IN, ANY_IN, ANY_IN, ANY_IN,
           ANY_IN, ANY_IN, ANY_IN, ANY_IN, ANY_IN, ANY_IN, ANY_IN, ANY_IN},
    .shape_doc = "x... (any) -> nothing",
    .shape = noop_shape,
    .cpu_ref = opd__noop_cpu_ref,
    .cuda = opd__noop_cuda,
    .cuda_dtypes = OPD_DT_ANY,
};
