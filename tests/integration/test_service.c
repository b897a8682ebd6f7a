/* opd as a system service (daemon/service.c, options.c, log.c, metrics.c):
 * the config file and --check-config, SIGHUP reload (good and broken),
 * --pid-file and --log-file, journal priorities, the notify protocol on a
 * $NOTIFY_SOCKET of our own, the drain deadline, `opctl health` exit
 * codes, and the metrics endpoint parsed by prometheus_client.
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

TestSuite(service, .timeout = 60);

static char out[65536];

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *opd_bin(void) {
  return getenv("OPD_BIN") ? getenv("OPD_BIN") : "build/opd";
}

/* In a forked child that becomes a daemon: it goes when the test's process
 * does (a failed assertion included), so that no daemon outlives its test
 * and holds the test runner's output open. */
static void die_with_parent(pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(127);
}

/* a scratch directory for files of one test */
static char dir[64];
static void scratch(void) {
  snprintf(dir, sizeof dir, "/tmp/opd-svc.XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}
static void scratch_rm(void) {
  char cmd[96];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_assert_eq(system(cmd), 0);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f, "%s: %s", path, strerror(errno));
  fputs(text, f);
  fclose(f);
}

static int slurp(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return -1;
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = '\0';
  fclose(f);
  return (int)n;
}

/* Waits until `path` contains `needle` (up to ms); returns 1 if it does. */
static int wait_for(const char *path, const char *needle, int ms) {
  static char buf[65536];
  for (int t = 0; t <= ms; t += 10) {
    if (slurp(path, buf, sizeof buf) >= 0 && strstr(buf, needle)) return 1;
    sleep_ms(10);
  }
  return 0;
}

/* opd --config FILE --check-config [extra]; output into out */
static int check_config(const char *file, const char *extra1, const char *extra2) {
  const char *argv[] = {"opd", "--config", file, "--check-config", extra1, extra2,
                        NULL};
  return th_run(opd_bin(), argv, out, sizeof out);
}

/* ---- the config file ---------------------------------------------------------- */

Test(service, config_unknown_key_bad_value_syntax_each_named) {
  scratch();
  char f[128];
  snprintf(f, sizeof f, "%s/opd.conf", dir);
  write_file(f, "# a comment\nmax-clients = 8\nmax-client = 9\n"
                "max-inflight = lots\nlog-level = loud\njust words\n"
                "config = /x\n[opd]\nthreads = 2\n");
  cr_assert_eq(check_config(f, NULL, NULL), 1, "%s", out);
  char want[256];
  snprintf(want, sizeof want, "%s:3: unknown key \"max-client\"", f);
  cr_assert(strstr(out, want), "%s", out);
  snprintf(want, sizeof want, "%s:4: max-inflight expects a number from 1 to "
           "1048576, got \"lots\"", f);
  cr_assert(strstr(out, want), "%s", out);
  snprintf(want, sizeof want, "%s:5: log-level expects error, warn, info or "
           "debug, got \"loud\"", f);
  cr_assert(strstr(out, want), "%s", out);
  snprintf(want, sizeof want, "%s:6: not \"key = value\"", f);
  cr_assert(strstr(out, want), "%s", out);
  snprintf(want, sizeof want, "%s:9: threads: keys go before any [section]", f);
  cr_assert(strstr(out, want), "%s", out);
  snprintf(want, sizeof want, "%s:7: config: only on the command line", f);
  cr_assert(strstr(out, want), "%s", out);
  /* nothing was printed as the configuration */
  cr_assert(strstr(out, "effective configuration") == NULL, "%s", out);
  /* the daemon itself refuses to start on it, with the same message */
  const char *argv[] = {"opd", "--config", f, "--socket", "/tmp/never.sock", NULL};
  cr_assert_eq(th_run(opd_bin(), argv, out, sizeof out), 1, "%s", out);
  cr_assert(strstr(out, "unknown key \"max-client\""), "%s", out);
  scratch_rm();
}

Test(service, config_missing_file_and_directory) {
  scratch();
  char f[128];
  snprintf(f, sizeof f, "%s/none.conf", dir);
  cr_assert_eq(check_config(f, NULL, NULL), 1, "%s", out);
  char want[256];
  snprintf(want, sizeof want, "cannot read the config file %s: No such file "
           "or directory", f);
  cr_assert(strstr(out, want), "%s", out);
  cr_assert_eq(check_config(dir, NULL, NULL), 1, "%s", out);
  snprintf(want, sizeof want, "the config file %s is a directory, not a file",
           dir);
  cr_assert(strstr(out, want), "%s", out);
  scratch_rm();
}

Test(service, check_config_prints_the_effective_configuration) {
  scratch();
  char f[128], g[128];
  snprintf(f, sizeof f, "%s/opd.conf", dir);
  snprintf(g, sizeof g, "%s/again.conf", dir);
  write_file(f, "max-clients = 5\nlog-level = warn ; inline comment\n"
                "socket = \"/tmp/x/opd.sock\"\ndrain-timeout-ms = 2500\n"
                "metrics-listen = 127.0.0.1:9464\n");
  /* the command line wins over the file */
  cr_assert_eq(check_config(f, "--max-clients", "7"), 0, "%s", out);
  cr_assert(strstr(out, "\nmax-clients = 7\n"), "%s", out);
  cr_assert(strstr(out, "\nlog-level = warn\n"), "%s", out);
  cr_assert(strstr(out, "\nsocket = /tmp/x/opd.sock\n"), "%s", out);
  cr_assert(strstr(out, "\ndrain-timeout-ms = 2500\n"), "%s", out);
  cr_assert(strstr(out, "\nmetrics-listen = 127.0.0.1:9464\n"), "%s", out);
  cr_assert(strstr(out, "\nmax-uid-clients = 256\n"), "defaults too: %s", out);
  /* what it prints is a config file that gives the same configuration */
  char first[65536];
  write_file(g, out);
  strcpy(first, strchr(out, '\n')); /* past the header naming the file */
  cr_assert_eq(check_config(g, NULL, NULL), 0, "%s", out);
  cr_assert_str_eq(strchr(out, '\n'), first);
  /* a bad value on the command line names the option */
  cr_assert_eq(check_config(f, "--metrics-listen", "nowhere"), 1, "%s", out);
  cr_assert(strstr(out, "--metrics-listen expects ADDR:PORT"), "%s", out);
  scratch_rm();
}

/* plugin is the one repeatable key: a line each, in order; too long a path
 * is an error naming where it came from */
Test(service, config_plugin_key_repeats_and_is_bounded) {
  scratch();
  char f[128], long_path[1200];
  snprintf(f, sizeof f, "%s/opd.conf", dir);
  write_file(f, "plugin = /opt/a.so\nplugin = /opt/b.so\n");
  cr_assert_eq(check_config(f, NULL, NULL), 0, "%s", out);
  const char *a = strstr(out, "\nplugin = /opt/a.so\n");
  const char *b = strstr(out, "\nplugin = /opt/b.so\n");
  cr_assert(a && b && a < b, "both, in order: %s", out);
  memset(long_path, 'x', sizeof long_path - 1);
  long_path[0] = '/';
  long_path[sizeof long_path - 1] = '\0';
  /* in the file, such a line is refused by the reader, naming the line */
  char text[1300];
  snprintf(text, sizeof text, "plugin = %s\n", long_path);
  write_file(f, text);
  cr_assert_eq(check_config(f, NULL, NULL), 1, "%s", out);
  char want[192];
  snprintf(want, sizeof want, "%s:1: line longer than", f);
  cr_assert(strstr(out, want), "%s", out);
  /* on the command line, past the plugin path buffer */
  write_file(f, "\n");
  cr_assert_eq(check_config(f, "--plugin", long_path), 1, "%s", out);
  cr_assert(strstr(out, "--plugin is too long (at most 1023 bytes)"), "%s", out);
  scratch_rm();
}

/* ---- reload --------------------------------------------------------------------- */

/* the daemon's hello limits as a new client sees them */
static long limit_of(const char *key) {
  opd_client_t *c = th_connect();
  char *json;
  size_t len;
  cr_assert_eq(opd_server_info(c, &json, &len), 0, "%s", opd_last_error());
  char k[64];
  snprintf(k, sizeof k, "\"%s\":", key);
  const char *p = strstr(json, k);
  cr_assert_not_null(p, "%s", json);
  long v = strtol(p + strlen(k), NULL, 10);
  opd_free(json);
  opd_close(c);
  return v;
}

Test(service, sighup_reloads_and_a_broken_config_keeps_the_old_one) {
  scratch();
  char f[128], lf[128], moved[128];
  snprintf(f, sizeof f, "%s/opd.conf", dir);
  snprintf(lf, sizeof lf, "%s/opd.log", dir);
  snprintf(moved, sizeof moved, "%s/opd.log.1", dir);
  write_file(f, "max-inflight = 100\nlog-level = info\n");
  const char *args[] = {"--config", f, "--log-file", lf, "--log-level", "info",
                        NULL};
  th_start(args);
  cr_assert_eq(limit_of("max_inflight"), 100);
  opd_client_t *old = th_connect(); /* stays open across the reloads */

  /* logrotate: moved away, then SIGHUP; the new value applies to new
   * sessions, the open one goes on */
  cr_assert_eq(rename(lf, moved), 0);
  write_file(f, "max-inflight = 200\nlog-level = warn\n");
  kill(th_d.pid, SIGHUP);
  cr_assert(wait_for(lf, "SIGHUP: configuration reloaded", 3000),
            "no reload line in the reopened log");
  cr_assert(wait_for(lf, "changed: max-inflight", 0), "names what changed");
  cr_assert_eq(limit_of("max_inflight"), 200);
  /* --log-level info on the command line still wins over the file's warn:
   * info lines are still logged (the reload line itself was one) */
  cr_assert_eq(opd_ping(old), 0, "%s", opd_last_error());

  /* broken: logged with file and line, nothing changes, still serving */
  write_file(f, "max-inflight = 300\nmax-inflite = 1\n");
  kill(th_d.pid, SIGHUP);
  char want[192];
  snprintf(want, sizeof want, "%s:2: unknown key \"max-inflite\"", f);
  cr_assert(wait_for(lf, want, 3000), "the error is not logged");
  cr_assert(wait_for(lf, "nothing changed, the one in use stays", 1000));
  cr_assert_eq(limit_of("max_inflight"), 200);
  cr_assert_eq(opd_ping(old), 0, "%s", opd_last_error());
  /* allow-lists naming nobody: refused the same way */
  write_file(f, "max-inflight = 300\nallow-users = no-such-user-here\n");
  kill(th_d.pid, SIGHUP);
  cr_assert(wait_for(lf, "no user is named \"no-such-user-here\"", 3000));
  cr_assert_eq(limit_of("max_inflight"), 200);
  th_assert_alive();
  opd_close(old);
  th_stop();
  scratch_rm();
}

/* plugins load once: a SIGHUP whose config drops one says it takes effect
 * at the next start, and its op is still served */
Test(service, sighup_keeps_the_loaded_plugins) {
  scratch();
  char f[128], lf[128], so[512];
  snprintf(f, sizeof f, "%s/opd.conf", dir);
  snprintf(lf, sizeof lf, "%s/opd.log", dir);
  th_tool("plugins/hello.so", so, sizeof so);
  cr_assert(access(so, R_OK) == 0, "%s is missing: run `make plugins`", so);
  char text[700];
  snprintf(text, sizeof text, "plugin = %s\n", so);
  write_file(f, text);
  const char *args[] = {"--config", f, "--log-file", lf, "--log-level", "info",
                        NULL};
  th_start(args);
  write_file(f, "max-inflight = 77\n");
  kill(th_d.pid, SIGHUP);
  cr_assert(wait_for(lf, "plugin changed; it takes effect at the next start",
                     3000), "no warning about the plugin");
  cr_assert(wait_for(lf, "SIGHUP: configuration reloaded", 3000));
  cr_assert_eq(limit_of("max_inflight"), 77, "the rest applies");
  opd_client_t *c = th_connect();
  char *json;
  size_t len;
  cr_assert_eq(opd_plugins_json(c, &json, &len), 0, "%s", opd_last_error());
  cr_assert(strstr(json, "\"scale\""), "hello still loaded: %s", json);
  opd_free(json);
  opd_close(c);
  th_stop();
  scratch_rm();
}

/* ---- pid file, log file ---------------------------------------------------------- */

Test(service, pid_file_written_and_removed) {
  scratch();
  char pf[128], buf[64];
  snprintf(pf, sizeof pf, "%s/opd.pid", dir);
  const char *args[] = {"--pid-file", pf, NULL};
  th_start(args);
  cr_assert_geq(slurp(pf, buf, sizeof buf), 0, "no pid file");
  cr_assert_eq(atoi(buf), th_d.pid, "pid file says %s", buf);
  th_stop();
  struct stat st;
  cr_assert_neq(stat(pf, &st), 0, "the pid file was left behind");
  /* a pid file that cannot be written: the daemon does not start */
  snprintf(pf, sizeof pf, "%s/missing/opd.pid", dir);
  char sock[128];
  snprintf(sock, sizeof sock, "%s/opd.sock", dir);
  const char *argv[] = {"opd", "--socket", sock, "--pid-file", pf, NULL};
  cr_assert_eq(th_run(opd_bin(), argv, out, sizeof out), 1, "%s", out);
  cr_assert(strstr(out, "--pid-file") && strstr(out, "No such file"), "%s", out);
  scratch_rm();
}

/* Runs opd with stderr on a file whose device and inode $JOURNAL_STREAM
 * names (as systemd does), until it logs "listening", then SIGTERM. */
Test(service, journal_lines_carry_syslog_priorities) {
  scratch();
  char log[128], sock[128];
  snprintf(log, sizeof log, "%s/journal", dir);
  snprintf(sock, sizeof sock, "%s/opd.sock", dir);
  int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  cr_assert_geq(fd, 0);
  struct stat st;
  cr_assert_eq(fstat(fd, &st), 0);
  char js[64];
  snprintf(js, sizeof js, "%llu:%llu", (unsigned long long)st.st_dev,
           (unsigned long long)st.st_ino);
  pid_t parent = getpid(), pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    die_with_parent(parent);
    dup2(fd, 2);
    setenv("JOURNAL_STREAM", js, 1);
    execl(opd_bin(), "opd", "--socket", sock, "--log-level", "info",
          "--allow-groups", "0", (char *)NULL);
    _exit(127);
  }
  close(fd);
  cr_assert(wait_for(log, "listening on", 3000), "opd did not start");
  kill(pid, SIGTERM);
  int status;
  waitpid(pid, &status, 0);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  slurp(log, out, sizeof out);
  cr_assert(strncmp(out, "<6>opd[info] ", 13) == 0, "%s", out);
  for (char *l = out; *l; l = strchr(l, '\n') + 1) {
    cr_assert(l[0] == '<' && strchr("34567", l[1]) && l[2] == '>', "line "
              "without a priority: %s", l);
    if (!strchr(l, '\n')) break;
  }
  /* and an error is <3> */
  pid = fork();
  if (pid == 0) {
    int f2 = open(log, O_WRONLY | O_TRUNC);
    dup2(f2, 2);
    setenv("JOURNAL_STREAM", js, 1);
    execl(opd_bin(), "opd", "--socket", sock, "--allow-users",
          "no-such-user-here", (char *)NULL);
    _exit(127);
  }
  waitpid(pid, &status, 0);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 1);
  slurp(log, out, sizeof out);
  cr_assert(strstr(out, "<3>opd[error] access.c:"), "%s", out);
  scratch_rm();
}

