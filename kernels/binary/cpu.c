/* The binary family on the CPU (add, mul, sub, div): broadcasting
 * elementwise kernels, one body for every op of the family (rows: ops.c).
 *
 * DESIGN
 * The reference walks the output with a multi-index and reads each operand
 * through broadcast strides (0 along stretched dims). The fast kernel
 * picks the cheapest of four layouts, all vectorizable inner loops, rows
 * spread over call->exec:
 *   equal    a, b, out all the same shape: one flat loop
 *   rowbias  one operand is the full output, the other repeats along
 *            leading dims (bias (C) over (N, C), or (H, W) over (N, C, H,
 *            W)): out[r, i] = full[r, i] op small[i]
 *   scalar   one operand has one element
 *   general  per output row (last dim), each operand read with stride 0
 *            or 1 in that row, its start from the outer multi-index
 * The layouts with a "full" operand may find it on the right (b): then
 * the loops run the reversed operation (OPD_BIN_RSUB: small - full,
 * OPD_BIN_RDIV: small / full; add and mul are their own reverse, being
 * commutative in IEEE arithmetic), so every op gives the bits of a op b.
 * Each loop is written once (an always-inline function of the operation)
 * and instantiated per operation by BIN_DISPATCH, so every copy is a plain
 * loop the compiler vectorizes. Division is IEEE division (no reciprocal):
 * x / 0 is +-inf, 0 / 0 NaN, as torch.
 * Variants (per op, through binary_ref / binary_fast):
 *   cpu_ref   multi-index walk through broadcast strides
 *   cpu_fast  equal / row-bias / scalar / general-by-rows loops, pooled
 * add and sub take alpha (torch's alpha=): out = a + alpha b (a - alpha
 * b); alpha 1 runs the plain operation, any other the AXPY operation
 * (x + al y; its reverse al x + y), al = alpha (sub: -alpha).
 * float64 (both variants): output rows through broadcast strides, in
 * double (binary64); float16 / bfloat16 run the float32 kernels on
 * converted copies (kernels/common/cast.h).
 * A new op of the family: its operation in opd_binop_t, BIN_APPLY and
 * BIN_DISPATCH (and its reverse, if it is not commutative), and one
 * BINARY_KERNELS line at the end.
 * Test: build/tests/ops, suite binary (tests/ops/test_binary.c).
 */
#include "kernels/binary/int.h"
#include "kernels/common/cast.h"
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"

/* The family's operations: the scalar op each row applies, and the
 * reverses the fast layouts use when the full operand is b. */
typedef enum {
  OPD_BIN_ADD,
  OPD_BIN_MUL,
  OPD_BIN_SUB,
  OPD_BIN_DIV,
  OPD_BIN_RSUB,                    /* y - x */
  OPD_BIN_RDIV,                    /* y / x */
  OPD_BIN_AXPY,                    /* x + al y: add / sub with alpha */
  OPD_BIN_RAXPY,                   /* al x + y */
} opd_binop_t;

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* T name(op, x, y, al): x op y in T; al is alpha, used by AXPY and RAXPY
 * only (apply: float, apply64: double). */
#define BIN_APPLY(name, T)                                                 \
  ALWAYS_INLINE T name(opd_binop_t op, T x, T y, T al) {                   \
    switch (op) {                                                          \
      case OPD_BIN_ADD: return x + y;                                      \
      case OPD_BIN_MUL: return x * y;                                      \
      case OPD_BIN_SUB: return x - y;                                      \
      case OPD_BIN_DIV: return x / y;                                      \
      case OPD_BIN_RSUB: return y - x;                                     \
      case OPD_BIN_AXPY: return x + al * y;                                \
      case OPD_BIN_RAXPY: return al * x + y;                               \
      default: return y / x; /* OPD_BIN_RDIV */                            \
    }                                                                      \
  }
BIN_APPLY(apply, float)
BIN_APPLY(apply64, double)

/* op with its operands swapped. */
static opd_binop_t reverse(opd_binop_t op) {
  switch (op) {
    case OPD_BIN_SUB: return OPD_BIN_RSUB;
    case OPD_BIN_DIV: return OPD_BIN_RDIV;
    case OPD_BIN_RSUB: return OPD_BIN_SUB;
    case OPD_BIN_RDIV: return OPD_BIN_DIV;
    case OPD_BIN_AXPY: return OPD_BIN_RAXPY;
    case OPD_BIN_RAXPY: return OPD_BIN_AXPY;
    default: return op;
  }
}

