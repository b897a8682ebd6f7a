/* The CUDA backend's shared state (state.h): the device each thread last
 * switched to, and whether an op has a CUDA kernel for a dtype (asked by
 * the plan of a run, launch.c, and of a graph, graph.c). Its own file so
 * that the backend's other files all depend on it and it on none of them. */
#include "common/wire.h" /* opd__dtype_name */
#include "daemon/backend/cuda/state.h"

_Thread_local int opd__cu_cur_device = -1;

const void *opd__cuda_kernel(const opd_op_def_t *op, int dtype,
                             opd_err_t *err) {
  if (op == NULL || op->cuda == NULL) {
    opd__errf(err, OPD_EDEVICE, "has no CUDA kernel; run it with device cpu");
    return NULL;
  }
  if (dtype > 0 && !((op->cuda_dtypes >> dtype) & 1)) {
    opd__errf(err, OPD_EDEVICE, "has no CUDA kernel for %s",
              opd__dtype_name(dtype));
    return NULL;
  }
  return op;
}
