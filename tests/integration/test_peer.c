/* Integration: the client checks the daemon. opd_connect refuses a socket
 * served by anyone but root, the client's own uid or the daemon user
 * ($OPD_DAEMON_USER, default "opd"), and sends it nothing.
 *
 * DESIGN
 * Needs root (skipped otherwise): a fake server binds a Unix socket, then
 * a child drops to an unused uid (64123, no user needed) and listen()s,
 * which is when the kernel records the credentials SO_PEERCRED reports.
 * It accepts one connection, reads what arrives within a second, and
 * reports the byte count through a pipe: 0 means libopd sent nothing. The
 * client is another child, as root or dropped to uid 64124, that calls
 * opd_connect with the OPD_DAEMON_USER under test and sends back its code
 * and message. When the check lets the connection through, the fake
 * server (which speaks no protocol) reads the hello and hangs up, so
 * opd_connect fails for that reason instead, and the server saw bytes.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/integration/harness.h"

TestSuite(peer, .timeout = 60);

enum { SERVER_UID = 64123, CLIENT_UID = 64124 };

typedef struct fake {
  pid_t pid;                     /* the serving child */
  char dir[64];                  /* its temporary directory */
  char sock[108];                /* the socket path in it (sun_path) */
  int report;                    /* read end: bytes the server received */
} fake_t;

typedef struct outcome {
  int rc;                        /* opd_connect's return */
  char msg[512];                 /* opd_last_error() after it */
} outcome_t;

static void need_root(void) {
  if (geteuid() != 0)
    cr_skip("needs root to serve a socket as another uid (setuid); "
            "run the integration suite as root to test the peer check");
}

/* Drops this process to uid (and gid = uid, no supplementary groups).
 * Returns 0 or errno. */
static int drop_to(uid_t uid) {
  if (setgroups(0, NULL) != 0 || setgid((gid_t)uid) != 0 || setuid(uid) != 0)
    return errno ? errno : EPERM;
  return 0;
}

/* Starts a fake server whose listen() runs as `uid`. Skips the test if
 * this machine does not let root change uid. */
static void fake_start(fake_t *f, uid_t uid) {
  int ready[2], report[2];
  strcpy(f->dir, "/tmp/opd-peer.XXXXXX");
  cr_assert_not_null(mkdtemp(f->dir), "mkdtemp: %s", strerror(errno));
  cr_assert_eq(chmod(f->dir, 0755), 0);
  snprintf(f->sock, sizeof f->sock, "%s/opd.sock", f->dir);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s", f->sock);
  int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cr_assert_geq(lfd, 0);
  cr_assert_eq(bind(lfd, (struct sockaddr *)&addr, sizeof addr), 0, "bind: %s",
               strerror(errno));
  cr_assert_eq(chmod(f->sock, 0666), 0); /* any uid may connect */
  cr_assert_eq(pipe(ready), 0);
  cr_assert_eq(pipe(report), 0);
  f->pid = fork();
  cr_assert_geq(f->pid, 0);
  if (f->pid == 0) {
    close(ready[0]);
    close(report[0]);
    int err = drop_to(uid);
    if (err == 0 && listen(lfd, 4) != 0) err = errno;
    (void)!write(ready[1], &err, sizeof err);
    if (err != 0) _exit(1);
    long got = -1;                       /* -1: nobody connected */
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    if (poll(&p, 1, 20000) == 1) {
      int cfd = accept(lfd, NULL, NULL);
      char buf[4096];
      got = 0;
      p.fd = cfd;
      if (cfd >= 0 && poll(&p, 1, 1000) == 1) {
        ssize_t n = read(cfd, buf, sizeof buf);
        got = n > 0 ? n : 0;
      }
      if (cfd >= 0) close(cfd);
    }
    (void)!write(report[1], &got, sizeof got);
    _exit(0);
  }
  close(lfd);
  close(ready[1]);
  close(report[1]);
  f->report = report[0];
  int err = -1;
  cr_assert_eq(read(ready[0], &err, sizeof err), (ssize_t)sizeof err);
  close(ready[0]);
  if (err != 0) {
    waitpid(f->pid, NULL, 0);
    f->pid = -1;
    cr_skip("cannot serve a socket as uid %u here: %s", (unsigned)uid,
            strerror(err));
  }
}

/* Waits for the server; returns the bytes it received (-1: no client). */
static long fake_finish(fake_t *f) {
  long got = -2;
  cr_assert_eq(read(f->report, &got, sizeof got), (ssize_t)sizeof got,
               "the fake server reported nothing");
  close(f->report);
  int st;
  cr_assert_eq(waitpid(f->pid, &st, 0), f->pid);
  unlink(f->sock);
  rmdir(f->dir);
  return got;
}

/* opd_connect(sock) in a child running as `uid` (0: stays root) with
 * OPD_DAEMON_USER = daemon_user (NULL: unset). */
