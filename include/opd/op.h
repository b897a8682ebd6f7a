/* The operator ABI: one row per op, and the call its kernels receive.
 *
 * DESIGN
 * An operator is one `opd_op_def_t` row: its schema (inputs and outputs
 * with the dtypes they accept, attributes with their types, defaults and
 * choices, the shape rule), its CPU kernels (the reference and an optional
 * fast variant), its CUDA kernel with the dtypes it takes and the scratch
 * it wants, and flags that tell the daemon what generic code may do with
 * it (run it in place, skip staging). The daemon checks arity, dtypes,
 * layout, bounds and attributes generically from the row, calls `shape` to
 * compute the outputs the op writes and compares them with the outputs the
 * client gave; only then does a kernel run. Kernels therefore never
 * re-check arity or dtypes: they may assume the call matches the schema and
 * the shape rule, and that every tensor view lies inside mapped memory
 * (host memory for the CPU kernels, device memory for the CUDA kernel).
 * Nothing in the daemon is keyed on an op's name: whatever differs between
 * ops is a field or a flag of this row.
 *
 * This header is the plugin ABI: plain C11, self-contained (it
 * needs only include/ on the path: opd/protocol.h gives the limits, dtypes,
 * attribute types and error codes), no pointers into daemon internals, no
 * CUDA header (CUDA objects travel as void pointers). A change to any
 * struct here that moves a field, or a change to the meaning of a field,
 * bumps OPD_OP_ABI_VERSION.
 */
#ifndef OPD_OP_H
#define OPD_OP_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "opd/protocol.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the structs below; a plugin states the one it was built
 * against and the daemon refuses another. */
#define OPD_OP_ABI_VERSION 1

/* ---- what a kernel receives ------------------------------------------- */

/* A validated view of a tensor. */
typedef struct opd_tview {
  void *data;                      /* first element: a host pointer for the
                                      CPU kernels, a device pointer for the
                                      CUDA kernel; NULL during shape rules */
  int32_t dtype;                   /* OPD_DTYPE_* */
  int32_t rank;                    /* 0..OPD_MAX_RANK */
  int64_t shape[OPD_MAX_RANK];     /* extents, >= 0 */
  int64_t strides[OPD_MAX_RANK];   /* in elements; C-contiguous unless the
                                      op sets OPD_OPF_STRIDED (inputs) or,
                                      for the CPU kernels,
                                      OPD_OPF_CPU_STRIDED (all tensors) */
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

struct opd_op_def;

/* One call of an op, as its shape rule and kernels see it. */
typedef struct opd_kcall {
  const struct opd_op_def *op;     /* the op's row */
  int32_t n_in;                    /* inputs given (n_in_min..n_in_max) */
  int32_t n_out;                   /* outputs given (== op->n_out) */
  opd_tview_t in[OPD_MAX_TENSORS];
  opd_tview_t out[OPD_MAX_TENSORS];
  opd_attr_val_t attr[OPD_MAX_ATTRS]; /* in the order of op->attrs */
  const opd_exec_t *exec;          /* CPU kernels: never NULL when one
                                      runs; take all parallelism from it */
  char err[256];                   /* message on failure, without op name */
} opd_kcall_t;

/* Where a CUDA kernel launches. Every tensor view's `data` is a DEVICE
 * pointer to C-contiguous memory (an OPD_OPF_STRIDED op's inputs may be
 * strided). The kernel launches asynchronously on `stream` and never
 * synchronizes or calls cudaMalloc; scratch comes from `workspace`. Only
 * when a call needs more scratch than the workspace holds may it take some
 * with cudaMallocAsync on the stream and give it back with cudaFreeAsync
 * behind its own launches (both stream-ordered, neither blocks the host).
 *
 * Workspace layout: for an op with OPD_OPF_CUDA_BLASLT the first
 * min(workspace_bytes, OPD_CUDA_LT_WORKSPACE) bytes are cuBLASLt's; the
 * rest (all of it for other ops) is the op's own scratch. */
typedef struct opd_cuda_ctx {
  void *stream;                    /* cudaStream_t the kernel launches on */
  void *cublaslt;                  /* cublasLtHandle_t (one per device) */
  void *workspace;                 /* device scratch, 256-byte aligned; may
                                      be NULL (nothing asked for) */
  size_t workspace_bytes;          /* its size */
  int device;                      /* CUDA device index (current device) */
} opd_cuda_ctx_t;

/* cuBLASLt's share of the workspace of an OPD_OPF_CUDA_BLASLT op (NVIDIA
 * recommends 32 MiB on Hopper). */
#define OPD_CUDA_LT_WORKSPACE ((size_t)32 << 20)

/* ---- the row ----------------------------------------------------------- */

/* Expected output of a shape rule. */
typedef struct opd_tshape {
  int32_t dtype;                   /* OPD_DTYPE_* */
  int32_t rank;                    /* 0..OPD_MAX_RANK */
  int64_t shape[OPD_MAX_RANK];     /* extents */
} opd_tshape_t;

/* An attribute the op takes. */
typedef struct opd_attr_spec {
  const char *name;                /* e.g. "eps" */
  int32_t type;                    /* OPD_ATTR_* */
  int32_t required;                /* 1: no default, must be given */
  opd_attr_val_t def;              /* default when not required (its type
                                      is `type`) */
  const char *choices;             /* STR only: "none|tanh", NULL = any */
  const char *doc;                 /* one line for `opctl ops` */
} opd_attr_spec_t;

/* Dtype masks: bit OPD_DTYPE_x set when dtype x is accepted. */
#define OPD_DT(name) (1u << OPD_DTYPE_##name)
#define OPD_DT_ANY 0xffffffffu
#define OPD_DT_FLOAT OPD_DT(FLOAT32)

/* An input or output of the op. */
typedef struct opd_io_spec {
  const char *name;                /* "x", "weight" */
  uint32_t dtypes;                 /* mask of OPD_DT(...) accepted (the
                                      union over the backends) */
  const char *doc;                 /* shape, e.g. "(..., C)" */
} opd_io_spec_t;

/* Op flags (opd_op_def_t.flags). */
#define OPD_OPF_STRIDED 0x1u     /* inputs may be non-contiguous */
#define OPD_OPF_INPLACE 0x2u     /* an output may be exactly an input (same
                                    bytes, same layout); other overlap is
                                    refused */