/* Calls LOOP(<constant op>, args...) for the run-time op `op`, so that
 * each always-inline LOOP is compiled once per operation. */
#define BIN_DISPATCH(op, LOOP, ...)                                        \
  switch (op) {                                                            \
    case OPD_BIN_ADD: LOOP(OPD_BIN_ADD, __VA_ARGS__); break;               \
    case OPD_BIN_MUL: LOOP(OPD_BIN_MUL, __VA_ARGS__); break;               \
    case OPD_BIN_SUB: LOOP(OPD_BIN_SUB, __VA_ARGS__); break;               \
    case OPD_BIN_DIV: LOOP(OPD_BIN_DIV, __VA_ARGS__); break;               \
    case OPD_BIN_RSUB: LOOP(OPD_BIN_RSUB, __VA_ARGS__); break;             \
    case OPD_BIN_RDIV: LOOP(OPD_BIN_RDIV, __VA_ARGS__); break;             \
    case OPD_BIN_AXPY: LOOP(OPD_BIN_AXPY, __VA_ARGS__); break;             \
    case OPD_BIN_RAXPY: LOOP(OPD_BIN_RAXPY, __VA_ARGS__); break;           \
  }

static int binary_ref(opd_kcall_t *call, opd_binop_t op, float al) {
  const opd_tview_t *a = &call->in[0], *b = &call->in[1];
  opd_tview_t *o = &call->out[0];
  int64_t sa[OPD_MAX_RANK], sb[OPD_MAX_RANK], idx[OPD_MAX_RANK] = {0};
  opd__bcast_strides(a->shape, a->rank, o->rank, sa);
  opd__bcast_strides(b->shape, b->rank, o->rank, sb);
  const float *pa = a->data, *pb = b->data;
  float *po = o->data;
  for (int64_t e = 0; e < o->numel; e++) {
    int64_t ia = 0, ib = 0;
    for (int d = 0; d < o->rank; d++) {
      ia += idx[d] * sa[d];
      ib += idx[d] * sb[d];
    }
    po[e] = apply(op, pa[ia], pb[ib], al);
    for (int d = o->rank - 1; d >= 0; d--) {
      if (++idx[d] < o->shape[d]) break;
      idx[d] = 0;
    }
  }
  return 0;
}

typedef struct bin_job {
  opd_binop_t op;                  /* which operation */
  float al;                        /* alpha of AXPY / RAXPY */
  const float *full;               /* operand of the output's shape */
  const float *small;              /* the other operand */
  float *out;                      /* output */
  int64_t len;                     /* rowbias: elements of small; general:
                                      elements of an output row */
  /* general case only: */
  const opd_tview_t *o;            /* output view (shape) */
  const float *a, *b;              /* operands */
  int64_t sa[OPD_MAX_RANK];        /* a's broadcast strides */
  int64_t sb[OPD_MAX_RANK];        /* b's broadcast strides */
} bin_job_t;

/* o[i] = x[i] op y[i] over [0, n). */
ALWAYS_INLINE void loop_vv(opd_binop_t op, const float *x, const float *y,
                           float *o, int64_t n, float al) {
  for (int64_t i = 0; i < n; i++) o[i] = apply(op, x[i], y[i], al);
}

/* o[i] = x[i] op s over [0, n). */
ALWAYS_INLINE void loop_vs(opd_binop_t op, const float *x, float s, float *o,
                           int64_t n, float al) {
  for (int64_t i = 0; i < n; i++) o[i] = apply(op, x[i], s, al);
}

/* o[i] = s op y[i] over [0, n). */
ALWAYS_INLINE void loop_sv(opd_binop_t op, float s, const float *y, float *o,
                           int64_t n, float al) {
  for (int64_t i = 0; i < n; i++) o[i] = apply(op, s, y[i], al);
}

/* Flat elements [b, e): equal shapes. */
OPD_FAST static void run_equal(void *arg, int64_t b, int64_t e) {
  const bin_job_t *j = arg;
  BIN_DISPATCH(j->op, loop_vv, j->full + b, j->small + b, j->out + b, e - b, j->al)
}

/* Flat elements [b, e): small is one value. */
OPD_FAST static void run_scalar(void *arg, int64_t b, int64_t e) {
  const bin_job_t *j = arg;
  BIN_DISPATCH(j->op, loop_vs, j->full + b, j->small[0], j->out + b, e - b, j->al)
}

