/* Acting as another uid in the security tests (test_security.c,
 * test_runtime_dir.c): a forked child drops to an unused uid with chosen
 * supplementary groups, acts as a client and reports what it saw through a
 * pipe, since criterion's asserts belong to the parent.
 */
#ifndef OPD_TEST_AS_OTHER_H
#define OPD_TEST_AS_OTHER_H

#include <sys/types.h>

enum { OTHER_UID = 64123, SQUAT_UID = 64124, SHARED_GID = 64500 };

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

typedef void (*child_fn)(report_t *r, void *arg);

void need_root(void); /* skips the test, with the reason, unless root */
/* The next step of r with rc and, on failure, libopd's last message. */
step_t *next_step(report_t *r, int rc);
/* Runs fn in a child as OTHER_UID with these supplementary groups; returns
 * its report. hide_system: the child first hides the system socket's
 * directory (/run/opd) in a mount namespace of its own; a host where that
 * cannot be done skips the test. */
void as_other_in(const gid_t *groups, int n_groups, child_fn fn, void *arg,
                 report_t *out, int hide_system);
void as_other(const gid_t *groups, int n_groups, child_fn fn, void *arg,
              report_t *out);

#endif
