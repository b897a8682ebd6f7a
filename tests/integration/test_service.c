/* opd as a system service (daemon/service.c, options.c, log.c, metrics.c):
 * the config file and --check-config, SIGHUP reload (good and broken),
 * --pid-file and --log-file, journal priorities, the notify protocol on a
 * $NOTIFY_SOCKET of our own, the drain deadline, `opctl health` exit
 * codes. The metrics endpoint: test_metrics.c.
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

TestSuite(service, .timeout = 60);

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
