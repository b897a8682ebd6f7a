/* copy on the CPU: gather a strided view into a contiguous output, and
 * the strided-to-strided copy behind it (kernels/copy/copy.h).
 *
 * Variants:
 *   cpu_ref   element by element with a full multi-index (the truth)
 *   cpu_fast  opd__copy_views_cpu: dims merged where both views are
 *             contiguous across them, whole runs copied with memcpy (or a
 *             typed strided loop), rows spread over call->exec
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
      for (int64_t i = 0; i < n; i++) memcpy(dst + i * t * 2, src + i * s * 2, 2);
      break;
    case 4:
      for (int64_t i = 0; i < n; i++) memcpy(dst + i * t * 4, src + i * s * 4, 4);
      break;
    case 8:
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
  int64_t rows = src->numel / n;
  int64_t grain = OPD_GRAIN_ELEMS * 4 / ((int64_t)esz * n);
  ex->parallel_for(ex, rows, grain < 1 ? 1 : grain, copy_rows, &p);
  return 0;
}

int opd__copy_cpu_fast(opd_kcall_t *call) {
  return opd__copy_views_cpu(call->exec, &call->out[0], &call->in[0]);
}
