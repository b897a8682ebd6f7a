/* Integration: the runtime directory (docs/operations.md, "Security"): a
 * squatted runtime directory is refused by the daemon, the fallback
 * directory is made and checked, and a client refuses a squatted fallback.
 * Needs root, as test_security.c (tests/integration/as_other.h).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/paths.h"
#include "tests/integration/harness.h"
#include "tests/integration/as_other.h"

/* ---- the runtime directory ---------------------------------------------- */

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Runs the daemon (as `uid` unless it is -1; with no --socket,
 * $OPD_SOCKET or $XDG_RUNTIME_DIR it uses /tmp/opd-<uid>/opd.sock) with
 * these arguments after argv[0], output into out. A daemon that is still
 * up after timeout_ms is serving: it is stopped (SIGTERM, then SIGKILL).
 * Returns its exit status, 128 + signal, or -1 when it had to be stopped;
 * *served (may be NULL) says whether `sock` (may be NULL) appeared. */
static int run_daemon(int uid, const char *const *args, const char *sock,
                      int timeout_ms, char *out, size_t cap, int *served) {
  const char *bin = getenv("OPD_BIN") ? getenv("OPD_BIN") : "build/opd";
  char log[] = "/tmp/opd-sec-out.XXXXXX";
  int fd = mkstemp(log);
  cr_assert_geq(fd, 0);
  const char *argv[16] = {"opd"};
  int n = 1;
  for (int i = 0; args[i] && n < 15; i++) argv[n++] = args[i];
  argv[n] = NULL;
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    unsetenv("OPD_SOCKET");
    unsetenv("XDG_RUNTIME_DIR");
    if (uid >= 0 && (setgroups(0, NULL) != 0 || setgid((gid_t)uid) != 0 ||
                     setuid((uid_t)uid) != 0))
      _exit(126);
    execv(bin, (char *const *)argv);
    _exit(127);
  }
  close(fd);
  int status = 0, rc = -1, up = 0;
  struct stat st;
  for (int t = 0; t < timeout_ms; t += 10) {
    if (sock && !up) up = lstat(sock, &st) == 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    sleep_ms(10);
  }
  if (rc == -1) { /* serving: stop it */
    kill(pid, SIGTERM);
    for (int t = 0; t < 3000 && waitpid(pid, &status, WNOHANG) != pid;
         t += 10)
      sleep_ms(10);
    if (kill(pid, 0) == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
  }
  if (served) *served = up;
  FILE *f = fopen(log, "r");
  size_t got = f ? fread(out, 1, cap - 1, f) : 0;
  out[got] = '\0';
  if (f) fclose(f);
  unlink(log);
  return rc;
}

/* Runs the daemon on dir/opd.sock; asserts it refuses to start with a
 * message naming the directory and `why`. */
static void expect_refused(const char *dir, const char *why) {
  char sock[128], out[8192];
  snprintf(sock, sizeof sock, "%s/opd.sock", dir);
  const char *args[] = {"--socket", sock, "--devices", "none", NULL};
  int rc = run_daemon(-1, args, NULL, 5000, out, sizeof out, NULL);
  cr_assert_eq(rc, 1, "opd served from %s (exit %d): %s", dir, rc, out);
  char want[200];
  snprintf(want, sizeof want, "socket directory %s", dir);
  cr_assert(strstr(out, want) && strstr(out, why), "expected \"%s\" and "
            "\"%s\" in: %s", want, why, out);
  struct stat st;
  cr_assert_neq(lstat(sock, &st), 0, "a socket was made in %s", dir);
}

