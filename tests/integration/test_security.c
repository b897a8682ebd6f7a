/* Integration: who may connect, who may read which name, and the runtime
 * directory (docs/operations.md, "Security").
 *
 * DESIGN
 * Needs root (each test skips with the reason otherwise): the daemon runs
 * as root, and a forked child drops to an unused uid (64123; no user entry
 * needed) with chosen supplementary groups, then acts as a client and
 * sends back what it saw through a pipe (return codes, messages and the
 * bytes it read), since criterion's asserts belong to the parent. The
 * harness's directory and socket are opened to other uids after th_start
 * (0755, 0666): only --allow-users / --allow-groups stand between the
 * child and the daemon then. Data read from an attachment is checked by
 * copying it (op "copy") into an arena of the reader's own.
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

TestSuite(security, .init = th_start_default, .fini = th_stop_default,
          .timeout = 60);

enum { OTHER_UID = 64123, SQUAT_UID = 64124, SHARED_GID = 64500 };

static void need_root(void) {
  if (geteuid() != 0)
    cr_skip("needs root to act as other uids (setuid in a child); run the "
            "integration suite as root to test access control");
}

/* Lets other uids reach the daemon of th_start. */
static void open_up(void) {
  cr_assert_eq(chmod(th_d.dir, 0755), 0, "chmod %s: %s", th_d.dir,
               strerror(errno));
  cr_assert_eq(chmod(th_d.sock, 0666), 0, "chmod %s: %s", th_d.sock,
               strerror(errno));
}

/* What a child reports: one result per step. */
typedef struct step {
  int rc;
  char msg[240];
  float data[4]; /* bytes read, where the step reads */
} step_t;

typedef struct report {
  int n;
  int hide_err; /* as_other_in: errno of hiding /run/opd, or 0 */
  step_t s[12];
} report_t;

static step_t *next_step(report_t *r, int rc) {
  step_t *s = &r->s[r->n < 12 ? r->n++ : 11];
  s->rc = rc;
  snprintf(s->msg, sizeof s->msg, "%s", rc ? opd_last_error() : "");
  return s;
}

/* Attaches `name` and copies its first 4 floats into an arena of c's own:
 * one step (rc, message, data). */
static void attach_and_read(opd_client_t *c, report_t *r, const char *name) {
  uint64_t att, size, own;
  void *base;
  int rc = opd_attach(c, name, &att, &size, NULL, 0, NULL, 0);
  if (rc != 0) {
    next_step(r, rc);
    return;
  }
  rc = opd_arena_create(c, 4096, &own, &base);
  if (rc == 0) {
    opd_tensor_t x = th_f32(att, 0, 1, (int64_t)4),
                 y = th_f32(own, 0, 1, (int64_t)4);
    rc = opd_run(c, "copy", &x, 1, &y, 1, NULL, 0);
  }
  step_t *s = next_step(r, rc);
  if (rc == 0) memcpy(s->data, base, sizeof s->data);
}

typedef void (*child_fn)(report_t *r, void *arg);

/* Covers the system socket's directory (/run/opd) with an empty tmpfs in a
 * mount namespace of the calling (child) process alone, where the host has
 * one (an installed opd, or one a package's test left): libopd's default
 * discovery then sees no system socket, as on a host without opd. 0, or
 * -errno. */
