/* torch's stable C ABI as the torch kernels (torchops.c) reach it, and
 * the connection they run on: the contract of shims.c.
 *
 * DESIGN
 * Nothing in client/torch links against torch: the shims (aoti_torch_*,
 * torch_*, and libstdc++'s throw) are looked up with dlsym in the process
 * that loaded torch (opd__torch_lookup, behind opd_torch_available), into
 * one table, opd__torch, that shims.c fills once and torchops.c only
 * reads. The connection opd.torch binds (opd_torch_bind) is shims.c's
 * too; torchops.c asks for it per call (opd__torch_connection).
 */
#ifndef OPD_CLIENT_TORCH_SHIMS_H
#define OPD_CLIENT_TORCH_SHIMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "opd/opd.h"

#pragma GCC visibility push(hidden)

typedef uint64_t siv_t;   /* StableIValue */
typedef void *ath_t;      /* AtenTensorHandle */
typedef int32_t aerr_t;   /* AOTITorchError: 0 success */
typedef void (*boxed_fn)(siv_t *stack, uint64_t n_args, uint64_t n_ret);

/* torch's shims, filled by opd_torch_available (state 1), read-only after */
typedef struct opd_torch_shims {
  int state; /* 0 not looked up, 1 available, -1 not */
  char why[160]; /* why not, for state -1 */
  aerr_t (*init_impl)(const char *, const char *, const char *, uint32_t, void **);
  aerr_t (*impl)(void *, const char *, boxed_fn);
  aerr_t (*data_ptr)(ath_t, void **);
  aerr_t (*dim)(ath_t, int64_t *);
  aerr_t (*sizes)(ath_t, int64_t **);
  aerr_t (*dtype)(ath_t, int32_t *);
  aerr_t (*dev_type)(ath_t, int32_t *);
  aerr_t (*dev_index)(ath_t, int32_t *);
  aerr_t (*contiguous)(ath_t, bool *);
  aerr_t (*strides)(ath_t, int64_t **); /* NULL: this torch lacks it (strided
                                           tensors then go as contiguous copies) */
  aerr_t (*empty)(int64_t, const int64_t *, const int64_t *, int32_t, int32_t,
                  int32_t, ath_t *);
  aerr_t (*new_handle)(ath_t, ath_t *);
  aerr_t (*del)(ath_t);
  aerr_t (*dispatch)(const char *, const char *, siv_t *);
  aerr_t (*stream)(int32_t, void **);
  aerr_t (*str)(void *, const char **);
  aerr_t (*str_del)(void *);
  aerr_t (*list_size)(void *, size_t *);
  aerr_t (*list_get)(void *, size_t, siv_t *);
  aerr_t (*list_del)(void *);
  int32_t (*type_cuda)(void);
  int32_t (*dt[10])(void); /* by OPD_DTYPE_* code: torch's ScalarType */
  void (*op_delete)(void *);                       /* ::operator delete */
  void *(*cxa_alloc)(size_t);
  void (*cxa_throw)(void *, void *, void (*)(void *));
  void *rt_typeinfo;                               /* std::runtime_error */
  void (*rt_ctor)(void *, const char *);
  void (*rt_dtor)(void *);
  /* optional, for the CPU kernels (NULL: this torch lacks them; torch >= 2.11) */
  aerr_t (*from_blob)(void *, int64_t, const int64_t *, const int64_t *, int64_t,
                      int32_t, int32_t, int32_t, ath_t *, int32_t,
                      const uint8_t *, int64_t, void (*)(void *, void *), void *);
  int32_t (*type_cpu)(void);
  aerr_t (*lib_del)(void *);
  int32_t cuda;     /* torch's device type of CUDA */
  int32_t cpu;      /* of the CPU (-1 without type_cpu) */
  int32_t tdt[10];  /* torch's ScalarType by OPD_DTYPE_* code */
} opd_torch_shims_t;

extern opd_torch_shims_t opd__torch;

/* Throws std::runtime_error(msg) into torch's dispatcher; never returns. */
_Noreturn void opd__torch_throw(const char *msg);
/* The OPD_DTYPE_* code of torch's ScalarType tdt, 0 for one opd lacks. */
int opd__torch_dtype(int32_t tdt);
/* aten::contiguous(t) through the dispatcher: a new owned handle, or NULL. */
ath_t opd__torch_contiguous(ath_t t);
/* aten::copy_(dst, src) on torch's current stream: 0 or -1. */
int opd__torch_copy(ath_t dst, ath_t src);

/* The bound connection, asking Python for a new one (the callback given to
 * opd_torch_bind) when there is none or it is the parent's (fork). NULL
 * with msg[cap] set when there is none. */
opd_client_t *opd__torch_connection(char *msg, size_t cap);
/* The bound connection if it is current, else NULL (asks nothing). */
opd_client_t *opd__torch_bound(void);
/* How many connections were unbound (closed) so far: what was made for a
 * connection under an older count may name one that is gone. */
unsigned opd__torch_unbinds(void);

#pragma GCC visibility pop

#endif
