/* probe_stretch: an opd-ordered forward in C, both sides, to find which
 * piece of the hand-off makes ResNet-18's slow level (issue 13,
 * docs/records/2026-12-01-stream-ordered-cost/README.md): a "client" process runs S stretches, each
 * J work kernels followed by a hand-off to a "daemon" process and back, the
 * way libopd and opd order a run under MPS:
 *   client  [J work kernels] [its word := k] (request k to the daemon)
 *           [poll kernel: wait for the daemon's word >= k]
 *   daemon  on request k: [wait kernel: the client's word >= k]
 *           [op over E floats] [the daemon's word := k] [completion event]
 * and, in the same client process, the same S stretches with no hand-off
 * (the J kernels only) as the baseline. The figure is the GPU time per
 * stretch (events around the S), median of R rounds, and the difference:
 * what a hand-off costs.
 * Variants (argv[3], comma list; a fresh pair of processes each):
 *   memset/pdl    the client's word by cuMemsetD32Async, the daemon's op and
 *                 word dependent launches of its wait kernel (opd today)
 *   kernel/pdl    the client's word stored by a one-thread kernel
 *   one/pdl       the client's word stored by the poll kernel as it starts
 *                 (after the request: one kernel, no memset; with @legacy
 *                 OPD_STREAM_LEGACY=kernel)
 *   onepdl/pdl    that kernel a programmatic dependent launch, which waits
 *                 for the kernel before it (griddepcontrol.wait) before it
 *                 stores (OPD_STREAM_LEGACY=pdl)
 *   memset/plain  the daemon's op and word plain launches
 *   memset/ahead1 the daemon launches run k only once run k-1 completed
 *                 (opd --word-ahead 1)
 *   none/pdl      no client word and no poll: the daemon's kernels as
 *                 before but its wait sees a word the daemon writes itself
 *                 (what the daemon's stream alone costs the client)
 *   ...+query     (a suffix to any of them, before an @ suffix) each
 *                 hand-off first asks whether the client's stream is idle
 *                 (cudaStreamQuery, the answer unused: the word is always
 *                 written), as libopd's idle check does on every call;
 *                 the earlier runs had no such query
 *   ...@legacy    (a suffix to any of them) the client's work on the legacy
 *                 default stream (torch's default stream), the hand-off's
 *                 word and poll kernel too; the earlier runs were all on a
 *                 non-blocking stream, where the slow level never showed
 *   ...@side      the work and the word on the legacy stream, the poll
 *                 kernel on a non-blocking stream, the legacy stream waiting
 *                 for it by an event (OPD_STREAM_LEGACY=side)
 *   ...@fork      the word too on that stream, after an event of the legacy
 *                 stream (OPD_STREAM_LEGACY=fork)
 * Build: make CUDA=1 build/bench/probe_stretch
 * Run (under MPS): build/bench/probe_stretch [S=200] [R=9] [variants] [J=4]
 *   [work_us=20] [L=2]
 *   L: the client's host at most L stretches ahead of its GPU (it waits for
 *   an event of stretch i - L before queueing stretch i), as a model's host
 *   is about one call ahead (the daemon's wait kernel is on the GPU ~100 us
 *   before the word); 0: all S queued behind a lead sleep
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/cuda/common.cuh" /* opd__pdl_config */

#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x,                \
              cudaGetErrorString(e_));                                         \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

#define DAEMON_WORD 32 /* words: the client's at 0, the daemon's 128 bytes on */
#define E_OP (1 << 20)

__device__ __forceinline__ unsigned long long gt(void) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ unsigned ld_acq(const unsigned *p) {
  unsigned v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__global__ void k_sleep(unsigned long long ns) {
  unsigned long long t0 = gt();
  while (gt() - t0 < ns) {
  }
}

/* a work kernel of the client's: 132 x 256 threads, about work_ns */
__global__ void k_work(float *x, unsigned long long ns) {
  unsigned long long t0 = gt();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = x[i];
  while (gt() - t0 < ns) v = v * 0.999f + 0.001f;
  x[i] = v;
}

__global__ void k_store(unsigned *w, unsigned v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(w), "r"(v) : "memory");
}