#define OPD_OPF_CUDA_BLASLT 0x4u /* the CUDA kernel calls cuBLASLt: its
                                    workspace always starts with
                                    OPD_CUDA_LT_WORKSPACE bytes for it (see
                                    opd_cuda_ctx_t), even when
                                    cuda_workspace asks for no scratch */
#define OPD_OPF_NO_CAPTURE 0x8u  /* the CUDA kernel may not be captured
                                    into a CUDA graph (it synchronizes,
                                    allocates or reads device memory from
                                    the host): in a graph (docs/graphs.md)
                                    it runs uncaptured, between captured
                                    segments */
#define OPD_OPF_VIEW 0x10u       /* output 0 is input 0's bytes in another
                                    shape (reshape): in a graph it may
                                    share input 0's memory, so its kernels
                                    must do nothing when out[0].data ==
                                    in[0].data */
#define OPD_OPF_ELEMENTWISE 0x20u /* out[i] = f(in[0][i], in[1][i], ...)
                                    element by element, the order of the
                                    elements free: when every tensor of a
                                    run has x's shape (no broadcast) and
                                    all share one dense layout (a
                                    permutation of contiguous: a
                                    transpose, torch's channels-last), the
                                    daemon gives the kernel flat 1-D views
                                    of their memory instead of copies */
#define OPD_OPF_CPU_STRIDED 0x40u /* the CPU kernels (cpu_ref and cpu_fast)
                                    take every input and output with any
                                    strides (stride 0 in inputs: a
                                    broadcast; outputs never overlap
                                    themselves): on the CPU backend the
                                    daemon hands them the views as they
                                    are, with no contiguous copy around
                                    them (kernels/common/strided.h has
                                    drivers for element-wise and row-wise
                                    kernels). The CUDA kernel still gets
                                    contiguous copies unless the op also
                                    sets OPD_OPF_STRIDED */
#define OPD_OPF_STEADY_COST 0x80u /* the CPU kernel's time is set by the
                                    run's signature (op, dtypes, shapes,
                                    strides, attribute values), not by the
                                    values it reads (a product, a
                                    convolution, a pooling; not NMS, whose
                                    work follows the boxes' overlaps): the
                                    daemon learns it per signature and runs
                                    the fast ones on its event loop, with
                                    no thread hand-off (--inline-us).
                                    OPD_OPF_INPLACE ops are taken as such */

/* Shape rule: from call->in (shapes/dtypes, data NULL) and call->attr, fill
 * out[0..n_out) with the outputs the op writes. Returns 0, or OPD_ESHAPE /
 * OPD_EATTR / OPD_EDTYPE with call->err set. */
typedef int (*opd_shape_fn)(opd_kcall_t *call, opd_tshape_t *out);
/* CPU kernel: returns 0, or a negative OPD_E* with call->err set. */
typedef int (*opd_cpu_fn)(opd_kcall_t *call);
/* CUDA kernel: queues the op's work on ctx->stream (see opd_cuda_ctx_t).
 * Returns 0, or a negative OPD_E* with call->err set (without the op
 * name): OPD_EBACKEND "cuda: <cudaGetErrorString> (file:line)" for a CUDA
 * or cuBLASLt failure seen at launch time, OPD_ELIMIT for a size the
 * kernel does not handle. Errors of the asynchronous work itself surface
 * later, at the daemon's completion check on the stream. */
typedef int (*opd_cuda_fn)(opd_kcall_t *call, const opd_cuda_ctx_t *ctx);
/* Bytes of op scratch (beyond cuBLASLt's share) a CUDA call would like,
 * for a call that passed its shape rule (data NULL). A smaller workspace
 * must still work (the kernel falls back to cudaMallocAsync). */
typedef size_t (*opd_workspace_fn)(const opd_kcall_t *call);

/* One operator. */
typedef struct opd_op_def {
  /* schema */
  const char *name;                /* "softmax": [a-z0-9_], unique */
  const char *summary;             /* one line for `opctl ops` */
  int32_t n_in_min, n_in_max;      /* inputs beyond n_in_min are optional */
  int32_t n_out;                   /* outputs, always all given */
  opd_io_spec_t in[OPD_MAX_TENSORS];  /* [0..n_in_max) */
  opd_io_spec_t out[OPD_MAX_TENSORS]; /* [0..n_out) */
  int32_t n_attrs;                 /* attrs used */
  opd_attr_spec_t attrs[OPD_MAX_ATTRS];
  uint32_t flags;                  /* OPD_OPF_* */
  const char *shape_doc;           /* "x (..., C) -> y (..., C)" */
  opd_shape_fn shape;              /* the shape rule; required */
  /* CPU backend */
  uint32_t cpu_dtypes;             /* dtypes the CPU kernels take in their
                                      inputs; 0: every dtype the io masks
                                      accept (which may list more, e.g.
                                      float16 / bfloat16, for CUDA) */
  opd_cpu_fn cpu_ref;              /* the plain reference every other
                                      variant is tested against; required */
  opd_cpu_fn cpu_fast;             /* vectorized / BLAS / threaded variant
                                      the daemon runs; NULL: cpu_ref */
  /* CUDA backend */
  opd_cuda_fn cuda;                /* NULL: no CUDA kernel (and always NULL
                                      in a build without CUDA) */
  uint32_t cuda_dtypes;            /* OPD_DT(...) mask of the dtype of in[0]
                                      the CUDA kernel takes */
  opd_workspace_fn cuda_workspace; /* op scratch per call; NULL: none */
} opd_op_def_t;


/* ---- plugins ------------------------------------------------------------ */

/* A plugin is a shared object that exports one function,
 *
 *     const opd_plugin_t *opd_plugin_init(void);
 *
 * which the daemon calls once, at start (`opd --plugin PATH` or
 * `--plugin-dir DIR`), and which returns a description of the plugin: the
 * ABI version it was built against, its name and version, and its ops'
 * rows. The daemon reads abi_version first and refuses any other version
 * before it looks at another field (that field stays first in every
 * version). Each row is checked like a built-in (a valid schema, a name
 * no other op has) and becomes an op like any other: same generic checks
 * before its kernels run, same `opctl ops`. NULL refuses to load (say why
 * on stderr). The returned struct and the rows it points to must live
 * as long as the process (static storage); the daemon never unloads a
 * plugin while it runs.
 *
 * Plugins are trusted code: they run inside the daemon's process with
 * its privileges, as Redis modules do. The daemon loads only files that
 * no one but root and its own user can write. */
#define OPD_PLUGIN_INIT_SYMBOL "opd_plugin_init"

typedef struct opd_plugin {
  uint32_t abi_version;            /* OPD_OP_ABI_VERSION; always first */
  const char *name;                /* "hello": [a-z0-9_], for `opctl plugins` */
  const char *version;             /* the plugin's own version, "1.0" */
  int32_t n_ops;                   /* rows in ops, >= 1 */
  const opd_op_def_t *const *ops;  /* the rows */
} opd_plugin_t;

typedef const opd_plugin_t *(*opd_plugin_init_fn)(void);

#if defined(__GNUC__)
#define OPD_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define OPD_PLUGIN_EXPORT
#endif

/* Defines opd_plugin_init for a plugin named `pname` (a string) at
 * version `pversion` holding the rows given after them (addresses of
 * opd_op_def_t), e.g. OPD_PLUGIN("hello", "1.0", &scale_op). Use it once,
 * at file scope, in one C or C++ file of the plugin. */
#ifdef __cplusplus
#define OPD_PLUGIN_EXTERN_C extern "C"
#else
#define OPD_PLUGIN_EXTERN_C
#endif
#define OPD_PLUGIN(pname, pversion, ...)                                      \
  static const opd_op_def_t *const opd_plugin_ops_[] = {__VA_ARGS__};        \
  static const opd_plugin_t opd_plugin_desc_ = {                             \
      OPD_OP_ABI_VERSION, pname, pversion,                                   \
      (int32_t)(sizeof opd_plugin_ops_ / sizeof opd_plugin_ops_[0]),         \
      opd_plugin_ops_};                                                      \
  OPD_PLUGIN_EXTERN_C OPD_PLUGIN_EXPORT const opd_plugin_t *opd_plugin_init( \
      void) {                                                                \
    return &opd_plugin_desc_;                                                \
  }

/* Writes a printf-style message into call->err and returns `code` (a
 * negative OPD_E*): `return opd_kerr(call, OPD_ESHAPE, "x has rank %d,
 * expected 4", r);`. The daemon prefixes the op's name. Inline so that a
 * plugin links nothing of the daemon. */
static inline int opd_kerr(opd_kcall_t *call, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static inline int opd_kerr(opd_kcall_t *call, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(call->err, sizeof call->err, fmt, ap);
  va_end(ap);
  return code;
}

#ifdef __cplusplus
}
#endif

#endif /* OPD_OP_H */
