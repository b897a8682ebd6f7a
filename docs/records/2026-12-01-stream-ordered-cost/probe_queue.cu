/* probe_queue: does work waiting on the GPU in another MPS process slow a
 * client's own back-to-back kernels, and what would a wait kernel that
 * launches its op itself (CUDA dynamic parallelism) cost? A diagnosis probe
 * for issue 13 (docs/records/2026-12-01-stream-ordered-cost/README.md): under MPS, ResNet-18 with
 * its ReLU through opd is ~4-6% slower when the daemon's stream holds a
 * resident wait kernel with the op and the word queued behind it.
 *
 * Part 1 (client against a holder process, both MPS clients): the client
 * queues K kernels back to back behind a sleep of lead_ms (20 ms: the host
 * has launched all K before the GPU starts them, so the GPU sets their pace)
 * and times them with events; median of R rounds, per kernel (GPU time with
 * the launch gaps), and the host's time per launch. "work" kernels are
 * 132 x 256, "tiny" ones a single thread. The holder, a second process,
 * holds one of:
 *   none      nothing (its context only)
 *   spin      a one-thread kernel spinning ~50 ms, again and again
 *   spinq2    the same with two small kernels queued behind each spin
 *             (the daemon's op and word behind its wait kernel)
 *   pdl       the spin with two programmatic dependent launches behind it
 *             (what the daemon does on sm_90); pdl1: one
 *   pdlw      pdl, then the next run's one-thread wait kernel as a normal
 *             launch and its op as its dependent (the daemon a run ahead)
 *   pdlall    the same with that wait kernel a dependent launch too
 *   pdle      pdl and an event recorded after it (the daemon's run with its
 *             completion event); pdlwe: and the next such run behind it
 *   evq2      two kernels on a second stream waiting for an event recorded
 *             after the spin
 *   spinmem   a one-thread kernel polling a word with ld.acquire.sys for
 *             ~50 ms, as the daemon's wait kernel (spinmemr: volatile loads,
 *             spinmems: __nanosleep(1000) between loads; spinmempdl: with
 *             two dependent launches behind it)
 *   spinms    the spin with a 4-byte cudaMemsetAsync and a one-thread kernel
 *             behind it (the client's word and poll kernel)
 *   blk66     66 one-warp blocks spinning (an op whose blocks wait for the
 *             word themselves); blk132: 132 blocks of 128 threads
 *   cdp       (built with -DPROBE_CDP -rdc=true -lcudadevrt, and -Iinclude -I.) the spin
 *             launching its child and a tail kernel itself at its end, so
 *             that nothing is queued meanwhile. MPS refuses it: "is using
 *             CUDA Dynamic Parallelism, but the current configuration, like
 *             MPS, does not support it" (H200, driver 580, CUDA 13.0).
 * Part 2 (one process): the latency of the hand-offs, %globaltimer, medians
 * of 200: a normal launch after a kernel on the same stream, a dependent
 * launch after its primary's trigger (and with PROBE_CDP: a child launched
 * from a one-thread kernel, a tail launch after the child's end).
 *
 * Build: make CUDA=1 build/bench/probe_queue (nvcc -O2 -arch=sm_90)
 * Run (under MPS): ./probe_queue [K=1000] [R=15] [mode,mode,...] [lead_ms=20]
 *   or ./probe_queue hold MODE: the holder alone, one byte on stdout once it
 *   holds MODE, until SIGTERM (docs/records/2026-12-01-stream-ordered-cost/probe_level.py --holders)
 *   lead_ms: the sleep the K kernels are queued behind; 2 ms is less than
 *   the host takes to launch 1000 (then the GPU's figure is the host's pace)
 *   PROBE_HOLDER_ENV="CUDA_MPS_CLIENT_PRIORITY=1,...": the holder's environment
 *   PROBE_HOLDER_PRIO=low|high: the holder stream's priority
 */
#include <cuda_runtime.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
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

__device__ __forceinline__ unsigned long long gt(void) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void k_sleep(unsigned long long ns) {
  unsigned long long t0 = gt();
  while (gt() - t0 < ns) {
  }
}

