/* opd as a system service, continued (daemon/metrics.c, access.c, log.c):
 * the metrics endpoint served and parsed by prometheus_client, a clear
 * start error on an address in use, a flood of scrapers; allow lists
 * reloaded by SIGHUP; repeated log lines rate limited.
 */
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


/* ---- metrics ------------------------------------------------------------------------------ */

/* a loopback port free now; *fd keeps it bound (and listening) if non-NULL */
static int free_port(int *fd) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0);
  cr_assert_eq(getsockname(s, (struct sockaddr *)&a, &len), 0);
  if (fd) {
    listen(s, 1);
    *fd = s;
  } else {
    close(s);
  }
  return ntohs(a.sin_port);
}

/* a field of /proc/PID/status ("Threads:", "VmRSS:" in kB) */
static long status_of(pid_t pid, const char *field) {
  char path[64], buf[4096];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  if (slurp(path, buf, sizeof buf) < 0) return -1;
  const char *p = strstr(buf, field);
  return p ? atol(p + strlen(field)) : -1;
}
#define threads_of(pid) ((int)status_of(pid, "Threads:"))

/* scrapes in a loop: whole GET /metrics requests, each read to the end */
static volatile int scraping;
static void *scraper(void *arg) {
  struct sockaddr_in a = *(struct sockaddr_in *)arg;
  char buf[8192];
  while (scraping) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        write(fd, "GET /metrics HTTP/1.0\r\n\r\n", 25) == 25)
      while (read(fd, buf, sizeof buf) > 0) {
      }
    close(fd);
  }
  return NULL;
}

/* prometheus_client's own parser over `opctl metrics`; prints "ok" and the
 * values the test asks about */
static const char *const parse_py =
    "import sys\n"
    "from prometheus_client.parser import text_string_to_metric_families\n"
    "fams = {f.name: f for f in text_string_to_metric_families(open(sys.argv[1]).read())}\n"
    "def val(name, **labels):\n"
    "    for f in fams.values():\n"
    "        for s in f.samples:\n"
    "            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):\n"
    "                return s.value\n"
    "    return None\n"
    "assert fams['opd_run_latency_seconds'].type == 'histogram'\n"
    "assert fams['opd_runs'].type == 'counter'\n"
    "assert fams['opd_build_info'].type == 'gauge'\n"
    "assert fams['opd_gpu_memory_total_bytes'].type == 'gauge'\n"
    "print('families', len(fams))\n"
    "print('healthy', val('opd_healthy'))\n"
    "print('relu_ok', val('opd_runs_total', op='relu', status='ok'))\n"
    "print('relu_bounds', val('opd_runs_total', op='relu', status='EBOUNDS'))\n"
    "print('relu_count', val('opd_run_latency_seconds_count', op='relu'))\n"
    "print('relu_inf', val('opd_run_latency_seconds_bucket', op='relu', le='+Inf'))\n"
    "print('sessions_total', val('opd_sessions_total'))\n"
    "print('ok')\n";

Test(service, metrics_served_and_parsed_by_prometheus_client) {
  int port = free_port(NULL);
  char addr[32];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  const char *args[] = {"--metrics-listen", addr, NULL};
  th_start(args);
  opd_client_t *c = th_connect();
  void *base;
  uint64_t a = th_arena(c, 65536, &base);
  opd_tensor_t x = th_f32(a, 0, 1, (int64_t)16), y = th_f32(a, 4096, 1, (int64_t)16);
  for (int i = 0; i < 5; i++)
    cr_assert_eq(opd_run(c, "relu", &x, 1, &y, 1, NULL, 0), 0, "%s", opd_last_error());
  opd_tensor_t bad = th_f32(a, 65536 - 8, 1, (int64_t)16);
  cr_assert_eq(opd_run(c, "relu", &bad, 1, &y, 1, NULL, 0), OPD_EBOUNDS);
  cr_assert_eq(opctl("metrics", addr), 0, "%s", out);
  char file[160];
  snprintf(file, sizeof file, "%s/metrics.txt", th_d.dir);
  write_file(file, out);
  const char *argv[] = {"python3", "-c", parse_py, file, NULL};
  int rc = th_run("/usr/bin/python3", argv, out, sizeof out);
  unlink(file);
  cr_assert_eq(rc, 0, "%s", out);
  cr_assert(strstr(out, "healthy 1.0\n"), "%s", out);
  cr_assert(strstr(out, "relu_ok 5.0\n"), "%s", out);
  /* refused by its checks: counted by status, but never timed */
  cr_assert(strstr(out, "relu_bounds 1.0\n"), "%s", out);
  cr_assert(strstr(out, "relu_count 5.0\n") && strstr(out, "relu_inf 5.0\n"),
            "%s", out);
  cr_assert(strstr(out, "\nok\n"), "%s", out);
  opd_close(c);
  th_stop();
}

