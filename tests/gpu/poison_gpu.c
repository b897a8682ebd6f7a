/* GPU machine: the poisoned-context drill. Needs a daemon built with the
 * test-only "fault" op (make TEST_OPS=1):
 *   build-test/opd --socket S &  build/tests/poison_gpu S [async]; wait  (status 3)
 * With "async" the fault is an asynchronous run (opd_run_async), which is
 * enqueued fine and reported by the next opd_synchronize.
 * A kernel writes to an invalid address; the daemon must fail that run with
 * a clear error, report unhealthy, refuse CUDA work, keep answering for its
 * grace period, then say goodbye to every client and exit with status 3.
 * Prints one line per check and "N passed, N failed". */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "opd/opd.h"
#include "tests/gpu/check.h"


static int healthy(opd_client_t *c) {
  char *json;
  size_t len;
  if (opd_stats_json(c, &json, &len) != 0) return -1;
  int h = strstr(json, "\"healthy\":true") != NULL;
  opd_free(json);
  return h;
}

int main(int argc, char **argv) {
  const char *sock = argc > 1 ? argv[1] : NULL;
  int async = argc > 2 && strcmp(argv[2], "async") == 0;
  opd_client_t *a, *b;
  if (opd_connect(sock, &a) != 0 || opd_connect(sock, &b) != 0) {
    fprintf(stderr, "%s\n", opd_last_error());
    return 1;
  }
  CHECK(healthy(a) == 1, "healthy before the fault");
  uint64_t dev, host;
  void *base;
  int rc = opd_alloc(a, "cuda", 4096, &dev);
  CHECK(rc == 0, "device arena: %s", rc ? opd_last_error() : "ok");
  rc = opd_arena_create(a, 4096, &host, &base);
  int64_t n = 16;
  opd_tensor_t dx, dy, hx, hy;
  opd_tensor_init(&dx, dev, 0, OPD_DTYPE_FLOAT32, 1, &n);
  opd_tensor_init(&dy, dev, 64, OPD_DTYPE_FLOAT32, 1, &n);
  opd_tensor_init(&hx, host, 0, OPD_DTYPE_FLOAT32, 1, &n);
  opd_tensor_init(&hy, host, 64, OPD_DTYPE_FLOAT32, 1, &n);
  rc = opd_run(a, "relu", &dx, 1, &dy, 1, NULL, 0);
  CHECK(rc == 0, "a CUDA run before the fault: %s", rc ? opd_last_error() : "ok");

  if (async) {
    /* enqueued fine; the fault is told at the next synchronization */
    rc = opd_run_async(a, "cuda", "fault", NULL, 0, NULL, 0, NULL, 0);
    CHECK(rc == 0, "the faulting run, asynchronous, is enqueued: %s",
          rc ? opd_last_error() : "ok");
    rc = opd_synchronize(a);
    CHECK(rc == OPD_EBACKEND &&
              strstr(opd_last_error(), "an earlier asynchronous run failed: "
                                       "fault (request") != NULL &&
              strstr(opd_last_error(), "illegal") != NULL,
          "opd_synchronize reports it clearly: %s (%s)", opd_errname(rc),
          opd_last_error());
  } else {
    rc = opd_run_on(a, "cuda", "fault", NULL, 0, NULL, 0, NULL, 0);
    CHECK(rc == OPD_EBACKEND && strstr(opd_last_error(), "illegal") != NULL,
          "the faulting run fails clearly: %s (%s)", opd_errname(rc),
          opd_last_error());
  }
  CHECK(healthy(a) == 0, "stats report unhealthy");
  rc = opd_run(a, "relu", &dx, 1, &dy, 1, NULL, 0);
  CHECK(rc == OPD_EBACKEND && strstr(opd_last_error(), "poisoned") != NULL,
        "later CUDA work is refused: %s", opd_last_error());
  rc = opd_run_on(a, "cpu", "relu", &hx, 1, &hy, 1, NULL, 0);
  CHECK(rc == 0, "cpu work goes on during the grace period: %s",
        rc ? opd_last_error() : "ok");

  /* the bystander is told why the daemon goes away */
  int code = 0;
  struct timespec ts = {0, 100 * 1000 * 1000};
  for (int i = 0; i < 150 && code == 0; i++) {
    code = opd_ping(b);
    if (code == 0) nanosleep(&ts, NULL);
  }
  CHECK(code == OPD_EBACKEND && strstr(opd_last_error(), "poisoned") != NULL,
        "other clients get a goodbye naming the cause: %s (%s)",
        opd_errname(code), opd_last_error());
  opd_close(a);
  opd_close(b);
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
