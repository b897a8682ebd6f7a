/* Integration: prepared runs (opd_prepare / opd_run_prepared /
 * opd_submit_prepared) against a real daemon: they compute what opd_run
 * does, see new input values on every call, pipeline, and fail clearly
 * (bad arguments, another connection, the daemon's own checks at run
 * time) without breaking the connection. Runs over every transport
 * (tests/run.sh sets OPD_WAIT). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "tests/integration/harness.h"

TestSuite(prepared, .init = th_start_default, .fini = th_stop_default,
          .timeout = 60);

Test(prepared, repeats_a_run_on_the_current_input_values) {
  opd_client_t *c = th_connect();
  void *base;
  uint64_t a = th_arena(c, 4096, &base);
  float *x = base, *y = (float *)((char *)base + 1024);
  opd_tensor_t tx = th_f32(a, 0, 2, 2, 8), ty = th_f32(a, 1024, 2, 2, 8);
  opd_prepared_t *p;
  cr_assert_eq(opd_prepare(c, NULL, "relu", &tx, 1, &ty, 1, NULL, 0, &p), 0,
               "%s", opd_last_error());
  for (int round = 0; round < 50; round++) {
    for (int i = 0; i < 16; i++) x[i] = (float)(i - 8 + round);
    cr_assert_eq(opd_run_prepared(c, p), 0, "%s", opd_last_error());
    for (int i = 0; i < 16; i++)
      cr_assert_float_eq(y[i], fmaxf(x[i], 0.0f), 0.0f, "round %d [%d]", round, i);
  }
  opd_prepared_free(p);
  /* attributes and a device travel in the prepared request too */
  opd_attr_t ax = {.name = "dim", .type = OPD_ATTR_INT, .i = -1};
  cr_assert_eq(opd_prepare(c, "cpu", "softmax", &tx, 1, &ty, 1, &ax, 1, &p), 0,
               "%s", opd_last_error());
  cr_assert_eq(opd_run_prepared(c, p), 0, "%s", opd_last_error());
  for (int r = 0; r < 2; r++) {
    float sum = 0;
    for (int i = 0; i < 8; i++) sum += y[r * 8 + i];
    cr_assert_float_eq(sum, 1.0f, 1e-5f);
  }
  opd_prepared_free(p);
  opd_close(c);
}

Test(prepared, pipelines_with_submit_and_wait) {
  opd_client_t *c = th_connect();
  void *base;
  uint64_t a = th_arena(c, 4096, &base);
  opd_tensor_t tx = th_f32(a, 0, 1, 64), ty = th_f32(a, 1024, 1, 64);
  opd_prepared_t *p;
  cr_assert_eq(opd_prepare(c, NULL, "copy", &tx, 1, &ty, 1, NULL, 0, &p), 0);
  uint64_t req[32];
  for (int i = 0; i < 32; i++)
    cr_assert_eq(opd_submit_prepared(c, p, &req[i]), 0, "%s", opd_last_error());
  for (int i = 1; i < 32; i++) cr_assert_neq(req[i], req[i - 1], "fresh ids");
  for (int i = 0; i < 32; i++)
    cr_assert_eq(opd_wait(c, req[i], 5000), 0, "%s", opd_last_error());
  opd_prepared_free(p);
  opd_close(c);
}