Test(security, squatted_runtime_directory_is_refused, .init = NULL,
     .fini = NULL) {
  need_root();
  char base[] = "/tmp/opd-sec-dirs.XXXXXX", d[160];
  cr_assert_not_null(mkdtemp(base));
  cr_assert_eq(chmod(base, 0755), 0);
  /* another uid's, world-writable */
  snprintf(d, sizeof d, "%s/theirs", base);
  cr_assert_eq(mkdir(d, 0777), 0);
  cr_assert_eq(chmod(d, 0777), 0);
  cr_assert_eq(chown(d, SQUAT_UID, SQUAT_UID), 0);
  expect_refused(d, "owned by uid 64124");
  /* another uid's, even if only it can write */
  cr_assert_eq(chmod(d, 0755), 0);
  expect_refused(d, "owned by uid 64124 (mode 0755), not by root");
  /* root's, but anyone may write it */
  snprintf(d, sizeof d, "%s/open", base);
  cr_assert_eq(mkdir(d, 0777), 0);
  cr_assert_eq(chmod(d, 0777), 0);
  expect_refused(d, "has mode 0777: its group and others can write it");
  cr_assert_eq(chmod(d, 0770), 0);
  expect_refused(d, "has mode 0770: its group can write it");
  /* a symbolic link (the squatter's) to a directory that would pass */
  char good[160];
  snprintf(good, sizeof good, "%s/good", base);
  cr_assert_eq(mkdir(good, 0700), 0);
  snprintf(d, sizeof d, "%s/link", base);
  cr_assert_eq(symlink(good, d), 0);
  cr_assert_eq(lchown(d, SQUAT_UID, SQUAT_UID), 0);
  expect_refused(d, "is a symbolic link");
  /* a file where the directory should be */
  snprintf(d, sizeof d, "%s/file", base);
  int fd = open(d, O_CREAT | O_WRONLY, 0600);
  cr_assert_geq(fd, 0);
  close(fd);
  expect_refused(d, "is not a directory");
  /* a good directory under one that another uid may rename entries of */
  snprintf(d, sizeof d, "%s/theirs/sub", base);
  cr_assert_eq(mkdir(d, 0750), 0);
  snprintf(d, sizeof d, "%s/theirs", base);
  cr_assert_eq(chmod(d, 0755), 0); /* still 64124's */
  snprintf(d, sizeof d, "%s/theirs/sub", base);
  expect_refused(d, "the directory above it, ");
  snprintf(d, sizeof d, "%s/open/new", base); /* refused before it is made */
  expect_refused(d, "is owned by uid 0 (mode 0770) and writable by its group");
  cr_assert_neq(access(d, F_OK), 0, "%s was made", d);
  /* a symbolic link above it: root's is followed, another uid's refused */
  snprintf(d, sizeof d, "%s/good/sub", base);
  cr_assert_eq(mkdir(d, 0700), 0);
  char via[200];
  snprintf(d, sizeof d, "%s/rootlink", base);
  cr_assert_eq(symlink(good, d), 0);
  snprintf(via, sizeof via, "%s/rootlink/sub/opd.sock", base);
  const char *vargs[] = {"--socket", via, NULL};
  th_start(vargs);
  th_stop();
  snprintf(d, sizeof d, "%s/link/sub", base);
  expect_refused(d, "the symbolic link above it");
  /* a missing one is made 0750; a sticky root-owned one like /tmp serves */
  snprintf(d, sizeof d, "%s/made", base);
  char sock[200];
  snprintf(sock, sizeof sock, "%s/opd.sock", d);
  const char *args[] = {"--socket", sock, NULL};
  th_start(args);
  struct stat st;
  cr_assert_eq(lstat(d, &st), 0);
  cr_assert(S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0750,
            "made with mode %o", st.st_mode & 07777);
  th_stop();
  rmdir(d);
  snprintf(d, sizeof d, "%s/sticky", base);
  cr_assert_eq(mkdir(d, 0777), 0);
  cr_assert_eq(chmod(d, 01777), 0);
  snprintf(sock, sizeof sock, "%s/opd.sock", d);
  th_start(args);
  th_assert_alive();
  th_stop();
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s", base);
  cr_assert_eq(system(cmd), 0);
}

static void client_refuses_a_squatted_fallback_directory(void);