/* a one-thread kernel polling a word that never comes, as the daemon's wait
 * kernel (kernels/cuda/flag.cu: ld.acquire.sys; relaxed: volatile loads;
 * sleep_ns: __nanosleep between loads), for ns */
__global__ void k_spin_mem(const unsigned *word, unsigned long long ns, int relaxed,
                           unsigned sleep_ns) {
  unsigned long long t0 = gt();
  unsigned x = 0;
  while (gt() - t0 < ns) {
    if (relaxed)
      x += *(volatile const unsigned *)word;
    else {
      unsigned v;
      asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(word) : "memory");
      x += v;
    }
    if (sleep_ns) __nanosleep(sleep_ns);
  }
  if (x == 0xdeadbeef) *(unsigned *)word = x;
}

/* a small kernel of the client's: 132 x 256, a few hundred ns of work */
__global__ void k_work(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = x[i];
    for (int j = 0; j < 16; j++) v = v * 0.999f + 0.001f;
    x[i] = v;
  }
}

__global__ void k_tiny(float *x) {
  if (threadIdx.x == 0) x[0] += 1.0f;
}

__global__ void k_dep(float *x) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
  if (threadIdx.x == 0 && blockIdx.x == 0) x[1] += 1.0f;
}

/* the next run's wait kernel: one thread (here it only touches x) */
__global__ void k_next(float *x) {
  asm volatile("griddepcontrol.launch_dependents;");
  if (threadIdx.x == 0) x[3] += 1.0f;
}

__global__ void k_child(float *x) {
  if (threadIdx.x == 0 && blockIdx.x == 0) x[2] += 1.0f;
}

#ifdef PROBE_CDP
__global__ void k_cdp_spin(unsigned long long ns, float *x) {
  unsigned long long t0 = gt();
  while (gt() - t0 < ns) {
  }
  k_child<<<1, 32, 0, cudaStreamFireAndForget>>>(x);
  k_tiny<<<1, 1, 0, cudaStreamTailLaunch>>>(x);
}
#endif

/* many resident spinning blocks (an op whose blocks wait for the word) */
__global__ void k_sleep_blocks(unsigned long long ns) {
  unsigned long long t0 = gt();
  while (gt() - t0 < ns) {
  }
}

/* ---- the holder ---------------------------------------------------------- */

static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig; stop = 1; }

/* a dependent launch (programmatic stream serialization), as the daemon's */
static void launch_dep_k(cudaStream_t s, void (*k)(float *), float *x, int grid, int block) {
  cudaLaunchAttribute at;
  cudaLaunchConfig_t cfg = opd__pdl_config(dim3(grid), dim3(block), s, &at);
  CK(cudaLaunchKernelEx(&cfg, k, x));
}

static void launch_dep(cudaStream_t s, float *x) { launch_dep_k(s, k_dep, x, 132, 256); }

