/* The compare family's table: eq, ne, lt, le, gt, ge, a, b -> out bool,
 * broadcasting (torch.eq ... torch.ge), one row per op.
 *
 * DESIGN
 * a and b share one dtype, any number dtype or bool (no promotion: the
 * Python layers give a number operand as a 0-d tensor of the other's
 * dtype, as torch's result_type does for a number of that kind); out is
 * bool of the broadcast shape. Comparisons are the dtype's own (IEEE for
 * floats: a NaN is unequal to everything, ne gives true; float16 and
 * bfloat16 compared as float32, which is exact). The rows differ only in
 * the operation, so they share the schema and the shape rule; one body
 * per backend (cpu.c, cuda.cu) takes the operation from the row's name.
 */
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/common/strided.h"
#include "kernels/compare/compare.h"

static int compare_shape(opd_kcall_t *call, opd_tshape_t *out) {
  const opd_tview_t *a = &call->in[0], *b = &call->in[1];
  char sa[128], sb[128];
  if (a->dtype != b->dtype)
    return opd__kerr(call, OPD_EDTYPE, "a is %s but b is %s; expected one dtype (convert one "
                     "of them first)", opd__kdtype_name(a->dtype), opd__kdtype_name(b->dtype));
  if (opd__bcast_shape(a->shape, a->rank, b->shape, b->rank, out[0].shape, &out[0].rank) != 0)
    return opd__kerr(call, OPD_ESHAPE, "a %s and b %s do not broadcast together",
                     opd__shape_str(sa, sizeof sa, a->shape, a->rank),
                     opd__shape_str(sb, sizeof sb, b->shape, b->rank));
  out[0].dtype = OPD_DTYPE_BOOL;
  return 0;
}

#define COMPARE_ROW(op, sym)                                               \
  {                                                                        \
      .name = #op,                                                         \
      .summary = "elementwise a " sym " b as bool, broadcast (torch." #op ")", \
      .n_in_min = 2,                                                       \
      .n_in_max = 2,                                                       \
      .n_out = 1,                                                          \
      .in = {{"a", OPD_DT_CMP, "(...) a number dtype or bool"},            \
             {"b", OPD_DT_CMP, "(...) a's dtype, broadcastable with a"}},  \
      .out = {{"out", OPD_DT(BOOL), "broadcast shape of a and b, bool"}},  \
      .shape_doc = "a (...), b (...) -> out (broadcast(a, b)) bool",       \
      .shape = compare_shape,                                              \
      .flags = OPD_OPF_CPU_STRIDED | OPD_OPF_STEADY_COST, /* behind the    \
                                           element-wise driver */          \
      OPD_ROW_KERNELS_STRIDED(op),                                         \
      .cuda_dtypes = OPD_DT_CMP,                                           \
  }

OPD_OP_DECLARE(eq);
OPD_EW_STRIDED_KERNELS(eq)
OPD_OP_DECLARE(ne);
OPD_EW_STRIDED_KERNELS(ne)
OPD_OP_DECLARE(lt);
OPD_EW_STRIDED_KERNELS(lt)
OPD_OP_DECLARE(le);
OPD_EW_STRIDED_KERNELS(le)
OPD_OP_DECLARE(gt);
OPD_EW_STRIDED_KERNELS(gt)
OPD_OP_DECLARE(ge);
OPD_EW_STRIDED_KERNELS(ge)

const opd_op_def_t opd__op_eq = COMPARE_ROW(eq, "==");
const opd_op_def_t opd__op_ne = COMPARE_ROW(ne, "!=");
const opd_op_def_t opd__op_lt = COMPARE_ROW(lt, "<");
const opd_op_def_t opd__op_le = COMPARE_ROW(le, "<=");
const opd_op_def_t opd__op_gt = COMPARE_ROW(gt, ">");
const opd_op_def_t opd__op_ge = COMPARE_ROW(ge, ">=");
