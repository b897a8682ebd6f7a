/* The binary family's table: broadcasting elementwise ops a, b -> out,
 * one row per op (add, mul, sub, div), float32, float64, float16 and
 * bfloat16 on both backends (the CPU computes halves in float32); add,
 * sub and mul also int8, uint8, int32 and int64 (kernels/binary/int.h:
 * wraparound, an integral alpha).
 *
 * DESIGN
 * The ops of the family differ only in the scalar operation, so their rows
 * share everything else: the schema, torch broadcasting for the output
 * shape (one rule, below), INPLACE (out may be exactly a, or b when that
 * operand has the output's shape), and one body per backend (cpu.c,
 * cuda.cu), whose per-op entry points each row names. A new op of the
 * family is one BINARY_ROW here plus its operation in cpu.c and cuda.cu
 * (and its X line in kernels/runtime/registry.c). add and sub take
 * torch's alpha (out = a + alpha b, a - alpha b). The rows set
 * OPD_OPF_CPU_STRIDED: the CPU entry points are cpu.c's behind the
 * element-wise strided driver (OPD_EW_STRIDED_KERNELS,
 * kernels/common/strided.h), so a transposed, stepped or stride-0 operand
 * and a strided out= are read and written as they are.
 */
#include "kernels/binary/int.h"
#include "kernels/common/cast.h"
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/common/strided.h"

/* Shape rule: out = broadcast(a, b) in a's dtype; OPD_EDTYPE when a and b
 * differ in dtype ("a is float16 but b is float32": no implicit
 * promotion, unlike torch), OPD_ESHAPE naming the dims that do not
 * broadcast. */
static int binary_shape(opd_kcall_t *call, opd_tshape_t *out) {
  const opd_tview_t *a = &call->in[0], *b = &call->in[1];
  int rank;
  int rc = opd__same_dtype(call); /* mixed dtypes: OPD_EDTYPE */
  if (rc) return rc;
  rc = opd__bcast_shape(a->shape, a->rank, b->shape, b->rank,
                            out[0].shape, &rank);
  if (rc < 0) {
    char sa[128], sb[128];
    int d = -1 - rc;
    int r = a->rank > b->rank ? a->rank : b->rank;
    return opd__kerr(call, OPD_ESHAPE,
                     "input 0 (a) has shape %s and input 1 (b) has shape %s, "
                     "which do not broadcast: %lld vs %lld at dim %d from the "
                     "right, expected equal or one of them 1",
                     opd__shape_str(sa, sizeof sa, a->shape, a->rank),
                     opd__shape_str(sb, sizeof sb, b->shape, b->rank),
                     (long long)(a->rank - r + d >= 0
                                     ? a->shape[a->rank - r + d]
                                     : 1),
                     (long long)(b->rank - r + d >= 0
                                     ? b->shape[b->rank - r + d]
                                     : 1),
                     r - d);
  }
  out[0].rank = rank;
  out[0].dtype = a->dtype;
  if (OPD_BIN_IS_INT(a->dtype) && call->op->n_attrs >= 1 &&
      call->attr[0].f != (double)(int64_t)call->attr[0].f)
    return opd__kerr(call, OPD_EATTR, "alpha = %g is not an integer, which %s tensors need "
                     "(as torch)", call->attr[0].f, opd__kdtype_name(a->dtype));
  return 0;
}

/* The row of binary op `op`: `sym` is its operator in the summary,
 * `torch` the torch function it matches, DTS its dtypes; more fields
 * (attributes) may follow. */
#define BINARY_ROW(op, sym, torch, DTS, ...)                               \
  {                                                                        \
    .name = #op,                                                           \
    .summary = "elementwise a " sym " b with broadcasting (" torch ")",    \
    .n_in_min = 2,                                                         \
    .n_in_max = 2,                                                         \
    .n_out = 1,                                                            \
    .in = {{"a", DTS, "(...) broadcastable with b"},                       \
           {"b", DTS, "(...) broadcastable with a, a's dtype"}},          \
    .out = {{"out", DTS, "broadcast shape of a and b"}},                   \
    .flags = OPD_OPF_INPLACE | OPD_OPF_ELEMENTWISE | OPD_OPF_CPU_STRIDED,  \
    .cpu_dtypes = DTS,                                                     \
    .shape_doc = "a (...), b (...) -> out (broadcast(a, b))",              \
    .shape = binary_shape,                                                 \
    OPD_ROW_KERNELS_STRIDED(op),                                           \
    .cuda_dtypes = DTS,                                                    \
    __VA_ARGS__                                                            \
  }

/* add's and sub's attribute: torch's alpha= (out = a + alpha b). */
#define ALPHA_ATTR                                                         \
  .n_attrs = 1,                                                            \
  .attrs = {{.name = "alpha",                                              \
             .type = OPD_ATTR_FLOAT,                                       \
             .def = {.type = OPD_ATTR_FLOAT, .f = 1.0},                    \
             .doc = "multiplies b first: a + alpha*b (sub: a - alpha*b)"}}

OPD_OP_DECLARE(add);
OPD_EW_STRIDED_KERNELS(add)
OPD_OP_DECLARE(mul);
OPD_EW_STRIDED_KERNELS(mul)
OPD_OP_DECLARE(sub);
OPD_EW_STRIDED_KERNELS(sub)
OPD_OP_DECLARE(div);
OPD_EW_STRIDED_KERNELS(div)

#define INT_DTS (OPD_DT_FLOATS64 | OPD_DT_BIN_INTS)

const opd_op_def_t opd__op_add = BINARY_ROW(add, "+", "torch.add", INT_DTS, ALPHA_ATTR);
const opd_op_def_t opd__op_mul = BINARY_ROW(mul, "*", "torch.mul", INT_DTS, );
const opd_op_def_t opd__op_sub = BINARY_ROW(sub, "-", "torch.sub", INT_DTS, ALPHA_ATTR);
const opd_op_def_t opd__op_div = BINARY_ROW(div, "/", "torch.div", OPD_DT_FLOATS64, );
