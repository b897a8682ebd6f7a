/* Helpers the service tests share: tests/integration/service_util.h. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/harness.h"

#include "tests/integration/service_util.h"

char out[65536];

void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

const char *opd_bin(void) {
  return getenv("OPD_BIN") ? getenv("OPD_BIN") : "build/opd";
}

/* In a forked child that becomes a daemon: it goes when the test's process
 * does (a failed assertion included), so that no daemon outlives its test
 * and holds the test runner's output open. */
void die_with_parent(pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(127);
}

/* a scratch directory for files of one test */
char dir[64];
void scratch(void) {
  snprintf(dir, sizeof dir, "/tmp/opd-svc.XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}
void scratch_rm(void) {
  char cmd[96];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_assert_eq(system(cmd), 0);
}

void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f, "%s: %s", path, strerror(errno));
  fputs(text, f);
  fclose(f);
}

int slurp(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return -1;
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = '\0';
  fclose(f);
  return (int)n;
}

/* Waits until `path` contains `needle` (up to ms); returns 1 if it does. */
int wait_for(const char *path, const char *needle, int ms) {
  static char buf[65536];
  for (int t = 0; t <= ms; t += 10) {
    if (slurp(path, buf, sizeof buf) >= 0 && strstr(buf, needle)) return 1;
    sleep_ms(10);
  }
  return 0;
}

/* opd --config FILE --check-config [extra]; output into out */
int check_config(const char *file, const char *extra1, const char *extra2) {
  const char *argv[] = {"opd", "--config", file, "--check-config", extra1, extra2,
                        NULL};
  return th_run(opd_bin(), argv, out, sizeof out);
}

int opctl(const char *cmd, const char *arg) {
  char path[256];
  th_tool("opctl", path, sizeof path);
  const char *argv[] = {"opctl", "--socket", th_d.sock, cmd, arg, NULL};
  return th_run(path, argv, out, sizeof out);
}
