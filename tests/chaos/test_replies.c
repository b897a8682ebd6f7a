/* Chaos: a client that never reads its replies costs the daemon bounded
 * memory and never stalls the other clients.
 *
 * DESIGN
 * A forked child floods 30,000 OPS requests (a ~6 KB reply each) on its
 * socket and never reads anything: once with rings of its own whose
 * completion ring it never pops (4 slots of 8 KiB: every reply fits a slot,
 * so all of them want the ring), once with no rings (the replies pile up
 * on the socket). The daemon, started with --max-reply-bytes 1 MiB, must
 * stop reading that session once its unread replies pass the bound: the
 * child's sends then block, and its counter in shared memory stops. All
 * that time the test process pings on a connection of its own (each ping
 * must come back within 5 s: a liveness check, no speed asserted) and
 * samples the daemon's VmRSS, whose peak must stay within
 *   baseline + 3 x max-reply-bytes + the VmRSS tolerance (chaos.c):
 * the pending replies (the bound plus the one reply that crosses it), the
 * session's read buffer (up to max-frame, 1 MiB, of requests not yet
 * parsed) and the reply being packed fit in 3x; the kernel's socket
 * buffers are not the daemon's memory. The daemon that walked an unbounded
 * reply list held +169 MB after 30,000 of them and stalled every client
 * for 23.8 s. Nor may the stalled flooder cost the daemon a core: over
 * the last second, with the flood standing still, the daemon's CPU time
 * must stay under half a second (the daemon that kept its loop from
 * blocking while a completion ring stayed full spun at 100% for as long
 * as the client did not read; 2026-12-08).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/chaos/chaos.h"

#define MiB (1024ull * 1024)
#define MAX_REPLY (1 * MiB)
enum { REQUESTS = 30000, BATCH = 100, PINGS = 100, PING_TIMEOUT_MS = 5000 };

/* The flooding child: sends REQUESTS ops frames in batches, counting them
 * in *sent, then holds the connection. Never reads. */
static void flood(int rings, volatile long *sent) {
  ch_ring_client_t rc = {.fd = -1, .memfd = -1, .efd = -1};
  char err[200];
  int fd;
  if (rings) {
    if (ch_ring_client_open(&rc, 4, 8192, err, sizeof err) != 0) {
      fprintf(stderr, "flooder: %s\n", err);
      _exit(2);
    }
    fd = rc.fd;
  } else {
    unsigned char hello[32];
    int type, code;
    if ((fd = ch_raw_connect_nc()) < 0 ||
        send(fd, hello, ch_frame_hello(hello), MSG_NOSIGNAL) < 0 ||
        ch_read_frame(fd, 5000, &type, &code, NULL, 0) != 0 || code != 0)
      _exit(2);
  }
  static unsigned char buf[BATCH * 16];
  uint64_t id = 100;
  for (long n = 0; n < REQUESTS; n += BATCH) {
    size_t len = 0;
    for (int i = 0; i < BATCH; i++) len += ch_frame_empty(buf + len, OPD_MSG_OPS, id++);
    for (size_t off = 0; off < len;) { /* blocks once the daemon stops reading */
      ssize_t k = send(fd, buf + off, len - off, MSG_NOSIGNAL);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) _exit(3);
      off += (size_t)k;
    }
    *sent = n + BATCH;
  }
  for (;;) pause();
}

