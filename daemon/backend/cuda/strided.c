/* The CUDA backend's copies of strided tensors around a kernel that takes
 * C-contiguous ones (daemon/run/strided.h).
 *
 * DESIGN
 * Everything is stream-ordered on the session's stream, between the
 * run's staging and its kernel: one cudaMallocAsync for all the
 * contiguous copies of a run, the gathers (kernels/copy/copy.h) before
 * the kernel, the scatters after it, and the scratch given back with
 * cudaFreeAsync behind them by launch.c (in its scratch list). No host
 * thread waits and nothing is cudaMalloc'd, so the same steps could be
 * captured. A strided output in host memory is staged through its whole
 * extent (launch.c copies the extent in before the kernel, so the bytes
 * between its elements go back out as they were).
 */
#include "daemon/backend/cuda/state.h"
#include "daemon/run/strided.h"
#include "kernels/copy/copy.h"

/* A copy's failure as the run's error: a cudaError_t, or OPD_EINVAL. */
static int copy_fail(int rc, int dev, const char *what, int idx, opd_err_t *err) {
  if (rc < 0)
    return opd__errf(err, OPD_EINTERNAL, "cuda:%d: the contiguous copy of "
                     "%s %d does not match it", dev, what, idx);
  return opd__errf(err, cuda_code((cudaError_t)rc), "cuda:%d: the contiguous "
                   "copy of %s %d: %s", dev, what, idx,
                   cudaGetErrorString((cudaError_t)rc));
}

int opd__cu_strided_gather(opd_job_t *job, cudaStream_t stream, void **scratch,
                           opd_strided_save_t *sv, opd_err_t *err) {
  opd_kcall_t *call = &job->call;
  size_t bytes = opd__strided_bytes(call, job->strided);
  *scratch = NULL; /* empty tensors only: nothing to copy */
  cudaError_t e = bytes ? cudaMallocAsync(scratch, bytes, stream) : cudaSuccess;
  if (e != cudaSuccess)
    return opd__errf(err, cuda_code(e), "cuda:%d: cudaMallocAsync of %zu "
                     "bytes for the contiguous copies of strided tensors: %s",
                     job->device, bytes, cudaGetErrorString(e));
  opd__strided_swap(call, job->strided, *scratch, sv);
  for (int i = 0; i < call->n_in; i++) {
    if (!(job->strided >> i & 1)) continue;
    int rc = opd__copy_views_cuda(stream, &call->in[i], &sv->in[i]);
    if (rc != 0) {
      opd__strided_restore(call, job->strided, sv);
      return copy_fail(rc, job->device, "input", i, err);
    }
  }
  return 0;
}

int opd__cu_strided_scatter(opd_job_t *job, cudaStream_t stream,
                            const opd_strided_save_t *sv, opd_err_t *err) {
  opd_kcall_t *call = &job->call;
  int rc = 0, i;
  for (i = 0; rc == 0 && i < call->n_out; i++)
    if (job->strided >> (OPD_STRIDED_OUT + i) & 1)
      rc = opd__copy_views_cuda(stream, &sv->out[i], &call->out[i]);
  opd__strided_restore(call, job->strided, sv);
  return rc == 0 ? 0 : copy_fail(rc, job->device, "output", i - 1, err);
}