Test(prepared, errors_are_clear_and_the_connection_survives) {
  opd_client_t *c = th_connect(), *other = th_connect();
  void *base;
  uint64_t a = th_arena(c, 4096, &base);
  opd_tensor_t tx = th_f32(a, 0, 1, 16), bad = th_f32(a, 1024, 1, 15);
  opd_prepared_t *p;
  EXPECT_ERR(opd_prepare(c, NULL, "relu", &tx, 1, NULL, 1, NULL, 0, &p),
             OPD_EINVAL, "NULL");
  EXPECT_ERR(opd_prepare(c, NULL, NULL, &tx, 1, &tx, 1, NULL, 0, &p),
             OPD_EINVAL, "op name");
  EXPECT_ERR(opd_prepare(c, NULL, "relu", &tx, 1, &tx, 1, NULL, 0, NULL),
             OPD_EINVAL, "NULL");
  /* the daemon checks the request when it runs: every call gets its error */
  cr_assert_eq(opd_prepare(c, NULL, "relu", &tx, 1, &bad, 1, NULL, 0, &p), 0);
  for (int i = 0; i < 3; i++)
    EXPECT_ERR(opd_run_prepared(c, p), OPD_ESHAPE, "relu");
  /* its arena ids are c's: another connection refuses it */
  EXPECT_ERR(opd_run_prepared(other, p), OPD_EINVAL, "another connection");
  uint64_t req;
  EXPECT_ERR(opd_submit_prepared(c, NULL, &req), OPD_EINVAL, "NULL");
  EXPECT_ERR(opd_submit_prepared(c, p, NULL), OPD_EINVAL, "NULL");
  opd_prepared_free(p);
  opd_prepared_free(NULL);
  cr_assert_eq(opd_ping(c), 0, "still usable");
  cr_assert_eq(opd_ping(other), 0);
  opd_close(other);
  opd_close(c);
  th_assert_alive();
}

/* The daemon keeps each session's last validated run request and reuses
 * the validation for byte-identical requests (daemon/run/runcache.c, the run
 * cache) until an arena is released anywhere: the run must then be
 * checked anew, and fail when it names the arena that went. */
Test(prepared, the_daemon_rechecks_a_cached_run_after_an_arena_goes) {
  opd_client_t *c = th_connect(), *other = th_connect();
  void *base, *base2, *obase;
  uint64_t a = th_arena(c, 4096, &base), b = th_arena(c, 4096, &base2);
  float *x = base, *y = (float *)((char *)base + 1024);
  opd_tensor_t tx = th_f32(a, 0, 1, 16), ty = th_f32(a, 1024, 1, 16);
  opd_tensor_t bx = th_f32(b, 0, 1, 16), by = th_f32(b, 1024, 1, 16);
  opd_prepared_t *p, *q;
  cr_assert_eq(opd_prepare(c, NULL, "relu", &tx, 1, &ty, 1, NULL, 0, &p), 0);
  cr_assert_eq(opd_prepare(c, NULL, "relu", &bx, 1, &by, 1, NULL, 0, &q), 0);
  int64_t hits = th_stat("run_cache_hits");
  for (int round = 0; round < 10; round++) {
    for (int i = 0; i < 16; i++) x[i] = (float)(i - 8 - round);
    cr_assert_eq(opd_run_prepared(c, p), 0, "%s", opd_last_error());
    for (int i = 0; i < 16; i++) cr_assert_float_eq(y[i], fmaxf(x[i], 0.0f), 0.0f);
  }
  cr_assert_geq(th_stat("run_cache_hits") - hits, 9, "repeats hit the cache");
  /* another session's arena goes: checked anew, still fine */
  uint64_t o = th_arena(other, 4096, &obase);
  cr_assert_eq(opd_arena_release(other, o), 0);
  x[0] = 5.0f;
  cr_assert_eq(opd_run_prepared(c, p), 0, "%s", opd_last_error());
  cr_assert_float_eq(y[0], 5.0f, 0.0f);
  /* the run's own arena goes: the same bytes now fail, every time */
  cr_assert_eq(opd_run_prepared(c, q), 0, "%s", opd_last_error());
  cr_assert_eq(opd_run_prepared(c, q), 0, "%s", opd_last_error());
  cr_assert_eq(opd_arena_release(c, b), 0);
  for (int i = 0; i < 2; i++)
    EXPECT_ERR(opd_run_prepared(c, q), OPD_EARENA, "unknown arena");
  cr_assert_eq(opd_run_prepared(c, p), 0, "%s", opd_last_error());
  opd_prepared_free(q);
  opd_prepared_free(p);
  opd_close(other);
  opd_close(c);
  th_assert_alive();
}
