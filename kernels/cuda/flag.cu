/* The daemon's flag word for stream-ordered runs whose client does not
 * wait for the reply (OPD_RUN_F_FLAG, include/opd/protocol.h): a one-thread
 * kernel on the session's stream stores `value` to the word with release
 * semantics at system scope, after the run's work; the client's stream
 * polls the word (libopd's own kernel, client/libopd/stream.c).
 * Why a kernel: stream memory operations (cuStreamWriteValue32) are not
 * supported on the H200 this was built on, and a kernel is what MPS
 * schedules with least delay (bench/bench_handoff: 4.6 us from the
 * daemon's kernel to the client's next kernel, against 5-13 us through an
 * interprocess event).
 * Test: tests/gpu/async_gpu.cu ("enqueue" checks).
 */
#include <cuda_runtime.h>

#include "kernels/cuda/cuda.h"

__global__ void opd_set_flag(unsigned *word, unsigned value) {
  __threadfence_system();
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(word), "r"(value) : "memory");
}

extern "C" int opd__cuda_set_flag(void *stream, unsigned *word, unsigned value) {
  opd_set_flag<<<1, 1, 0, (cudaStream_t)stream>>>(word, value);
  return (int)cudaGetLastError();
}