Test(service, metrics_address_in_use_is_a_clear_start_error) {
  int held;
  int port = free_port(&held);
  char addr[32], sock[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  snprintf(sock, sizeof sock, "/tmp/opd-svc-%d.sock", (int)getpid());
  const char *argv[] = {"opd", "--socket", sock, "--metrics-listen", addr, NULL};
  cr_assert_eq(th_run(opd_bin(), argv, out, sizeof out), 1, "%s", out);
  char want[96];
  snprintf(want, sizeof want, "metrics-listen %s: Address already in use", addr);
  cr_assert(strstr(out, want), "%s", out);
  struct stat st;
  cr_assert_neq(stat(sock, &st), 0, "the socket was left behind");
  close(held);
}

/* A flood of scrapers: connections held open and requests in a loop. The
 * daemon's threads stay bounded, the event loop keeps answering pings,
 * and the endpoint serves once the flood is gone. */
Test(service, a_metrics_flood_is_bounded) {
  int port = free_port(NULL);
  char addr[32];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  const char *args[] = {"--metrics-listen", addr, NULL};
  th_start(args);
  int before = threads_of(th_d.pid);
  enum { HELD = 200 };
  int fds[HELD];
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  for (int i = 0; i < HELD; i++) {
    fds[i] = socket(AF_INET, SOCK_STREAM, 0);
    connect(fds[i], (struct sockaddr *)&a, sizeof a); /* may be refused */
    if (i % 2) (void)!write(fds[i], "GET /metrics HTTP/1.1\r\n", 23); /* never ends */
  }
  long rss0 = status_of(th_d.pid, "VmRSS:");
  pthread_t scrapers[4];
  scraping = 1;
  for (int i = 0; i < 4; i++) pthread_create(&scrapers[i], NULL, scraper, &a);
  opd_client_t *c = th_connect();
  double worst = 0;
  for (int i = 0; i < 200; i++) {
    double t0 = now_s();
    cr_assert_eq(opd_ping(c), 0, "%s", opd_last_error());
    double dt = now_s() - t0;
    if (dt > worst) worst = dt;
  }
  int during = threads_of(th_d.pid);
  long rss1 = status_of(th_d.pid, "VmRSS:");
  scraping = 0;
  for (int i = 0; i < 4; i++) pthread_join(scrapers[i], NULL);
  cr_assert_leq(during, before, "threads %d before the flood, %d during it",
                before, during);
  cr_log_info("flood: threads %d -> %d, VmRSS %ld -> %ld kB, worst ping %.2f ms", before, during, rss0, rss1, worst * 1e3);
  cr_assert_lt(rss1 - rss0, 32 * 1024, "resident memory grew from %ld to %ld kB "
               "in the flood", rss0, rss1);
  cr_assert_lt(worst, 0.05, "a ping took %.3f s during the flood", worst);
  for (int i = 0; i < HELD; i++) close(fds[i]);
  /* served again (the held slots time out or close) */
  int rc = 1;
  for (int t = 0; t < 50 && rc != 0; t++) {
    rc = opctl("metrics", addr);
    if (rc) sleep_ms(100);
  }
  cr_assert_eq(rc, 0, "%s", out);
  cr_assert(strstr(out, "opd_build_info{version=\"" OPD_VERSION "\""), "%s", out);
  opd_close(c);
  th_stop();
}

/* ---- reloading the allow-lists; repeated log lines -------------------------------------- */

/* In a child as uid 64123 with supplementary group 0 (so the socket's
 * mode lets it in): connect and say hello. Returns its exit status: 0
 * connected, 1 refused (the message then in the daemon log), 100 when
 * this machine cannot change uid. */
static int connect_as_other(void) {
  pid_t pid = fork();
  if (pid == 0) {
    gid_t g = 0;
    if (setgroups(1, &g) != 0 || setgid(64123) != 0 || setuid(64123) != 0)
      _exit(100);
    setenv("OPD_DAEMON_USER", "0", 1);
    opd_client_t *c;
    _exit(opd_connect(th_d.sock, &c) == 0 ? 0 : 1);
  }
  int status;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

Test(service, sighup_applies_new_allow_lists_to_new_sessions) {
  scratch();
  char f[128];
  snprintf(f, sizeof f, "%s/opd.conf", dir);
  write_file(f, "max-clients = 100\n");
  const char *args[] = {"--config", f, NULL};
  th_start(args);
  cr_assert_eq(chmod(th_d.dir, 0755), 0);
  int rc = connect_as_other();
  if (rc == 100) cr_skip("cannot become another uid here");
  cr_assert_eq(rc, 0, "uid 64123 refused before the allow-list");
  opd_client_t *mine = th_connect();
  write_file(f, "max-clients = 100\nallow-users = root\n");
  kill(th_d.pid, SIGHUP);
  cr_assert(wait_for(th_d.log, "changed: allow-users", 3000), "no reload");
  cr_assert_eq(connect_as_other(), 1, "uid 64123 let in past allow-users = root");
  cr_assert(wait_for(th_d.log, "uid 64123 may not use this daemon", 1000));
  cr_assert_eq(opd_ping(mine), 0, "the open session: %s", opd_last_error());
  /* and back */
  write_file(f, "max-clients = 100\n");
  kill(th_d.pid, SIGHUP);
  cr_assert(wait_for(th_d.log, "changed: allow-users", 3000));
  for (int t = 0; t < 100 && (rc = connect_as_other()) != 0; t++) sleep_ms(20);
  cr_assert_eq(rc, 0, "uid 64123 still refused after the allow-list went");
  opd_close(mine);
  chmod(th_d.dir, 0700);
  th_stop();
  scratch_rm();
}

/* A call site repeating itself is held back after 20 lines in 10 s: 60
 * refused connections (no slot left) log at most 20 refusals. */
Test(service, repeated_log_lines_are_rate_limited) {
  const char *args[] = {"--max-clients", "1", "--reserved-clients", "0", NULL};
  th_start(args);
  /* th_start's own probe may still hold the one slot for a moment */
  opd_client_t *c = th_connect_retry(3000), *d = NULL;
  /* (its refusals, if any, count: the same call site, the same window) */
  for (int i = 0; i < 60; i++) {
    cr_assert_neq(opd_connect(th_d.sock, &d), 0, "a second session got in");
  }
  sleep_ms(100);
  slurp(th_d.log, out, sizeof out);
  int n = 0;
  for (const char *p = out; (p = strstr(p, ": refused pid ")); p++) n++;
  cr_assert_eq(n, 20, "%d refusal lines for 60 refusals", n);
  cr_assert_eq(opd_ping(c), 0);
  opd_close(c);
  th_stop();
}
