/* matmul's plan (plan.h): how a call maps onto a batch of (M,K)@(K,N)
 * products, shared by its shape rule (op.c) and kernels (cpu.c, cuda.cu).
 *
 * DESIGN
 * See plan.h: a 1-D a or b becomes a matrix whose dim is dropped from the
 * output, and the leading dims of both broadcast into the batch.
 */
#include "kernels/matmul/plan.h"

#include <string.h>

#include "kernels/common/kutil.h"

int opd__matmul_plan(opd_kcall_t *call, mm_plan_t *p, opd_tshape_t *out) {
  const opd_tview_t *a = &call->in[0], *b = &call->in[1];
  char sa[128], sb[128];
  memset(p, 0, sizeof *p);
  opd__shape_str(sa, sizeof sa, a->shape, a->rank);
  opd__shape_str(sb, sizeof sb, b->shape, b->rank);
  if (a->rank == 0 || b->rank == 0)
    return opd__kerr(call, OPD_ESHAPE,
                     "input 0 (a) has shape %s and input 1 (b) has shape %s; "
                     "both must have at least 1 dim (0-d is not allowed)",
                     sa, sb);
  p->a_vec = a->rank == 1;
  p->b_vec = b->rank == 1;
  int64_t Kb;
  p->M = p->a_vec ? 1 : a->shape[a->rank - 2];
  p->K = a->shape[a->rank - 1];
  Kb = p->b_vec ? b->shape[0] : b->shape[b->rank - 2];
  p->N = p->b_vec ? 1 : b->shape[b->rank - 1];
  if (p->K != Kb)
    return opd__kerr(call, OPD_ESHAPE,
                     "input 0 (a) has shape %s and input 1 (b) has shape %s; "
                     "inner dims differ: a's last dim is %lld but b's %s dim "
                     "is %lld",
                     sa, sb, (long long)p->K,
                     p->b_vec ? "only" : "second-to-last", (long long)Kb);
  int nba = p->a_vec ? 0 : a->rank - 2, nbb = p->b_vec ? 0 : b->rank - 2;
  int rc = opd__bcast_shape(a->shape, nba, b->shape, nbb, p->batch, &p->nb);
  if (rc < 0)
    return opd__kerr(call, OPD_ESHAPE,
                     "input 0 (a) has shape %s and input 1 (b) has shape %s; "
                     "their batch dims (all but the last two) do not "
                     "broadcast",
                     sa, sb);
  opd__bcast_strides(a->shape, nba, p->nb, p->sa);
  opd__bcast_strides(b->shape, nbb, p->nb, p->sb);
  p->nbatch = 1;
  for (int i = 0; i < p->nb; i++) p->nbatch *= p->batch[i];
  p->abatch = 1;
  for (int i = 0; i < nba; i++) p->abatch *= a->shape[i];
  p->bbatch = 1;
  for (int i = 0; i < nbb; i++) p->bbatch *= b->shape[i];
  if (out) {
    out->dtype = a->dtype;
    out->rank = p->nb;
    for (int i = 0; i < p->nb; i++) out->shape[i] = p->batch[i];
    if (!p->a_vec) out->shape[out->rank++] = p->M;
    if (!p->b_vec) out->shape[out->rank++] = p->N;
  }
  return 0;
}

void opd__matmul_batch_index(const mm_plan_t *p, int64_t i, int64_t *ia,
                             int64_t *ib) {
  int64_t xa = 0, xb = 0;
  for (int d = p->nb - 1; d >= 0; d--) {
    int64_t k = i % p->batch[d];
    i /= p->batch[d];
    xa += k * p->sa[d];
    xb += k * p->sb[d];
  }
  *ia = xa;
  *ib = xb;
}
