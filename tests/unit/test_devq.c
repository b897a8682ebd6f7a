/* Unit: device admission by class of service (daemon/devq.c) — with no
 * latency user the bound is off; with one, best-effort runs take at most
 * --device-be-inflight slots per device and a session at most half of
 * them; sessions that wait are woken first come first when a slot frees
 * (through the loop watcher, never inside the release); a session at its
 * share does not block the others; latency runs never wait; the bound
 * going off wakes everyone; a session that ends leaves the FIFO. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <uv.h>

#include "daemon/devq.h"
#include "daemon/loop.h"

static opd_server_t *srv;
static uv_loop_t loop;

/* The test's sessions: ready tries to launch the session's next run, as
 * the session's pump would (opd__runq_start), and counts its calls. */
enum { N_SESS = 4 };
static opd_session_t sess[N_SESS];
static opd_job_t next_job[N_SESS]; /* each session's queued run */
static int queued[N_SESS], launched[N_SESS], woken[N_SESS];

static int idx(const opd_session_t *s) { return (int)(s - sess); }

static int try_launch(opd_session_t *s) {
  int i = idx(s);
  if (!queued[i]) return 0;
  if (!opd__devq_admit(s, &next_job[i])) return 0;
  launched[i]++;
  queued[i] = 0;
  return 1;
}

static void ready(opd_session_t *s) {
  woken[idx(s)]++;
  try_launch(s);
}

static const opd_transport_cb_t cb = {.ready = ready};

static void setup(void) {
  cr_assert_eq(uv_loop_init(&loop), 0);
  srv = calloc(1, sizeof *srv);
  srv->loop = &loop;
  srv->n_devices = 1;
  srv->cfg.limits.dev_be_inflight = 4;
  opd__loop_init(srv);
  cr_assert_eq(opd__devq_init(srv), 0);
  for (int i = 0; i < N_SESS; i++) {
    memset(&sess[i], 0, sizeof sess[i]);
    sess[i].srv = srv;
    sess[i].cb = &cb;
    queued[i] = launched[i] = woken[i] = 0;
  }
}

static void teardown(void) {
  opd__devq_free(srv);
  uv_close((uv_handle_t *)&srv->loop_check, NULL);
  uv_close((uv_handle_t *)&srv->loop_prepare, NULL);
  uv_close((uv_handle_t *)&srv->loop_idle, NULL);
  uv_run(&loop, UV_RUN_NOWAIT);
  uv_loop_close(&loop);
  free(srv);
}

/* A best-effort run of session i on device 0, queued. */
static opd_job_t *queue_run(int i) {
  opd_job_t *j = &next_job[i];
  memset(j, 0, sizeof *j);
  j->s = &sess[i];
  j->device = 0;
  queued[i] = 1;
  return j;
}

/* The watchers' check, as the loop runs it after each poll. */
static void loop_check(void) {
  for (int i = 0; i < srv->n_watchers; i++)
    if (srv->watchers[i]->check != NULL) srv->watchers[i]->check(srv);
}

/* A run of session i that holds a slot (copied: next_job is reused). */
static opd_job_t held[16];
static int n_held;
static opd_job_t *launch_held(int i) {
  queue_run(i);
  cr_assert(try_launch(&sess[i]), "session %d launches", i);
  held[n_held] = next_job[i];
  return &held[n_held++];
}

/* A latency user there, and sessions 0 and 1 holding two slots each: the
 * device's four are taken. */
static void fill_device(void) {
  opd__devq_latency(srv, 1);
  for (int i = 0; i < 2; i++) {
    launch_held(i);
    launch_held(i);
  }
}

TestSuite(devq, .init = setup, .fini = teardown);

Test(devq, no_latency_user_no_bound) {
  n_held = 0;
  for (int k = 0; k < 10; k++) launch_held(0); /* far past 4, one session */
  cr_assert_eq(launched[0], 10);
}

Test(devq, bound_and_share) {
  n_held = 0;
  opd__devq_latency(srv, 1);
  opd_job_t *a1 = launch_held(0);
  launch_held(0);
  queue_run(0);
  cr_assert_not(try_launch(&sess[0]), "a session holds at most half the slots");
  launch_held(1);
  launch_held(1);
  queue_run(2);
  cr_assert_not(try_launch(&sess[2]), "the device holds at most 4");
  /* sess[3] comes later: it queues behind sess[0] and sess[2] */
  queue_run(3);
  cr_assert_not(try_launch(&sess[3]));
  /* a release never calls back into a session */
  opd__devq_release(srv, a1);
  cr_assert_eq(woken[0] + woken[2] + woken[3], 0);
  loop_check();
  cr_assert_eq(launched[2], 1, "the first waiter for a free slot goes");
  cr_assert_eq(launched[3], 0);
  cr_assert_eq(a1->devq_slot, 0);
  /* 0's own completion runs its pump: the device is full, it queues
   * behind 3 */
  cr_assert_not(try_launch(&sess[0]));
  opd__devq_release(srv, &held[2]); /* one of 1's */
  loop_check();
  cr_assert_eq(launched[3], 1);
  cr_assert_eq(launched[0], 2);
}

Test(devq, share_does_not_block_others) {
  n_held = 0;
  opd__devq_latency(srv, 1);
  opd_job_t *a = launch_held(0);
  launch_held(0);
  queue_run(0); /* 0 at its share: it waits for its own runs */
  cr_assert_not(try_launch(&sess[0]));
  launch_held(1); /* ... and blocks no one */
  opd_job_t *b = launch_held(1);
  queue_run(2);
  cr_assert_not(try_launch(&sess[2]));
  opd__devq_release(srv, b); /* 1's slot frees: it goes to 2, who waited */
  loop_check();
  cr_assert_eq(launched[2], 1);
  cr_assert_eq(woken[0], 0);
  opd__devq_release(srv, a); /* 0's own completion: its pump retries */
  cr_assert(try_launch(&sess[0]));
}

Test(devq, latency_runs_never_wait) {
  n_held = 0;
  fill_device();
  sess[3].priority = 1; /* a latency session */
  queue_run(3);
  cr_assert(try_launch(&sess[3]));
  cr_assert_eq(next_job[3].devq_slot, 0, "a latency run takes no slot");
  /* and a best-effort session's latency graph neither: the class is the
   * graph's (daemon/sched.h), checked by opd__job_class */
}

Test(devq, bound_off_wakes_everyone) {
  n_held = 0;
  fill_device();
  queue_run(2);
  queue_run(3);
  cr_assert_not(try_launch(&sess[2]));
  cr_assert_not(try_launch(&sess[3]));
  opd__devq_latency(srv, -1); /* the latency client left */
  loop_check();
  cr_assert_eq(launched[2], 1);
  cr_assert_eq(launched[3], 1);
}

Test(devq, session_end_leaves_the_queue) {
  n_held = 0;
  fill_device();
  queue_run(2);
  cr_assert_not(try_launch(&sess[2]));
  queue_run(3);
  cr_assert_not(try_launch(&sess[3]));
  opd__devq_session_end(&sess[2]);
  queued[2] = 0;
  opd__devq_release(srv, &held[0]);
  loop_check();
  cr_assert_eq(woken[2], 0, "an ended session is never woken");
  cr_assert_eq(launched[3], 1);
}