static int hide_system_socket(void) {
  char dir[sizeof OPD_SYSTEM_SOCKET];
  snprintf(dir, sizeof dir, "%s", OPD_SYSTEM_SOCKET);
  *strrchr(dir, '/') = '\0';
  struct stat st;
  if (lstat(dir, &st) != 0) return 0; /* nothing to hide */
  if (unshare(CLONE_NEWNS) != 0) return -errno;
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return -errno;
  if (mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") != 0)
    return -errno;
  return 0;
}

/* Runs fn in a child as OTHER_UID with these supplementary groups; returns
 * its report. hide_system: the child first hides /run/opd (above); a host
 * where that cannot be done skips the test. */
static void as_other_in(const gid_t *groups, int n_groups, child_fn fn,
                        void *arg, report_t *out, int hide_system) {
  int p[2];
  cr_assert_eq(pipe(p), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    close(p[0]);
    report_t r;
    memset(&r, 0, sizeof r);
    int hidden = hide_system ? hide_system_socket() : 0;
    if (hidden != 0) {
      r.hide_err = -hidden;
    } else if (setgroups((size_t)n_groups, groups) != 0 ||
        setgid((gid_t)OTHER_UID) != 0 || setuid((uid_t)OTHER_UID) != 0) {
      r.n = -errno;
    } else {
      fn(&r, arg);
    }
    ssize_t w = write(p[1], &r, sizeof r);
    _exit(w == (ssize_t)sizeof r ? 0 : 1);
  }
  close(p[1]);
  memset(out, 0, sizeof *out);
  size_t got = 0;
  ssize_t n;
  while (got < sizeof *out &&
         (n = read(p[0], (char *)out + got, sizeof *out - got)) > 0)
    got += (size_t)n;
  close(p[0]);
  int status;
  waitpid(pid, &status, 0);
  cr_assert_eq(got, sizeof *out, "the child sent no report (status 0x%x)",
               status);
  if (out->hide_err != 0)
    cr_skip("/run/opd is there and cannot be hidden from a child (a mount "
            "namespace: %s)",
            strerror(out->hide_err));
  cr_assert_geq(out->n, 0, "the child could not become uid %d: %s", OTHER_UID,
                strerror(-out->n));
}

static void as_other(const gid_t *groups, int n_groups, child_fn fn, void *arg,
                     report_t *out) {
  as_other_in(groups, n_groups, fn, arg, out, 0);
}

static int count_lines(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  char line[1024];
  int n = 0;
  if (f == NULL) return -1;
  while (fgets(line, sizeof line, f))
    if (strstr(line, needle)) n++;
  fclose(f);
  return n;
}

static void child_connect(report_t *r, void *arg) {
  (void)arg;
  opd_client_t *c = NULL;
  int rc = opd_connect(th_d.sock, &c);
  if (rc == 0) rc = opd_ping(c);
  next_step(r, rc);
  if (c) opd_close(c);
}

/* --allow-users: a uid not listed is refused with EPERM and a message, the
 * daemon logs one line and serves root on; a listed uid gets in. */
Test(security, allow_users_refuses_others, .init = NULL) {
  need_root();
  const char *args[] = {"--allow-users", "64200,64201", NULL};
  th_start(args);
  open_up();
  report_t r;
  as_other(NULL, 0, child_connect, NULL, &r);
  cr_assert_eq(r.s[0].rc, OPD_EPERM, "expected EPERM, got %s (%s)",
               opd_errname(r.s[0].rc), r.s[0].msg);
  cr_assert(strstr(r.s[0].msg, "uid 64123") &&
                strstr(r.s[0].msg, "may not use this daemon"),
            "message: %s", r.s[0].msg);
  th_assert_alive(); /* root, and after the refusal */
  cr_assert_eq(count_lines(th_d.log, "may not use this daemon"), 1,
               "the refusal should be logged once");
  th_stop();

  const char *mine[] = {"--allow-users", "64200,64123", NULL};
  th_start(mine);
  open_up();
  as_other(NULL, 0, child_connect, NULL, &r);
  cr_assert_eq(r.s[0].rc, 0, "a listed uid was refused: %s", r.s[0].msg);
  th_stop();
}

/* --allow-groups: the peer process's supplementary groups count. */
Test(security, allow_groups_by_supplementary_group, .init = NULL) {
  need_root();
  const char *args[] = {"--allow-groups", "64500", NULL};
  th_start(args);
  open_up();
  report_t r;
  gid_t g[] = {100, SHARED_GID};
  as_other(g, 2, child_connect, NULL, &r);
  cr_assert_eq(r.s[0].rc, 0, "a member of group 64500 was refused: %s",
               r.s[0].msg);
  as_other(g, 1, child_connect, NULL, &r); /* group 100 only */
  cr_assert_eq(r.s[0].rc, OPD_EPERM, "expected EPERM, got %s (%s)",
               opd_errname(r.s[0].rc), r.s[0].msg);
  th_assert_alive();
  th_stop();
}

/* An unknown name in --allow-users / --allow-groups stops the start. */
Test(security, unknown_allow_name_is_a_startup_error, .init = NULL,
     .fini = NULL) {
  const char *bin = getenv("OPD_BIN") ? getenv("OPD_BIN") : "build/opd";
  char out[4096];
  const char *u[] = {"opd", "--socket", "/tmp/opd-sec-unknown.sock",
                     "--devices", "none", "--allow-users",
                     "root,no-such-user-opd", NULL};
  cr_assert_eq(th_run(bin, u, out, sizeof out), 1, "%s", out);
  cr_assert(strstr(out, "--allow-users: no user is named "
                        "\"no-such-user-opd\"") != NULL, "%s", out);
  const char *g[] = {"opd", "--socket", "/tmp/opd-sec-unknown.sock",
                     "--devices", "none", "--allow-groups",
                     "no-such-group-opd", NULL};
  cr_assert_eq(th_run(bin, g, out, sizeof out), 1, "%s", out);
  cr_assert(strstr(out, "--allow-groups: no group is named "
                        "\"no-such-group-opd\"") != NULL, "%s", out);
  cr_assert_neq(access("/tmp/opd-sec-unknown.sock", F_OK), 0);
}

/* Root publishes: "w" for itself, "shared" for uid 64123, "grp" for group
 * 64500, "any" for everyone; each holds 4 floats base, base+1, ... */
static uint64_t publish_floats(opd_client_t *c, const char *name, float base,
                               const char *const *readers, int n) {
  void *mem;
  uint64_t a = th_arena(c, 4096, &mem);
  for (int i = 0; i < 4; i++) ((float *)mem)[i] = base + (float)i;
  int rc = opd_publish2(c, a, name, NULL, readers, n);
  cr_assert_eq(rc, 0, "publish %s: %s", name, opd_last_error());
  return a;
}

static void child_confined(report_t *r, void *arg) {
  (void)arg;
  opd_client_t *c = NULL;
  int rc = opd_connect(th_d.sock, &c);
  next_step(r, rc);                        /* 0 */
  if (rc != 0) return;
  attach_and_read(c, r, "w");              /* 1: not in its own names */
  attach_and_read(c, r, "root/w");         /* 2: root's, not shared */
  attach_and_read(c, r, "0/w");            /* 3 */
  attach_and_read(c, r, "root/shared");    /* 4: shared with uid 64123 */
  attach_and_read(c, r, "0/grp");          /* 5: with group 64500 */
  attach_and_read(c, r, "root/any");       /* 6: with "*" */
  attach_and_read(c, r, "root/nothing");   /* 7: does not exist */
  uint64_t a;
  void *base;
  opd_arena_create(c, 4096, &a, &base);
  next_step(r, opd_publish(c, a, "root/w", NULL)); /* 8: '/' */
  next_step(r, opd_unpublish(c, "root/any"));      /* 9: not its name */
  attach_and_read(c, r, "root/");                  /* 10: no name */
  opd_close(c);
}

/* Names belong to their uid: another uid sees only what was shared with it
 * (readers), and what was not looks like nothing at all. */
Test(security, names_are_confined_to_their_uid) {
  need_root();
  open_up();
  opd_client_t *c = th_connect();
  const char *to_uid[] = {"64123"}, *to_grp[] = {"group:64500"},
             *to_all[] = {"*"};
  publish_floats(c, "w", 10, NULL, 0);
  publish_floats(c, "shared", 20, to_uid, 1);
  publish_floats(c, "grp", 30, to_grp, 1);
  publish_floats(c, "any", 40, to_all, 1);
  report_t r;
  gid_t g[] = {SHARED_GID};
  as_other(g, 1, child_confined, NULL, &r);
  cr_assert_eq(r.s[0].rc, 0, "connect: %s", r.s[0].msg);
  for (int i = 1; i <= 3; i++)
    cr_assert_eq(r.s[i].rc, OPD_ENOENT, "step %d: expected ENOENT, got %s "
                 "(%s)", i, opd_errname(r.s[i].rc), r.s[i].msg);
  cr_assert(strstr(r.s[1].msg, "nothing is published as \"w\" by uid 64123"),
            "%s", r.s[1].msg);
  cr_assert(strstr(r.s[2].msg, "nothing that uid 64123 may read is published "
                               "as \"root/w\""), "%s", r.s[2].msg);
  float want[] = {0, 0, 0, 0, 20, 30, 40};
  for (int i = 4; i <= 6; i++) {
    cr_assert_eq(r.s[i].rc, 0, "step %d: %s", i, r.s[i].msg);
    for (int k = 0; k < 4; k++)
      cr_assert_eq(r.s[i].data[k], want[i] + (float)k, "step %d float %d", i,
                   k);
  }
  /* unshared and absent are told apart by nobody but the log */
  cr_assert_eq(r.s[7].rc, OPD_ENOENT);
  cr_assert(strstr(r.s[7].msg, "nothing that uid 64123 may read is "
                               "published as \"root/nothing\""), "%s",
            r.s[7].msg);
  cr_assert_eq(r.s[8].rc, OPD_EINVAL, "%s", r.s[8].msg);
  cr_assert(strstr(r.s[8].msg, "may not contain '/'"), "%s", r.s[8].msg);
  cr_assert_eq(r.s[9].rc, OPD_EINVAL, "%s", r.s[9].msg);
  cr_assert(strstr(r.s[9].msg, "published by another session"), "%s",
            r.s[9].msg);
  cr_assert_eq(r.s[10].rc, OPD_EINVAL, "%s", r.s[10].msg);
  cr_assert(strstr(r.s[10].msg, "is not \"name\" or \"user/name\""), "%s",
            r.s[10].msg);
  /* root itself reads its names bare and qualified */
  uint64_t att;
  cr_assert_eq(opd_attach(c, "w", &att, NULL, NULL, 0, NULL, 0), 0, "%s",
               opd_last_error());
  cr_assert_eq(opd_attach(c, "root/w", &att, NULL, NULL, 0, NULL, 0), 0, "%s",
               opd_last_error());
  opd_close(c);
}

/* The squatter: uid 64123 publishes "w2" first and holds it while root
 * publishes and reads its own "w2". */
typedef struct squat {
  int ready[2], go[2];           /* child -> parent, parent -> child */
} squat_t;

static void child_squat(report_t *r, void *arg) {
  squat_t *q = arg;
  opd_client_t *c = NULL;
  char b = 0;
  int rc = opd_connect(th_d.sock, &c);
  if (rc == 0) {
    void *base;
    uint64_t a;
    rc = opd_arena_create(c, 4096, &a, &base);
    for (int i = 0; rc == 0 && i < 4; i++) ((float *)base)[i] = 666 + i;
    if (rc == 0) rc = opd_publish(c, a, "w2", NULL);
  }
  next_step(r, rc);                        /* 0: the squat */
  if (write(q->ready[1], &b, 1) != 1 || read(q->go[0], &b, 1) != 1) b = 0;
  if (c != NULL) {
    attach_and_read(c, r, "w2");           /* 1: its own */
    attach_and_read(c, r, "64123/w2");     /* 2: the same, qualified */
    attach_and_read(c, r, "root/w2");      /* 3: root's, not shared */
    opd_close(c);
  }
}

static void read_f4(opd_client_t *c, const char *name, float out[4]) {
  uint64_t att, own;
  void *base;
  cr_assert_eq(opd_attach(c, name, &att, NULL, NULL, 0, NULL, 0), 0,
               "attach %s: %s", name, opd_last_error());
  own = th_arena(c, 4096, &base);
  opd_tensor_t x = th_f32(att, 0, 1, (int64_t)4),
               y = th_f32(own, 0, 1, (int64_t)4);
  cr_assert_eq(opd_run(c, "copy", &x, 1, &y, 1, NULL, 0), 0, "%s",
               opd_last_error());
  memcpy(out, base, 4 * sizeof(float));
}

Test(security, a_squatted_name_is_the_squatters_own) {
  need_root();
  open_up();
  squat_t q;
  cr_assert_eq(pipe(q.ready), 0);
  cr_assert_eq(pipe(q.go), 0);
  int rp[2];
  cr_assert_eq(pipe(rp), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    /* as_other's child part, with the turn-taking in between */
    close(q.ready[0]);
    close(q.go[1]);
    close(rp[0]);
    report_t r;
    memset(&r, 0, sizeof r);
    if (setgroups(0, NULL) != 0 || setgid(OTHER_UID) != 0 ||
        setuid(OTHER_UID) != 0)
      r.n = -errno;
    else
      child_squat(&r, &q);
    ssize_t w = write(rp[1], &r, sizeof r);
    _exit(w == (ssize_t)sizeof r ? 0 : 1);
  }
  close(rp[1]);
  close(q.ready[1]);
  close(q.go[0]);
  char b;
  cr_assert_eq(read(q.ready[0], &b, 1), 1, "the squatter did not start");
  /* the squatter holds "w2" now; root's publish still succeeds */
  opd_client_t *c = th_connect();
  void *mem;
  uint64_t a = th_arena(c, 4096, &mem);
  for (int i = 0; i < 4; i++) ((float *)mem)[i] = 1.5f + (float)i;
  cr_assert_eq(opd_publish(c, a, "w2", NULL), 0, "root's publish: %s",
               opd_last_error());
  float got[4];
  read_f4(c, "w2", got); /* root's own, not the squatter's */
  for (int i = 0; i < 4; i++) cr_assert_eq(got[i], 1.5f + (float)i);
  read_f4(c, "64123/w2", got); /* root may read any uid's name */
  for (int i = 0; i < 4; i++) cr_assert_eq(got[i], 666.0f + (float)i);
  cr_assert_eq(write(q.go[1], "g", 1), 1);
  report_t r;
  size_t n = 0;
  ssize_t k;
  while (n < sizeof r && (k = read(rp[0], (char *)&r + n, sizeof r - n)) > 0)
    n += (size_t)k;
  int status;
  waitpid(pid, &status, 0);
  cr_assert_eq(n, sizeof r, "no report from the squatter");
  cr_assert_geq(r.n, 1, "the squatter could not become uid %d", OTHER_UID);
  cr_assert_eq(r.s[0].rc, 0, "the squatter's publish: %s", r.s[0].msg);
  for (int s = 1; s <= 2; s++) {
    cr_assert_eq(r.s[s].rc, 0, "step %d: %s", s, r.s[s].msg);
    for (int i = 0; i < 4; i++) cr_assert_eq(r.s[s].data[i], 666.0f + i);
  }
  cr_assert_eq(r.s[3].rc, OPD_ENOENT, "%s", r.s[3].msg);
  opd_close(c);
}

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
