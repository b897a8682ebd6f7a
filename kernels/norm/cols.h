/* layernorm and rmsnorm over a dim that is not the innermost in memory
 * (kernels/norm/cols.c): x and y laid out alike as (outer, C, inner), C
 * normalized, each column j of a (outer index) one row of the norm.
 *
 * DESIGN
 * A transposed x written into an output laid out alike (torch's
 * x.transpose(1, 2) normalized into a preserve_format result) would
 * otherwise go through tiles gathered and scattered by transposes
 * (kernels/common/strided_rows.c), whose scatter into the transposed
 * output costs 2-3x the contiguous kernel. Here the memory is walked in
 * its own order instead: for a block of up to 1024 columns, the C rows
 * of the block are read twice (statistics, output), every read a
 * contiguous run of the block's width, the statistics per column in
 * double. Float32 and float64 (every float tensor of one dtype); others
 * go through the tiles.
 */
#ifndef OPD_KERNELS_NORM_COLS_H
#define OPD_KERNELS_NORM_COLS_H

#include <stdint.h>

#include "kernels/kernel.h"

/* Whether call (layernorm or rmsnorm) can run as columns: x, y, weight
 * and bias of one dtype, float32 or float64, weight and bias contiguous,
 * one normalized dim. */
int opd__norm_cols_ok(const opd_kcall_t *call);

/* y = norm(x) along C with x and y (outer, C, inner) contiguous at their
 * views' data (whatever their views' strides say: the caller checked the
 * layout), weight and bias (C) when given (inputs 1, 2), eps attr 0;
 * rms: rmsnorm (no mean, no bias). Columns spread over call->exec.
 * Returns 0. */
int opd__norm_cols(opd_kcall_t *call, int64_t outer, int64_t C, int64_t inner,
                   int rms);

#endif /* OPD_KERNELS_NORM_COLS_H */
