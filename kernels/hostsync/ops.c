/* hostsync, hostsync_nocap: operators of test builds only (make
 * TEST_OPS=1) for graphs' capture (docs/graphs.md, tests/gpu/graph_gpu.c).
 * y = x (float32), and on a CUDA device the kernel call waits for its
 * stream from the host (cudaStreamSynchronize), which a stream capture
 * does not allow. hostsync does not say so: capturing it fails, and the
 * graph must fall back to running its nodes uncaptured. hostsync_nocap
 * says so (OPD_OPF_NO_CAPTURE): the graph must run it between captured
 * segments. On the cpu both copy. */
#ifdef OPD_TEST_OPS
#include <string.h>

#include "kernels/common/kutil.h"
#include "kernels/kernel.h"

OPD_CUDA_WEAK int opd__hostsync_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx);

static int hostsync_cpu(opd_kcall_t *call) {
  memcpy(call->out[0].data, call->in[0].data, (size_t)call->in[0].numel * 4);
  return 0;
}

static int hostsync_shape(opd_kcall_t *call, opd_tshape_t *out) {
  out[0].dtype = call->in[0].dtype;
  out[0].rank = call->in[0].rank;
  memcpy(out[0].shape, call->in[0].shape, sizeof(int64_t) * (size_t)call->in[0].rank);
  return 0;
}

#define HOSTSYNC_ROW(op, flag, what)                                          \
  {                                                                           \
    .name = #op,                                                              \
    .summary = "TEST BUILD ONLY: y = x, the CUDA call waits from the host " what, \
    .n_in_min = 1,                                                            \
    .n_in_max = 1,                                                            \
    .n_out = 1,                                                               \
    .in = {{"x", OPD_DT_FLOAT, "(...)"}},                                     \
    .out = {{"y", OPD_DT_FLOAT, "(...) as x"}},                               \
    .flags = flag,                                                            \
    .shape_doc = "x (...) -> y (...)",                                        \
    .shape = hostsync_shape,                                                  \
    .cpu_ref = hostsync_cpu,                                                  \
    .cuda = opd__hostsync_cuda,                                               \
    .cuda_dtypes = OPD_DT_FLOAT,                                              \
  }

const opd_op_def_t opd__op_hostsync =
    HOSTSYNC_ROW(hostsync, 0, "(not capturable, unsaid)");
const opd_op_def_t opd__op_hostsync_nocap =
    HOSTSYNC_ROW(hostsync_nocap, OPD_OPF_NO_CAPTURE, "(OPD_OPF_NO_CAPTURE)");
#else
typedef int opd_hostsync_unused_t; /* ISO C: no empty translation unit */
#endif
