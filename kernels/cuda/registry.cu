/* The CUDA kernel table: one row per op, looked up by name, and each
 * call's scratch needs.
 *
 * DESIGN
 * Compiled only when CUDA is on (a .cu file), so a CPU-only build never
 * references the CUDA entry points. `dtypes` is what the kernel takes in
 * its float inputs; the op's io masks (kernels/<op>/op.c) accept the union
 * of the backends' dtypes and `cpu_dtypes` says what the CPU takes.
 */
#include <string.h>

#include "kernels/cuda/cuda.h"

#ifdef OPD_TEST_OPS
extern "C" int opd__fault_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx);
#endif
extern "C" size_t opd__conv2d_cuda_workspace(const opd_kcall_t *call);
extern "C" size_t opd__nms_cuda_workspace(const opd_kcall_t *call);

#define F3 (OPD_DT(FLOAT32) | OPD_DT(FLOAT16) | OPD_DT(BFLOAT16))

static const opd_cuda_kernel_t kernels[] = {
    {"noop", OPD_DT_ANY, opd__noop_cuda},
    {"copy", OPD_DT_ANY, opd__copy_cuda},
    {"add", F3, opd__add_cuda},
    {"mul", F3, opd__mul_cuda},
    {"relu", F3, opd__relu_cuda},
    {"gelu", F3, opd__gelu_cuda},
    {"softmax", F3, opd__softmax_cuda},
    {"layernorm", F3, opd__layernorm_cuda},
    {"rmsnorm", F3, opd__rmsnorm_cuda},
    {"matmul", F3, opd__matmul_cuda},
    {"conv2d", F3, opd__conv2d_cuda},
    {"nms", OPD_DT(FLOAT32), opd__nms_cuda},
#ifdef OPD_TEST_OPS
    {"fault", OPD_DT_ANY, opd__fault_cuda},
#endif
};

extern "C" const opd_cuda_kernel_t *opd__cuda_kernel_find(const char *op) {
  if (!op) return NULL;
  for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++)
    if (strcmp(kernels[i].op, op) == 0) return &kernels[i];
  return NULL;
}

extern "C" size_t opd__cuda_workspace(const opd_kcall_t *call) {
  const char *name = call->op ? call->op->name : "";
  if (strcmp(name, "conv2d") == 0) return opd__conv2d_cuda_workspace(call);
  if (strcmp(name, "nms") == 0) return opd__nms_cuda_workspace(call);
  return 0;
}
