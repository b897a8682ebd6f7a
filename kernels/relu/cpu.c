/* relu on the CPU: y = x < 0 ? 0 : x (NaN passes through, as in torch).
 *
 * Variants:
 *   cpu_ref   scalar loop
 *   cpu_fast  vectorized loop (O3 + AVX2 clone), chunks over call->exec
 * Test: build/tests/ops, suite relu
 */
#include "kernels/common/cpu.h"
#include "kernels/common/kutil.h"

OPD_OP_DECLARE(relu);

typedef struct relu_job {
  const float *x;                  /* input (numel) */
  float *y;                        /* output, may be x */
} relu_job_t;

int opd__relu_cpu_ref(opd_kcall_t *call) {
  const float *x = call->in[0].data;
  float *y = call->out[0].data;
  for (int64_t i = 0; i < call->in[0].numel; i++) y[i] = x[i] < 0 ? 0.0f : x[i];
  return 0;
}

OPD_FAST static void relu_range(void *arg, int64_t b, int64_t e) {
  const relu_job_t *j = arg;
  const float *x = j->x;
  float *y = j->y;
  for (int64_t i = b; i < e; i++) y[i] = x[i] < 0 ? 0.0f : x[i];
}

int opd__relu_cpu_fast(opd_kcall_t *call) {
  relu_job_t j = {call->in[0].data, call->out[0].data};
  call->exec->parallel_for(call->exec, call->in[0].numel, OPD_GRAIN_ELEMS,
                           relu_range, &j);
  return 0;
}
