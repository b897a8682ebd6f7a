/* The CUDA backend's completions: the launched jobs' events, watched by
 * the loop thread while it spins (a watcher registered with the loop
 * scheduler, daemon/loop.h) and by a completion thread otherwise; a
 * finished job gets its completion callback (job->done) on the loop. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h" /* opd__now_ns */
#include "daemon/backend/cuda/state.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/ticks.h"

/* The completion poller. A launched job ends with an event recorded on
 * its stream (a stream that failed reports its error there too, so a
 * poisoned context is noticed even when the kernel never completes).
 *
 * Right after a launch the loop thread itself queries the events (it spins
 * for GPU_SPIN_NS: the loop scheduler's window, daemon/loop.c, calls
 * cuda_poll) and replies
 * at once: a tiny op needs no hand-off between threads, no wake-up, and no
 * second thread in the driver's locks while the loop launches. Meanwhile
 * this thread sleeps on its condition variable. When the loop stops
 * polling with jobs still pending (cuda_spinning(srv, 0): a kernel
 * longer than GPU_SPIN_NS, or the loop about to block), it wakes this
 * thread, which polls them (spinning for up to SPIN_NS after the last
 * progress, then sleeps doubling up to MAX_SLEEP_NS) and hands finished
 * ones to the loop through uv_async_send. With nothing pending, or while
 * the loop polls, it sleeps: no busy core besides the loop's own. Querying
 * instead of a stream callback saves the driver's callback thread hand-off
 * (tens of microseconds on a tiny op). */
#define SPIN_NS 50000
#define MAX_SLEEP_NS 100000
/* how long the loop itself spins for a launched job (daemon/loop.c) */
#define GPU_SPIN_NS 50000

static void cpu_pause(int n) {
  for (int i = 0; i < n; i++) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

/* Moves the pending jobs whose events completed to st->done. A stream
 * completes its work in order, so once one job of a stream is not done,
 * its later jobs are not queried (a client with many asynchronous runs
 * in flight costs one query per pass, not one per run). */
#define BLOCKED_MAX 32
static int collect_done(cuda_state_t *st) {
  int done = 0, n_blocked = 0;
  cudaStream_t blocked[BLOCKED_MAX];
  for (opd_job_t **pp = &st->pending, *prev = NULL; *pp;) {
    opd_job_t *job = *pp;
    cuda_sess_t *cs = cuda_sess(job->s, job->device);
    int skip = 0;
    for (int i = 0; i < n_blocked && !skip; i++) skip = blocked[i] == cs->stream;
    cudaError_t e = cudaErrorNotReady;
    if (!skip) {
      set_device(st->dev[job->device].index);
      e = cudaEventQuery(cuda_job(job)->event);
    }
    if (e == cudaErrorNotReady) {
      if (!skip && n_blocked < BLOCKED_MAX) blocked[n_blocked++] = cs->stream;
      prev = job;
      pp = &job->next;
      continue;
    }
    *pp = job->next; /* finished, or its stream failed */
    if (st->pending_tail == job) st->pending_tail = prev;
    cuda_job(job)->status = (int)e;
    cuda_job(job)->t_seen = opd__now_ns();
    job->ns = cuda_job(job)->t_seen - job->t_start;
    job->next = st->done;
    st->done = job;
    done++;
  }
  return done;
}

static void *poller_main(void *arg) {
  opd_server_t *srv = arg;
  cuda_state_t *st = cuda_state(srv);
  uint64_t last_progress = 0;
  long sleep_ns = 0;

  pthread_mutex_lock(&st->mu);
  for (;;) {
    if ((__atomic_load_n(&st->loop_polls, __ATOMIC_RELAXED) || st->pending == NULL) &&
        !st->stop) {
      while ((__atomic_load_n(&st->loop_polls, __ATOMIC_RELAXED) ||
              st->pending == NULL) && !st->stop)
        pthread_cond_wait(&st->cv, &st->mu);
      last_progress = opd__now_ns();
      sleep_ns = 0;
    }
    if (st->stop) break;
    if (collect_done(st)) {
      pthread_mutex_unlock(&st->mu);
      uv_async_send(&st->async);
      pthread_mutex_lock(&st->mu);
      last_progress = opd__now_ns();
      sleep_ns = 0;
      continue;
    }
    if (opd__now_ns() - last_progress < SPIN_NS) {
      /* let launches in between: the loop thread takes mu to queue jobs */
      pthread_mutex_unlock(&st->mu);
      cpu_pause(8);
      pthread_mutex_lock(&st->mu);
      continue;
    }
    /* a long kernel: back off, 2 us doubling up to MAX_SLEEP_NS */
    sleep_ns = sleep_ns ? (sleep_ns * 2 > MAX_SLEEP_NS ? MAX_SLEEP_NS : sleep_ns * 2)
                        : 2000;
    pthread_mutex_unlock(&st->mu);
    struct timespec ts = {0, sleep_ns};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&st->mu);
  }
  pthread_mutex_unlock(&st->mu);
  return NULL;
}