/* ---- systemd's notify protocol ------------------------------------------------------ */

static int count_of(const char *buf, const char *needle) {
  int k = 0;
  for (const char *p = buf; (p = strstr(p, needle)); p++) k++;
  return k;
}

/* Reads datagrams from fd into buf (each message then "|") until `needle`
 * is there `times` times or ms have passed: the deadline is
 * generous, the test waits only as long as the daemon takes (a loaded CI
 * machine sends the same messages later). */
static void collect_until(int fd, char *buf, size_t cap, const char *needle,
                          int times, int ms) {
  double end = now_s() + ms / 1e3;
  size_t n = strlen(buf);
  while (now_s() < end && n + 512 < cap) {
    if (count_of(buf, needle) >= times) return;
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 20) != 1) continue;
    ssize_t r = recv(fd, buf + n, cap - n - 2, 0);
    if (r <= 0) continue;
    n += (size_t)r;
    buf[n++] = '|';
    buf[n] = '\0';
  }
}

Test(service, notify_ready_status_watchdog_reloading_stopping) {
  scratch();
  char ns[128], sock[128], conf[128];
  snprintf(ns, sizeof ns, "%s/notify", dir);
  snprintf(sock, sizeof sock, "%s/opd.sock", dir);
  snprintf(conf, sizeof conf, "%s/opd.conf", dir);
  write_file(conf, "max-clients = 10\n");
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  strcpy(a.sun_path, ns);
  cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0, "%s", strerror(errno));
  pid_t parent = getpid(), pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    die_with_parent(parent);
    char wp[24];
    snprintf(wp, sizeof wp, "%d", (int)getpid()); /* exec keeps the pid */
    setenv("NOTIFY_SOCKET", ns, 1);
    setenv("WATCHDOG_USEC", "200000", 1);
    setenv("WATCHDOG_PID", wp, 1);
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    execl(opd_bin(), "opd", "--socket", sock, "--config", conf, (char *)NULL);
    _exit(127);
  }
  static char msgs[16384];
  msgs[0] = '\0';
  collect_until(fd, msgs, sizeof msgs, "READY=1", 1, 5000);
  cr_assert(strstr(msgs, "READY=1"), "%s", msgs);
  cr_assert(strstr(msgs, "STATUS=healthy; 0 session(s)"), "%s", msgs);
  /* READY=1 came only once the socket accepts */
  opd_client_t *c;
  cr_assert_eq(opd_connect(sock, &c), 0, "%s", opd_last_error());
  /* the watchdog every 100 ms (half of 200 ms), from the loop: three in a
   * row (how fast they come is the loop's timer, not asserted here: a
   * loaded 2-core machine took 700 ms for two) */
  double t0 = now_s();
  collect_until(fd, msgs, sizeof msgs, "WATCHDOG=1", 3, 5000);
  int pings = count_of(msgs, "WATCHDOG=1");
  cr_assert_geq(pings, 3, "%d pings in %.1f s: %s", pings, now_s() - t0, msgs);
  /* the status follows the sessions */
  msgs[0] = '\0';
  collect_until(fd, msgs, sizeof msgs, "STATUS=healthy; 1 session(s)", 1, 5000);
  cr_assert(strstr(msgs, "STATUS=healthy; 1 session(s)"), "%s", msgs);
  /* reload: RELOADING=1, then READY=1 */
  msgs[0] = '\0';
  kill(pid, SIGHUP);
  collect_until(fd, msgs, sizeof msgs, "READY=1", 1, 5000);
  const char *r = strstr(msgs, "RELOADING=1");
  cr_assert(r && strstr(r, "READY=1"), "%s", msgs);
  opd_close(c);
  msgs[0] = '\0';
  kill(pid, SIGTERM);
  collect_until(fd, msgs, sizeof msgs, "STOPPING=1", 1, 5000);
  cr_assert(strstr(msgs, "STOPPING=1"), "%s", msgs);
  int status;
  waitpid(pid, &status, 0);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "0x%x", status);
  close(fd);
  scratch_rm();
}

