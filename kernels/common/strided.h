/* Strided views for CPU kernels that loop over contiguous memory: the
 * drivers behind the rows flagged OPD_OPF_CPU_STRIDED (include/opd/op.h),
 * which walk a call's strided tensors in cache-sized tiles and run the
 * op's contiguous kernel on each tile (kernels/common/strided.c).
 *
 * DESIGN
 * A row whose CPU kernels take any strides spares the daemon its whole-
 * tensor gather before the kernel and scatter after it (two more passes
 * over memory: daemon/run/strided.h). The kernels of the element-wise
 * (unary, binary) and row-wise (norm) families stay single loops over
 * contiguous memory; these drivers sit in front of them: a call whose
 * tensors are all C-contiguous goes straight to the kernel, any other is
 * cut into tiles of about 64 KiB a tensor (a block of rows of the
 * output, 16 rows of a transpose), each tensor of a tile that is not
 * contiguous there copied into a per-thread buffer (inputs; outputs from
 * it after the kernel: kernels/common/tile.h), and the kernel runs on the
 * tile with contiguous views and a serial exec, tiles spread over
 * call->exec. Every element is read and written once in memory; the
 * tile copies stay in cache. The drivers are strided.c (element-wise) and
 * strided_rows.c (row-wise).
 */
#ifndef OPD_KERNELS_COMMON_STRIDED_H
#define OPD_KERNELS_COMMON_STRIDED_H

#include "kernels/kernel.h"

/* Whether v is C-contiguous in its own shape (extents of 1 ignored). */
int opd__kview_contiguous(const opd_tview_t *v);

/* Runs element-wise kernel fn (contiguous tensors only; inputs broadcast
 * to output 0's shape, as unary and binary ops) on call, whose tensors
 * may have any strides (stride 0: a broadcast input): fn(call) when all
 * are C-contiguous, else fn on tiles (see DESIGN). Returns fn's result
 * (the first failing tile's, its message in call->err), or OPD_ENOMEM. */
int opd__ew_strided(opd_kcall_t *call, opd_cpu_fn fn);

/* The same for row-wise kernel fn: it normalizes input 0 over dims
 * [d0, d0 + k) (softmax's dim, the norms' trailing dims) into output 0 of
 * its shape; inputs after the first (a norm's weight and bias) have the
 * shape of those dims. A tile is a block of rows: fn sees input 0 and
 * output 0 as (rows, shape[d0..d0+k)) contiguous and, when dim_attr >= 0,
 * that attribute (softmax's dim) set to -1. dim_attr >= 0 also says fn
 * takes any dim (k == 1): when x and the output share one dense layout
 * (x.transpose(1, 2) into a result laid out alike), fn runs once on their
 * memory in that layout's order, the dim renumbered, with no copy. */
int opd__rows_strided(opd_kcall_t *call, int d0, int k, int dim_attr,
                      opd_cpu_fn fn);

/* Whether input 0 and output 0 of call share one dense layout (a
 * permutation of contiguous, the same strides); then, in that layout's
 * memory order, x is (outer, C, inner) around dim d0. */
int opd__rows_dense(const opd_kcall_t *call, int d0, int64_t *outer,
                    int64_t *C, int64_t *inner);

/* Static cpu_ref / cpu_fast entry points of op `name` behind
 * opd__ew_strided: name##_ref_strided and name##_fast_strided, for the
 * row (OPD_OPF_CPU_STRIDED). */
#define OPD_EW_STRIDED_KERNELS(name)                                       \
  static int name##_ref_strided(opd_kcall_t *call) {                       \
    return opd__ew_strided(call, opd__##name##_cpu_ref);                   \
  }                                                                        \
  static int name##_fast_strided(opd_kcall_t *call) {                      \
    return opd__ew_strided(call, opd__##name##_cpu_fast);                  \
  }

/* The kernel fields of op `name`'s row with its CPU kernels behind a
 * strided driver (name##_ref_strided, name##_fast_strided; for a row
 * that sets OPD_OPF_CPU_STRIDED). */
#define OPD_ROW_KERNELS_STRIDED(name)                                      \
  .cpu_ref = name##_ref_strided, .cpu_fast = name##_fast_strided,          \
  .cuda = opd__##name##_cuda

#endif /* OPD_KERNELS_COMMON_STRIDED_H */
