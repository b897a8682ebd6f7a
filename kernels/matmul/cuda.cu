/* matmul on the GPU through cuBLASLt (kernels/cuda/gemm.cu), torch.matmul
 * semantics from the shared plan (kernels/matmul/plan.h), float32 (true
 * fp32, TF32 off), float16 and bfloat16 (fp32 accumulation), float64
 * (double compute).
 *
 * Variants, by how the batch dims broadcast:
 *   fold     no batch, or b without batch dims and a holding every item:
 *            one GEMM with a's batch folded into M (nbatch*M, K)@(K, N)
 *   strided  a and b both hold every item: one strided-batched GEMM
 *   bcast-a  a holds one matrix, b every item: strided batch, a stride 0
 *   items    any other broadcast (e.g. (2,1,M,K)@(1,3,K,N)): one GEMM per
 *            output item, matrices picked by opd__matmul_batch_index
 * K == 0 writes zeros (cudaMemsetAsync); M, N or the batch 0 writes
 * nothing. Test: build/tests/gpu_kernels (op=matmul); bench: --bench
 * (bf16 M x 4096 x 4096, TFLOP/s).
 */
#include "kernels/cuda/gemm.cuh"

extern "C" {
#include "kernels/matmul/plan.h"
}

extern "C" int opd__matmul_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  mm_plan_t p;
  int rc = opd__matmul_plan(call, &p, NULL);
  if (rc) return rc;
  int32_t dt = call->out[0].dtype;
  int64_t esz = (int64_t)opd__dtype_size(dt);
  if (p.nbatch == 0 || p.M == 0 || p.N == 0) return 0;
  if (p.K == 0) {
    OPD_CUDA_CHECK(cudaMemsetAsync(call->out[0].data, 0,
                                   (size_t)(p.nbatch * p.M * p.N * esz), OPD_STREAM(ctx)));
    return 0;
  }
  opd_gemm_t g = {dt, p.M, p.N, p.K, call->in[0].data, call->in[1].data,
                  call->out[0].data, p.M * p.K, p.K * p.N, p.M * p.N, p.nbatch, 0.0f};
  if (p.nbatch == 1 || (p.bbatch == 1 && p.abatch == p.nbatch)) {
    g.M = p.nbatch * p.M;
    g.batch = 1;
    return opd__cuda_gemm(call, ctx, &g);
  }
  if (p.abatch == p.nbatch && p.bbatch == p.nbatch) return opd__cuda_gemm(call, ctx, &g);
  if (p.abatch == 1 && p.bbatch == p.nbatch) {
    g.sA = 0;
    return opd__cuda_gemm(call, ctx, &g);
  }
  g.batch = 1;
  for (int64_t t = 0; t < p.nbatch; t++) {
    int64_t ia, ib;
    opd__matmul_batch_index(&p, t, &ia, &ib);
    g.A = (const char *)call->in[0].data + ia * p.M * p.K * esz;
    g.B = (const char *)call->in[1].data + ib * p.K * p.N * esz;
    g.C = (char *)call->out[0].data + t * p.M * p.N * esz;
    if ((rc = opd__cuda_gemm(call, ctx, &g))) return rc;
  }
  return 0;
}
