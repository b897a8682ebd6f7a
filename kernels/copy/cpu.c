/* copy on the CPU: gather a strided view into a contiguous output, and
 * the strided-to-strided copy behind it (kernels/copy/copy.h).
 *
 * Variants:
 *   cpu_ref   element by element with a full multi-index (the truth)
 *   cpu_fast  opd__copy_views_cpu: dims merged where both views are
 *             contiguous across them, whole runs copied with memcpy (or a
 *             typed strided loop), rows spread over call->exec; a
 *             transpose (the unit-stride dim of one side is not the
 *             last) in TILE x TILE tiles; 4-byte elements whose two
 *             sides are unit-stride along the two tile dims (a plain
 *             transpose) through 8 x 8 AVX2 register transposes
 * Test: build/tests/ops, suite copy
 */
#include <string.h>

#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/copy/copy.h"

OPD_OP_DECLARE(copy);

int opd__copy_cpu_ref(opd_kcall_t *call) {
  const opd_tview_t *x = &call->in[0];
  size_t esz = opd__dtype_size(x->dtype);
  const char *src = x->data;
  char *dst = call->out[0].data;
  int64_t idx[OPD_MAX_RANK] = {0};
  for (int64_t e = 0; e < x->numel; e++) {
    int64_t off = 0;
    for (int d = 0; d < x->rank; d++) off += idx[d] * x->strides[d];
    memcpy(dst + (size_t)e * esz, src + off * (int64_t)esz, esz);
    for (int d = x->rank - 1; d >= 0; d--) {
      if (++idx[d] < x->shape[d]) break;
      idx[d] = 0;
    }
  }
  return 0;
}

/* The joint geometry of a copy: dims of extent 1 dropped, neighbours
 * merged where both views are contiguous across them; the last dim is the
 * run. */
typedef struct copy_plan {
  int rank;                        /* merged dims, >= 1 */
  int64_t shape[OPD_MAX_RANK];     /* merged extents */
  int64_t ss[OPD_MAX_RANK];        /* src strides, in elements */
  int64_t ds[OPD_MAX_RANK];        /* dst strides, in elements */
  size_t esz;                      /* bytes per element */
  const char *src;                 /* src's first element */
  char *dst;                       /* dst's first element */
} copy_plan_t;

static void plan_views(copy_plan_t *p, const opd_tview_t *dst,
                       const opd_tview_t *src) {
  p->rank = 0;
  for (int d = 0; d < src->rank; d++) {
    if (src->shape[d] == 1) continue;
    int k = p->rank - 1;
    if (k >= 0 && p->ss[k] == src->strides[d] * src->shape[d] &&
        p->ds[k] == dst->strides[d] * src->shape[d]) {
      p->shape[k] *= src->shape[d];
      p->ss[k] = src->strides[d];
      p->ds[k] = dst->strides[d];
    } else {
      p->shape[p->rank] = src->shape[d];
      p->ss[p->rank] = src->strides[d];
      p->ds[p->rank] = dst->strides[d];
      p->rank++;
    }
  }
  if (p->rank == 0) { /* a single element */
    p->rank = 1;
    p->shape[0] = 1;
    p->ss[0] = p->ds[0] = 1;
  }
}

/* Copies one run of n elements of esz bytes: source stride s, destination
 * stride t (elements). */
OPD_FAST static void copy_run(char *dst, const char *src, int64_t n,
                              int64_t s, int64_t t, size_t esz) {
  if (s == 1 && t == 1) {
    memcpy(dst, src, (size_t)n * esz);
    return;
  }
  switch (esz) {
    case 1:
      for (int64_t i = 0; i < n; i++) dst[i * t] = src[i * s];
      break;
    case 2:
      if (t == 1)
        for (int64_t i = 0; i < n; i++) memcpy(dst + i * 2, src + i * s * 2, 2);
      else
        for (int64_t i = 0; i < n; i++) memcpy(dst + i * t * 2, src + i * s * 2, 2);
      break;
    case 4: /* a gather into a contiguous run (t == 1) vectorizes, as
               stride 2 does (16 x 1024 float32 in cache: 4.5x) */
      if (t == 1 && s == 2)
        for (int64_t i = 0; i < n; i++) memcpy(dst + i * 4, src + i * 8, 4);
      else if (t == 1)
        for (int64_t i = 0; i < n; i++) memcpy(dst + i * 4, src + i * s * 4, 4);
      else
        for (int64_t i = 0; i < n; i++) memcpy(dst + i * t * 4, src + i * s * 4, 4);
      break;
    case 8:
      if (t == 1)
        for (int64_t i = 0; i < n; i++) memcpy(dst + i * 8, src + i * s * 8, 8);
      else
        for (int64_t i = 0; i < n; i++) memcpy(dst + i * t * 8, src + i * s * 8, 8);
      break;
    default:
      for (int64_t i = 0; i < n; i++)
        memcpy(dst + i * t * (int64_t)esz, src + i * s * (int64_t)esz, esz);
  }
}

