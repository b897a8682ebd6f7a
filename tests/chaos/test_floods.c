/* Chaos: floods of connections from other uids and of published names:
 * fair limits per uid and per session, and slots kept for root.
 *
 * DESIGN
 * The flooding clients are forked children that setuid() to uids of their
 * own (64123 and up; the test must run as root, and skips otherwise), so
 * the daemon sees them through SO_PEERCRED as other users; the test's
 * temporary directory and the socket are opened to them (0755, 0666).
 * Each child opens its connections, says hello on each, reports what it
 * got back (a hello reply, or a goodbye with its code and message) through
 * a pipe, and holds them until the parent closes its release pipe. A
 * daemon with global limits only let 1,024 idle connections lock everyone
 * out, opctl included.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/chaos/chaos.h"

enum { MAX_CONNS = 32, UID0 = 64123 };

typedef struct outcome {
  int code;                  /* 0: served (hello reply 0); else the goodbye's
                                code, or 1 when nothing came */
  char msg[240];
} outcome_t;

typedef struct flood {
  pid_t pid;
  int results;               /* read end: n outcome_t */
  int release;               /* write end: closing it ends the child */
  int n;
  outcome_t out[MAX_CONNS];
} flood_t;

static void open_to_others(void) {
  cr_assert_eq(chmod(th_d.dir, 0755), 0, "chmod %s: %s", th_d.dir, strerror(errno));
  cr_assert_eq(chmod(th_d.sock, 0666), 0, "chmod %s: %s", th_d.sock, strerror(errno));
}

/* Starts a child running as uid that opens n connections and says hello on
 * each; collects the outcomes into f->out. The connections stay open until
 * flood_release(f). */
static void flood_start(flood_t *f, uid_t uid, int n) {
  int res[2], rel[2];
  cr_assert(n <= MAX_CONNS);
  cr_assert_eq(pipe(res), 0);
  cr_assert_eq(pipe(rel), 0);
  f->n = n;
  f->pid = fork();
  cr_assert(f->pid >= 0);
  if (f->pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives the test */
    close(res[0]);
    close(rel[1]);
    if (setgroups(0, NULL) != 0 || setgid(uid) != 0 || setuid(uid) != 0) _exit(2);
    int fds[MAX_CONNS];
    outcome_t out[MAX_CONNS];
    for (int i = 0; i < n; i++) {
      memset(&out[i], 0, sizeof out[i]);
      unsigned char hello[32];
      int type, code;
      out[i].code = 1;
      if ((fds[i] = ch_raw_connect_nc()) < 0) {
        snprintf(out[i].msg, sizeof out[i].msg, "connect: %s", strerror(errno));
        continue;
      }
      if (send(fds[i], hello, ch_frame_hello(hello), MSG_NOSIGNAL) < 0) {
        snprintf(out[i].msg, sizeof out[i].msg, "send: %s", strerror(errno));
      }
      /* the first frame back: the hello's reply, or a goodbye */
      if (ch_read_frame(fds[i], 3000, &type, &code, out[i].msg,
                        sizeof out[i].msg) == 0)
        out[i].code = type == OPD_MSG_GOODBYE ? (code ? code : 1) : code;
    }
    if (write(res[1], out, sizeof out[0] * (size_t)n) < 0) _exit(3);
    char ch;
    while (read(rel[0], &ch, 1) > 0) {
    }
    _exit(0);
  }
  close(res[1]);
  close(rel[0]);
  f->results = res[0];
  f->release = rel[1];
  size_t want = sizeof f->out[0] * (size_t)n, got = 0;
  while (got < want) {
    ssize_t k = read(f->results, (char *)f->out + got, want - got);
    cr_assert(k > 0, "the flooding child (uid %u) died", (unsigned)uid);
    got += (size_t)k;
  }
}

/* Ends n floods: every release pipe first (a child forked later holds
 * copies of the earlier children's pipes), then the waits. */
static void flood_release(flood_t *f, int n) {
  for (int i = 0; i < n; i++) {
    close(f[i].release);
    close(f[i].results);
  }
  for (int i = 0; i < n; i++) waitpid(f[i].pid, NULL, 0);
}

static int served(const flood_t *f) {
  int n = 0;
  for (int i = 0; i < f->n; i++) n += f->out[i].code == 0;
  return n;
}

#define NEEDS_ROOT()                                                        \
  do {                                                                      \
    if (geteuid() != 0)                                                     \
      cr_skip_test("needs root: the flooding clients setuid() to uid %d "   \
                   "and up, other users than the daemon's", UID0);          \
  } while (0)