/* wait for *w >= want (signed difference), at most 1 s */
__global__ void k_poll(const unsigned *w, unsigned want) {
  unsigned long long t0 = gt();
  while ((int)(ld_acq(w) - want) < 0 && gt() - t0 < 1000000000ull) {
  }
}

/* k_store then k_poll as one kernel (OPD_STREAM_LEGACY=kernel) */
__global__ void k_store_poll(unsigned *mine, const unsigned *w, unsigned want) {
  __threadfence_system();
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(mine), "r"(want) : "memory");
  unsigned long long t0 = gt();
  while ((int)(ld_acq(w) - want) < 0 && gt() - t0 < 1000000000ull) {
  }
}

/* the same as a dependent launch's (OPD_STREAM_LEGACY=pdl): the grid before
 * it ended and seen first */
__global__ void k_store_poll_pdl(unsigned *mine, const unsigned *w, unsigned want) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  __threadfence_system();
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(mine), "r"(want) : "memory");
  unsigned long long t0 = gt();
  while ((int)(ld_acq(w) - want) < 0 && gt() - t0 < 1000000000ull) {
  }
}

__global__ void k_wait_pdl(const unsigned *w, unsigned want) {
  unsigned long long t0 = gt();
  while ((int)(ld_acq(w) - want) < 0 && gt() - t0 < 1000000000ull) {
  }
  asm volatile("griddepcontrol.launch_dependents;");
}

__global__ void k_op(float *y, int n, int dep) {
  if (dep) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
  }
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    y[i] = y[i] > 0.0f ? y[i] : 0.0f;
}

__global__ void k_flag(unsigned *w, unsigned v, int dep) {
  if (dep) asm volatile("griddepcontrol.wait;" ::: "memory");
  __threadfence_system();
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(w), "r"(v) : "memory");
}

/* the daemon's op and word as dependent launches (as opd's) */
static void launch(cudaStream_t s, void (*k)(float *, int, int), float *y, int n, int grid,
                   int block) {
  cudaLaunchAttribute at;
  cudaLaunchConfig_t cfg = opd__pdl_config(dim3(grid), dim3(block), s, &at);
  CK(cudaLaunchKernelEx(&cfg, k, y, n, 1));
}

static void launch_flag(cudaStream_t s, unsigned *w, unsigned v) {
  cudaLaunchAttribute at;
  cudaLaunchConfig_t cfg = opd__pdl_config(dim3(1), dim3(1), s, &at);
  CK(cudaLaunchKernelEx(&cfg, k_flag, w, v, 1));
}

/* ---- the daemon --------------------------------------------------------- */

static void daemon_side(int fd, const char *variant) {
  int plain = strstr(variant, "/plain") != NULL;
  int ahead1 = strstr(variant, "/ahead1") != NULL;
  int self = strncmp(variant, "none", 4) == 0;
  unsigned *flag;
  float *y;
  CK(cudaMalloc(&flag, 4096));
  CK(cudaMemset(flag, 0, 4096));
  CK(cudaMalloc(&y, E_OP * sizeof(float)));
  CK(cudaMemset(y, 0, E_OP * sizeof(float)));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaDeviceSynchronize());
  cudaIpcMemHandle_t h;
  CK(cudaIpcGetMemHandle(&h, flag));
  if (write(fd, &h, sizeof h) != sizeof h) exit(1);
  enum { NEV = 1024 };
  static cudaEvent_t ev[NEV];
  for (int i = 0; i < NEV; i++) CK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
  unsigned k, prev = 0;
  while (read(fd, &k, sizeof k) == sizeof k) {
    if (k == 0) break;
    if (ahead1 && prev != 0) CK(cudaEventSynchronize(ev[prev % NEV]));
    if (self) /* its own word: the wait sees it at once */
      k_store<<<1, 1, 0, s>>>(flag, k);
    if (plain) {
      k_poll<<<1, 1, 0, s>>>(flag, k);
      k_op<<<1024, 256, 0, s>>>(y, E_OP, 0);
      k_flag<<<1, 1, 0, s>>>(flag + DAEMON_WORD, k, 0);
    } else {
      k_wait_pdl<<<1, 1, 0, s>>>(flag, k);
      launch(s, k_op, y, E_OP, 1024, 256);
      launch_flag(s, flag + DAEMON_WORD, k);
    }
    CK(cudaEventRecord(ev[k % NEV], s));
    CK(cudaGetLastError());
    prev = k;
  }
  CK(cudaStreamSynchronize(s));
  exit(0);
}

