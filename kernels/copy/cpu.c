/* copy on the CPU: gather a strided view into a contiguous output.
 *
 * Variants:
 *   cpu_ref   element by element with a full multi-index (the truth)
 *   cpu_fast  dims merged where the view is contiguous across them, whole
 *             runs copied with memcpy (or a typed strided loop), rows
 *             spread over call->exec
 * Test: build/tests/ops, suite copy
 */
#include <string.h>

#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"

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

typedef struct copy_plan {
  int rank;                        /* merged dims, the last is the run */
  int64_t shape[OPD_MAX_RANK];     /* merged extents */
  int64_t strides[OPD_MAX_RANK];   /* merged strides, in elements */
  size_t esz;                      /* bytes per element */
  const char *src;                 /* x's first element */
  char *dst;                       /* y's first element */
} copy_plan_t;

/* Copies one run of n elements of esz bytes, source stride s elements. */
OPD_FAST static void copy_run(char *dst, const char *src, int64_t n,
                              int64_t s, size_t esz) {
  if (s == 1) {
    memcpy(dst, src, (size_t)n * esz);
    return;
  }
  switch (esz) {
    case 1:
      for (int64_t i = 0; i < n; i++) dst[i] = src[i * s];
      break;
    case 2: {
      uint16_t *d = (uint16_t *)dst;
      for (int64_t i = 0; i < n; i++) memcpy(&d[i], src + i * s * 2, 2);
      break;
    }
    case 4: {
      uint32_t *d = (uint32_t *)dst;
      for (int64_t i = 0; i < n; i++) memcpy(&d[i], src + i * s * 4, 4);
      break;
    }
    case 8: {
      uint64_t *d = (uint64_t *)dst;
      for (int64_t i = 0; i < n; i++) memcpy(&d[i], src + i * s * 8, 8);
      break;
    }
    default:
      for (int64_t i = 0; i < n; i++)
        memcpy(dst + i * (int64_t)esz, src + i * s * (int64_t)esz, esz);
  }
}

/* Rows [b, e) of the plan: row r is the run at outer multi-index r. */
static void copy_rows(void *arg, int64_t b, int64_t e) {
  const copy_plan_t *p = arg;
  int last = p->rank - 1;
  int64_t n = p->shape[last];
  for (int64_t r = b; r < e; r++) {
    int64_t off = 0, rem = r;
    for (int d = last - 1; d >= 0; d--) {
      off += (rem % p->shape[d]) * p->strides[d];
      rem /= p->shape[d];
    }
    copy_run(p->dst + r * n * (int64_t)p->esz,
             p->src + off * (int64_t)p->esz, n, p->strides[last], p->esz);
  }
}

/* Elements [b, e) of a fully contiguous copy. */
static void copy_flat(void *arg, int64_t b, int64_t e) {
  const copy_plan_t *p = arg;
  memcpy(p->dst + b * (int64_t)p->esz, p->src + b * (int64_t)p->esz,
         (size_t)(e - b) * p->esz);
}

int opd__copy_cpu_fast(opd_kcall_t *call) {
  const opd_tview_t *x = &call->in[0];
  if (x->numel == 0) return 0;
  copy_plan_t p = {0};
  p.esz = opd__dtype_size(x->dtype);
  p.src = x->data;
  p.dst = call->out[0].data;
  /* Drop extents of 1, merge dim d into d+1 where x is contiguous across
   * them (stride[d] == stride[d+1] * shape[d+1]). */
  for (int d = 0; d < x->rank; d++) {
    if (x->shape[d] == 1) continue;
    if (p.rank > 0 &&
        p.strides[p.rank - 1] == x->strides[d] * x->shape[d]) {
      p.shape[p.rank - 1] *= x->shape[d];
      p.strides[p.rank - 1] = x->strides[d];
    } else {
      p.shape[p.rank] = x->shape[d];
      p.strides[p.rank] = x->strides[d];
      p.rank++;
    }
  }
  if (p.rank == 0) { /* a single element */
    p.rank = 1;
    p.shape[0] = 1;
    p.strides[0] = 1;
  }
  int64_t n = p.shape[p.rank - 1];
  if (p.rank == 1 && p.strides[0] == 1) {
    call->exec->parallel_for(call->exec, n,
                             OPD_GRAIN_ELEMS * 4 / (int64_t)p.esz, copy_flat,
                             &p);
    return 0;
  }
  int64_t rows = x->numel / n;
  int64_t grain = OPD_GRAIN_ELEMS * 4 / ((int64_t)p.esz * n);
  call->exec->parallel_for(call->exec, rows, grain < 1 ? 1 : grain,
                           copy_rows, &p);
  return 0;
}
