/* Strided tensors for kernels that take C-contiguous ones
 * (daemon/run/strided.c): which tensors of a run need a contiguous copy,
 * and the copies themselves around the kernel, inside the run's job.
 *
 * DESIGN
 * validate.c marks, per run, the inputs that are not C-contiguous (for an
 * op without OPD_OPF_STRIDED) and the outputs that are not (for every op:
 * kernels write C-contiguous outputs) in opd_job_t.strided; the backend
 * that runs the job points those views at contiguous scratch for the
 * kernel (opd__strided_swap), gathers the inputs into it before, scatters
 * the outputs from it after (kernels/copy/copy.h), and puts the views
 * back (opd__strided_restore). The CPU backend does all of it in
 * opd__strided_cpu; the CUDA backend with its stream-ordered scratch
 * (daemon/backend/cuda/strided.c). jobs.c counts the copies in the
 * server's stats as each run completes.
 */
#ifndef OPD_STRIDED_H
#define OPD_STRIDED_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/types.h"

/* The bit of input i in a mask is 1u << i, that of output i
 * 1u << (OPD_STRIDED_OUT + i). */
#define OPD_STRIDED_OUT 16
#define OPD_STRIDED_IN_MASK 0xffffu

/* The views a swap replaced, to put back. */
typedef struct opd_strided_save {
  opd_tview_t in[OPD_MAX_TENSORS];  /* the masked inputs' views */
  opd_tview_t out[OPD_MAX_TENSORS]; /* the masked outputs' views */
} opd_strided_save_t;

/* Whether v's strides are C-contiguous (extents of 1 ignored). */
int opd__view_contiguous(const opd_tview_t *v);

/* An elementwise op's run (OPD_OPF_ELEMENTWISE) whose tensors all have
 * one shape and one dense layout (a transpose of contiguous, say): each
 * view becomes the flat 1-D run of its numel elements and no copy is
 * needed (returns 0); otherwise mask, unchanged. After the shape rule. */
uint32_t opd__strided_flatten(opd_kcall_t *call, uint32_t mask);
/* Whether two elements of v may share an address (a stride-0 dim of
 * extent > 1, or dims whose strides interleave): such a view cannot be
 * written. Sorted by stride, each dim must step past the span of the
 * smaller ones. */
int opd__view_self_overlaps(const opd_tview_t *v);

/* Bytes of contiguous scratch the masked tensors of call take (each
 * rounded up to 256 bytes). */
size_t opd__strided_bytes(const opd_kcall_t *call, uint32_t mask);
/* Points each masked view of call at its contiguous share of scratch
 * (laid out as opd__strided_bytes counts), its strides made contiguous;
 * the views replaced go to sv. */
void opd__strided_swap(opd_kcall_t *call, uint32_t mask, char *scratch,
                       opd_strided_save_t *sv);
/* Puts back the views opd__strided_swap replaced. */
void opd__strided_restore(opd_kcall_t *call, uint32_t mask,
                          const opd_strided_save_t *sv);

/* Runs fn on call with its masked tensors copied: inputs gathered into
 * contiguous scratch before, outputs scattered from it after fn
 * succeeded; the views are as they were on return. fn's result, or
 * OPD_ENOMEM (call->err set) when the scratch cannot be had. */
int opd__strided_cpu(opd_kcall_t *call, uint32_t mask, opd_cpu_fn fn);

/* The copies of a completed run into the server's stats. */
void opd__strided_count(opd_server_t *srv, const opd_kcall_t *call,
                        uint32_t mask);

#endif /* OPD_STRIDED_H */