/* Rows [b, e) of the plan: row r is the run at outer multi-index r. */
static void copy_rows(void *arg, int64_t b, int64_t e) {
  const copy_plan_t *p = arg;
  int last = p->rank - 1;
  int64_t n = p->shape[last];
  for (int64_t r = b; r < e; r++) {
    int64_t so = 0, dof = 0, rem = r;
    for (int d = last - 1; d >= 0; d--) {
      int64_t i = rem % p->shape[d];
      so += i * p->ss[d];
      dof += i * p->ds[d];
      rem /= p->shape[d];
    }
    copy_run(p->dst + dof * (int64_t)p->esz, p->src + so * (int64_t)p->esz, n,
             p->ss[last], p->ds[last], p->esz);
  }
}

#define TILE 16 /* a transpose's square: a 64-byte line of float32 per row */

/* A block of the tile: element (k, l) from src sk*k + sl*l to dst
 * dk*k + dl*l (elements), k in [k0, k1), l in [l0, l1), typed moves. */
#define TILE_LOOP(U)                                                        \
  for (int64_t k = k0; k < k1; k++) {                                       \
    const char *s_ = s + k * sk * (int64_t)sizeof(U);                       \
    char *d_ = d + k * dk * (int64_t)sizeof(U);                             \
    for (int64_t l = l0; l < l1; l++)                                       \
      memcpy(d_ + l * dl * (int64_t)sizeof(U),                              \
             s_ + l * sl * (int64_t)sizeof(U), sizeof(U));                  \
  }

#if defined(__x86_64__)
#include <immintrin.h>

/* An 8 x 8 block of float32 transposed in registers: d[j][i] = s[i][j],
 * rows ss and ds elements apart (the unpack / shuffle / permute
 * network). */