static void holder(const char *mode, int ready_fd) {
  signal(SIGTERM, on_term);
  /* PROBE_HOLDER_ENV="A=1,B=2": the holder's environment only (before its
   * CUDA context); PROBE_HOLDER_PRIO=low|high: its stream's priority */
  const char *he = getenv("PROBE_HOLDER_ENV");
  if (he != NULL && *he) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", he);
    for (char *t = strtok(buf, ","); t != NULL; t = strtok(NULL, ",")) putenv(strdup(t));
  }
  int lo = 0, hi = 0;
  CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  const char *hp = getenv("PROBE_HOLDER_PRIO");
  int prio = hp == NULL ? 0 : strcmp(hp, "low") == 0 ? lo : strcmp(hp, "high") == 0 ? hi : 0;
  cudaStream_t s;
  CK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, prio));
  float *x;
  CK(cudaMalloc(&x, 4096));
  CK(cudaMemset(x, 0, 4096));
  CK(cudaDeviceSynchronize());
  unsigned long long ns = 50ull * 1000 * 1000;
  int first = 1;
  while (!stop) {
    if (strcmp(mode, "none") == 0) {
    } else if (strcmp(mode, "spin") == 0) {
      k_sleep<<<1, 1, 0, s>>>(ns);
    } else if (strcmp(mode, "spinq2") == 0) {
      k_sleep<<<1, 1, 0, s>>>(ns);
      k_work<<<132, 256, 0, s>>>(x, 1024);
      k_tiny<<<1, 1, 0, s>>>(x);
    } else if (strcmp(mode, "pdl") == 0) {
      k_sleep<<<1, 1, 0, s>>>(ns);
      launch_dep(s, x);
      launch_dep(s, x);
    } else if (strcmp(mode, "pdlw") == 0) {
      /* the default daemon a run ahead: the next run's wait kernel, a
       * normal launch, queued behind this run's wait and dependents */
      k_sleep<<<1, 1, 0, s>>>(ns);
      launch_dep(s, x);
      launch_dep(s, x);
      k_next<<<1, 1, 0, s>>>(x);
      launch_dep(s, x);
    } else if (strcmp(mode, "pdle") == 0 || strcmp(mode, "pdlwe") == 0) {
      /* the daemon's whole run: wait, op and word as dependents, then the
       * run's completion event; pdlwe: and the next run behind it */
      static cudaEvent_t ev;
      if (ev == NULL) CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
      k_sleep<<<1, 1, 0, s>>>(ns);
      launch_dep(s, x);
      launch_dep(s, x);
      CK(cudaEventRecord(ev, s));
      if (mode[4] == 'w') {
        k_next<<<1, 1, 0, s>>>(x);
        launch_dep(s, x);
        launch_dep(s, x);
        CK(cudaEventRecord(ev, s));
      }
    } else if (strcmp(mode, "pdlall") == 0) {
      /* the same with the next wait kernel a dependent launch too */
      k_sleep<<<1, 1, 0, s>>>(ns);
      launch_dep(s, x);
      launch_dep(s, x);
      launch_dep_k(s, k_next, x, 1, 1);
      launch_dep(s, x);
    } else if (strcmp(mode, "spinmem") == 0 || strcmp(mode, "spinmemr") == 0 ||
               strcmp(mode, "spinmems") == 0) {
      k_spin_mem<<<1, 1, 0, s>>>((const unsigned *)x + 512, ns, mode[7] == 'r',
                                 mode[7] == 's' ? 1000 : 0);
    } else if (strcmp(mode, "spinmempdl") == 0) { /* the daemon's whole run */
      k_spin_mem<<<1, 1, 0, s>>>((const unsigned *)x + 512, ns, 0, 0);
      launch_dep(s, x);
      launch_dep(s, x);
    } else if (strcmp(mode, "spinms") == 0) {
      /* the client's side of an ordered run behind its own long kernel: the
       * word's memset and the poll kernel queued behind it */
      k_sleep<<<1, 1, 0, s>>>(ns);
      CK(cudaMemsetAsync(x + 600, 1, 4, s));
      k_tiny<<<1, 1, 0, s>>>(x);
    } else if (strcmp(mode, "pdl1") == 0) {
      k_sleep<<<1, 1, 0, s>>>(ns);
      launch_dep(s, x);
    } else if (strcmp(mode, "evq2") == 0) {
      /* two kernels on a stream waiting for an event behind the spin */
      static cudaStream_t s2;
      static cudaEvent_t ev;
      if (s2 == NULL) {
        CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
        CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
      }
      k_sleep<<<1, 1, 0, s>>>(ns);
      CK(cudaEventRecord(ev, s));
      CK(cudaStreamWaitEvent(s2, ev, 0));
      k_work<<<132, 256, 0, s2>>>(x, 1024);
      k_tiny<<<1, 1, 0, s2>>>(x);
      CK(cudaStreamSynchronize(s2));
    } else if (strcmp(mode, "blk66") == 0) {
      k_sleep_blocks<<<66, 32, 0, s>>>(ns);
    } else if (strcmp(mode, "blk132") == 0) {
      k_sleep_blocks<<<132, 128, 0, s>>>(ns);
#ifdef PROBE_CDP
    } else if (strcmp(mode, "cdp") == 0) {
      k_cdp_spin<<<1, 1, 0, s>>>(ns, x);
#endif
    }
    CK(cudaGetLastError());
    if (first) {
      char c = 1;
      if (write(ready_fd, &c, 1) != 1) exit(1);
      first = 0;
    }
    if (strcmp(mode, "none") == 0)
      usleep(50000);
    else
      CK(cudaStreamSynchronize(s));
  }
  exit(0);
}

