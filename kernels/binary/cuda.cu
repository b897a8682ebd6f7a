/* The binary family on the GPU (add, mul, sub, div): broadcasting elementwise
 * kernels, torch broadcasting, float32 / float16 / bfloat16 (a and b share
 * the dtype: the shape rule refuses mixed dtypes), computed in float, and
 * float64 computed in double (the functors are templates on the compute
 * type); one body for every op of the family (rows: ops.c).
 *
 * DESIGN
 * The layouts of the CPU fast kernel (kernels/binary/cpu.c), each its
 * own kernel, grid-stride:
 *   equal    a, b, out of one shape: 16-byte packs when all three are
 *            aligned, else scalar
 *   scalar   one operand has one element (read once per thread)
 *   rowbias  one operand is the full output, the other repeats along the
 *            leading dims (bias (C) over (N, C)): small[i % len]
 *   general  any broadcast: the output index is split into a multi-index,
 *            each operand read through broadcast strides (0 where it is
 *            stretched); rank <= OPD_MAX_RANK
 * When the full operand of rowbias is b, the functor runs with its
 * operands swapped back (Swapped<F>: f(small, full)), so sub and div give
 * a - b and a / b; for add and mul (commutative in IEEE arithmetic) that
 * changes no bit. Division is IEEE (nvcc's default -prec-div=true). In place (out == a or b) is fine: each
 * output element depends only on the same thread's reads.
 * add and sub with torch's alpha other than 1 run AxpyF (x + al y, al =
 * alpha, sub: -alpha), whose swapped form rowbias uses as for sub.
 * Variants (per op, the functor a template parameter): equal shapes
 * (16-byte packs when aligned, else scalar), scalar / rowbias operand,
 * general broadcast. A new op of the family: its functor and one
 * BINARY_CUDA line at the end.
 * Test: build/tests/gpu_kernels (op=add, op=mul).
 */
#include "kernels/binary/int.h"
#include "kernels/cuda/common.cuh"

struct AddF {
  template <typename V> __device__ V operator()(V x, V y) const { return x + y; }
};
struct MulF {
  template <typename V> __device__ V operator()(V x, V y) const { return x * y; }
};
struct SubF {
  template <typename V> __device__ V operator()(V x, V y) const { return x - y; }
};
struct DivF {
  template <typename V> __device__ V operator()(V x, V y) const { return x / y; }
};
/* add and sub with an alpha other than 1: x + al y (sub: al = -alpha). */
struct AxpyF {
  double al;                       /* rounded to float for float compute */
  template <typename V> __device__ V operator()(V x, V y) const { return x + (V)al * y; }
};
/* f with its operands swapped: rowbias's full operand is b. */
template <typename F> struct Swapped {
  F f;
  template <typename V> __device__ V operator()(V x, V y) const { return f(y, x); }
};

template <typename T, typename F>
__global__ void bin_equal_vec(const T *a, const T *b, T *o, int64_t npack, F f) {
  constexpr int N = Pack<T>::N;
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < npack;
       i += stride) {
    Pack<T> p = load_pack_cs(a + i * N), q = load_pack_cs(b + i * N);
#pragma unroll
    for (int k = 0; k < N; k++) p.v[k] = from_f<T>(f(to_f(p.v[k]), to_f(q.v[k])));
    store_pack(o + i * N, p);
  }
}

template <typename T, typename F>
__global__ void bin_equal(const T *a, const T *b, T *o, int64_t begin, int64_t n,
                          F f) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = begin + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride)
    o[i] = from_f<T>(f(to_f(a[i]), to_f(b[i])));
}

/* out[i] = full[i] op small[i % len] (len == 1: a scalar). */
template <typename T, typename F>
__global__ void bin_rowbias(const T *full, const T *small, T *o, int64_t n,
                            int64_t len, F f) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride)
    o[i] = from_f<T>(f(to_f(full[i]), to_f(small[len == 1 ? 0 : i % len])));
}

typedef struct bin_geom {
  int rank;                        /* output rank */
  int64_t shape[OPD_MAX_RANK];     /* output extents */
  int64_t sa[OPD_MAX_RANK];        /* a's broadcast strides (elements) */
  int64_t sb[OPD_MAX_RANK];        /* b's */
} bin_geom_t;