/* ---- the drain deadline ----------------------------------------------------------------- */

typedef struct { opd_client_t *c; opd_tensor_t in[2], out; int rc; } slow_t;

static void *slow_run(void *arg) {
  slow_t *s = arg;
  s->rc = opd_run(s->c, "matmul", s->in, 2, &s->out, 1, NULL, 0);
  return NULL;
}

/* a matmul that takes the daemon a while */
#define N 2048

Test(service, the_drain_deadline_ends_the_process) {
  const char *args[] = {"--drain-timeout-ms", "100", "--threads", "1", NULL};
  th_start(args);
  slow_t s = {.c = th_connect()};
  void *base;
  uint64_t bytes = (uint64_t)N * N * 4;
  uint64_t a = th_arena(s.c, 3 * bytes, &base);
  s.in[0] = th_f32(a, 0, 2, (int64_t)N, (int64_t)N);
  s.in[1] = th_f32(a, bytes, 2, (int64_t)N, (int64_t)N);
  s.out = th_f32(a, 2 * bytes, 2, (int64_t)N, (int64_t)N);
  /* how long one takes, undisturbed */
  double t0 = now_s();
  cr_assert_eq(opd_run(s.c, "matmul", s.in, 2, &s.out, 1, NULL, 0), 0, "%s",
               opd_last_error());
  double one = now_s() - t0;
  int runs = one > 0.4 ? 1 : (int)(0.8 / one) + 1; /* queue ~0.8 s of work */
  cr_log_info("one matmul: %.3f s; %d sessions", one, runs);
  pthread_t th[64];
  slow_t more[64];
  if (runs > 64) runs = 64;
  for (int i = 0; i < runs; i++) {
    more[i].c = th_connect();
    uint64_t ai = th_arena(more[i].c, 3 * bytes, &base);
    more[i].in[0] = th_f32(ai, 0, 2, (int64_t)N, (int64_t)N);
    more[i].in[1] = th_f32(ai, bytes, 2, (int64_t)N, (int64_t)N);
    more[i].out = th_f32(ai, 2 * bytes, 2, (int64_t)N, (int64_t)N);
    pthread_create(&th[i], NULL, slow_run, &more[i]);
  }
  sleep_ms(20);
  t0 = now_s();
  kill(th_d.pid, SIGTERM);
  int status;
  waitpid(th_d.pid, &status, 0);
  double took = now_s() - t0;
  th_d.pid = 0;
  for (int i = 0; i < runs; i++) pthread_join(th[i], NULL);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "0x%x", status);
  /* 100 ms of drain, 100 ms for the dropped sessions to go, then exit; the
   * work queued would have taken ~one * runs */
  cr_assert_lt(took, 0.6, "exited %.2f s after SIGTERM (drain 100 ms; one "
               "run %.2f s, %d running)", took, one, runs);
  slurp(th_d.log, out, sizeof out);
  cr_assert(strstr(out, "did not finish in 100 ms (drain-timeout-ms)"), "%s", out);
  for (int i = 0; i < runs; i++) opd_close(more[i].c);
  opd_close(s.c);
  unlink(th_d.sock);
  unlink(th_d.log);
  rmdir(th_d.dir);
}