/* on: the loop polls (the poller sleeps); off: the poller takes over the
 * pending jobs, woken only if there are any. Off always looks at them:
 * a job launched while the poller slept (nothing pending then) is left to
 * the loop's spin window, and the loop may stop wanting to spin before
 * that window ever ran (its GPU_SPIN_NS over by the next opd__loop_update,
 * loop_polls still 0): skipping the look then left the job unpolled and
 * its client waiting for good (seen once in six daemon_gpu runs). */
static void cuda_spinning(opd_server_t *srv, int on) {
  cuda_state_t *st = cuda_state(srv);
  if (st == NULL) return;
  if (on) {
    __atomic_store_n(&st->loop_polls, 1, __ATOMIC_RELAXED);
    return;
  }
  if (__atomic_load_n(&st->loop_polls, __ATOMIC_RELAXED) == 0 &&
      __atomic_load_n(&st->pending, __ATOMIC_RELAXED) == NULL)
    return; /* nothing pending: nothing to hand over */
  pthread_mutex_lock(&st->mu);
  __atomic_store_n(&st->loop_polls, 0, __ATOMIC_RELAXED);
  if (st->pending != NULL) pthread_cond_signal(&st->cv);
  pthread_mutex_unlock(&st->mu);
}

/* Whether job's WORD wait gave up (its record on the device's board, read
 * once the run completed): then the run fails with ETIMEDOUT. */
static int word_timed_out(cuda_state_t *st, opd_job_t *job) {
  const opd_cuda_board_t *b = st->dev[job->device].board;
  if (!(job->flags & OPD_RUN_F_WORD) || b == NULL) return 0;
  unsigned n = __atomic_load_n(&b->n, __ATOMIC_ACQUIRE);
  if (n == 0) return 0;
  unsigned long long want = ((unsigned long long)(unsigned)job->s->id << 32) |
                            (unsigned)job->req_id;
  unsigned k = n < OPD_CUDA_BOARD_RECS ? n : OPD_CUDA_BOARD_RECS;
  for (unsigned i = 0; i < k; i++)
    if (((volatile const unsigned long long *)b->rec)[i] == want) return 1;
  return 0;
}

static void reply_done(opd_server_t *srv, opd_job_t *list) {
  cuda_state_t *st = cuda_state(srv);
  /* the list is newest first; sessions are independent, order is moot */
  while (list) {
    opd_job_t *job = list;
    list = job->next;
    job->next = NULL;
    cudaError_t e = (cudaError_t)cuda_job(job)->status;
    if (e != cudaSuccess) {
      job->rc = OPD_EBACKEND;
      snprintf(job->call.err, sizeof job->call.err, "cuda:%d: %s",
               job->device, cudaGetErrorString(e));
      if (is_sticky(e)) srv->poisoned(srv, cudaGetErrorString(e));
    } else if (word_timed_out(st, job)) {
      job->rc = OPD_ETIMEDOUT;
      snprintf(job->call.err, sizeof job->call.err, "cuda:%d: the GPU wait "
               "for the client's stream to reach this run gave up after %llu "
               "ms (the stream stopped, or is that far behind; STREAM "
               "\"wait_ms\", --stream-wait-ms): the run went ahead without "
               "the work queued before it", job->device,
               (unsigned long long)cuda_job(job)->wait_ms);
    }
    st->dev_inflight[job->device]--;
    if (--st->inflight == 0) uv_unref((uv_handle_t *)&st->async);
    if (e == cudaSuccess) /* an event of a failed stream is not reused */
      opd__cu_event_give(st, job->device, cuda_job(job)->event);
    cuda_job(job)->event = NULL;
    uint64_t now = opd__now_ns();
    if (now - job->t_recv < 1000000) {
      uint64_t piece[4] = {job->t_start - job->t_recv,
                           cuda_job(job)->t_launched - job->t_start,
                           cuda_job(job)->t_seen - cuda_job(job)->t_launched,
                           now - cuda_job(job)->t_seen};
      st->n_short++;
      for (int k = 0; k < 4; k++) { /* histograms of 0.1 us buckets */
        st->ns_sum[k] += piece[k];
        opd__hist_add(st->hist[k], HIST_BUCKETS, piece[k], 100);
      }
    }
    job->done(job);
  }
}

/* The loop's watcher: the finished jobs, replied to at once (0 also when
 * the lock is busy). */
static int cuda_poll(opd_server_t *srv) {
  cuda_state_t *st = cuda_state(srv);
  if (st == NULL || (__atomic_load_n(&st->pending, __ATOMIC_RELAXED) == NULL &&
                     __atomic_load_n(&st->done, __ATOMIC_RELAXED) == NULL) ||
      pthread_mutex_trylock(&st->mu) != 0)
    return 0;
  int done = collect_done(st);
  opd_job_t *list = st->done; /* with what the poller finished before */
  st->done = NULL;
  pthread_mutex_unlock(&st->mu);
  reply_done(srv, list);
  return done + (list != NULL);
}

static int cuda_wants_spin(const opd_server_t *srv, uint64_t now) {
  const cuda_state_t *st = cuda_state(srv);
  return st != NULL && st->inflight > 0 && (now == 0 || now < st->spin_until);
}