static void unread_replies(int rings) {
  char opt[32];
  snprintf(opt, sizeof opt, "%llu", (unsigned long long)MAX_REPLY);
  th_start((const char *[]){"--max-reply-bytes", opt, NULL});
  ch_snap_t base, now;
  ch_baseline(&base);
  ch_tol_t tol = ch_tol_default();
  uint64_t bound = 3 * MAX_REPLY + tol.rss;

  volatile long *sent = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  cr_assert(sent != MAP_FAILED);
  *sent = 0;
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives the test */
    flood(rings, sent);
  }

  int pinger = th_raw_connect();
  th_raw_hello(pinger);
  uint64_t peak = 0;
  long last = -1;
  double t0 = ch_now(), moved = t0, worst = 0;
  int pings = 0, late = 0;
  /* until the flood is all sent or has stood still for 1.5 s (the daemon
   * stopped reading it), and at least PINGS pings; 30 s at most */
  while ((*sent < REQUESTS && ch_now() - moved < 1.5) || pings < PINGS) {
    if (ch_now() - t0 > 30) break;
    double t = ch_now();
    th_raw_request(pinger, OPD_MSG_PING, 1000 + (uint64_t)pings, "\x80", 1, -1);
    th_reply_t r;
    if (th_raw_reply(pinger, &r, PING_TIMEOUT_MS) != 0) {
      late = 1;
      break;
    }
    cr_assert_eq(r.code, 0, "ping: %s", r.message);
    if (ch_now() - t > worst) worst = ch_now() - t;
    pings++;
    ch_proc_t p;
    ch_proc_read(th_d.pid, &p);
    if (p.vm_rss > peak) peak = p.vm_rss;
    if (*sent != last) last = *sent, moved = ch_now();
    ch_sleep_ms(10);
  }
  /* and half a second more: the daemon may still be taking requests the
   * kernel buffered (30,000 small frames may all fit in it) */
  for (int i = 0; !late && i < 25; i++) {
    ch_proc_t p;
    ch_proc_read(th_d.pid, &p);
    if (p.vm_rss > peak) peak = p.vm_rss;
    ch_sleep_ms(20);
  }
  /* a second with the flood standing still: the daemon's CPU time */
  double cpu0 = ch_cpu_seconds(th_d.pid), w0 = ch_now();
  ch_sleep_ms(1000);
  double busy = (ch_cpu_seconds(th_d.pid) - cpu0) / (ch_now() - w0);
  long taken = *sent;
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  munmap((void *)sent, 4096);
  const char *what = rings ? "a ring session that never reads its completion "
                             "ring" : "a session that never reads its socket";
  uint64_t grew = peak > base.proc.vm_rss ? peak - base.proc.vm_rss : 0;
  if (ch_verbose())
    printf("unread replies (%s): %ld ops requests sent before the daemon "
           "stopped reading; VmRSS peak %.1f MiB over the baseline (bound "
           "%.1f MiB = 3 x --max-reply-bytes %.1f MiB + %.1f MiB); %d pings, "
           "slowest %.1f ms; daemon CPU while stalled %.0f%%\n",
           rings ? "completion ring" : "socket", taken,
           (double)grew / MiB, (double)bound / MiB, (double)MAX_REPLY / MiB,
           (double)tol.rss / MiB, pings, worst * 1e3, busy * 100);
  cr_assert(!late, "%s (%ld requests sent): ping %d got no reply within "
            "%d ms", what, taken, pings, PING_TIMEOUT_MS);
  cr_expect(busy < 0.5, "%s: the daemon used %.0f%% of a core while the "
            "flood stood still (nothing to do but wait for the client)", what,
            busy * 100);
  cr_expect(grew <= bound, "%s: VmRSS grew by %.1f MiB (%ld requests sent), "
            "more than %.1f MiB (3 x --max-reply-bytes + %.1f MiB)", what,
            (double)grew / MiB, taken, (double)bound / MiB,
            (double)tol.rss / MiB);
  close(pinger);
  th_assert_alive();
  ch_snapshot(&now, 10000);
  ch_expect_near(what, &base, &now, &tol);
  th_stop();
}

Test(chaos, unread_completion_ring_is_bounded, .timeout = 120) {
  unread_replies(1);
}

Test(chaos, unread_socket_is_bounded, .timeout = 120) {
  unread_replies(0);
}

/* A libopd client on adaptive rings submits runs answered at once (on the
 * loop: 16 floats) and never reads a reply: its completion ring fills,
 * the rest wait in the session's overflow, the daemon stops taking its
 * submissions and the client blocks in opd_submit. The daemon then has
 * nothing to do until the client reads: over a second it must use less
 * than half a core. The daemon that kept its loop from blocking while a
 * completion ring stayed full spun at 100% here for as long as the client
 * stood (2026-12-08: found when runs that used to go to the kernel
 * threads began to run on the loop). */
Test(chaos, a_full_completion_ring_costs_no_core, .timeout = 60) {
  th_start(NULL);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    opd_client_t *c = th_connect();
    void *mem;
    uint64_t a = th_arena(c, 4096, &mem);
    opd_tensor_t x = th_f32(a, 0, 1, (int64_t)16);
    opd_tensor_t y = th_f32(a, 64, 1, (int64_t)16);
    for (int i = 0; i < 100000; i++) {
      uint64_t req;
      if (opd_submit(c, "relu", &x, 1, &y, 1, NULL, 0, &req) != 0) _exit(3);
    }
    _exit(0); /* not reached: the daemon stops taking them first */
  }
  ch_sleep_ms(1500); /* the ring fills and the client blocks */
  int status;
  cr_assert_eq(waitpid(pid, &status, WNOHANG), 0, "the client exited (status "
               "%d): the daemon took 100,000 runs from a client that reads "
               "no reply", status);
  double cpu0 = ch_cpu_seconds(th_d.pid), w0 = ch_now();
  ch_sleep_ms(1000);
  double busy = (ch_cpu_seconds(th_d.pid) - cpu0) / (ch_now() - w0);
  if (ch_verbose())
    printf("a full completion ring: the daemon used %.0f%% of a core over "
           "1 s while its client stood\n", busy * 100);
  cr_expect(busy < 0.5, "the daemon used %.0f%% of a core while its only "
            "client, whose completion ring is full, read nothing", busy * 100);
  th_raw_hello(th_raw_connect()); /* still serving */
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  th_assert_alive();
  th_stop();
}