/* ---- opctl health ----------------------------------------------------------------------- */

static int opctl(const char *cmd, const char *arg) {
  char path[256];
  th_tool("opctl", path, sizeof path);
  const char *argv[] = {"opctl", "--socket", th_d.sock, cmd, arg, NULL};
  return th_run(path, argv, out, sizeof out);
}

Test(service, opctl_health_exit_codes) {
  th_start(NULL);
  cr_assert_eq(opctl("health", NULL), 0, "%s", out);
  cr_assert(strncmp(out, "healthy: opd at ", 16) == 0, "%s", out);
  /* permission denied: another uid, the socket 0660 root's */
  char path[256], said[512];
  th_tool("opctl", path, sizeof path);
  /* its own file: the daemon's log may still be written at the daemon's
   * offset (the last session's close), over what opctl appended there */
  snprintf(said, sizeof said, "%s/opctl-denied.out", th_d.dir);
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(said, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (chmod(th_d.dir, 0755) != 0 || setgroups(0, NULL) != 0 ||
        setgid(64123) != 0 || setuid(64123) != 0)
      _exit(100);
    dup2(fd, 1);
    execl(path, "opctl", "--socket", th_d.sock, "health", (char *)NULL);
    _exit(101);
  }
  int status;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 100)
    cr_skip("cannot become another uid here");
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 3, "exit 0x%x", status);
  slurp(said, out, sizeof out);
  cr_assert(strstr(out, "permission denied: cannot connect to the opd daemon at ") &&
                strstr(out, ": permission denied (not in group root?"), "%s", out);
  chmod(th_d.dir, 0700);
  th_stop();
  cr_assert_eq(opctl("health", NULL), 2, "%s", out);
  cr_assert(strstr(out, "unreachable: ") && strstr(out, "it is not running"),
            "%s", out);
}

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