/* Rows [b, e) of len elements: out[r, i] = full[r, i] op small[i]. */
OPD_FAST static void run_rowbias(void *arg, int64_t b, int64_t e) {
  const bin_job_t *j = arg;
  int64_t n = j->len;
  for (int64_t r = b; r < e; r++)
    BIN_DISPATCH(j->op, loop_vv, j->full + r * n, j->small, j->out + r * n, n, j->al)
}

/* Where output row r (last dim) starts in a and b: *ia, *ib from the
 * outer multi-index of r through the broadcast strides sa, sb. */
ALWAYS_INLINE void row_start(const opd_tview_t *o, const int64_t *sa, const int64_t *sb,
                             int64_t r, int64_t *ia, int64_t *ib) {
  *ia = *ib = 0;
  for (int d = o->rank - 2; d >= 0; d--) {
    int64_t k = r % o->shape[d];
    r /= o->shape[d];
    *ia += k * sa[d];
    *ib += k * sb[d];
  }
}

/* Output rows [b, e) (last dim), operands through broadcast strides. */
OPD_FAST static void run_general(void *arg, int64_t b, int64_t e) {
  const bin_job_t *j = arg;
  const opd_tview_t *o = j->o;
  int last = o->rank - 1;
  int64_t n = j->len, ta = j->sa[last], tb = j->sb[last];
  for (int64_t r = b; r < e; r++) {
    int64_t ia, ib;
    row_start(o, j->sa, j->sb, r, &ia, &ib);
    const float *x = j->a + ia, *y = j->b + ib;
    float *po = j->out + r * n;
    if (ta == 1 && tb == 1) {
      BIN_DISPATCH(j->op, loop_vv, x, y, po, n, j->al)
    } else if (ta == 1) { /* y[0] repeats along the row */
      BIN_DISPATCH(j->op, loop_vs, x, y[0], po, n, j->al)
    } else if (tb == 1) {
      BIN_DISPATCH(j->op, loop_sv, x[0], y, po, n, j->al)
    } else {
      float v = apply(j->op, x[0], y[0], j->al);
      for (int64_t i = 0; i < n; i++) po[i] = v;
    }
  }
}

/* True when `s` (rank rs), leading 1s dropped, equals the trailing dims of
 * `o` (rank ro): s repeats along o's leading dims. */
static int trails(const int64_t *s, int rs, const int64_t *o, int ro) {
  int k = 0;
  while (k < rs && s[k] == 1) k++;
  if (rs - k > ro) return 0;
  for (int i = k; i < rs; i++)
    if (s[i] != o[ro - rs + i]) return 0;
  return 1;
}

static int binary_fast(opd_kcall_t *call, opd_binop_t op, float al) {
  const opd_tview_t *a = &call->in[0], *b = &call->in[1];
  const opd_tview_t *o = &call->out[0];
  int64_t n = o->numel;
  if (n == 0) return 0;
  const opd_exec_t *ex = call->exec;
  bin_job_t j = {.op = op, .al = al, .out = o->data};
  if (a->numel == n && b->numel == n) {
    j.full = a->data;
    j.small = b->data;
    ex->parallel_for(ex, n, OPD_GRAIN_ELEMS, run_equal, &j);
    return 0;
  }
  /* Make `full` the operand with the output's shape, if any. */
  const opd_tview_t *full = NULL, *small = NULL;
  if (a->numel == n) {
    full = a;
    small = b;
  } else if (b->numel == n) {
    full = b;
    small = a;
    j.op = reverse(op); /* the loops compute full op small */
  }
  if (full && small->numel == 1) {
    j.full = full->data;
    j.small = small->data;
    ex->parallel_for(ex, n, OPD_GRAIN_ELEMS, run_scalar, &j);
    return 0;
  }
  if (full && trails(small->shape, small->rank, o->shape, o->rank)) {
    j.full = full->data;
    j.small = small->data;
    j.len = small->numel;
    ex->parallel_for(ex, n / j.len, opd__row_grain(j.len), run_rowbias, &j);
    return 0;
  }
  j.op = op; /* a and b in place again */
  j.o = o;
  j.a = a->data;
  j.b = b->data;
  j.len = o->shape[o->rank - 1]; /* rank >= 1: rank 0 has numel 1 == n */
  opd__bcast_strides(a->shape, a->rank, o->rank, j.sa);
  opd__bcast_strides(b->shape, b->rank, o->rank, j.sb);
  ex->parallel_for(ex, n / j.len, opd__row_grain(j.len), run_general, &j);
  return 0;
}

