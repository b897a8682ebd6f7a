/* Moving bytes on the GPU for the data movement ops (shape family,
 * embedding, where): the widest unit a copy can move, and a dispatch that
 * binds a type of that size.
 *
 * DESIGN
 * These ops never look at values, only at element sizes, so a kernel is
 * one template over an unsigned type U of 1, 2, 4, 8 or 16 bytes. Where a
 * whole run of elements moves together (an embedding row, a cat run) the
 * run is moved in the widest unit that divides every run length and every
 * address involved (16 bytes when all line up: one vector load and store
 * per thread).
 */
#ifndef OPD_KERNELS_SHAPE_MOVE_CUH
#define OPD_KERNELS_SHAPE_MOVE_CUH

#include <cuda_runtime.h>
#include <stdint.h>

/* The widest of 16, 8, 4, 2, 1 bytes dividing `bits` (the OR of the byte
 * counts and addresses a copy uses). */
static inline int opd__move_unit(uint64_t bits) {
  int u = 16;
  while (u > 1 && (bits & (uint64_t)(u - 1)) != 0) u /= 2;
  return u;
}

/* Runs the statements after `bad` with U an unsigned type of `size` bytes
 * (1, 2, 4, 8 or 16); another size runs `bad`. */
#define OPD_MOVE_DISPATCH(size, bad, ...)                  \
  switch (size) {                                          \
    case 1: { typedef uint8_t U; __VA_ARGS__ } break;      \
    case 2: { typedef uint16_t U; __VA_ARGS__ } break;     \
    case 4: { typedef uint32_t U; __VA_ARGS__ } break;     \
    case 8: { typedef uint2 U; __VA_ARGS__ } break;        \
    case 16: { typedef uint4 U; __VA_ARGS__ } break;       \
    default: bad;                                          \
  }

#endif /* OPD_KERNELS_SHAPE_MOVE_CUH */