template <typename T, typename F>
__global__ void bin_general(const T *a, const T *b, T *o, int64_t n,
                            bin_geom_t g, F f) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    int64_t rem = i, ia = 0, ib = 0;
    for (int d = g.rank - 1; d >= 0; d--) {
      int64_t k = rem % g.shape[d];
      rem /= g.shape[d];
      ia += k * g.sa[d];
      ib += k * g.sb[d];
    }
    o[i] = from_f<T>(f(to_f(a[ia]), to_f(b[ib])));
  }
}

/* True when `s` (rank rs), leading 1s dropped, equals the trailing dims of
 * `o` (rank ro). */
static inline bool bin_trails(const int64_t *s, int rs, const int64_t *o, int ro) {
  int k = 0;
  while (k < rs && s[k] == 1) k++;
  if (rs - k > ro) return false;
  for (int i = k; i < rs; i++)
    if (s[i] != o[ro - rs + i]) return false;
  return true;
}

/* Runs out = a op b on ctx's stream; 0 or OPD_EBACKEND. */
template <typename F>
static int binary_run(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, F f) {
  const opd_tview_t *av = &call->in[0], *bv = &call->in[1], *ov = &call->out[0];
  int64_t n = ov->numel;
  if (n == 0) return 0;
  cudaStream_t st = OPD_STREAM(ctx);
  OPD_FLOAT_DISPATCH64(ov->dtype, return opd__cuda_bad_dtype(call, ov->dtype),
    const T *a = (const T *)av->data, *b = (const T *)bv->data;
    T *o = (T *)ov->data;
    if (av->numel == n && bv->numel == n) {
      int64_t done = 0;
      if (aligned16(a) && aligned16(b) && aligned16(o)) {
        int64_t np = n / Pack<T>::N;
        if (np > 0) bin_equal_vec<T, F><<<grid_for(np, 256), 256, 0, st>>>(a, b, o, np, f);
        done = np * Pack<T>::N;
      }
      if (done < n)
        bin_equal<T, F><<<grid_for(n - done, 256), 256, 0, st>>>(a, b, o, done, n, f);
    } else {
      const opd_tview_t *full = NULL, *small = NULL;
      if (av->numel == n) { full = av; small = bv; }
      else if (bv->numel == n) { full = bv; small = av; }
      if (full && (small->numel == 1 ||
                   bin_trails(small->shape, small->rank, ov->shape, ov->rank))) {
        if (full == av)
          bin_rowbias<T, F><<<grid_for(n, 256), 256, 0, st>>>(
              (const T *)full->data, (const T *)small->data, o, n, small->numel, f);
        else
          bin_rowbias<T, Swapped<F>><<<grid_for(n, 256), 256, 0, st>>>(
              (const T *)full->data, (const T *)small->data, o, n, small->numel,
              Swapped<F>{f});
      } else {
        bin_geom_t g;
        g.rank = ov->rank;
        for (int d = 0; d < ov->rank; d++) g.shape[d] = ov->shape[d];
        opd__bcast_strides(av->shape, av->rank, ov->rank, g.sa);
        opd__bcast_strides(bv->shape, bv->rank, ov->rank, g.sb);
        bin_general<T, F><<<grid_for(n, 256), 256, 0, st>>>(a, b, o, n, g, f);
      }
    }
  )
  OPD_CUDA_LAUNCHED();
  return 0;
}

/* One op of the family: its CUDA entry point, named in its row (ops.c). */
#define BINARY_CUDA(name, F)                                                   \
  extern "C" int opd__##name##_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) { \
    return binary_run(call, ctx, F());                                         \
  }

/* add and sub: alpha (attribute 0) other than 1 runs AxpyF. */
#define ALPHA_CUDA(name, F, sign)                                              \
  extern "C" int opd__##name##_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) { \
    if (OPD_BIN_IS_INT(call->out[0].dtype)) return opd__binary_int_cuda(call, ctx); \
    double al = call->attr[0].f;                                               \
    if (al != 1.0) return binary_run(call, ctx, AxpyF{sign al});               \
    return binary_run(call, ctx, F());                                         \
  }

ALPHA_CUDA(add, AddF, +)
extern "C" int opd__mul_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  if (OPD_BIN_IS_INT(call->out[0].dtype)) return opd__binary_int_cuda(call, ctx);
  return binary_run(call, ctx, MulF());
}
ALPHA_CUDA(sub, SubF, -)
BINARY_CUDA(div, DivF)
