/* The operator contract: what an op declares and what its kernels receive.
 *
 * DESIGN
 * Each operator is one `opd_op_def_t`: a declarative row (name, inputs with
 * their accepted dtypes, outputs, attributes with types and defaults, flags)
 * plus a shape rule and its kernels. The daemon checks arity, dtypes, layout,
 * bounds and attributes generically from the row, then calls `shape` to
 * compute the outputs the op will write and compares them with the outputs
 * the client gave; only then does a kernel run. Kernels therefore never
 * re-check arity or dtypes: they may assume the call matches the schema
 * and the shape rule, and that every tensor view lies inside mapped memory.
 *
 * `cpu_ref` is the plain reference every other variant is tested against.
 * `cpu_fast` (optional) is the vectorized / BLAS / multi-threaded version the
 * daemon runs. Kernels take all their parallelism from `call->exec`, so the
 * daemon controls threads and tests can run them serially.
 *
 * This header is also the seed of the plugin ABI: keep it plain C, no
 * pointers into daemon internals.
 */
#ifndef OPD_KERNEL_H
#define OPD_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#include "opd/protocol.h"

/* A validated view of a tensor. */
typedef struct opd_tview {
  void *data;                      /* first element; NULL during shape rules */
  int32_t dtype;                   /* OPD_DTYPE_* */
  int32_t rank;                    /* 0..OPD_MAX_RANK */
  int64_t shape[OPD_MAX_RANK];     /* extents, >= 0 */
  int64_t strides[OPD_MAX_RANK];   /* in elements; C-contiguous unless the
                                      op sets OPD_OPF_STRIDED */
  int64_t numel;                   /* product of shape (1 for rank 0) */
} opd_tview_t;

/* An attribute value (resolved: defaults filled in). */
typedef struct opd_attr_val {
  int32_t type;                    /* OPD_ATTR_*; OPD_ATTR_NONE if absent */
  int32_t n;                       /* number of ints used for OPD_ATTR_INTS */
  int64_t i;                       /* INT and BOOL */
  double f;                        /* FLOAT (an INT given for a FLOAT attr
                                      is converted) */
  int64_t ints[OPD_MAX_RANK];      /* INTS; an INT given for INTS becomes
                                      n=1 */
  char s[OPD_MAX_NAME];            /* STR, NUL-terminated */
} opd_attr_val_t;

typedef struct opd_attr_spec {
  const char *name;                /* e.g. "eps" */
  int32_t type;                    /* OPD_ATTR_* */
  int32_t required;                /* 1: no default, must be given */
  opd_attr_val_t def;              /* default when not required */
  const char *choices;             /* STR only: "none|tanh", NULL = any */
  const char *doc;                 /* one line for `opctl ops` */
} opd_attr_spec_t;

/* Parallel loop: runs fn(arg, begin, end) over disjoint chunks covering
 * [0, n), chunks at least `grain` long, possibly on several threads, and
 * returns when all are done. */
typedef void (*opd_range_fn)(void *arg, int64_t begin, int64_t end);
typedef struct opd_exec {
  void (*parallel_for)(const struct opd_exec *ex, int64_t n, int64_t grain,
                       opd_range_fn fn, void *arg);
  int nthreads;                    /* threads parallel_for may use */
  void *impl;                      /* owner's data */
} opd_exec_t;

/* Runs everything on the calling thread (tests, small tensors). */
extern const opd_exec_t opd__exec_serial;

struct opd_op_def;

/* One call of an op, as kernels see it. */
typedef struct opd_kcall {
  const struct opd_op_def *op;
  int32_t n_in;                    /* inputs given (n_in_min..n_in_max) */
  int32_t n_out;                   /* outputs given (== op->n_out) */
  opd_tview_t in[OPD_MAX_TENSORS];
  opd_tview_t out[OPD_MAX_TENSORS];
  opd_attr_val_t attr[OPD_MAX_ATTRS]; /* in the order of op->attrs */
  const opd_exec_t *exec;          /* never NULL when a kernel runs */
  char err[256];                   /* message on failure, without op name */
} opd_kcall_t;

/* Expected output of a shape rule. */
typedef struct opd_tshape {
  int32_t dtype;
  int32_t rank;
  int64_t shape[OPD_MAX_RANK];
} opd_tshape_t;

/* Op flags. */
#define OPD_OPF_STRIDED 0x1u   /* inputs may be non-contiguous */
#define OPD_OPF_INPLACE 0x2u   /* an output may be exactly an input (same
                                  bytes, same layout); other overlap is
                                  refused */

#define OPD_DT(name) (1u << OPD_DTYPE_##name)
#define OPD_DT_ANY 0xffffffffu
#define OPD_DT_FLOAT OPD_DT(FLOAT32)

typedef struct opd_io_spec {
  const char *name;                /* "x", "weight" */
  uint32_t dtypes;                 /* mask of OPD_DT(...) accepted */
  const char *doc;                 /* shape, e.g. "(..., C)" */
} opd_io_spec_t;

typedef struct opd_op_def {
  const char *name;                /* "softmax" */
  const char *summary;             /* one line */
  int32_t n_in_min, n_in_max;      /* inputs beyond n_in_min are optional */
  int32_t n_out;
  opd_io_spec_t in[OPD_MAX_TENSORS];
  opd_io_spec_t out[OPD_MAX_TENSORS];
  int32_t n_attrs;
  opd_attr_spec_t attrs[OPD_MAX_ATTRS];
  uint32_t flags;                  /* OPD_OPF_* */
  uint32_t cpu_dtypes;             /* dtypes the CPU kernels take in their
                                      float inputs; 0: every dtype the io
                                      masks accept. The io masks may list
                                      more (float16, bfloat16) for the CUDA
                                      kernels. */
  const char *shape_doc;           /* "x (..., C) -> y (..., C)" */
  /* Shape rule: from call->in (shapes/dtypes, data NULL) and call->attr,
   * fill out[0..n_out) with the outputs the op writes. Returns 0, or
   * OPD_ESHAPE / OPD_EATTR / OPD_EDTYPE with call->err set. */
  int (*shape)(opd_kcall_t *call, opd_tshape_t *out);
  /* Kernels: return 0, or a negative OPD_E* with call->err set. */
  int (*cpu_ref)(opd_kcall_t *call);
  int (*cpu_fast)(opd_kcall_t *call); /* NULL: cpu_ref is used */
} opd_op_def_t;

/* The built-in operators, one X per op folder under kernels/: the registry
 * (kernels/registry.c), the CPU entry points (kernels/common/cpu.h) and the
 * CUDA entry points (kernels/cuda/cuda.h) are all generated from it. */
#define OPD_BUILTIN_OPS(X) \
  X(noop)                  \
  X(copy)                  \
  X(add)                   \
  X(mul)                   \
  X(relu)                  \
  X(gelu)                  \
  X(softmax)               \
  X(layernorm)             \
  X(rmsnorm)               \
  X(matmul)                \
  X(conv2d)                \
  X(nms)

/* The registry (kernels/registry.c). */
extern const opd_op_def_t *const opd__ops[];
extern const int opd__n_ops;
const opd_op_def_t *opd__op_find(const char *name);
int opd__op_index(const char *name); /* -1 if unknown */

/* Writes a printf-style message into call->err; returns `code`. */
int opd__kerr(opd_kcall_t *call, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* OPD_KERNEL_H */
