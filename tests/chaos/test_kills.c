/* Chaos: clients SIGKILLed at random while they hold arenas, rings and
 * runs in flight; afterwards the daemon holds what it held before.
 *
 * DESIGN
 * Each client is a forked child that connects over one of the three
 * transports (socket, adaptive rings, spinning rings), registers a few
 * arenas of 4 KiB to 2 MiB and touches them, then either nothing more,
 * one matmul big enough to be running when the kill comes, or a queue of
 * smaller ones, and tells the parent it is ready. The parent kills most
 * children a random 0-3 ms after that, and some at a random point of their
 * setup (mid-connect, mid-register). A few children run at once. Then the
 * daemon must drop to no sessions and its fds, memfd mappings, RssShmem,
 * VmRSS and VmSize come back to the warmed-up baseline.
 *
 * `make test`: 200 kills within 60 s; OPD_CHAOS_SOAK=1: 10,000 kills, the
 * figures printed (bench/soak_chaos.sh).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/chaos/chaos.h"

enum { PARALLEL = 6 };   /* children alive at once */

static unsigned rnd(unsigned *seed) { return (unsigned)rand_r(seed); }

/* Submits one matmul of n x n in arena a (laid out as A, B, C). */
static int submit_matmul(opd_client_t *c, uint64_t a, int n, uint64_t *req) {
  uint64_t sq = (uint64_t)n * n * 4;
  opd_tensor_t in[2], out;
  int64_t shape[2] = {n, n};
  opd_tensor_init(&in[0], a, 0, OPD_DTYPE_FLOAT32, 2, shape);
  opd_tensor_init(&in[1], a, sq, OPD_DTYPE_FLOAT32, 2, shape);
  opd_tensor_init(&out, a, 2 * sq, OPD_DTYPE_FLOAT32, 2, shape);
  return opd_submit(c, "matmul", in, 2, &out, 1, NULL, 0, req);
}

/* The client's life; never returns (killed, or _exit on a failure the
 * parent does not need to tell apart from a kill). */
static void client(int ready, unsigned seed) {
  static const uint32_t modes[] = {OPD_CONNECT_WAIT_SOCKET,
                                   OPD_CONNECT_WAIT_ADAPTIVE,
                                   OPD_CONNECT_WAIT_SPIN};
  opd_client_t *c;
  if (opd_connect_flags(th_d.sock, modes[rnd(&seed) % 3], &c) != 0) _exit(2);
  int n_arenas = 1 + (int)(rnd(&seed) % 3);
  for (int i = 0; i < n_arenas; i++) {
    uint64_t size = (uint64_t)4096 << (rnd(&seed) % 10), id;
    void *base;
    if (opd_arena_create(c, size, &id, &base) != 0) _exit(3);
    memset(base, 0x11, size); /* resident, so that it counts */
  }
  int kind = (int)(rnd(&seed) % 3), n = kind == 1 ? 384 : 128;
  uint64_t a, req;
  void *base;
  if (kind > 0) {
    if (opd_arena_create(c, (uint64_t)3 * n * n * 4, &a, &base) != 0) _exit(4);
    int runs = kind == 1 ? 1 : 16 + (int)(rnd(&seed) % 48);
    for (int i = 0; i < runs; i++)
      if (submit_matmul(c, a, n, &req) != 0) _exit(5);
  }
  if (write(ready, "r", 1) != 1) _exit(6);
  for (;;) { /* busy until the kill: round trips and more runs */
    if (opd_ping(c) != 0) _exit(7);
    if (kind > 0 && submit_matmul(c, a, n, &req) != 0) _exit(8);
  }
}

typedef struct kid {
  pid_t pid;
  int ready;             /* read end of its pipe */
  int wait_ready;        /* 0: killed at a random point of its setup */
  double t_kill;         /* when (wait_ready == 0) */
} kid_t;

static void spawn(kid_t *k, unsigned *seed) {
  int p[2];
  cr_assert_eq(pipe(p), 0);
  unsigned child_seed = rnd(seed);
  k->wait_ready = rnd(seed) % 5 != 0; /* 1 in 5 dies during setup */
  k->t_kill = ch_now() + (double)(rnd(seed) % 5000) * 1e-6;
  k->pid = fork();
  cr_assert(k->pid >= 0, "fork: %s", strerror(errno));
  if (k->pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives the test */
    close(p[0]);
    client(p[1], child_seed);
  }
  close(p[1]);
  k->ready = p[0];
}

/* Kills k when its moment has come; returns 1 once it is reaped, and
 * counts in *held the children that were killed holding their arenas and
 * runs (ready, and still in their busy loop: a child that fails exits by
 * itself). */
static int reap_when_due(kid_t *k, unsigned *seed, int *held) {
  int ready = 0;
  if (k->wait_ready) {
    struct pollfd pfd = {.fd = k->ready, .events = POLLIN};
    if (poll(&pfd, 1, 0) == 0) return 0; /* not ready yet */
    char ch;
    ready = read(k->ready, &ch, 1) == 1; /* 0: it exited (EOF) */
    usleep(rnd(seed) % 3000); /* 0-3 ms into its busy loop */
  } else if (ch_now() < k->t_kill) {
    return 0;
  }
  kill(k->pid, SIGKILL);
  int status;
  cr_assert_eq(waitpid(k->pid, &status, 0), k->pid);
  *held += ready && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  close(k->ready);
  k->pid = 0;
  return 1;
}

Test(chaos, sigkilled_clients_leave_nothing_behind, .timeout = 3600) {
  int total = ch_soak() ? 10000 : 200;
  double budget = ch_soak() ? 3000 : 60; /* seconds */
  th_start(NULL);
  ch_snap_t base, now;
  ch_baseline(&base);
  ch_tol_t tol = ch_tol_default();

  unsigned seed = 12345;
  kid_t kids[PARALLEL] = {{0}};
  int started = 0, done = 0, held = 0;
  double t0 = ch_now();
  while (done < total) {
    for (int i = 0; i < PARALLEL; i++) {
      if (kids[i].pid == 0 && started < total) {
        spawn(&kids[i], &seed);
        started++;
      }
      if (kids[i].pid != 0) done += reap_when_due(&kids[i], &seed, &held);
    }
    ch_sleep_ms(1);
    cr_assert(ch_now() - t0 < budget, "%d kills took over %.0f s", done, budget);
  }
  /* 4 in 5 wait to be ready: most of those must have been killed in the
   * middle of their work, not have failed on their own */
  cr_expect(held >= total / 2, "only %d of %d clients were killed while "
            "holding their arenas and runs (the others failed by themselves)",
            held, total);
  /* the killed clients' big matmuls finish, then their sessions go */
  ch_snapshot(&now, 60000);
  char what[64];
  snprintf(what, sizeof what, "after %d SIGKILLed clients", total);
  if (ch_verbose()) {
    printf("%d of the %d were killed holding their arenas and runs\n", held,
           total);
    ch_print(what, &base, &now, ch_now() - t0);
  }
  ch_expect_near(what, &base, &now, &tol);
  th_assert_alive();
  th_stop();
}
