/* How a matmul call maps onto a batch of row-major (M,K)@(K,N) products,
 * shared by matmul's shape rule and its kernels.
 *
 * DESIGN
 * torch.matmul's cases all reduce to one form: a 1-D a is a (1, K) matrix
 * whose M dim is dropped from the output, a 1-D b a (K, 1) matrix whose N
 * dim is dropped (the same bytes, and the output's bytes are the same
 * either way), and the leading dims of both broadcast into the batch.
 */
#ifndef OPD_KERNELS_MATMUL_PLAN_H
#define OPD_KERNELS_MATMUL_PLAN_H

#include "kernels/kernel.h"

typedef struct mm_plan {
  int64_t M, K, N;                 /* one product is (M,K)@(K,N) */
  int nb;                          /* batch dims of the output */
  int64_t batch[OPD_MAX_RANK];     /* their extents */
  int64_t nbatch;                  /* product of batch (1 when nb == 0) */
  int64_t sa[OPD_MAX_RANK];        /* a's matrix stride per batch dim, in
                                      matrices (0 where broadcast) */
  int64_t sb[OPD_MAX_RANK];        /* same for b */
  int64_t abatch;                  /* matrices in a */
  int64_t bbatch;                  /* matrices in b */
  int a_vec, b_vec;                /* a / b was 1-D */
} mm_plan_t;

/* Fills *p and, when out is not NULL, the output shape. Returns 0, or
 * OPD_ESHAPE with call->err set (0-d operand, inner dims differ, batch
 * dims do not broadcast). */
int opd__matmul_plan(opd_kcall_t *call, mm_plan_t *p, opd_tshape_t *out);

/* Index of batch item i's a and b matrices (in matrices). */
void opd__matmul_batch_index(const mm_plan_t *p, int64_t i, int64_t *ia,
                             int64_t *ib);

#endif /* OPD_KERNELS_MATMUL_PLAN_H */
