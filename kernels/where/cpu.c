/* where on the CPU: out[i] = cond[i] ? x[i] : y[i] through broadcast
 * strides, elements moved by size (any dtype).
 *
 * Variants:
 *   cpu_ref   element by element with a full multi-index (the truth)
 *   cpu_fast  rows of out's last dim over call->exec, a typed loop per
 *             element size with each input's stride along the row (0 or 1)
 * Test: build/tests/ops, suite where
 */
#include <string.h>

#include "kernels/common/cpu.h"
#include "kernels/where/where.h"

OPD_OP_DECLARE(where);

int opd__where_cpu_ref(opd_kcall_t *call) {
  where_geom_t g;
  opd__where_geom(call, &g);
  const uint8_t *c = call->in[0].data;
  const char *x = call->in[1].data, *y = call->in[2].data;
  char *o = call->out[0].data;
  int64_t esz = (int64_t)opd__dtype_size(call->out[0].dtype);
  int64_t idx[OPD_MAX_RANK] = {0};
  for (int64_t e = 0; e < call->out[0].numel; e++) {
    int64_t oc = 0, ox = 0, oy = 0;
    for (int d = 0; d < g.rank; d++) {
      oc += idx[d] * g.sc[d];
      ox += idx[d] * g.sx[d];
      oy += idx[d] * g.sy[d];
    }
    memcpy(o + e * esz, c[oc] ? x + ox * esz : y + oy * esz, (size_t)esz);
    for (int d = g.rank - 1; d >= 0; d--) {
      if (++idx[d] < g.shape[d]) break;
      idx[d] = 0;
    }
  }
  return 0;
}

typedef struct where_plan {
  where_geom_t g;                  /* the geometry */
  int64_t n;                       /* elements per row (out's last dim) */
  const uint8_t *c;                /* cond */
  const char *x, *y;               /* x, y */
  char *o;                         /* out */
  size_t esz;                      /* bytes per element */
} where_plan_t;

#define WHERE_ROW(T)                                                        \
  do {                                                                      \
    const T *xs = (const T *)(p->x + ox * esz);                              \
    const T *ys = (const T *)(p->y + oy * esz);                              \
    T *os = (T *)(p->o + r * p->n * esz);                                    \
    for (int64_t i = 0; i < p->n; i++)                                      \
      memcpy(&os[i], cs[i * kc] ? &xs[i * kx] : &ys[i * ky], sizeof(T));    \
  } while (0)

static void where_rows(void *arg, int64_t b, int64_t e) {
  const where_plan_t *p = arg;
  int last = p->g.rank - 1;
  int64_t esz = (int64_t)p->esz;
  int64_t kc = last >= 0 ? p->g.sc[last] : 0, kx = last >= 0 ? p->g.sx[last] : 0,
          ky = last >= 0 ? p->g.sy[last] : 0;
  for (int64_t r = b; r < e; r++) {
    int64_t oc = 0, ox = 0, oy = 0, rem = r;
    for (int d = last - 1; d >= 0; d--) {
      int64_t i = rem % p->g.shape[d];
      rem /= p->g.shape[d];
      oc += i * p->g.sc[d];
      ox += i * p->g.sx[d];
      oy += i * p->g.sy[d];
    }
    const uint8_t *cs = p->c + oc;
    switch (esz) {
      case 1: WHERE_ROW(uint8_t); break;
      case 2: WHERE_ROW(uint16_t); break;
      case 4: WHERE_ROW(uint32_t); break;
      default: WHERE_ROW(uint64_t); break;
    }
  }
}

int opd__where_cpu_fast(opd_kcall_t *call) {
  const opd_tview_t *out = &call->out[0];
  if (out->numel == 0) return 0;
  where_plan_t p;
  opd__where_geom(call, &p.g);
  p.n = out->rank > 0 ? out->shape[out->rank - 1] : 1;
  p.c = call->in[0].data;
  p.x = call->in[1].data;
  p.y = call->in[2].data;
  p.o = out->data;
  p.esz = opd__dtype_size(out->dtype);
  int64_t grain = OPD_GRAIN_ELEMS / p.n;
  call->exec->parallel_for(call->exec, out->numel / p.n, grain < 1 ? 1 : grain, where_rows,
                           &p);
  return 0;
}