/* The operation a call of `op` runs: op itself, or for add / sub with an
 * alpha other than 1 (their attribute 0), AXPY with *al = alpha (sub:
 * -alpha; a + (-alpha b) is a - alpha b to the bit). */
static opd_binop_t with_alpha(const opd_kcall_t *call, opd_binop_t op,
                              float *al) {
  *al = 1.0f;
  if (call->op->n_attrs < 1 || (op != OPD_BIN_ADD && op != OPD_BIN_SUB) ||
      call->attr[0].f == 1.0)
    return op;
  *al = (float)(op == OPD_BIN_SUB ? -call->attr[0].f : call->attr[0].f);
  return OPD_BIN_AXPY;
}

/* ---- float64: x op y in double (apply64), output rows through
 * broadcast strides. */
typedef struct b64_job {
  opd_binop_t op;                  /* the operation */
  double al;                       /* alpha of AXPY */
  const opd_tview_t *o;            /* output view (shape) */
  const double *a, *b;             /* operands */
  double *out;                     /* output */
  int64_t len;                     /* elements of an output row */
  int64_t sa[OPD_MAX_RANK];        /* a's broadcast strides */
  int64_t sb[OPD_MAX_RANK];        /* b's broadcast strides */
} b64_job_t;

/* Output rows [b, e) (last dim; rank 0 is one row of one element). */
static void run64(void *arg, int64_t b, int64_t e) {
  const b64_job_t *j = arg;
  const opd_tview_t *o = j->o;
  int last = o->rank - 1;
  int64_t n = j->len, ta = last >= 0 ? j->sa[last] : 0, tb = last >= 0 ? j->sb[last] : 0;
  for (int64_t r = b; r < e; r++) {
    int64_t ia, ib;
    row_start(o, j->sa, j->sb, r, &ia, &ib);
    for (int64_t i = 0; i < n; i++)
      j->out[r * n + i] = apply64(j->op, j->a[ia + i * ta], j->b[ib + i * tb], j->al);
  }
}

static int binary64(opd_kcall_t *call, opd_binop_t op) {
  const opd_tview_t *a = &call->in[0], *b = &call->in[1], *o = &call->out[0];
  if (o->numel == 0) return 0;
  b64_job_t j = {.op = op, .al = 1.0, .o = o, .a = a->data, .b = b->data,
                 .out = o->data, .len = o->rank > 0 ? o->shape[o->rank - 1] : 1};
  if (call->op->n_attrs >= 1 && (op == OPD_BIN_ADD || op == OPD_BIN_SUB) &&
      call->attr[0].f != 1.0) {
    j.al = op == OPD_BIN_SUB ? -call->attr[0].f : call->attr[0].f;
    j.op = OPD_BIN_AXPY;
  }
  opd__bcast_strides(a->shape, a->rank, o->rank, j.sa);
  opd__bcast_strides(b->shape, b->rank, o->rank, j.sb);
  call->exec->parallel_for(call->exec, o->numel / j.len, opd__row_grain(j.len), run64, &j);
  return 0;
}

/* One op of the family: its two CPU entry points (kernels/kernel.h),
 * named in its row (ops.c), and its float64 kernel. */
#define BINARY_KERNELS(name, op)                                         \
  OPD_OP_DECLARE(name);                                                  \
  static int name##64(opd_kcall_t *call) { return binary64(call, op); }  \
  int opd__##name##_cpu_ref(opd_kcall_t *call) {                         \
    if (OPD_BIN_IS_INT(call->out[0].dtype))                    \
      return opd__binary_int_cpu(call); /* int.c */                      \
    OPD_CAST_DISPATCH(call, opd__##name##_cpu_ref, name##64);            \
    float al;                                                            \
    opd_binop_t o = with_alpha(call, op, &al);                           \
    return binary_ref(call, o, al);                                      \
  }                                                                      \
  int opd__##name##_cpu_fast(opd_kcall_t *call) {                        \
    if (OPD_BIN_IS_INT(call->out[0].dtype))                    \
      return opd__binary_int_cpu(call);                                  \
    OPD_CAST_DISPATCH(call, opd__##name##_cpu_fast, name##64);           \
    float al;                                                            \
    opd_binop_t o = with_alpha(call, op, &al);                           \
    return binary_fast(call, o, al);                                     \
  }

BINARY_KERNELS(add, OPD_BIN_ADD)
BINARY_KERNELS(mul, OPD_BIN_MUL)
BINARY_KERNELS(sub, OPD_BIN_SUB)
BINARY_KERNELS(div, OPD_BIN_DIV)
