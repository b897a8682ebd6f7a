/* Acting as another uid: tests/integration/as_other.h. */
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

void need_root(void) {
  if (geteuid() != 0)
    cr_skip("needs root to act as other uids (setuid in a child); run the "
            "integration suite as root to test access control");
}

step_t *next_step(report_t *r, int rc) {
  step_t *s = &r->s[r->n < 12 ? r->n++ : 11];
  s->rc = rc;
  snprintf(s->msg, sizeof s->msg, "%s", rc ? opd_last_error() : "");
  return s;
}

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

/* The child's part: tests/integration/as_other.h. */
void as_other_in(const gid_t *groups, int n_groups, child_fn fn,
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

void as_other(const gid_t *groups, int n_groups, child_fn fn, void *arg,
              report_t *out) {
  as_other_in(groups, n_groups, fn, arg, out, 0);
}