static outcome_t connect_as(const char *sock, uid_t uid, const char *daemon_user) {
  int p[2];
  outcome_t o = {.rc = 1};
  cr_assert_eq(pipe(p), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    close(p[0]);
    if (daemon_user) setenv("OPD_DAEMON_USER", daemon_user, 1);
    else unsetenv("OPD_DAEMON_USER");
    if (uid != 0 && drop_to(uid) != 0) {
      o.rc = 2;
      snprintf(o.msg, sizeof o.msg, "setuid(%u): %s", (unsigned)uid,
               strerror(errno));
    } else {
      opd_client_t *c = NULL;
      o.rc = opd_connect(sock, &c);
      snprintf(o.msg, sizeof o.msg, "%s", opd_last_error());
      if (o.rc == 0) opd_close(c);
    }
    (void)!write(p[1], &o, sizeof o);
    _exit(0);
  }
  close(p[1]);
  cr_assert_eq(read(p[0], &o, sizeof o), (ssize_t)sizeof o, "client child died");
  close(p[0]);
  waitpid(pid, NULL, 0);
  cr_assert_neq(o.rc, 2, "%s", o.msg);
  return o;
}

static void expect_refused(const outcome_t *o, long got) {
  cr_assert_eq(o->rc, OPD_EPERM, "expected EPERM, got %s (%s)",
               opd_errname(o->rc), o->msg);
  cr_assert(strstr(o->msg, "refusing to send it memory") != NULL, "%s", o->msg);
  cr_assert_eq(got, 0, "libopd sent %ld bytes to an untrusted server", got);
}

/* The check let it through: the hello went out and the fake server hung
 * up on it, so connect failed for that reason, not the peer check. */
static void expect_past_check(const outcome_t *o, long got) {
  cr_assert_neq(o->rc, OPD_EPERM, "refused by the peer check: %s", o->msg);
  cr_assert(strstr(o->msg, "refusing") == NULL, "%s", o->msg);
  cr_assert_eq(o->rc, OPD_ECLOSED, "expected ECLOSED (no hello reply), got %s (%s)",
               opd_errname(o->rc), o->msg);
  cr_assert(strstr(o->msg, "closed the connection") != NULL, "%s", o->msg);
  cr_assert_gt(got, 0, "the server received no hello");
}

Test(peer, another_users_socket_is_refused) {
  need_root();
  fake_t f;
  fake_start(&f, SERVER_UID);
  outcome_t o = connect_as(f.sock, CLIENT_UID, NULL);
  long got = fake_finish(&f);
  expect_refused(&o, got);
  char want[256];
  snprintf(want, sizeof want, "the socket %s is served by uid %d (", f.sock,
           SERVER_UID);
  cr_assert(strstr(o.msg, want) != NULL, "%s", o.msg);
  snprintf(want, sizeof want, "not by root, uid %d or the daemon user opd",
           CLIENT_UID);
  cr_assert(strstr(o.msg, want) != NULL, "%s", o.msg);
}

Test(peer, root_refuses_too_and_unknown_daemon_users_match_no_one) {
  need_root();
  fake_t f;
  fake_start(&f, SERVER_UID);
  outcome_t o = connect_as(f.sock, 0, "opd-no-such-user-64123");
  expect_refused(&o, fake_finish(&f));
  cr_assert(strstr(o.msg, "not by root, uid 0 or the daemon user "
                          "opd-no-such-user-64123 (no such user)") != NULL,
            "%s", o.msg);
  /* digits then letters is a name, not uid 64123 */
  fake_start(&f, SERVER_UID);
  o = connect_as(f.sock, CLIENT_UID, "64123x");
  expect_refused(&o, fake_finish(&f));
  cr_assert(strstr(o.msg, "64123x (no such user)") != NULL, "%s", o.msg);
}

Test(peer, daemon_user_by_uid_is_trusted) {
  need_root();
  fake_t f;
  fake_start(&f, SERVER_UID);
  outcome_t o = connect_as(f.sock, CLIENT_UID, "64123");
  expect_past_check(&o, fake_finish(&f));
}

Test(peer, daemon_user_by_name_is_trusted) {
  need_root();
  struct passwd *pw = getpwnam("nobody");
  if (pw == NULL || pw->pw_uid == 0 || pw->pw_uid == CLIENT_UID)
    cr_skip("no user \"nobody\" to serve the socket as a named daemon user");
  uid_t nobody = pw->pw_uid;
  fake_t f;
  fake_start(&f, nobody);
  outcome_t o = connect_as(f.sock, CLIENT_UID, "nobody");
  expect_past_check(&o, fake_finish(&f));
  /* the same server without OPD_DAEMON_USER: refused, and named */
  fake_start(&f, nobody);
  o = connect_as(f.sock, CLIENT_UID, NULL);
  expect_refused(&o, fake_finish(&f));
  char want[64];
  snprintf(want, sizeof want, "served by uid %u (nobody, pid ", (unsigned)nobody);
  cr_assert(strstr(o.msg, want) != NULL, "%s", o.msg);
  cr_assert(strstr(o.msg, "set OPD_DAEMON_USER=nobody") != NULL, "%s", o.msg);
}

Test(peer, own_uid_is_trusted) {
  need_root();
  fake_t f;
  fake_start(&f, CLIENT_UID);
  outcome_t o = connect_as(f.sock, CLIENT_UID, "opd-no-such-user-64123");
  expect_past_check(&o, fake_finish(&f));
}

/* The daemon every other test starts runs as root: trusted by anyone. */
Test(peer, a_root_daemon_is_trusted, .init = th_start_default,
     .fini = th_stop_default) {
  setenv("OPD_DAEMON_USER", "opd-no-such-user-64123", 1);
  opd_client_t *c = NULL;
  int rc = opd_connect(th_d.sock, &c);
  cr_assert_eq(rc, 0, "%s", opd_last_error());
  cr_assert_eq(opd_ping(c), 0, "%s", opd_last_error());
  opd_close(c);
}
