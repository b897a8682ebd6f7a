/* matmul on the CPU: a batch of row-major (M,K)@(K,N) products.
 *
 * Variants:
 *   cpu_ref   triple loop per batch item, double accumulation (truth)
 *   cpu_fast  OpenBLAS sgemm in blocks of rows over call->exec
 *             (opd__sgemm_ex, kernels/common/gemm.h), or
 *             for 10..64 columns and 16+ rows the register tiles
 *             (opd__sgemm_nn_small, on call->exec when not per item): one
 *             call for the whole batch when b
 *             has no batch dims (a's batch folds into M); else one call
 *             per item, items spread over call->exec when each product is
 *             small (a large product's rows spread over it instead)
 * Built with OPD_NO_BLAS (make BLAS=0: the GPU machine has no OpenBLAS),
 * cpu_fast is cpu_ref.
 * float64 (both variants): opd__dgemm per batch item (OpenBLAS dgemm, or
 * plain loops with BLAS=0); float16 / bfloat16 run the float32 kernels on
 * converted copies (kernels/common/cast.h).
 * K == 0 gives zeros; M == 0 or N == 0 writes nothing.
 * Test: build/tests/ops, suite matmul
 */
#include <limits.h>
#include <string.h>

#include "kernels/common/cast.h"
#include "kernels/common/cpu.h"
#include "kernels/common/gemm.h"
#include "kernels/matmul/plan.h"

OPD_OP_DECLARE(matmul);

/* Per-item products at most this many multiply-adds run one per pool
 * chunk; larger ones each spread their rows over the pool. */
#define SMALL_GEMM (1 << 18)

/* float64: one opd__dgemm per batch item. */
static int matmul64(opd_kcall_t *call) {
  mm_plan_t p;
  int rc = opd__matmul_plan(call, &p, NULL);
  if (rc) return rc;
  const double *A = call->in[0].data, *B = call->in[1].data;
  double *Y = call->out[0].data;
  for (int64_t t = 0; t < p.nbatch; t++) {
    int64_t ia, ib;
    opd__matmul_batch_index(&p, t, &ia, &ib);
    opd__dgemm(0, p.M, p.N, p.K, A + ia * p.M * p.K, B + ib * p.K * p.N,
               Y + t * p.M * p.N);
  }
  return 0;
}

int opd__matmul_cpu_ref(opd_kcall_t *call) {
  OPD_CAST_DISPATCH(call, opd__matmul_cpu_ref, matmul64);
  mm_plan_t p;
  int rc = opd__matmul_plan(call, &p, NULL);
  if (rc) return rc;
  const float *A = call->in[0].data, *B = call->in[1].data;
  float *Y = call->out[0].data;
  int64_t M = p.M, K = p.K, N = p.N;
  for (int64_t t = 0; t < p.nbatch; t++) {
    int64_t ia, ib;
    opd__matmul_batch_index(&p, t, &ia, &ib);
    const float *a = A + ia * M * K, *b = B + ib * K * N;
    float *y = Y + t * M * N;
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double s = 0;
        for (int64_t k = 0; k < K; k++) s += (double)a[i * K + k] * b[k * N + j];
        y[i * N + j] = (float)s;
      }
  }
  return 0;
}

#ifdef OPD_NO_BLAS
int opd__matmul_cpu_fast(opd_kcall_t *call) { return opd__matmul_cpu_ref(call); }
#else
typedef struct mm_job {
  const mm_plan_t *p;              /* the plan */
  const opd_exec_t *ex;            /* each product's threads (NULL: items
                                      spread over the pool instead) */
  const float *A, *B;              /* operands */
  float *Y;                        /* output (nbatch, M, N) */
} mm_job_t;

/* Small N (a few columns, as the MLP's matmul form x^T): the tiles on ex
 * (kernels/common/gemm_wt.c); else OpenBLAS in blocks of rows on ex. */
static void gemm(const opd_exec_t *ex, int64_t M, int64_t N, int64_t K,
                 const float *a, const float *b, float *y) {
  if (!opd__sgemm_nn_small(ex, M, N, K, a, b, y))
    opd__sgemm_ex(ex, 0, M, N, K, a, b, 0.0f, y);
}

static void mm_items(void *arg, int64_t b, int64_t e) {
  const mm_job_t *j = arg;
  const mm_plan_t *p = j->p;
  for (int64_t t = b; t < e; t++) {
    int64_t ia, ib;
    opd__matmul_batch_index(p, t, &ia, &ib);
    gemm(j->ex, p->M, p->N, p->K, j->A + ia * p->M * p->K, j->B + ib * p->K * p->N,
         j->Y + t * p->M * p->N);
  }
}

int opd__matmul_cpu_fast(opd_kcall_t *call) {
  OPD_CAST_DISPATCH(call, opd__matmul_cpu_fast, matmul64);
  mm_plan_t p;
  int rc = opd__matmul_plan(call, &p, NULL);
  if (rc) return rc;
  mm_job_t j = {&p, NULL, call->in[0].data, call->in[1].data, call->out[0].data};
  int64_t M = p.M, K = p.K, N = p.N;
  if (p.nbatch == 0 || M == 0 || N == 0) return 0;
  if (K == 0) {
    memset(j.Y, 0, (size_t)(p.nbatch * M * N) * sizeof(float));
    return 0;
  }
  /* b without batch dims and a holding every item: fold the batch into M */
  if (p.bbatch == 1 && p.abatch == p.nbatch && p.nbatch * M <= INT_MAX &&
      N <= INT_MAX && K <= INT_MAX) {
    gemm(call->exec, p.nbatch * M, N, K, j.A, j.B, j.Y);
    return 0;
  }
  if (M > INT_MAX || N > INT_MAX || K > INT_MAX)
    return opd__matmul_cpu_ref(call); /* beyond BLAS's int sizes */
  int64_t work = M * N * K;
  if (p.nbatch > 1 && work <= SMALL_GEMM) {
    int64_t grain = SMALL_GEMM / (work > 0 ? work : 1);
    call->exec->parallel_for(call->exec, p.nbatch, grain < 1 ? 1 : grain,
                             mm_items, &j);
  } else {
    j.ex = call->exec;
    mm_items(&j, 0, p.nbatch);
  }
  return 0;
}
#endif /* OPD_NO_BLAS */
