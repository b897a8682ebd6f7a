/* Strided tensors for kernels that take C-contiguous ones: the layout
 * checks, the scratch layout, and the CPU backend's gather / kernel /
 * scatter (see strided.h).
 *
 * DESIGN
 * A kernel never sees a strided view unless its op says it reads strides
 * (OPD_OPF_STRIDED, inputs only): the daemon copies. The copies happen in
 * the run's own job, on the thread (CPU) or stream (CUDA) of its kernel,
 * so a strided run is ordered, timed and answered like any other, and a
 * kernel stays one plain loop over contiguous memory. The CPU scratch is
 * the job's own (malloc'd for the run, freed at its end: glibc keeps
 * freed large blocks for the next run of the same size once its mmap
 * threshold has grown past them). An output is scattered only after its
 * kernel succeeded, so a failed run leaves a strided out= as it was.
 */
#include <stdlib.h>
#include <string.h>

#include "daemon/run/strided.h"
#include "kernels/common/kutil.h"
#include "kernels/copy/copy.h"

#define SCRATCH_ALIGN 256 /* cudaMallocAsync's, and every vector width */

int opd__view_contiguous(const opd_tview_t *v) {
  int64_t expect = 1;
  for (int i = v->rank - 1; i >= 0; i--) {
    if (v->shape[i] == 1) continue;
    if (v->shape[i] == 0) return 1; /* no element: any strides */
    if (v->strides[i] != expect) return 0;
    if (__builtin_mul_overflow(expect, v->shape[i], &expect)) return 0;
  }
  return 1;
}

int opd__view_self_overlaps(const opd_tview_t *v) {
  int64_t shape[OPD_MAX_RANK], stride[OPD_MAX_RANK];
  int n = 0;
  if (v->numel <= 1) return 0;
  for (int d = 0; d < v->rank; d++) { /* insertion sort by stride */
    if (v->shape[d] == 1) continue;
    int k = n++;
    while (k > 0 && stride[k - 1] > v->strides[d]) {
      stride[k] = stride[k - 1];
      shape[k] = shape[k - 1];
      k--;
    }
    stride[k] = v->strides[d];
    shape[k] = v->shape[d];
  }
  int64_t span = 1; /* elements covered by the smaller dims */
  for (int k = 0; k < n; k++) {
    if (stride[k] < span) return 1;
    span = stride[k] * (shape[k] - 1) + span; /* bounded: validated */
  }
  return 0;
}

/* Whether v is dense: its elements fill numel consecutive slots (a
 * permutation of a contiguous layout), no stride negative. */
static int dense(const opd_tview_t *v) {
  int64_t span = 1;
  for (int d = 0; d < v->rank; d++) {
    if (v->strides[d] < 0) return 0;
    if (v->shape[d] > 1) span += v->strides[d] * (v->shape[d] - 1);
  }
  return span == v->numel && !opd__view_self_overlaps(v);
}

uint32_t opd__strided_flatten(opd_kcall_t *call, uint32_t mask) {
  if (mask == 0 || !(call->op->flags & OPD_OPF_ELEMENTWISE) ||
      call->n_out < 1)
    return mask;
  const opd_tview_t *ref = &call->out[0];
  int n = call->n_in + call->n_out;
  for (int i = 0; i < n; i++) {
    const opd_tview_t *v = i < call->n_in ? &call->in[i] : &call->out[i - call->n_in];
    if (v->rank != ref->rank ||
        memcmp(v->shape, ref->shape, sizeof(int64_t) * (size_t)v->rank) != 0 ||
        memcmp(v->strides, ref->strides, sizeof(int64_t) * (size_t)v->rank) != 0)
      return mask;
  }
  if (!dense(ref)) return mask;
  for (int i = 0; i < n; i++) {
    opd_tview_t *v = i < call->n_in ? &call->in[i] : &call->out[i - call->n_in];
    v->rank = 1;
    v->shape[0] = v->numel;
    v->strides[0] = 1;
  }
  return 0;
}

static size_t share_bytes(const opd_tview_t *v) {
  size_t b = (size_t)v->numel * opd__dtype_size(v->dtype);
  return (b + SCRATCH_ALIGN - 1) / SCRATCH_ALIGN * SCRATCH_ALIGN;
}

/* The masked view k of call: input k, or output k - OPD_STRIDED_OUT. */
static opd_tview_t *view_of(opd_kcall_t *call, int k) {
  return k < OPD_STRIDED_OUT ? &call->in[k] : &call->out[k - OPD_STRIDED_OUT];
}

size_t opd__strided_bytes(const opd_kcall_t *call, uint32_t mask) {
  size_t total = 0;
  for (int k = 0; k < 32; k++)
    if (mask >> k & 1) total += share_bytes(view_of((opd_kcall_t *)call, k));
  return total;
}

void opd__strided_swap(opd_kcall_t *call, uint32_t mask, char *scratch,
                       opd_strided_save_t *sv) {
  for (int k = 0; k < 32; k++) {
    if (!(mask >> k & 1)) continue;
    opd_tview_t *v = view_of(call, k);
    *(k < OPD_STRIDED_OUT ? &sv->in[k] : &sv->out[k - OPD_STRIDED_OUT]) = *v;
    v->data = scratch;
    int64_t s = 1;
    for (int d = v->rank - 1; d >= 0; d--) {
      v->strides[d] = s;
      s *= v->shape[d] > 1 ? v->shape[d] : 1;
    }
    scratch += share_bytes(v);
  }
}

void opd__strided_restore(opd_kcall_t *call, uint32_t mask,
                          const opd_strided_save_t *sv) {
  for (int k = 0; k < 32; k++)
    if (mask >> k & 1)
      *view_of(call, k) = k < OPD_STRIDED_OUT ? sv->in[k]
                                               : sv->out[k - OPD_STRIDED_OUT];
}

int opd__strided_cpu(opd_kcall_t *call, uint32_t mask, opd_cpu_fn fn) {
  size_t bytes = opd__strided_bytes(call, mask);
  char *scratch = aligned_alloc(SCRATCH_ALIGN, bytes ? bytes : SCRATCH_ALIGN);
  if (scratch == NULL)
    return opd_kerr(call, OPD_ENOMEM, "out of memory for %zu bytes of "
                    "contiguous copies of strided tensors", bytes);
  opd_strided_save_t sv;
  opd__strided_swap(call, mask, scratch, &sv);
  for (int i = 0; i < call->n_in; i++) /* gather */
    if (mask >> i & 1) opd__copy_views_cpu(call->exec, &call->in[i], &sv.in[i]);
  int rc = fn(call);
  for (int i = 0; rc == 0 && i < call->n_out; i++) /* scatter */
    if (mask >> (OPD_STRIDED_OUT + i) & 1)
      opd__copy_views_cpu(call->exec, &sv.out[i], &call->out[i]);
  opd__strided_restore(call, mask, &sv);
  free(scratch);
  return rc;
}

void opd__strided_count(opd_server_t *srv, const opd_kcall_t *call,
                        uint32_t mask) {
  for (int k = 0; k < 32; k++) {
    if (!(mask >> k & 1)) continue;
    const opd_tview_t *v = view_of((opd_kcall_t *)call, k);
    srv->strided_copies++;
    srv->strided_bytes += (uint64_t)v->numel * opd__dtype_size(v->dtype);
  }
}
