/* The daemon's side of stream-ordered runs whose client does not wait for
 * the reply (OPD_RUN_F_FLAG / OPD_RUN_F_WORD, include/opd/protocol.h), on
 * the session's stream, in the session's flag allocation (2 MiB of device
 * memory mapped by the client through its IPC handle; layout in
 * daemon/backend/cuda/flag.h):
 *   opd__cuda_set_flag  after the run: the request id into the daemon's
 *                       word, which the client's stream polls (libopd's
 *                       own kernel, client/libopd/stream.c);
 *   opd__cuda_wait_word before the run: a one-thread kernel polls the
 *                       client's word of a slot until the client's stream
 *                       has written the run's id there (cuMemsetD32Async
 *                       on that stream, after the work the run needs).
 * Why these: stream memory operations (cuStreamWaitValue32 /
 * cuStreamWriteValue32) are not supported on the GPU this was built on;
 * a 4-byte cuMemsetD32Async is what MPS hands over fastest, and costs the
 * host least (bench/bench_handoff, MPS: the client's next kernel starts
 * 2.9 us after the daemon's work ends against 4.5 through a one-thread
 * kernel and 5.0 through an interprocess event; 1.4 us of host time
 * against 4.9 for the kernel's launch). Polling the client's word costs
 * the daemon a kernel launch (4.4 us of host time against 1.1 for
 * cudaStreamWaitEvent) and saves the GPU 2.8 us (3.1 against 5.9 through
 * the client's interprocess event).
 * The wait gives up after timeout_ns of %globaltimer, or at once once an
 * earlier wait of the session gave up (the sticky word): the run then goes
 * ahead, and the kernel appends (sid, want) to the device's timeout board
 * (pinned host memory the daemon reads when the run completes, which then
 * fails with ETIMEDOUT). A client whose stream stops (killed, hung) costs
 * its own session one timeout, not one per run, and never the others.
 * On sm_90 and later the wait kernel triggers its dependents once the
 * word is there, and after an op that went on as its dependent launch
 * (kernels/unary/cuda.cu; the offer: kernels/cuda/pdl.cu) the daemon's
 * word is
 * opd_set_flag_pdl, a one-thread dependent kernel, instead of the memset:
 * ~4.5 us less GPU time per ordered run (docs/async.md "Dependent
 * launches"; OPD_PDL=0 in the daemon's environment: as before).
 * Test: tests/gpu/async_gpu.cu ("enqueue" checks).
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/backend/cuda/flag.h"
#include "kernels/cuda/common.cuh" /* opd__pdl_wait, opd__pdl_config */

__device__ __forceinline__ unsigned long long gtime(void) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* The flag word as a dependent launch of the op: resident while the op
 * runs, it stores once the op has ended and its writes are visible.
 * stamps: NULL, or the run's entry of OPD_GPU_STAMPS (include/opd/protocol.h) */
static __global__ void opd_set_flag_pdl(unsigned *word, unsigned value,
                                        unsigned long long *stamps) {
  opd__pdl_wait();
  __threadfence_system();
  unsigned long long t = stamps != NULL ? gtime() : 0;
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(word), "r"(value) : "memory");
  if (stamps != NULL) {
    stamps[2] = t;
    stamps[3] = value;
  }
}

static __global__ void opd_set_flag(unsigned *word, unsigned value) {
  __threadfence_system();
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(word), "r"(value) : "memory");
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned *p) {
  unsigned x;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(x) : "l"(p) : "memory");
  return x;
}

static __global__ void opd_wait_word(const unsigned *word, unsigned want, unsigned *sticky,
                                     opd_cuda_board_t *board, unsigned sid,
                                     unsigned long long timeout_ns,
                                     unsigned long long *stamps) {
  unsigned long long t0 = gtime();
  for (;;) {
    if ((int)(ld_acquire(word) - want) >= 0) {
      opd__pdl_trigger(); /* the op's blocks may start (they wait for our end) */
      if (stamps != NULL) {
        stamps[0] = t0;
        stamps[1] = gtime();
      }
      return;
    }
    if (*(volatile unsigned *)sticky != 0 || gtime() - t0 > timeout_ns) break;
  }
  *sticky = 1;
  unsigned i = atomicAdd_system(&board->n, 1u);
  board->rec[i % OPD_CUDA_BOARD_RECS] = ((unsigned long long)sid << 32) | want;
  __threadfence_system();
}

/* cuMemsetD32Async through the runtime's entry point (the daemon links no
 * libcuda); NULL: not there, or OPD_FLAG_WRITE=kernel (for comparison). */
typedef CUresult (*memset_d32_fn)(CUdeviceptr, unsigned, size_t, CUstream);
static memset_d32_fn memset_d32;
static pthread_once_t memset_once = PTHREAD_ONCE_INIT;

static void memset_load(void) {
  const char *env = getenv("OPD_FLAG_WRITE");
  if (env != NULL && strcmp(env, "kernel") == 0) return;
#if CUDART_VERSION >= 12050 /* older toolkits: the kernel */
  void *fn = NULL;
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion("cuMemsetD32Async", &fn, 12000,
                                       cudaEnableDefault, &q) == cudaSuccess &&
      q == cudaDriverEntryPointSuccess)
    memset_d32 = (memset_d32_fn)fn;
  (void)cudaGetLastError();
#endif
}

extern "C" int opd__cuda_set_flag(void *stream, unsigned *word, unsigned value) {
  pthread_once(&memset_once, memset_load);
  if (memset_d32 != NULL) {
    CUresult r = memset_d32((CUdeviceptr)word, value, 1, (CUstream)stream);
    /* CUresult and cudaError_t share their values for the errors this
     * can give (invalid value, a poisoned context's 7xx) */
    return (int)r;
  }
  opd_set_flag<<<1, 1, 0, (cudaStream_t)stream>>>(word, value);
  return (int)cudaGetLastError();
}

extern "C" int opd__cuda_set_flag_how(void) {
  pthread_once(&memset_once, memset_load);
  return memset_d32 != NULL;
}

/* OPD_PDL, read once */
static int pdl_env = -1;

extern "C" int opd__cuda_pdl_enabled(int cc_major) {
  if (pdl_env < 0) {
    const char *e = getenv("OPD_PDL");
    pdl_env = !(e != NULL && strcmp(e, "0") == 0);
  }
  return pdl_env && cc_major >= 9;
}

extern "C" int opd__cuda_set_flag_pdl(void *stream, unsigned *word, unsigned value,
                                      unsigned long long *stamps) {
  cudaLaunchAttribute at;
  cudaLaunchConfig_t cfg = opd__pdl_config(dim3(1), dim3(1), (cudaStream_t)stream, &at);
  return (int)cudaLaunchKernelEx(&cfg, opd_set_flag_pdl, word, value, stamps);
}

extern "C" int opd__cuda_wait_word(void *stream, const unsigned *word, unsigned want,
                                   unsigned *sticky, opd_cuda_board_t *board,
                                   unsigned sid, unsigned long long timeout_ns,
                                   unsigned long long *stamps) {
  opd_wait_word<<<1, 1, 0, (cudaStream_t)stream>>>(word, want, sticky, board, sid,
                                                   timeout_ns, stamps);
  return (int)cudaGetLastError();
}