/* ---- the client ---------------------------------------------------------- */

static int cmp_f(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static unsigned long long lead_ns = 20000000; /* argv[4], ms */

/* the GPU's time per kernel, and (*host) the host's per launch */
static float client_round(cudaStream_t s, float *x, int K, int tiny, float *host) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  /* 20 ms: the host queues all K (~2.5 us a launch) before the GPU starts them */
  k_sleep<<<1, 1, 0, s>>>(lead_ns);
  CK(cudaEventRecord(e0, s));
  double h0 = now_us();
  for (int i = 0; i < K; i++) {
    if (tiny)
      k_tiny<<<1, 1, 0, s>>>(x);
    else
      k_work<<<132, 256, 0, s>>>(x, 132 * 256);
  }
  *host = (float)((now_us() - h0) / K);
  CK(cudaEventRecord(e1, s));
  CK(cudaEventSynchronize(e1));
  float ms;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return ms * 1000.0f / K; /* ms -> us, per kernel */
}

static void client(const char *mode, int K, int R) {
  int fds[2];
  if (pipe(fds) != 0) exit(1);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    holder(mode, fds[1]);
  }
  close(fds[1]);
  char c;
  if (read(fds[0], &c, 1) != 1) {
    fprintf(stderr, "holder %s failed\n", mode);
    exit(1);
  }
  close(fds[0]);
  usleep(100000);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *x;
  CK(cudaMalloc(&x, 132 * 256 * 4));
  CK(cudaMemset(x, 0, 132 * 256 * 4));
  float med[2], hmed[2];
  for (int tiny = 0; tiny < 2; tiny++) {
    float v[64], h[64], h1;
    client_round(s, x, K, tiny, &h1);
    for (int r = 0; r < R && r < 64; r++) v[r] = client_round(s, x, K, tiny, &h[r]);
    qsort(v, R, sizeof v[0], cmp_f);
    qsort(h, R, sizeof h[0], cmp_f);
    med[tiny] = v[R / 2];
    hmed[tiny] = h[R / 2];
  }
  kill(pid, SIGTERM);
  waitpid(pid, NULL, 0);
  CK(cudaFree(x));
  CK(cudaStreamDestroy(s));
  printf("queue holder=%-6s work_us_per_kernel=%.3f tiny_us_per_kernel=%.3f "
         "host_us_per_launch work=%.3f tiny=%.3f K=%d R=%d lead_ms=%llu\n",
         mode, med[0], med[1], hmed[0], hmed[1], K, R, lead_ns / 1000000);
  fflush(stdout);
}

/* ---- part 2: hand-off latencies ------------------------------------------ */

__device__ unsigned long long st[8];
__device__ unsigned done_blocks;

__global__ void l_a(void) { st[0] = gt(); }
__global__ void l_b(void) {
  if (threadIdx.x == 0 && blockIdx.x == 0) st[1] = gt();
}
__global__ void l_prim(void) {
  st[0] = gt();
  asm volatile("griddepcontrol.launch_dependents;");
}
__global__ void l_sec(void) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (threadIdx.x == 0 && blockIdx.x == 0) st[1] = gt();
}
__global__ void l_tail(void) { st[3] = gt(); }
__global__ void l_child(void) {
  if (threadIdx.x == 0 && blockIdx.x == 0) st[1] = gt();
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&done_blocks, 1u) == gridDim.x - 1) st[2] = gt();
  }
}
#ifdef PROBE_CDP
__global__ void l_parent(int tail) {
  done_blocks = 0;
  __threadfence();
  st[0] = gt();
  l_child<<<132, 256, 0, cudaStreamFireAndForget>>>();
  if (tail) l_tail<<<1, 1, 0, cudaStreamTailLaunch>>>();
}
#endif

