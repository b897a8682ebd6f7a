/* Chaos: the daemon's fd limit lowered under it (RLIMIT_NOFILE 64) while
 * it runs, then flooded with connections until it runs out of fds.
 *
 * DESIGN
 * At start the daemon raises its soft fd limit to the hard one and caps
 * its sessions below it (server.c, fd_budget), so a flood is refused by
 * name before it takes the fds of the clients already served
 * (tests/python/test_fd_limit.py). Running out of fds anyway (the
 * system's ENFILE, or a limit lowered later with prlimit) must still be
 * survived: the limit is lowered here with prlimit(2) on the running
 * daemon, soft and hard, after it sized its cap. A client connects first; then 100 raw
 * connections arrive, more than the daemon can hold. While it is out of
 * fds, over one second: its CPU time (/proc/PID/stat utime + stime) must
 * stay under 0.3 s (a loop retrying accept() spins at 100%), its log must
 * grow by a few lines at most (that loop logged ~25 MB/s); the client that
 * was there first registers an arena and gets OPD_EFD naming the real
 * cause, "file descriptors", and is still served afterwards (it was
 * dropped with "more than 8 file descriptors"). Once the flood closes, the
 * daemon accepts again and the first client's next arena works.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/chaos/chaos.h"

enum { FD_LIMIT = 64, FLOOD = 100 };

/* Bytes and lines of the daemon's log. */
static void log_size(long *bytes, long *lines) {
  FILE *f = fopen(th_d.log, "r");
  cr_assert_not_null(f);
  *bytes = *lines = 0;
  for (int ch; (ch = getc(f)) != EOF; (*bytes)++) *lines += ch == '\n';
  fclose(f);
}

Test(chaos, out_of_fds_pauses_accepting, .timeout = 60) {
  struct rlimit low = {FD_LIMIT, FD_LIMIT};
  th_start(NULL);
  cr_assert_eq(prlimit(th_d.pid, RLIMIT_NOFILE, &low, NULL), 0, "prlimit: %s",
               strerror(errno));

  /* adaptive rings (whatever $OPD_WAIT says): a spinning session would
   * keep the daemon's loop busy by design, and the CPU figure is the
   * loop's */
  opd_client_t *first = NULL;
  cr_assert_eq(opd_connect_flags(th_d.sock, OPD_CONNECT_WAIT_ADAPTIVE, &first),
               0, "%s", opd_last_error());
  cr_assert_eq(opd_ping(first), 0, "%s", opd_last_error());
  int flood[FLOOD];
  for (int i = 0; i < FLOOD; i++) flood[i] = th_raw_connect();
  /* until the daemon holds all the fds it may */
  ch_proc_t p;
  for (int t = 0; t < 3000; t += 10) {
    ch_proc_read(th_d.pid, &p);
    if (p.fds >= FD_LIMIT) break;
    ch_sleep_ms(10);
  }
  cr_assert_geq(p.fds, FD_LIMIT - 1, "the daemon holds %ld fds, it should be "
                "out of them (limit %d)", p.fds, FD_LIMIT);

  long b0, l0, b1, l1;
  ch_sleep_ms(100); /* past the first "out of fds" lines */
  log_size(&b0, &l0);
  double cpu0 = ch_cpu_seconds(th_d.pid), t0 = ch_now();
  ch_sleep_ms(1000);
  double cpu = ch_cpu_seconds(th_d.pid) - cpu0, dt = ch_now() - t0;
  log_size(&b1, &l1);
  cr_expect(cpu < 0.3 * dt, "out of fds, the daemon used %.2f s of CPU in "
            "%.2f s (a busy loop)", cpu, dt);
  cr_expect(l1 - l0 <= 5 && b1 - b0 <= 2048, "out of fds, the daemon logged "
            "%ld lines (%ld bytes) in %.2f s", l1 - l0, b1 - b0, dt);

  /* the client from before is not dropped: it is told why */
  uint64_t id;
  void *base;
  EXPECT_ERR(opd_arena_create(first, 4096, &id, &base), OPD_EFD,
             "file descriptors");
  cr_assert_eq(opd_ping(first), 0, "the client that could not pass an fd "
               "was dropped: %s", opd_last_error());

  for (int i = 0; i < FLOOD; i++) close(flood[i]);
  opd_client_t *late = th_connect_retry(5000);
  cr_assert_eq(opd_ping(late), 0, "%s", opd_last_error());
  opd_close(late);
  cr_assert_eq(opd_arena_create(first, 4096, &id, &base), 0,
               "once fds are free again: %s", opd_last_error());
  opd_close(first);
  th_assert_alive();
  th_stop();
}
