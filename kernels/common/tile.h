/* What the strided drivers (kernels/common/strided.c: element-wise,
 * strided_rows.c: row-wise) share: the tile sizes, the serial exec the
 * tiles' kernels run on, the per-thread tile buffer, view helpers.
 *
 * DESIGN
 * The per-thread buffer is kept between calls (the kernel threads live as
 * long as the daemon) up to 1 MiB; a larger one is freed after its tiles.
 * A driver holds it for one range of tiles; a range that finds it held
 * (a nested call) takes a private one.
 */
#ifndef OPD_KERNELS_COMMON_TILE_H
#define OPD_KERNELS_COMMON_TILE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/kernel.h"

#define OPD_TILE_BYTES ((int64_t)64 << 10) /* per tensor: a few fit in L2 */
#define OPD_ROW_DIRECT 256 /* rows this long: the kernel runs on each */

/* Runs every range on the calling thread: the tiles' kernels. */
extern const opd_exec_t opd__tile_serial;

/* Whether every tensor of call is C-contiguous in its own shape. */
int opd__call_contiguous(const opd_kcall_t *call);

/* A buffer of `bytes` (64-byte aligned) for one range of tiles: the
 * thread's own, or a private one (*own = 1) when the thread's is held;
 * NULL when memory is short. opd__tile_buf_give hands it back. */
char *opd__tile_buf_take(size_t bytes, int *own);
void opd__tile_buf_give(char *buf, int own);

/* v = the view of `rank` dims at data (numel computed). */
void opd__tile_view(opd_tview_t *v, void *data, int32_t dtype, int rank,
                    const int64_t *shape, const int64_t *strides);
/* dst = the C-contiguous view of v's shape and dtype at data. */
void opd__tile_contig_like(opd_tview_t *dst, const opd_tview_t *v, void *data);
/* Records the first failure of a tile: its code in *rc, msg in err (256
 * bytes). */
void opd__tile_fail(_Atomic int *rc, char *err, const char *msg, int code);

#endif /* OPD_KERNELS_COMMON_TILE_H */