static void latency(void) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  enum { N = 200 };
  static float a[4][N];
  for (int i = 0; i < N; i++) {
    unsigned long long h[8];
    k_sleep<<<1, 1, 0, s>>>(20000);
    l_a<<<1, 1, 0, s>>>();
    l_b<<<132, 256, 0, s>>>();
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpyFromSymbol(h, st, sizeof h));
    a[0][i] = (h[1] - h[0]) / 1000.0f;

    k_sleep<<<1, 1, 0, s>>>(20000);
    l_prim<<<1, 1, 0, s>>>();
    cudaLaunchAttribute at;
    cudaLaunchConfig_t cfg = opd__pdl_config(dim3(132), dim3(256), s, &at);
    CK(cudaLaunchKernelEx(&cfg, l_sec));
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpyFromSymbol(h, st, sizeof h));
    a[1][i] = (h[1] - h[0]) / 1000.0f;

#ifdef PROBE_CDP
    k_sleep<<<1, 1, 0, s>>>(20000);
    l_parent<<<1, 1, 0, s>>>(1);
    CK(cudaStreamSynchronize(s));
    CK(cudaGetLastError());
    CK(cudaMemcpyFromSymbol(h, st, sizeof h));
    a[2][i] = (h[1] - h[0]) / 1000.0f;
    a[3][i] = (h[3] - h[2]) / 1000.0f;
#else
    a[2][i] = a[3][i] = 0;
#endif
  }
  const char *name[4] = {"normal_launch_after_kernel", "dependent_after_trigger",
                         "cdp_child_after_launch", "cdp_tail_after_child_end"};
  for (int k = 0; k < 4; k++) {
#ifndef PROBE_CDP
    if (k >= 2) break;
#endif
    qsort(a[k], N, sizeof a[k][0], cmp_f);
    printf("latency %s_us p50=%.2f p10=%.2f p90=%.2f\n", name[k], a[k][N / 2],
           a[k][N / 10], a[k][N * 9 / 10]);
  }
  CK(cudaStreamDestroy(s));
}

int main(int argc, char **argv) {
  if (argc > 2 && strcmp(argv[1], "hold") == 0) {
    /* the holder alone (docs/records/2026-12-01-stream-ordered-cost/probe_level.py's victim is torch's forward):
     * one byte on stdout once it holds MODE, until SIGTERM */
    holder(argv[2], 1);
  }
  int K = argc > 1 ? atoi(argv[1]) : 1000;
  int R = argc > 2 ? atoi(argv[2]) : 15;
  if (R > 64) R = 64;
  if (argc > 4) lead_ns = strtoull(argv[4], NULL, 10) * 1000000ull;
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *modes[64] = {"none", "spin", "spinq2", "pdl", "pdl1", "evq2", "blk66", "blk132",
                           "none", "blk66", "pdl", "spin", "spinq2", "pdl1", "evq2", "blk132"};
  unsigned nm = 16;
  if (argc > 3) { /* a comma list of holder modes */
    static char buf[512];
    snprintf(buf, sizeof buf, "%s", argv[3]);
    nm = 0;
    for (char *t = strtok(buf, ","); t != NULL && nm < 64; t = strtok(NULL, ",")) modes[nm++] = t;
  }
  /* fork before this process touches CUDA: each holder is a fresh context */
  for (unsigned m = 0; m < nm; m++) {
    pid_t p = fork();
    if (p == 0) {
      client(modes[m], K, R);
      exit(0);
    }
    int st_;
    waitpid(p, &st_, 0);
    if (!WIFEXITED(st_) || WEXITSTATUS(st_) != 0) {
      fprintf(stderr, "client %s failed\n", modes[m]);
      return 1;
    }
  }
  latency();
  return 0;
}
