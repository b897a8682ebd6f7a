/* One call of a torch kernel as both of libopd's torch kernels read it
 * (the CUDA one, torchops.c; the CPU one, cpukern.c): the contract of
 * call.c.
 *
 * DESIGN
 * A kernel (top_t) is one form of one operator, registered by
 * opd_torch_kernel (torchops.c owns the table of them). A call (call_t)
 * holds what the boxed stack gave: the inputs' and out= tensors' handles
 * (owned from the moment they are read, released by
 * opd__torch_call_release), the attributes as libopd takes them, and the
 * message of the error the kernel throws once it released everything.
 * opd__torch_call_read reads the stack the same way for both devices and
 * starts the call's signature (opd_torch_sig_t: the plan cache's key) with
 * the attribute values; each kernel then adds its tensors' and device's.
 */
#ifndef OPD_CLIENT_TORCH_CALL_H
#define OPD_CLIENT_TORCH_CALL_H

#include <stdint.h>

#include "client/torch/plans.h"
#include "client/torch/shims.h"

#pragma GCC visibility push(hidden)

#define OPD_TORCH_FORM_KIND 0x3 /* OPD_TORCH_FUNCTIONAL, _INPLACE or _OUT */

typedef struct top {
  char op[64];          /* the daemon's operator */
  char tname[72];       /* the torch name: op, op + "_" or op + "_out" */
  int kind;             /* OPD_TORCH_FUNCTIONAL, _INPLACE or _OUT */
  int variadic;         /* the inputs are one Tensor[] */
  uint32_t n_in, min_in, n_attrs, n_out;
  char attr_name[OPD_MAX_ATTRS][64];
  int32_t attr_type[OPD_MAX_ATTRS]; /* OPD_ATTR_* */
  opd_torch_plans_t plans;          /* the outputs per call signature (CUDA) */
  opd_torch_plans_t cpu_plans;      /* the same for CPU tensors */
  struct opd_torch_last *last;      /* the CPU kernel's last request
                                       (cpukern.c's, made on first use) */
} top_t;

/* one call's state, released before returning or throwing */
typedef struct call {
  ath_t in[OPD_MAX_TENSORS];   /* owned handles of the inputs */
  ath_t tmp[OPD_MAX_TENSORS];  /* contiguous copies made here */
  ath_t out[OPD_MAX_TENSORS];  /* outputs: made here, or given (out=) */
  ath_t otmp[OPD_MAX_TENSORS]; /* temporaries of non-contiguous outputs */
  uint32_t n_in, n_out;
  char strs[OPD_MAX_ATTRS][128];
  opd_attr_t attr[OPD_MAX_ATTRS];
  char msg[512];
} call_t;

/* Releases every handle k holds (NULLs them). */
void opd__torch_call_release(call_t *k);
/* Sets k->msg to "opd: <tname>: " + fmt (one %s: arg); returns -1. */
int opd__torch_fail(call_t *k, const top_t *o, const char *fmt, const char *arg);
/* "output j has dtype .. and shape ..; the op's output here is .. ..", as
 * opd.torch's Python path words it; returns -1. */
int opd__torch_fail_output(call_t *k, const top_t *o, uint32_t j,
                           const opd_tensor_t *got, const opd_tensor_t *want);
/* libopd's last error as k->msg, its op named once; returns -1. */
int opd__torch_fail_opd(call_t *k, const top_t *o);
/* Checks the stack's size against o's schema, then reads the inputs into
 * k->in, the out= tensors (the _out form) into k->out and the attributes
 * into k->attr, their values into s. 0, or -1 with k->msg set (the handles
 * read so far are k's); -2: the stack is not o's (nothing read: leave it). */
int opd__torch_call_read(const top_t *o, call_t *k, const siv_t *stack,
                         uint64_t n_args, uint64_t n_ret, opd_torch_sig_t *s);
/* The outputs' dtypes and shapes of signature s into outs[0..*n_out): from
 * the plan cache pl, else from the daemon's shape rule on c (a new plan).
 * *ran: the signature's run was answered before. 0 or -1 (k->msg). */
int opd__torch_plan_of(top_t *o, opd_torch_plans_t *pl, call_t *k,
                       opd_client_t *c, const opd_torch_sig_t *s,
                       const opd_tensor_t *ins, opd_tensor_t *outs,
                       uint32_t *n_out, int *ran);

#pragma GCC visibility pop

#endif