/* ---- the client --------------------------------------------------------- */

static int cmp_f(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

typedef CUresult (*memset_fn)(CUdeviceptr, unsigned, size_t, CUstream);

static void client_side(const char *variant, int S, int R, int J, unsigned long long work_ns,
                        int L) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) exit(1);
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    daemon_side(sv[1], variant);
  }
  close(sv[1]);
  int fd = sv[0];
  cudaIpcMemHandle_t h;
  if (read(fd, &h, sizeof h) != sizeof h) {
    fprintf(stderr, "daemon side failed\n");
    exit(1);
  }
  unsigned *flag;
  CK(cudaIpcOpenMemHandle((void **)&flag, h, cudaIpcMemLazyEnablePeerAccess));
  memset_fn memset_d32 = NULL;
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion("cuMemsetD32Async", (void **)&memset_d32, 12000,
                                      cudaEnableDefault, &q));
  int by_kernel = strncmp(variant, "kernel", 6) == 0;
  int by_one = strncmp(variant, "one", 3) == 0;
  int one_pdl = strncmp(variant, "onepdl", 6) == 0;
  int none = strncmp(variant, "none", 4) == 0;
  int query = strstr(variant, "+query") != NULL;
  /* the client's stream: a non-blocking one of its own, or @MODE: the
   * legacy default stream (torch's default stream), with the hand-off's
   * part on it (@legacy) or on a side stream as OPD_STREAM_LEGACY's modes
   * put it (@side: the poll kernel; @fork: the word's memset too),
   * ordered with the legacy stream by events */
  const char *at = strchr(variant, '@');
  int legacy = at != NULL, side_poll = at && strcmp(at, "@side") == 0,
      fork_word = at && strcmp(at, "@fork") == 0;
  if (at && !side_poll && !fork_word && strcmp(at, "@legacy") != 0) {
    fprintf(stderr, "variant %s: @legacy, @side or @fork\n", variant);
    exit(1);
  }
  cudaStream_t s, side = NULL;
  cudaEvent_t ev_fork, ev_join;
  if (legacy) {
    s = cudaStreamLegacy;
    CK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&ev_fork, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&ev_join, cudaEventDisableTiming));
  } else {
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  }
  cudaStream_t s_word = s, s_poll = s;
  if (fork_word) s_word = side;
  if (fork_word || side_poll) s_poll = side;
  float *x;
  CK(cudaMalloc(&x, 132 * 256 * sizeof(float)));
  CK(cudaMemset(x, 0, 132 * 256 * sizeof(float)));
  cudaEvent_t e0, e1, ring[16];
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 16; i++) CK(cudaEventCreateWithFlags(&ring[i], cudaEventDisableTiming));
  unsigned k = 0;
  float base[64], with[64];
  for (int r = -1; r < R && r < 63; r++) {
    for (int pass = 0; pass < 2; pass++) {
      /* the lead: the host queues all S stretches before the GPU starts
       * (L = 0), or its first L */
      k_sleep<<<1, 1, 0, s>>>(L > 0 ? 200000ull : 2000000ull + (unsigned long long)S * J * work_ns / 2);
      CK(cudaEventRecord(e0, s));
      for (int i = 0; i < S; i++) {
        /* the host at most L stretches ahead of the GPU (as a model's
         * host is, about one call ahead): wait for stretch i - L */
        if (L > 0 && i >= L)
          while (cudaEventQuery(ring[(i - L) % 16]) == cudaErrorNotReady) {
          }
        for (int j = 0; j < J; j++) k_work<<<132, 256, 0, s>>>(x, work_ns);
        if (pass == 0) {
          if (L > 0) CK(cudaEventRecord(ring[i % 16], s));
          continue;
        }
        k++;
        /* libopd's idle check: its answer unused (the stream is busy here,
         * and the word goes on it either way) */
        if (query) (void)cudaStreamQuery(s);
        if (!none && !by_one) {
          if (s_word != s) {
            CK(cudaEventRecord(ev_fork, s));
            CK(cudaStreamWaitEvent(s_word, ev_fork, 0));
          }
          if (by_kernel)
            k_store<<<1, 1, 0, s_word>>>(flag, k);
          else if (memset_d32((CUdeviceptr)flag, k, 1, (CUstream)s_word) != CUDA_SUCCESS) {
            fprintf(stderr, "cuMemsetD32Async failed\n");
            exit(1);
          }
        }
        if (write(fd, &k, sizeof k) != sizeof k) exit(1);
        if (one_pdl) {
          cudaLaunchAttribute at;
          cudaLaunchConfig_t cfg = opd__pdl_config(dim3(1), dim3(1), s, &at);
          CK(cudaLaunchKernelEx(&cfg, k_store_poll_pdl, flag, (const unsigned *)(flag + DAEMON_WORD), k));
        } else if (by_one) {
          k_store_poll<<<1, 1, 0, s>>>(flag, flag + DAEMON_WORD, k);
        } else if (!none) {
          k_poll<<<1, 1, 0, s_poll>>>(flag + DAEMON_WORD, k);
          if (s_poll != s) {
            CK(cudaEventRecord(ev_join, s_poll));
            CK(cudaStreamWaitEvent(s, ev_join, 0));
          }
        }
        if (L > 0) CK(cudaEventRecord(ring[i % 16], s));
      }
      CK(cudaEventRecord(e1, s));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (r >= 0) (pass ? with : base)[r] = ms * 1000.0f / S;
    }
  }
  unsigned zero = 0;
  if (write(fd, &zero, sizeof zero) != sizeof zero) exit(1);
  waitpid(pid, NULL, 0);
  qsort(base, R, sizeof base[0], cmp_f);
  qsort(with, R, sizeof with[0], cmp_f);
  printf("stretch variant=%-13s base_us=%.2f with_us=%.2f per_handoff_us=%.2f ratio=%.3f "
         "S=%d R=%d J=%d work_us=%.1f L=%d\n", variant, base[R / 2], with[R / 2],
         with[R / 2] - base[R / 2], with[R / 2] / base[R / 2], S, R, J, work_ns / 1000.0, L);
  exit(0);
}

int main(int argc, char **argv) {
  int S = argc > 1 ? atoi(argv[1]) : 200;
  int R = argc > 2 ? atoi(argv[2]) : 9;
  const char *vs = argc > 3 ? argv[3] : "memset/pdl,kernel/pdl,memset/plain,memset/ahead1,none/pdl";
  int J = argc > 4 ? atoi(argv[4]) : 4;
  unsigned long long work_ns = (unsigned long long)((argc > 5 ? atof(argv[5]) : 20.0) * 1000);
  int L = argc > 6 ? atoi(argv[6]) : 2;
  if (L > 15) L = 15;
  if (R > 63) R = 63;
  setvbuf(stdout, NULL, _IOLBF, 0);
  static char buf[1024];
  snprintf(buf, sizeof buf, "%s", vs);
  for (char *v = strtok(buf, ","); v != NULL; v = strtok(NULL, ",")) {
    pid_t p = fork(); /* each pair fresh: no CUDA in this process */
    if (p == 0) client_side(v, S, R, J, work_ns, L);
    int st;
    waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "variant %s failed\n", v);
      return 1;
    }
  }
  return 0;
}
