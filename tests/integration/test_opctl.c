/* Integration: opctl, the admin CLI, against a real daemon. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/integration/harness.h"

TestSuite(opctl, .init = th_start_default, .fini = th_stop_default,
          .timeout = 60);

/* Runs opctl (built next to $OPD_BIN) on the test's socket; returns its exit
 * status and its stdout+stderr in out. */
static int opctl(char *out, size_t cap, const char *a1, const char *a2,
                 const char *a3) {
  char path[512];
  th_tool("opctl", path, sizeof path);
  const char *argv[] = {"opctl", "--socket", th_d.sock, a1, a2, a3, NULL};
  return th_run(path, argv, out, cap);
}

static char out[65536];

Test(opctl, ping_prints_round_trip_times) {
  cr_assert_eq(opctl(out, sizeof out, "ping", "-c", "20"), 0, "%s", out);
  cr_assert(strstr(out, "20 pings: min") != NULL && strstr(out, "p99") != NULL,
            "%s", out);
}

Test(opctl, ops_prints_every_schema) {
  cr_assert_eq(opctl(out, sizeof out, "ops", NULL, NULL), 0, "%s", out);
  cr_assert(strstr(out, "22 operators") != NULL, "%s", out);
  cr_assert(strstr(out, "attr    iou_threshold float  required") != NULL, "%s", out);
  cr_assert(strstr(out, "attr    eps      float  default 1e-05") != NULL, "%s", out);
  cr_assert(strstr(out, "one of none|tanh") != NULL, "%s", out);
  cr_assert_eq(opctl(out, sizeof out, "--json", "ops", NULL), 0);
  cr_assert(strncmp(out, "{\"ops\":[", 8) == 0, "%.80s", out);
}

Test(opctl, stats_and_version) {
  opd_client_t *c = th_connect();
  opd_run(c, "noop", NULL, 0, NULL, 0, NULL, 0);
  cr_assert_eq(opctl(out, sizeof out, "stats", NULL, NULL), 0, "%s", out);
  cr_assert(strstr(out, "opd daemon: healthy") != NULL, "%s", out);
  cr_assert(strstr(out, "noop                1") != NULL, "%s", out);
  /* the per-op column of runs executed on the event loop (a noop touches
   * no bytes: --inline-bytes) */
  cr_assert(strstr(out, "on loop") != NULL, "%s", out);
  cr_assert(strstr(out, "noop                1        0          1") != NULL, "%s", out);
  cr_assert_eq(opctl(out, sizeof out, "version", NULL, NULL), 0, "%s", out);
  cr_assert(strstr(out, "opd " OPD_VERSION " (protocol 1)") != NULL, "%s", out);
  opd_close(c);
}

Test(opctl, errors_are_one_clear_line) {
  cr_assert_eq(opctl(out, sizeof out, "frobnicate", NULL, NULL), 2);
  cr_assert(strstr(out, "unknown command \"frobnicate\"") != NULL, "%s", out);
  th_stop();
  cr_assert_eq(opctl(out, sizeof out, "ping", NULL, NULL), 1);
  cr_assert(strstr(out, "cannot connect to the opd daemon") != NULL, "%s", out);
}