__attribute__((target("avx2"))) static void t8x8(const float *s, int64_t ss,
                                                float *d, int64_t ds) {
  __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + ss),
         r2 = _mm256_loadu_ps(s + 2 * ss), r3 = _mm256_loadu_ps(s + 3 * ss),
         r4 = _mm256_loadu_ps(s + 4 * ss), r5 = _mm256_loadu_ps(s + 5 * ss),
         r6 = _mm256_loadu_ps(s + 6 * ss), r7 = _mm256_loadu_ps(s + 7 * ss);
  __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1),
         t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3),
         t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
         t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)),
         u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2)),
         u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)),
         u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2)),
         u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)),
         u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2)),
         u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)),
         u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(d + ds, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(d + 2 * ds, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(d + 3 * ds, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(d + 4 * ds, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(d + 5 * ds, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(d + 6 * ds, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(d + 7 * ds, _mm256_permute2f128_ps(u3, u7, 0x31));
}

static int have_avx2(void) {
  static int v = -1;
  if (v < 0) v = __builtin_cpu_supports("avx2") ? 1 : 0;
  return v;
}

/* The TILE x TILE block [k0, k1) x [l0, l1) of a 4-byte transpose whose
 * one side is unit-stride along K and the other along L, in 8 x 8 register
 * transposes; 0 if it does not apply (then TILE_LOOP copies it). */
static int tile_t8(const char *s, char *d, int64_t sk, int64_t sl, int64_t dk,
                   int64_t dl, int64_t k0, int64_t k1, int64_t l0, int64_t l1) {
  if ((k1 - k0) % 8 || (l1 - l0) % 8 || !have_avx2()) return 0;
  const float *fs = (const float *)s;
  float *fd = (float *)d;
  if (sl == 1 && dk == 1) { /* src rows along L, dst rows along K */
    /* k inner: each dst line is written whole before the next (k outer
       left halves of lines behind: 1.8x the time of a 1024 x 1024
       scatter into a transpose, 2-core VM, 2026-12-07) */
    for (int64_t l = l0; l < l1; l += 8)
      for (int64_t k = k0; k < k1; k += 8) t8x8(fs + k * sk + l, sk, fd + l * dl + k, dl);
    return 1;
  }
  if (sk == 1 && dl == 1) { /* src rows along K, dst rows along L */
    for (int64_t l = l0; l < l1; l += 8)
      for (int64_t k = k0; k < k1; k += 8) t8x8(fs + l * sl + k, sl, fd + k * dk + l, dk);
    return 1;
  }
  return 0;
}
#else
static int tile_t8(const char *s, char *d, int64_t sk, int64_t sl, int64_t dk,
                   int64_t dl, int64_t k0, int64_t k1, int64_t l0, int64_t l1) {
  (void)s, (void)d, (void)sk, (void)sl, (void)dk, (void)dl;
  (void)k0, (void)k1, (void)l0, (void)l1;
  return 0;
}
#endif

/* Tiles [b, e) of a copy whose last two dims are transposed between src
 * and dst (one is unit-stride in src, the other in dst): tile r is the
 * r-th TILE rows of dim K at the outer multi-index of the dims before K,
 * copied in TILE x TILE blocks so both sides stay in cache. */
OPD_FAST static void copy_tiles(void *arg, int64_t b, int64_t e) {
  const copy_plan_t *p = arg;
  int L = p->rank - 1, K = p->rank - 2;
  const int64_t sk = p->ss[K], sl = p->ss[L], dk = p->ds[K], dl = p->ds[L];
  int64_t nk = p->shape[K], nl = p->shape[L], kb = (nk + TILE - 1) / TILE;
  for (int64_t r = b; r < e; r++) {
    int64_t so = 0, dof = 0, rem = r / kb;
    for (int d = K - 1; d >= 0; d--) {
      int64_t i = rem % p->shape[d];
      so += i * p->ss[d];
      dof += i * p->ds[d];
      rem /= p->shape[d];
    }
    const char *s = p->src + so * (int64_t)p->esz;
    char *d = p->dst + dof * (int64_t)p->esz;
    int64_t k0 = r % kb * TILE, k1 = k0 + TILE < nk ? k0 + TILE : nk;
    for (int64_t l0 = 0; l0 < nl; l0 += TILE) {
      int64_t l1 = l0 + TILE < nl ? l0 + TILE : nl;
      if (p->esz == 4 && tile_t8(s, d, sk, sl, dk, dl, k0, k1, l0, l1)) continue;
      switch (p->esz) {
        case 1: TILE_LOOP(uint8_t); break;
        case 2: TILE_LOOP(uint16_t); break;
        case 4: TILE_LOOP(uint32_t); break;
        default: TILE_LOOP(uint64_t); break; /* plan_tiles: 8 at most */
      }
    }
  }
}

/* Whether to copy in tiles: src's last dim is not unit-stride but another
 * dim is (or the same of dst), and elements are 1-8 bytes. That dim is
 * swapped into place K = rank - 2 (the order of the outer dims is free:
 * each element is copied once whatever it is). */
static int plan_tiles(copy_plan_t *p) {
  int L = p->rank - 1;
  if (p->rank < 2 || p->esz > 8 || (p->esz & (p->esz - 1)) != 0) return 0;
  const int64_t *unit = p->ss[L] != 1 ? p->ss : p->ds[L] != 1 ? p->ds : NULL;
  if (unit == NULL) return 0;
  for (int k = L - 1; k >= 0; k--) {
    if (unit[k] != 1 || p->shape[k] < TILE / 4) continue;
    int K = L - 1;
    int64_t t;
    t = p->shape[k], p->shape[k] = p->shape[K], p->shape[K] = t;
    t = p->ss[k], p->ss[k] = p->ss[K], p->ss[K] = t;
    t = p->ds[k], p->ds[k] = p->ds[K], p->ds[K] = t;
    return 1;
  }
  return 0;
}

/* Elements [b, e) of a copy contiguous on both sides. */
static void copy_flat(void *arg, int64_t b, int64_t e) {
  const copy_plan_t *p = arg;
  memcpy(p->dst + b * (int64_t)p->esz, p->src + b * (int64_t)p->esz,
         (size_t)(e - b) * p->esz);
}

int opd__copy_views_cpu(const opd_exec_t *ex, const opd_tview_t *dst,
                        const opd_tview_t *src) {
  size_t esz = opd__dtype_size(src->dtype);
  if (src->rank != dst->rank || esz != opd__dtype_size(dst->dtype) ||
      memcmp(src->shape, dst->shape, sizeof(int64_t) * (size_t)src->rank) != 0)
    return OPD_EINVAL;
  if (src->numel == 0) return 0;
  copy_plan_t p;
  p.esz = esz;
  p.src = src->data;
  p.dst = dst->data;
  plan_views(&p, dst, src);
  int64_t n = p.shape[p.rank - 1];
  if (p.rank == 1 && p.ss[0] == 1 && p.ds[0] == 1) {
    ex->parallel_for(ex, n, OPD_GRAIN_ELEMS * 4 / (int64_t)esz, copy_flat, &p);
    return 0;
  }
  if (plan_tiles(&p)) {
    int64_t nk = p.shape[p.rank - 2];
    int64_t tiles = src->numel / (nk * n) * ((nk + TILE - 1) / TILE);
    int64_t grain = OPD_GRAIN_ELEMS * 4 / ((int64_t)esz * n * TILE);
    ex->parallel_for(ex, tiles, grain < 1 ? 1 : grain, copy_tiles, &p);
    return 0;
  }
  int64_t rows = src->numel / n;
  int64_t grain = OPD_GRAIN_ELEMS * 4 / ((int64_t)esz * n);
  ex->parallel_for(ex, rows, grain < 1 ? 1 : grain, copy_rows, &p);
  return 0;
}

int opd__copy_cpu_fast(opd_kcall_t *call) {
  return opd__copy_views_cpu(call->exec, &call->out[0], &call->in[0]);
}