Test(chaos, one_uid_is_held_to_max_uid_clients, .timeout = 60) {
  NEEDS_ROOT();
  th_start((const char *[]){"--max-uid-clients", "8", NULL});
  open_to_others();
  flood_t f;
  flood_start(&f, UID0, 8 + 5);
  cr_expect_eq(served(&f), 8, "uid %d was served on %d of 13 connections "
               "with --max-uid-clients 8", UID0, served(&f));
  for (int i = 8; i < f.n; i++) {
    cr_expect_eq(f.out[i].code, OPD_ELIMIT, "connection %d of uid %d: %s "
                 "(\"%s\"), a goodbye ELIMIT expected", i, UID0,
                 opd_errname(f.out[i].code), f.out[i].msg);
    cr_expect(strstr(f.out[i].msg, "--max-uid-clients") != NULL,
              "connection %d: the goodbye \"%s\" does not name "
              "--max-uid-clients", i, f.out[i].msg);
  }
  /* the flooder's uid is full; others (root here) are served */
  th_assert_alive();
  flood_release(&f, 1);
  cr_expect_eq(th_wait_stat("sessions", 1, 3000), 1);
  th_stop();
}

Test(chaos, root_keeps_reserved_slots_when_uids_fill_max_clients,
     .timeout = 60) {
  NEEDS_ROOT();
  th_start((const char *[]){"--max-clients", "12", "--max-uid-clients", "4",
                            "--reserved-clients", "2", NULL});
  open_to_others();
  flood_t f[4];
  for (int u = 0; u < 3; u++) {
    flood_start(&f[u], UID0 + u, 4);
    cr_assert_eq(served(&f[u]), 4, "uid %d: served on %d of 4 connections "
                 "(%s)", UID0 + u, served(&f[u]), f[u].out[0].msg);
  }
  /* 12 sessions: a fourth uid is refused by the daemon-wide limit */
  flood_start(&f[3], UID0 + 3, 1);
  cr_expect_eq(f[3].out[0].code, OPD_ELIMIT, "uid %d past --max-clients: %s "
               "(\"%s\")", UID0 + 3, opd_errname(f[3].out[0].code),
               f[3].out[0].msg);
  cr_expect(strstr(f[3].out[0].msg, "--max-clients") != NULL,
            "the goodbye \"%s\" does not name --max-clients", f[3].out[0].msg);

  /* root still gets in, and so does opctl */
  opd_client_t *c = NULL;
  int rc = opd_connect(th_d.sock, &c);
  cr_assert_eq(rc, 0, "root refused while other uids fill --max-clients: %s",
               opd_last_error());
  cr_assert_eq(opd_ping(c), 0, "%s", opd_last_error());
  opd_close(c);
  cr_assert_eq(th_wait_stat("sessions", 13, 2000), 13);
  char path[512], out[8192];
  th_tool("opctl", path, sizeof path);
  const char *argv[] = {"opctl", "--socket", th_d.sock, "stats", NULL};
  cr_expect_eq(th_run(path, argv, out, sizeof out), 0, "opctl stats on a "
               "full daemon: %s", out);
  flood_release(f, 4);
  cr_expect_eq(th_wait_stat("sessions", 1, 3000), 1);
  th_assert_alive();
  th_stop();
}

enum { SESSION_NAMES = 16 };

Test(chaos, publish_flood_stops_at_max_session_names, .timeout = 60) {
  th_start((const char *[]){"--max-session-names", "16", NULL});
  opd_client_t *c = th_connect(), *other = th_connect();
  void *base;
  uint64_t a = th_arena(c, 4096, &base), b = th_arena(other, 4096, &base);
  char name[64];
  for (int i = 0; i < SESSION_NAMES; i++) {
    snprintf(name, sizeof name, "chaos-%d", i);
    cr_assert_eq(opd_publish(c, a, name, NULL), 0, "name %d: %s", i,
                 opd_last_error());
  }
  /* the flood goes on: every further name is refused, none taken */
  for (int i = SESSION_NAMES; i < 4 * SESSION_NAMES; i++) {
    snprintf(name, sizeof name, "chaos-%d", i);
    EXPECT_ERR(opd_publish(c, a, name, NULL), OPD_ELIMIT, "--max-session-names");
  }
  /* the limit is the session's: another session still publishes */
  cr_assert_eq(opd_publish(other, b, "other-name", NULL), 0, "%s",
               opd_last_error());
  /* and one name given back makes room for one */
  cr_assert_eq(opd_unpublish(c, "chaos-0"), 0, "%s", opd_last_error());
  cr_assert_eq(opd_publish(c, a, "chaos-again", NULL), 0, "%s", opd_last_error());
  snprintf(name, sizeof name, "chaos-%d", SESSION_NAMES);
  EXPECT_ERR(opd_publish(c, a, name, NULL), OPD_ELIMIT, "--max-session-names");
  /* the names end with their session */
  opd_close(c);
  cr_assert_eq(th_wait_stat("sessions", 2, 2000), 2);
  uint64_t id, size;
  EXPECT_ERR(opd_attach(other, "chaos-1", &id, &size, NULL, 0, NULL, 0),
             OPD_ENOENT, "");
  opd_close(other);
  th_stop();
}
