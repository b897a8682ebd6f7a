/* The compare family's shared parts (eq, ne, lt, le, gt, ge): the
 * operation codes and the broadcast geometry both bodies use
 * (kernels/compare/cpu.c, cuda.cu; rows: ops.c).
 */
#ifndef OPD_KERNELS_COMPARE_H
#define OPD_KERNELS_COMPARE_H

#include <stdint.h>

#include "opd/protocol.h"

enum { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE };

/* The dtypes a and b may have (one dtype for both). */
#define OPD_DT_CMP                                                           \
  (OPD_DT(FLOAT32) | OPD_DT(FLOAT16) | OPD_DT(BFLOAT16) | OPD_DT(FLOAT64) |  \
   OPD_DT(INT8) | OPD_DT(UINT8) | OPD_DT(INT32) | OPD_DT(INT64) | OPD_DT(BOOL))

typedef struct cmp_geom {
  int rank;                        /* output rank */
  int64_t shape[OPD_MAX_RANK];     /* output extents */
  int64_t sa[OPD_MAX_RANK];        /* a's broadcast strides (elements) */
  int64_t sb[OPD_MAX_RANK];        /* b's */
} cmp_geom_t;

#endif /* OPD_KERNELS_COMPARE_H */
