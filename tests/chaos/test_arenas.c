/* Chaos: arenas registered and released in a loop, and sparse 64 GiB
 * arenas up to the session's limit: once released (or their session
 * closed) nothing of them stays mapped.
 *
 * DESIGN
 * The register/release loop watches the daemon's memfd mappings while it
 * runs: after each release they must be what they were with the client
 * connected and holding no arena (a daemon that never unmaps filled
 * vm.max_map_count in ~3 s this way, and served nobody after). The sparse
 * arenas cost no memory, only address space, so VmSize is what shows them.
 *
 * `make test`: 20,000 loops; OPD_CHAOS_SOAK=1: 200,000, figures printed.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/chaos/chaos.h"

Test(chaos, register_release_loop_keeps_no_mapping, .timeout = 3600) {
  long loops = ch_soak() ? 200000 : 20000;
  double budget = ch_soak() ? 1800 : 60;
  th_start(NULL);
  ch_snap_t base, now;
  ch_baseline(&base);
  ch_tol_t tol = ch_tol_default();

  opd_client_t *c = th_connect(); /* the transport $OPD_WAIT says */
  ch_proc_t p;
  ch_proc_read(th_d.pid, &p);
  /* what the connected client holds by itself: its ring region, if any */
  long idle_maps = p.memfd_maps;
  double t0 = ch_now();
  for (long i = 1; i <= loops; i++) {
    uint64_t id;
    void *mem;
    int rc = opd_arena_create(c, 4096, &id, &mem);
    cr_assert_eq(rc, 0, "loop %ld: arena_create: %s", i, opd_last_error());
    ((char *)mem)[0] = 1;
    cr_assert_eq(opd_arena_release(c, id), 0, "loop %ld: release: %s", i,
                 opd_last_error());
    if (i % 2000 == 0 || i == loops) {
      ch_proc_read(th_d.pid, &p);
      cr_assert_eq(p.memfd_maps, idle_maps,
                   "after %ld arenas registered and released the daemon maps "
                   "%ld memfds (%ld with this client holding none)", i,
                   p.memfd_maps, idle_maps);
      cr_assert(ch_now() - t0 < budget, "%ld loops took over %.0f s", i, budget);
    }
  }
  double took = ch_now() - t0;
  opd_close(c);
  th_assert_alive();
  ch_snapshot(&now, 10000);
  char what[64];
  snprintf(what, sizeof what, "after %ld register/release loops", loops);
  if (ch_verbose()) ch_print(what, &base, &now, took);
  ch_expect_near(what, &base, &now, &tol);
  th_stop();
}

enum { MAX_ARENAS = 12, ROUNDS = 4 };
#define SPARSE (64ull << 30)

/* A sealed memfd of 64 GiB that holds no page. */
static int sparse_memfd(void) {
  int fd = memfd_create("chaos-sparse", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  cr_assert(fd >= 0, "memfd_create: %s", strerror(errno));
  cr_assert_eq(ftruncate(fd, (off_t)SPARSE), 0, "ftruncate: %s", strerror(errno));
  cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  return fd;
}

Test(chaos, sparse_arenas_give_back_address_space, .timeout = 120) {
  /* 12 x 64 GiB per session fits every other default limit (per-uid
   * bytes: 1 TiB) */
  th_start((const char *[]){"--max-arenas", "12", "--max-session-bytes",
                            "1099511627776", NULL});
  ch_snap_t base, now;
  ch_baseline(&base);
  ch_tol_t tol = ch_tol_default();

  double t0 = ch_now();
  for (int r = 0; r < ROUNDS; r++) {
    opd_client_t *c = th_connect();
    uint64_t ids[MAX_ARENAS];
    for (int i = 0; i <= MAX_ARENAS; i++) {
      int fd = sparse_memfd();
      uint64_t id;
      int rc = opd_arena_register_fd(c, fd, SPARSE, &id);
      close(fd); /* the daemon holds its own mapping */
      if (i < MAX_ARENAS) {
        cr_assert_eq(rc, 0, "round %d: sparse arena %d: %s", r, i,
                     opd_last_error());
        ids[i] = id;
      } else {
        cr_assert_eq(rc, OPD_ELIMIT, "round %d: arena %d past --max-arenas: "
                     "%s (%s)", r, i, opd_errname(rc), opd_last_error());
      }
    }
    /* while they are held the daemon's stats say what /proc shows: the
     * arenas, and the host mappings (those plus the client's rings) */
    opd_client_t *q = ch_connect_socket(2000);
    ch_snap_t held;
    ch_stats_read(q, &held.st);
    ch_proc_read(th_d.pid, &held.proc);
    opd_close(q);
    cr_expect_eq(held.st.arenas, MAX_ARENAS, "stats arenas %lld, %d held",
                 (long long)held.st.arenas, MAX_ARENAS);
    cr_expect_eq((uint64_t)held.st.bytes_mapped, MAX_ARENAS * SPARSE,
                 "stats bytes_mapped %lld, %d x 64 GiB held",
                 (long long)held.st.bytes_mapped, MAX_ARENAS);
    ch_expect_stats_true("12 sparse arenas held", &held);
    /* half released one by one, the rest with the session */
    for (int i = 0; i < MAX_ARENAS / 2; i++)
      cr_assert_eq(opd_arena_release(c, ids[i]), 0, "%s", opd_last_error());
    opd_close(c);
  }
  ch_snapshot(&now, 10000);
  if (ch_verbose())
    ch_print("after 48 sparse 64 GiB arenas", &base, &now, ch_now() - t0);
  ch_expect_near("after 48 sparse 64 GiB arenas", &base, &now, &tol);
  th_stop();
}
