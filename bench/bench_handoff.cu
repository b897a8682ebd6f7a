/* How long the GPU takes to hand work from one process's stream to
 * another's and back (what a stream-ordered opd run costs on the
 * GPU, apart from the host): a "client" and a "daemon" process, the
 * client's stream busy with a 300 us kernel while both enqueue the
 * hand-off, kernels stamping %globaltimer so that the gaps are GPU time:
 *   hop1  the client's kernel ends -> the daemon's kernel starts
 *   hop2  the daemon's kernel ends -> the client's next kernel starts
 * for three ways of ordering:
 *   event  interprocess events both ways (cudaStreamWaitEvent; the client
 *          must wait for the daemon's record before its wait: today's way)
 *   flag   both ways a flag in the daemon's device memory, written by a
 *          one-thread kernel after the work and polled by a one-thread
 *          kernel before it (no host waits at all)
 *   hybrid the daemon waits on the client's event, the client polls the
 *          daemon's flag (the client need not wait for the daemon's answer)
 * and, the daemon waiting on the client's event as in hybrid, three other
 * ways to write the daemon's flag after the work:
 *   memset cuMemsetD32Async of the word (no kernel of ours)
 *   fused  the work kernel itself stores the word at its end (what a
 *          kernel that knows the word can do: one kernel boundary less)
 *   pdl    the flag kernel launched as a programmatic dependent launch
 *          (it waits in griddepcontrol.wait, not behind the boundary)
 * and flags both ways with the client's word written by cuMemsetD32Async
 * and the daemon's by the work kernel (memflag). The same-stream gap
 * between two kernels of one process is the floor. Also the host cost of
 * each call in the client and of each enqueue in the daemon, and of the
 * driver calls libopd's enqueue makes besides (cuStreamQuery,
 * cuPointerGetAttributes, cuStreamGetCtx + cuCtxGetCurrent +
 * cuCtxGetDevice). Run with and without MPS.
 *   build/bench/bench_handoff [ROUNDS]
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

__device__ __forceinline__ unsigned long long gtime(void) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void busy_then_stamp(unsigned long long ns, unsigned long long *end) {
  unsigned long long t0 = gtime();
  while (gtime() - t0 < ns) {
  }
  *end = gtime();
}

__global__ void stamp2(unsigned long long *start, unsigned long long *end) {
  *start = gtime();
  *end = gtime();
}

__global__ void stamp2_flag(unsigned long long *start, unsigned long long *end,
                            unsigned *f, unsigned v) {
  *start = gtime();
  *end = gtime();
  __threadfence_system();
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(f), "r"(v) : "memory");
}

__global__ void set_flag_pdl(unsigned *f, unsigned v) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  __threadfence_system();
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(f), "r"(v) : "memory");
}

__global__ void stamp1(unsigned long long *at) { *at = gtime(); }

__global__ void set_flag(unsigned *f, unsigned v) {
  __threadfence_system();
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(f), "r"(v) : "memory");
}

__global__ void poll_flag(const unsigned *f, unsigned v, unsigned *err) {
  unsigned long long t0 = gtime();
  for (;;) {
    unsigned x;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(x) : "l"(f) : "memory");
    if ((int)(x - v) >= 0) return;
    if (gtime() - t0 > 2000000000ull) {
      *err = 1;
      return;
    }
  }
}

#define CK(x)                                                                     \
  do {                                                                            \
    cudaError_t e_ = (x);                                                         \
    if (e_ != cudaSuccess) {                                                      \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

static void xfer(int fd, void *p, size_t n, int out) {
  char *b = (char *)p;
  while (n) {
    ssize_t k = out ? write(fd, b, n) : read(fd, b, n);
    if (k <= 0) exit(2);
    b += k;
    n -= (size_t)k;
  }
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

enum { M_EVENT, M_FLAG, M_HYBRID, M_MEMSET, M_FUSED, M_PDL, M_MEMFLAG, M_N };
static const char *mname[] = {"event", "flag", "hybrid", "memset", "fused", "pdl", "memflag"};

#define CU(x)                                                                     \
  do {                                                                            \
    CUresult r_ = (x);                                                            \
    if (r_ != CUDA_SUCCESS) {                                                     \
      fprintf(stderr, "%s:%d %s: CUresult %d\n", __FILE__, __LINE__, #x, (int)r_); \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

static void launch_pdl(cudaStream_t s, unsigned *f, unsigned v) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(1);
  cfg.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, set_flag_pdl, f, v));
}

struct shared_handles {
  cudaIpcMemHandle_t mem;
  cudaIpcEventHandle_t ev_daemon;
};

/* the daemon: per round reads (mode, seq) and enqueues its side */
static void daemon_side(int fd) {
  CK(cudaSetDevice(0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  char *mem;
  CK(cudaMalloc((void **)&mem, 4096));
  CK(cudaMemset(mem, 0, 4096));
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming));
  struct shared_handles h;
  CK(cudaIpcGetMemHandle(&h.mem, mem));
  CK(cudaIpcGetEventHandle(&h.ev_daemon, ev));
  xfer(fd, &h, sizeof h, 1);
  cudaIpcEventHandle_t ch;
  xfer(fd, &ch, sizeof ch, 0);
  cudaEvent_t cev;
  CK(cudaIpcOpenEventHandle(&cev, ch));
  unsigned *flag_c = (unsigned *)mem, *flag_d = (unsigned *)(mem + 64), *err = (unsigned *)(mem + 128);
  unsigned long long *st = (unsigned long long *)(mem + 256);
  for (;;) {
    int msg[2];
    xfer(fd, msg, sizeof msg, 0);
    if (msg[0] < 0) break;
    unsigned seq = (unsigned)msg[1];
    int m = msg[0];
    double t0 = now_us();
    if (m == M_FLAG || m == M_MEMFLAG)
      poll_flag<<<1, 1, 0, s>>>(flag_c, seq, err);
    else
      CK(cudaStreamWaitEvent(s, cev, 0));
    if (m == M_FUSED || m == M_MEMFLAG)
      stamp2_flag<<<1, 1, 0, s>>>(&st[1], &st[2], flag_d, seq);
    else
      stamp2<<<1, 1, 0, s>>>(&st[1], &st[2]);
    if (m == M_EVENT)
      CK(cudaEventRecord(ev, s));
    else if (m == M_MEMSET)
      CU(cuMemsetD32Async((CUdeviceptr)flag_d, seq, 1, (CUstream)s));
    else if (m == M_PDL)
      launch_pdl(s, flag_d, seq);
    else if (m == M_FLAG || m == M_HYBRID)
      set_flag<<<1, 1, 0, s>>>(flag_d, seq);
    CK(cudaGetLastError());
    double ok = now_us() - t0; /* the daemon's host cost of the enqueue */
    xfer(fd, &ok, sizeof ok, 1);
  }
  CK(cudaStreamSynchronize(s));
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 200;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return 1;
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    daemon_side(sv[1]);
    _exit(0);
  }
  close(sv[1]);
  int fd = sv[0];
  CK(cudaSetDevice(0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  struct shared_handles h;
  xfer(fd, &h, sizeof h, 0);
  char *mem;
  CK(cudaIpcOpenMemHandle((void **)&mem, h.mem, cudaIpcMemLazyEnablePeerAccess));
  cudaEvent_t dev_ev, cev;
  CK(cudaIpcOpenEventHandle(&dev_ev, h.ev_daemon));
  CK(cudaEventCreateWithFlags(&cev, cudaEventInterprocess | cudaEventDisableTiming));
  cudaIpcEventHandle_t ch;
  CK(cudaIpcGetEventHandle(&ch, cev));
  xfer(fd, &ch, sizeof ch, 1);
  unsigned *flag_c = (unsigned *)mem, *flag_d = (unsigned *)(mem + 64), *err = (unsigned *)(mem + 128);
  unsigned long long *st = (unsigned long long *)(mem + 256);
  const unsigned long long busy_ns = 300000;
  double *hop1 = (double *)calloc((size_t)rounds, sizeof(double));
  double *hop2 = (double *)calloc((size_t)rounds, sizeof(double));
  double *host = (double *)calloc((size_t)rounds, sizeof(double));
  double *dhost = (double *)calloc((size_t)rounds, sizeof(double));
  unsigned seq = 0;
  /* the floor: two kernels on one stream of one process */
  for (int i = 0; i < rounds; i++) {
    busy_then_stamp<<<1, 1, 0, s>>>(busy_ns, &st[0]);
    stamp1<<<1, 1, 0, s>>>(&st[3]);
    CK(cudaStreamSynchronize(s));
    unsigned long long v[4];
    CK(cudaMemcpy(v, st, sizeof v, cudaMemcpyDeviceToHost));
    hop1[i] = (double)(v[3] - v[0]) / 1e3;
  }
  qsort(hop1, (size_t)rounds, sizeof(double), cmpd);
  printf("handoff same_stream gap_us p50=%.2f p90=%.2f\n", hop1[rounds / 2], hop1[rounds * 9 / 10]);
  for (int m = 0; m < M_N; m++) {
    for (int i = 0; i < rounds; i++) {
      seq++;
      busy_then_stamp<<<1, 1, 0, s>>>(busy_ns, &st[0]);
      double t0 = now_us();
      if (m == M_FLAG)
        set_flag<<<1, 1, 0, s>>>(flag_c, seq);
      else if (m == M_MEMFLAG)
        CU(cuMemsetD32Async((CUdeviceptr)flag_c, seq, 1, (CUstream)s));
      else
        CK(cudaEventRecord(cev, s));
      int msg[2] = {m, (int)seq};
      double ok;
      xfer(fd, msg, sizeof msg, 1);
      if (m == M_EVENT) {
        xfer(fd, &ok, sizeof ok, 0); /* the daemon's record must come first */
        CK(cudaStreamWaitEvent(s, dev_ev, 0));
      } else {
        poll_flag<<<1, 1, 0, s>>>(flag_d, seq, err);
      }
      host[i] = now_us() - t0;
      stamp1<<<1, 1, 0, s>>>(&st[3]);
      if (m != M_EVENT) xfer(fd, &ok, sizeof ok, 0);
      dhost[i] = ok;
      CK(cudaStreamSynchronize(s));
      unsigned long long v[4];
      CK(cudaMemcpy(v, st, sizeof v, cudaMemcpyDeviceToHost));
      hop1[i] = (double)(v[1] - v[0]) / 1e3;
      hop2[i] = (double)(v[3] - v[2]) / 1e3;
    }
    unsigned e = 0;
    CK(cudaMemcpy(&e, err, sizeof e, cudaMemcpyDeviceToHost));
    qsort(hop1, (size_t)rounds, sizeof(double), cmpd);
    qsort(hop2, (size_t)rounds, sizeof(double), cmpd);
    qsort(host, (size_t)rounds, sizeof(double), cmpd);
    qsort(dhost, (size_t)rounds, sizeof(double), cmpd);
    printf("handoff %-7s hop1_us p50=%.2f p90=%.2f hop2_us p50=%.2f p90=%.2f "
           "client_host_us p50=%.2f daemon_host_us p50=%.2f timeouts=%u\n",
           mname[m], hop1[rounds / 2], hop1[rounds * 9 / 10], hop2[rounds / 2],
           hop2[rounds * 9 / 10], host[rounds / 2], dhost[rounds / 2], e);
  }
  /* host cost of the client's pieces on an idle stream */
  double t0 = now_us();
  for (int i = 0; i < 1000; i++) set_flag<<<1, 1, 0, s>>>(flag_c, ++seq);
  double t_set = (now_us() - t0) / 1000;
  CK(cudaStreamSynchronize(s));
  t0 = now_us();
  for (int i = 0; i < 1000; i++) CK(cudaEventRecord(cev, s));
  double t_rec = (now_us() - t0) / 1000;
  CK(cudaStreamSynchronize(s));
  t0 = now_us();
  for (int i = 0; i < 1000; i++) poll_flag<<<1, 1, 0, s>>>(flag_c, 0, err);
  double t_poll = (now_us() - t0) / 1000;
  CK(cudaStreamSynchronize(s));
  t0 = now_us();
  for (int i = 0; i < 1000; i++) CK(cudaStreamWaitEvent(s, cev, 0));
  double t_wait = (now_us() - t0) / 1000;
  CK(cudaStreamSynchronize(s));
  t0 = now_us();
  for (int i = 0; i < 1000; i++) CU(cuMemsetD32Async((CUdeviceptr)flag_c, ++seq, 1, (CUstream)s));
  double t_memset = (now_us() - t0) / 1000;
  CK(cudaStreamSynchronize(s));
  t0 = now_us();
  for (int i = 0; i < 1000; i++) launch_pdl(s, flag_c, ++seq);
  double t_pdl = (now_us() - t0) / 1000;
  CK(cudaStreamSynchronize(s));
  printf("handoff host_us launch_set_flag=%.2f event_record=%.2f launch_poll=%.2f "
         "stream_wait_event=%.2f memset_d32=%.2f launch_pdl=%.2f\n", t_set, t_rec, t_poll,
         t_wait, t_memset, t_pdl);
  /* what libopd's enqueue asks the driver besides (client/libopd/stream.c
   * ordered(), client/libopd/imports.c opd__tensor_at()), on the idle
   * stream */
  CUdeviceptr dp = (CUdeviceptr)flag_c;
  t0 = now_us();
  for (int i = 0; i < 1000; i++) CU(cuStreamQuery((CUstream)s));
  double t_query = (now_us() - t0) / 1000;
  unsigned long long buf_id = 0;
  CUdeviceptr base = 0;
  size_t range = 0;
  int ordinal = -1;
  CUpointer_attribute at[4] = {CU_POINTER_ATTRIBUTE_BUFFER_ID, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                               CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  void *av[4] = {&buf_id, &base, &range, &ordinal};
  t0 = now_us();
  for (int i = 0; i < 1000; i++) CU(cuPointerGetAttributes(4, at, av, dp));
  double t_attrs = (now_us() - t0) / 1000;
  CUcontext cx = NULL;
  CUdevice cd = 0;
  t0 = now_us();
  for (int i = 0; i < 1000; i++) {
    CU(cuStreamGetCtx((CUstream)s, &cx));
    CU(cuCtxGetCurrent(&cx));
    CU(cuCtxGetDevice(&cd));
  }
  double t_ctx = (now_us() - t0) / 1000;
  printf("handoff host_us stream_query=%.2f pointer_attributes4=%.2f "
         "stream_ctx+current+device=%.2f\n", t_query, t_attrs, t_ctx);
  int bye[2] = {-1, 0};
  xfer(fd, bye, sizeof bye, 1);
  int status;
  waitpid(pid, &status, 0);
  return 0;
}