static const opd_watcher_t cuda_watcher = {
    .name = "cuda", .poll = cuda_poll, .wants_spin = cuda_wants_spin,
    .spinning = cuda_spinning};

/* Replies to every job the poller finished (loop thread). */
static void cuda_reap(opd_server_t *srv) {
  cuda_state_t *st = cuda_state(srv);
  pthread_mutex_lock(&st->mu);
  opd_job_t *list = st->done;
  st->done = NULL;
  pthread_mutex_unlock(&st->mu);
  reply_done(srv, list);
}

static void on_async(uv_async_t *h) {
  cuda_reap((opd_server_t *)h->data);
}

int opd__cu_load(const opd_server_t *srv, int dev) {
  const cuda_state_t *st = cuda_state(srv);
  return st != NULL && dev >= 0 && dev < OPD_MAX_DEVICES ? st->dev_inflight[dev]
                                                         : 0;
}

void opd__cu_pending_add(opd_server_t *srv, opd_job_t *job) {
  cuda_state_t *st = cuda_state(srv);
  job->next = NULL;
  pthread_mutex_lock(&st->mu);
  if (st->pending_tail) st->pending_tail->next = job;
  else st->pending = job;
  st->pending_tail = job;
  /* no signal: the loop polls it first (its spin window), and wakes the
   * poller if it is still pending when the loop stops */
  pthread_mutex_unlock(&st->mu);
  st->dev_inflight[job->device]++;
  st->dev_runs[job->device]++;
  if (st->inflight++ == 0) uv_ref((uv_handle_t *)&st->async);
  /* a tiny op finishes within microseconds: the loop watches for it
   * without blocking for a while */
  st->spin_until = opd__now_ns() + GPU_SPIN_NS;
  opd__loop_update(srv);
}

/* An event for a job on device dev (recycled; loop thread only). */
int opd__cu_event_take(cuda_state_t *st, int dev, cudaEvent_t *ev) {
  if (st->n_free_ev[dev] > 0) {
    *ev = st->free_ev[dev][--st->n_free_ev[dev]];
    return 0;
  }
  return cudaEventCreateWithFlags(ev, cudaEventDisableTiming) == cudaSuccess
             ? 0
             : -1;
}

void opd__cu_event_give(cuda_state_t *st, int dev, cudaEvent_t ev) {
  if (st->n_free_ev[dev] < 64) st->free_ev[dev][st->n_free_ev[dev]++] = ev;
  else cudaEventDestroy(ev);
}

void opd__cu_events_free(opd_server_t *srv) {
  cuda_state_t *st = cuda_state(srv);
  for (int d = 0; d < srv->n_devices; d++)
    for (int i = 0; i < st->n_free_ev[d]; i++) cudaEventDestroy(st->free_ev[d][i]);
}

int opd__cu_poller_start(opd_server_t *srv) {
  cuda_state_t *st = cuda_state(srv);
  uv_async_init(srv->loop, &st->async, on_async);
  st->async.data = srv;
  uv_unref((uv_handle_t *)&st->async);
  opd__loop_watch(srv, &cuda_watcher);
  pthread_cond_init(&st->cv, NULL);
  if (pthread_create(&st->poller, NULL, poller_main, srv) != 0) {
    LOG_ERROR("cannot start the CUDA completion thread");
    return OPD_EBACKEND;
  }
  st->poller_started = 1;
  return 0;
}

void opd__cu_poller_stop(opd_server_t *srv) {
  cuda_state_t *st = cuda_state(srv);
  if (st->poller_started) {
    pthread_mutex_lock(&st->mu);
    __atomic_store_n(&st->stop, 1, __ATOMIC_RELEASE);
    pthread_cond_signal(&st->cv);
    pthread_mutex_unlock(&st->mu);
    pthread_join(st->poller, NULL);
  }
  if (st->n_short > 0) {
    double n = (double)st->n_short * 1000.0, med[4];
    for (int k = 0; k < 4; k++) /* us: 0.1 us buckets */
      med[k] = opd__hist_pct(st->hist[k], HIST_BUCKETS, st->n_short, 0.5, 0.1);
    LOG_INFO("cuda: %llu jobs under 1 ms, mean us: request to launch %.2f, "
             "launch %.2f, launch to seen complete %.2f, to replied %.2f; "
             "median us: %.2f, %.2f, %.2f, %.2f",
             (unsigned long long)st->n_short, st->ns_sum[0] / n,
             st->ns_sum[1] / n, st->ns_sum[2] / n, st->ns_sum[3] / n, med[0],
             med[1], med[2], med[3]);
  }
  const opd_steps_t *o = &st->ordered;
  if (o->n > 0) {
    const char *name[4] = {"wait for the client", "kernel", "signal",
                           "completion event"};
    for (int k = 0; k < 4; k++)
      LOG_INFO("cuda: %llu ordered runs, %s: mean %.2f us, max %.1f us, "
               "%llu over 20 us", (unsigned long long)o->n, name[k],
               o->sum[k] / 1000.0 / (double)o->n, o->max[k] / 1000.0,
               (unsigned long long)o->slow[k]);
  }
}
