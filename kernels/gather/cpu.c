/* gather on the CPU: every index checked, then one element moved per out
 * element (addressing: kernels/gather/gather.h).
 *
 * Variants:
 *   cpu_ref   indices checked, then elements moved in order
 *   cpu_fast  indices checked, then elements moved over call->exec
 * Test: build/tests/ops, suite shape (gather_*)
 */
#include <string.h>

#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"
#include "kernels/gather/gather.h"

OPD_OP_DECLARE(gather);

typedef struct job {
  gather_plan_t p;                 /* addressing */
  const int64_t *idx;              /* index values, out's order */
  const char *x;                   /* x's first element */
  char *y;                         /* out's first element */
  size_t es;                       /* element size in bytes */
} job_t;

/* 0 when every index is in [0, n), else OPD_EINVAL naming the first one
 * that is not. */
static int check(opd_kcall_t *call, const job_t *j) {
  for (int64_t i = 0; i < call->in[1].numel; i++)
    if (j->idx[i] < 0 || j->idx[i] >= j->p.n)
      return opd__kerr(call, OPD_EINVAL, "index[%lld] (flat) = %lld is out of range [0, %lld) "
                       "of x's dim %d", (long long)i, (long long)j->idx[i], (long long)j->p.n,
                       j->p.dim);
  return 0;
}

#define MOVE(T)                                                                  \
  for (int64_t i = b; i < e; i++)                                                \
    ((T *)j->y)[i] = ((const T *)j->x)[gather_offset(&j->p, i, j->idx[i])];

static void move(void *arg, int64_t b, int64_t e) {
  const job_t *j = arg;
  switch (j->es) {
    case 1: MOVE(uint8_t) break;
    case 2: MOVE(uint16_t) break;
    case 4: MOVE(uint32_t) break;
    case 8: MOVE(uint64_t) break;
    default:
      for (int64_t i = b; i < e; i++)
        memcpy(j->y + (size_t)i * j->es,
               j->x + (size_t)gather_offset(&j->p, i, j->idx[i]) * j->es, j->es);
  }
}

static int plan(opd_kcall_t *call, job_t *j) {
  const opd_tview_t *x = &call->in[0];
  int r = x->rank ? x->rank : 1;
  int dim = (int)(call->attr[0].i < 0 ? call->attr[0].i + r : call->attr[0].i);
  gather_plan(&j->p, x->shape, call->in[1].shape, x->rank, dim);
  j->idx = call->in[1].data;
  j->x = x->data;
  j->y = call->out[0].data;
  j->es = opd__dtype_size(x->dtype);
  return check(call, j);
}

int opd__gather_cpu_ref(opd_kcall_t *call) {
  job_t j;
  int rc = plan(call, &j);
  if (rc == 0) move(&j, 0, call->out[0].numel);
  return rc;
}

int opd__gather_cpu_fast(opd_kcall_t *call) {
  job_t j;
  int rc = plan(call, &j);
  if (rc != 0 || call->out[0].numel == 0) return rc;
  call->exec->parallel_for(call->exec, call->out[0].numel, OPD_GRAIN_ELEMS, move, &j);
  return 0;
}
