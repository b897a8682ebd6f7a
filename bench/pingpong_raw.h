/* bench_pingpong's raw baselines: a parent and a forked child bouncing a
 * counter through a shared page (spin, futex) or a socketpair, with no
 * opd in between. Included by bench/bench_pingpong.c only (after its
 * libc includes and bench/harness.h); see its DESIGN comment for what the
 * numbers mean. */
#ifndef OPD_BENCH_PINGPONG_RAW_H
#define OPD_BENCH_PINGPONG_RAW_H

#define SOCK_MSG 64                     /* bytes each way, socket case */
#define STOP_SEQ UINT64_MAX             /* ping value that ends a child */
#define GUARD_NS 1000000000ull          /* one round trip longer: abort */
#define SPIN_CHECK 1024                 /* pauses between clock reads */
#define FUTEX_TIMEOUT_NS 100000000l     /* parent's FUTEX_WAIT slice */
#define LINE 128 /* two 64 B lines: the adjacent-line prefetcher pairs them */

#if ATOMIC_LLONG_LOCK_FREE != 2
#error "bench_pingpong needs lock-free 64-bit atomics"
#endif

/* The page shared by parent and child (mapped before fork). */
typedef struct shared {
  _Alignas(LINE) _Atomic uint64_t ping; /* parent -> child */
  _Alignas(LINE) _Atomic uint64_t pong; /* child -> parent */
} shared_t;
_Static_assert(sizeof(shared_t) <= 4096, "a raw block maps one page");

typedef enum { K_SPIN, K_FUTEX, K_SOCKET, K_COUNT } kind_t;
static const char *const kind_name[K_COUNT] = {"spin", "futex", "socket"};

/* Placement: cpu[0] the parent's, cpu[1] the child's; -1 = not pinned. */
static int pin_cpu[2] = {-1, -1};

/* ---- small helpers ------------------------------------------------------ */


static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
  __asm__ __volatile__("yield" ::: "memory");
#elif defined(__powerpc__)
  __asm__ __volatile__("or 27,27,27" ::: "memory");
#else
  atomic_signal_fence(memory_order_seq_cst);
#endif
}

/* The 32-bit half of a 64-bit word that holds its low bits: what futex
 * compares. */
static inline uint32_t *futex_word(_Atomic uint64_t *w) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  return (uint32_t *)(void *)w + 1;
#else
  return (uint32_t *)(void *)w;
#endif
}

/* FUTEX_WAIT while the low half of *w is `val` (timeout NULL: forever).
 * Shared (non-private) futex: the page is mapped in two processes. */
static long futex_wait(_Atomic uint64_t *w, uint64_t val,
                       const struct timespec *timeout) {
  return syscall(SYS_futex, futex_word(w), FUTEX_WAIT, (uint32_t)val, timeout,
                 NULL, 0);
}

static void futex_wake(_Atomic uint64_t *w) {
  syscall(SYS_futex, futex_word(w), FUTEX_WAKE, 1, NULL, NULL, 0);
}

static void pin_self(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  SYSCHECK(sched_setaffinity(0, sizeof set, &set) == 0, "sched_setaffinity");
}

/* ---- the child ---------------------------------------------------------- */

/* Echoes ping to pong by spinning, until ping is STOP_SEQ. */
static void child_spin(shared_t *sh) {
  for (uint64_t want = 1;; want++) {
    uint64_t v;
    while ((v = atomic_load_explicit(&sh->ping, memory_order_acquire)) != want) {
      if (v == STOP_SEQ) return;
      cpu_relax();
    }
    atomic_store_explicit(&sh->pong, want, memory_order_release);
  }
}

/* Echoes ping to pong, sleeping on the futex instead of spinning. */
static void child_futex(shared_t *sh) {
  for (uint64_t want = 1;; want++) {
    uint64_t v;
    while ((v = atomic_load_explicit(&sh->ping, memory_order_acquire)) != want) {
      if (v == STOP_SEQ) return;
      futex_wait(&sh->ping, v, NULL); /* EAGAIN / EINTR: look again */
    }
    atomic_store_explicit(&sh->pong, want, memory_order_release);
    futex_wake(&sh->pong);
  }
}

/* Echoes SOCK_MSG-byte messages until EOF. */
static void child_socket(int fd) {
  unsigned char m[SOCK_MSG];
  while (xfer(fd, m, sizeof m, 0) == 0)
    if (xfer(fd, m, sizeof m, 1) != 0) break;
}

/* ---- the parent's side of one case -------------------------------------- */

typedef struct peer {
  kind_t kind;
  shared_t *sh;
  int fd;    /* socket case: the parent's end */
  pid_t pid; /* the child */
  uint64_t seq; /* last seq sent (spin, futex) */
} peer_t;

