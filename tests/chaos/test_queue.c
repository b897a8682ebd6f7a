/* Chaos: many sessions with full queues of runs close; the memory of the
 * queued runs goes back (a bounded pool may stay), and stats "inflight"
 * returns to 0.
 *
 * DESIGN
 * Each session submits one matmul that takes a while (256^3) and then
 * 1023 smaller ones (128^3, not inline: each a job on the kernel
 * threads), so nearly all of its 1024 runs (--max-inflight's default) sit
 * in its queue; the sessions stay open together, then all close. A daemon
 * that kept every job ever queued on a free list held 1.04 GB after
 * 120 x 1024 of them; here 16 x 1024 must leave VmRSS within the
 * tolerance of the baseline (chaos.c).
 */
#include <criterion/criterion.h>
#include <stdio.h>

#include "tests/chaos/chaos.h"

/* 16 x 1024: every run is taken at once within the default per-uid limit
 * (--max-uid-inflight 16384; all sessions here are root's) */
enum { SESSIONS = 16, RUNS = 1024, BIG = 256, SMALL = 128 };

Test(chaos, queued_runs_are_freed, .timeout = 120) {
  /* every run a job on the kernel threads, none on the loop by measure
   * (backend/cpu.c): on the loop the runs would be answered as fast as
   * they come, and this client reads no reply until all are sent */
  th_start((const char *[]){"--inline-us", "0", "--idle-inline-us", "0", NULL});
  ch_snap_t base, now;
  ch_baseline(&base);
  ch_tol_t tol = ch_tol_default();
  /* The jobs' memory comes from the heap: once they are freed the daemon
   * gives the pages back (malloc_trim: VmRSS checks that), but the break
   * stays where the peak put it while a live chunk (a pooled job, another
   * session's buffer) sits at the top. That range is reused and does not
   * grow with the number of runs; VmSize is held to the peak's order
   * (16 x 1024 jobs), RSS to the tolerance. */
  tol.vm += 256ull << 20;

  opd_client_t *c[SESSIONS];
  double t0 = ch_now();
  uint64_t sq = (uint64_t)BIG * BIG * 4;
  for (int s = 0; s < SESSIONS; s++) {
    c[s] = th_connect();
    void *mem;
    uint64_t a = th_arena(c[s], 3 * sq, &mem);
    opd_tensor_t bin[2] = {th_f32(a, 0, 2, (int64_t)BIG, (int64_t)BIG),
                           th_f32(a, sq, 2, (int64_t)BIG, (int64_t)BIG)};
    opd_tensor_t bout = th_f32(a, 2 * sq, 2, (int64_t)BIG, (int64_t)BIG);
    opd_tensor_t sin[2] = {th_f32(a, 0, 2, (int64_t)SMALL, (int64_t)SMALL),
                           th_f32(a, sq, 2, (int64_t)SMALL, (int64_t)SMALL)};
    opd_tensor_t sout = th_f32(a, 2 * sq, 2, (int64_t)SMALL, (int64_t)SMALL);
    uint64_t req;
    cr_assert_eq(opd_submit(c[s], "matmul", bin, 2, &bout, 1, NULL, 0, &req), 0,
                 "%s", opd_last_error());
    for (int i = 1; i < RUNS; i++)
      cr_assert_eq(opd_submit(c[s], "matmul", sin, 2, &sout, 1, NULL, 0, &req),
                   0, "session %d run %d: %s", s, i, opd_last_error());
  }
  /* the daemon knows how many it holds (a look, not a figure to match:
   * some ran meanwhile) */
  opd_client_t *q = ch_connect_socket(5000);
  ch_stats_t st;
  ch_stats_read(q, &st);
  opd_close(q);
  int64_t inflight = st.inflight;
  for (int s = 0; s < SESSIONS; s++) opd_close(c[s]);
  cr_expect(inflight > 0, "stats \"inflight\" was %lld with %d sessions of "
            "queued runs open (-1: not reported)", (long long)inflight,
            SESSIONS);
  ch_snapshot(&now, 60000);
  char what[80];
  snprintf(what, sizeof what, "after %d sessions x %d queued runs closed",
           SESSIONS, RUNS);
  if (ch_verbose()) {
    printf("stats \"inflight\" with the %d sessions open: %lld\n", SESSIONS,
           (long long)inflight);
    ch_print(what, &base, &now, ch_now() - t0);
  }
  ch_expect_near(what, &base, &now, &tol);
  th_stop();
}
