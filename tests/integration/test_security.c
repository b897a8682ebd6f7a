/* Integration: who may connect and who may read which name
 * (docs/operations.md, "Security"; the runtime directory: test_runtime_dir.c).
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
#include "tests/integration/as_other.h"

TestSuite(security, .init = th_start_default, .fini = th_stop_default,
          .timeout = 60);

/* Lets other uids reach the daemon of th_start. */
static void open_up(void) {
  cr_assert_eq(chmod(th_d.dir, 0755), 0, "chmod %s: %s", th_d.dir,
               strerror(errno));
  cr_assert_eq(chmod(th_d.sock, 0666), 0, "chmod %s: %s", th_d.sock,
               strerror(errno));
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