static void peer_start(peer_t *p, kind_t kind, shared_t *sh) {
  int sv[2] = {-1, -1};
  p->kind = kind;
  p->sh = sh;
  p->fd = -1;
  p->seq = 0;
  atomic_store(&sh->ping, 0);
  atomic_store(&sh->pong, 0);
  if (kind == K_SOCKET)
    SYSCHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
  pid_t parent = getpid();
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  SYSCHECK(pid >= 0, "fork");
  if (pid == 0) {
    /* die with the parent, however it ends */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(0);
    pin_self(pin_cpu[1]);
    switch (kind) {
      case K_SPIN: child_spin(sh); break;
      case K_FUTEX: child_futex(sh); break;
      case K_SOCKET:
        close(sv[0]);
        child_socket(sv[1]);
        break;
      default: break;
    }
    _exit(0);
  }
  p->pid = pid;
  if (kind == K_SOCKET) {
    close(sv[1]);
    p->fd = sv[0];
    struct timeval tv = {.tv_sec = GUARD_NS / 1000000000ull, .tv_usec = 0};
    SYSCHECK(setsockopt(p->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0,
             "setsockopt SO_RCVTIMEO");
  }
}

/* One round trip; 0, or -1 when it took longer than GUARD_NS (or the
 * socket failed). */
static int round_trip(peer_t *p) {
  shared_t *sh = p->sh;
  uint64_t t0;
  switch (p->kind) {
    case K_SPIN: {
      uint64_t s = ++p->seq;
      t0 = now_ns();
      atomic_store_explicit(&sh->ping, s, memory_order_release);
      for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(&sh->pong, memory_order_acquire) == s) break;
        cpu_relax();
        if (i % SPIN_CHECK == 0 && now_ns() - t0 > GUARD_NS) return -1;
      }
      return 0;
    }
    case K_FUTEX: {
      uint64_t s = ++p->seq, v;
      t0 = now_ns();
      atomic_store_explicit(&sh->ping, s, memory_order_release);
      futex_wake(&sh->ping);
      struct timespec to = {.tv_sec = 0, .tv_nsec = FUTEX_TIMEOUT_NS};
      while ((v = atomic_load_explicit(&sh->pong, memory_order_acquire)) != s) {
        futex_wait(&sh->pong, v, &to);
        if (now_ns() - t0 > GUARD_NS) return -1;
      }
      return 0;
    }
    case K_SOCKET: {
      unsigned char m[SOCK_MSG];
      memset(m, 0xa5, sizeof m);
      if (xfer(p->fd, m, sizeof m, 1) != 0) return -1;
      if (xfer(p->fd, m, sizeof m, 0) != 0) return -1;
      return 0;
    }
    default: return -1;
  }
}

/* Ends the child: cleanly (STOP_SEQ / EOF), or with SIGKILL after an
 * abort. Reaps it either way. */
static void peer_stop(peer_t *p, int kill_it) {
  if (kill_it) kill(p->pid, SIGKILL);
  if (p->kind == K_SOCKET) {
    close(p->fd);
  } else {
    atomic_store_explicit(&p->sh->ping, STOP_SEQ, memory_order_release);
    futex_wake(&p->sh->ping);
  }
  int st;
  while (waitpid(p->pid, &st, 0) < 0)
    SYSCHECK(errno == EINTR, "waitpid");
}

/* ---- statistics --------------------------------------------------------- */


/* Runs one case: warm-up, then n timed round trips into lat. Prints its
 * line; 0, or -1 if it was aborted. */
/* Times n raw round trips of `kind` (after warm untimed ones) into lat,
 * with a fresh child on a fresh page: the two lines' home in the CPU's
 * cache mesh (which sets a cross-core transfer's latency) differs from
 * page to page, and one fixed pair would make the baseline a draw of one.
 * 0, or -1 after printing an error line. */
static int raw_block(kind_t kind, uint64_t *lat, size_t n, size_t warm,
                     int ncpus) {
  if (kind == K_SPIN && ncpus < 2) {
    /* two spinners on one CPU: each round trip waits for a time slice */
    printf("error transport=raw_spin reason=\"needs 2 allowed CPUs, this "
           "process has %d\"\n", ncpus);
    fflush(stdout);
    return -1;
  }
  shared_t *sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  SYSCHECK(sh != MAP_FAILED, "mmap");
  peer_t p;
  peer_start(&p, kind, sh);
  int rc = 0;
  for (size_t i = 0; i < warm + n; i++) {
    uint64_t t0 = now_ns();
    if (round_trip(&p) != 0) {
      printf("error transport=raw_%s phase=%s round_trip=%zu "
             "reason=\"no echo within 1 s\"\n", kind_name[kind],
             i < warm ? "warmup" : "timed", i < warm ? i : i - warm);
      fflush(stdout);
      rc = -1;
      break;
    }
    if (i >= warm) lat[i - warm] = now_ns() - t0;
  }
  peer_stop(&p, rc != 0);
  munmap(sh, 4096);
  return rc;
}

/* Prints a raw case's line (sorts lat); returns its p50. */
static uint64_t report_raw(kind_t kind, uint64_t *lat, size_t n) {
  double sum = 0;
  for (size_t i = 0; i < n; i++) sum += (double)lat[i];
  qsort(lat, n, sizeof *lat, cmp_u64);
  printf("latency transport=raw_%s p50_ns=%" PRIu64 " p99_ns=%" PRIu64
         " p999_ns=%" PRIu64 " mean_ns=%.0f n=%zu\n",
         kind_name[kind], pct(lat, n, 0.50), pct(lat, n, 0.99),
         pct(lat, n, 0.999), sum / (double)n, n);
  fflush(stdout);
  return pct(lat, n, 0.50);
}

#endif /* OPD_BENCH_PINGPONG_RAW_H */