Test(security, fallback_directory_is_made_and_checked, .init = NULL,
     .fini = NULL) {
  need_root();
  char dir[64], sock[96], out[8192], cmd[128];
  snprintf(dir, sizeof dir, "/tmp/opd-%d", OTHER_UID);
  snprintf(sock, sizeof sock, "%s/opd.sock", dir);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_assert_eq(system(cmd), 0);
  const char *args[] = {"--devices", "none", NULL};
  /* squatted by another uid first, mode 0777: refused */
  cr_assert_eq(mkdir(dir, 0777), 0);
  cr_assert_eq(chmod(dir, 0777), 0);
  cr_assert_eq(chown(dir, SQUAT_UID, SQUAT_UID), 0);
  int rc = run_daemon(OTHER_UID, args, NULL, 5000, out, sizeof out, NULL);
  if (rc == 126) cr_skip("this machine does not let root change uid");
  if (rc == 127)
    cr_skip("uid %d cannot run $OPD_BIN (a directory on its path is closed)",
            OTHER_UID);
  cr_assert_eq(rc, 1, "opd served from a squatted %s (exit %d): %s", dir, rc,
               out);
  cr_assert(strstr(out, "socket directory /tmp/opd-64123 is owned by uid "
                        "64124 (mode 0777), not by uid 64123"), "%s", out);
  /* the uid's own, but group-writable: refused too */
  cr_assert_eq(chown(dir, OTHER_UID, OTHER_UID), 0);
  cr_assert_eq(chmod(dir, 0770), 0);
  rc = run_daemon(OTHER_UID, args, NULL, 5000, out, sizeof out, NULL);
  cr_assert_eq(rc, 1, "exit %d: %s", rc, out);
  cr_assert(strstr(out, "has mode 0770: its group can write it"), "%s", out);
  /* missing: made 0700, that uid's, and served */
  cr_assert_eq(rmdir(dir), 0);
  int served = 0;
  rc = run_daemon(OTHER_UID, args, sock, 1500, out, sizeof out, &served);
  cr_assert(rc == -1 && served, "opd did not serve %s (exit %d): %s", sock,
            rc, out);
  struct stat st;
  cr_assert_eq(lstat(dir, &st), 0);
  cr_assert(S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0700 &&
                st.st_uid == OTHER_UID,
            "made with mode %o, owner %u", st.st_mode & 07777,
            (unsigned)st.st_uid);
  cr_assert_eq(system(cmd), 0);
  client_refuses_a_squatted_fallback_directory();
}

static void child_connect_default(report_t *r, void *arg) {
  (void)arg;
  unsetenv("OPD_SOCKET");
  unsetenv("XDG_RUNTIME_DIR");
  opd_client_t *c = NULL;
  next_step(r, opd_connect(NULL, &c)); /* /tmp/opd-64123/opd.sock */
  if (c) opd_close(c);
}

/* libopd refuses the fallback directory when another uid made it first,
 * before it even looks for a socket there. Run from the test above: both
 * use /tmp/opd-64123, so they must not run side by side (--jobs 2). */
static void client_refuses_a_squatted_fallback_directory(void) {
  char dir[64], cmd[96];
  snprintf(dir, sizeof dir, "/tmp/opd-%d", OTHER_UID);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_assert_eq(system(cmd), 0);
  cr_assert_eq(mkdir(dir, 0777), 0);
  cr_assert_eq(chmod(dir, 0777), 0);
  cr_assert_eq(chown(dir, SQUAT_UID, SQUAT_UID), 0);
  report_t r;
  as_other_in(NULL, 0, child_connect_default, NULL, &r, 1);
  cr_assert_eq(r.s[0].rc, OPD_EPERM, "expected EPERM, got %s (%s)",
               opd_errname(r.s[0].rc), r.s[0].msg);
  cr_assert(strstr(r.s[0].msg, "socket directory /tmp/opd-64123 is owned by "
                               "uid 64124") &&
                strstr(r.s[0].msg, "refusing to connect"),
            "%s", r.s[0].msg);
  /* its own directory: on to the connect, which finds no daemon */
  cr_assert_eq(chown(dir, OTHER_UID, OTHER_UID), 0);
  cr_assert_eq(chmod(dir, 0700), 0);
  as_other_in(NULL, 0, child_connect_default, NULL, &r, 1);
  cr_assert_eq(r.s[0].rc, OPD_ECONNECT, "expected ECONNECT, got %s (%s)",
               opd_errname(r.s[0].rc), r.s[0].msg);
  cr_assert_eq(system(cmd), 0);
}
