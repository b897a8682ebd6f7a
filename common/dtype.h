/* Bytes of one element of a dtype, from the one dtype table.
 *
 * DESIGN
 * include/opd/protocol.h's OPD_DTYPE_MAP is the table (value, size,
 * name); this is its size column as a switch, inline because kernels and
 * descriptor checks call it per tensor. The client's opd_dtype_size and
 * the daemon use this one definition.
 */
#ifndef OPD_COMMON_DTYPE_H
#define OPD_COMMON_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "opd/protocol.h"

/* Bytes of one element of `dtype` (0 for an unknown dtype). */
static inline size_t opd__dtype_size(int32_t dtype) {
  switch (dtype) {
#define X(name, val, size, str) \
  case OPD_DTYPE_##name:        \
    return size;
    OPD_DTYPE_MAP(X)
#undef X
    default:
      return 0;
  }
}

#endif
