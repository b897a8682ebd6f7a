/* A connection's CUDA state (struct opd_cuda, stream.h): made at the
 * first CUDA call of the connection, with the environment's knobs, and
 * ended through the hooks conn.c calls at opd_close.
 *
 * DESIGN
 * conn.c names nothing of CUDA: opd__cuda_of sets c->cuda with the hooks
 * (opd__conn_hooks_t) that end it, so a program that never orders a run
 * with a stream pays nothing at close, and the core library's objects do
 * not depend on the CUDA side's. The knobs are read once per connection:
 * OPD_STREAM_POLL, OPD_STREAM_POLL_TIMEOUT_MS, OPD_STREAM_WORDS,
 * OPD_STREAM_IDLE, OPD_STREAM_WAIT_MS (docs/async.md), and in bench
 * builds OPD_STREAM_TRACE and OPD_STREAM_STAMPS.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/libopd/stream.h"

#ifdef OPD_BENCH
static const char *const trace_step[4] = {"tensors", "cuEventRecord / the word",
                                          "the run", "cuStreamWaitEvent / the poll"};

/* OPD_STREAM_TRACE's lines (at close, and every 2000 calls) */
void opd__trace_print(const struct opd_cuda *k) {
  const opd_steps_t *s = &k->steps;
  for (int i = 0; s->n > 0 && i < 4; i++)
    fprintf(stderr, "opd: %llu ordered calls, %s: mean %.2f us, max %.1f "
            "us, %llu over 20 us\n", (unsigned long long)s->n, trace_step[i],
            s->sum[i] / 1000.0 / (double)s->n, s->max[i] / 1000.0,
            (unsigned long long)s->slow[i]);
  if (s->n > 0)
    fprintf(stderr, "opd: %llu enqueued calls found their stream idle (no "
            "wait); %llu batched runs, %llu joins\n", (unsigned long long)k->idle,
            (unsigned long long)k->batch.n_runs, (unsigned long long)k->batch.n_joins);
}
#endif

/* conn.c's hook after the socket closed: what the connection holds of
 * CUDA (events, the poll paths, what a batch kept) released. */
static void cuda_free(opd_client_t *c) {
  struct opd_cuda *k = c->cuda;
  if (k == NULL) return;
  if (TRACING(k)) opd__trace_print(k);
  /* the events are this process's: after a fork the child leaves them */
  int mine = opd__cu.ok && c->fork_gen == __atomic_load_n(&opd__fork_gen, __ATOMIC_RELAXED);
  batch_t *b = &k->batch; /* cuda_close joined it: what is left */
  for (int i = 0; i < b->n_keep; i++) b->keep[i].drop(b->keep[i].obj);
  b->n_keep = 0;
  if (mine) {
    for (int d = 0; d < OPD_CUDA_DEVICES; d++) {
      opd__poll_free(&k->ev[d]);
      if (k->ev[d].mine) opd__cu.event_destroy(k->ev[d].mine);
      if (k->ev[d].theirs) opd__cu.event_destroy(k->ev[d].theirs);
    }
  }
  pthread_mutex_destroy(&k->mu);
  free(k);
  c->cuda = NULL;
}

/* opd_close, before the socket closes: an open batch ends (its stream
 * waits for its runs), and where runs were enqueued the daemon finishes
 * them first: a session's runs still waiting when it ends are let go
 * (the daemon stops waiting for a departed client's stream), which would
 * run them before the work they wait for, into memory the stream's later
 * work reads. conn.c's hook before the socket closes. */
static void cuda_close(opd_client_t *c) {
  struct opd_cuda *k = c->cuda;
  if (k == NULL) return;
  pthread_mutex_lock(&k->mu);
  int open = k->batch.open, lazy = k->n_lazy > 0;
  if (open) { /* as opd_batch_end */
    (void)opd__batch_join_in(c, k, "opd_batch_end");
    k->batch.open = 0;
  }
  pthread_mutex_unlock(&k->mu);
  if (!open && !lazy) return;
  /* a SYNC, waited for as long as the poll kernels wait (a daemon that
   * stopped answering does not hold the close for longer) */
  fbuf_t b;
  msgpack_packer pk;
  uint64_t id = opd__new_id(c);
  opd__frame_begin(&b, &pk, OPD_MSG_SYNC, id);
  msgpack_pack_map(&pk, 0);
  int rc = opd__submit_frame(c, &b, id, 0, -1);
  opd__fbuf_free(&b);
  if (rc == 0)
    (void)opd__wait_reply(c, id, (int)(k->poll_ns / 1000000u), NULL, NULL, NULL);
}

static const opd__conn_hooks_t hooks = {cuda_close, cuda_free};

static pthread_mutex_t make_mu = PTHREAD_MUTEX_INITIALIZER;

struct opd_cuda *opd__cuda_of(opd_client_t *c) {
  struct opd_cuda *k = __atomic_load_n(&c->cuda, __ATOMIC_ACQUIRE);
  if (k != NULL) return k;
  pthread_mutex_lock(&make_mu);
  if ((k = c->cuda) == NULL && (k = calloc(1, sizeof *k)) != NULL) {
    pthread_mutex_init(&k->mu, NULL);
#ifdef OPD_BENCH
    const char *tr = getenv("OPD_STREAM_TRACE");
    k->trace = tr != NULL && *tr && strcmp(tr, "0") != 0;
    const char *sp = getenv("OPD_STREAM_STAMPS");
    k->stamps = sp != NULL && strcmp(sp, "1") == 0;
#endif
    const char *pl = getenv("OPD_STREAM_POLL");
    k->no_poll = pl != NULL && strcmp(pl, "0") == 0;
    const char *to = getenv("OPD_STREAM_POLL_TIMEOUT_MS");
    long ms = to != NULL ? strtol(to, NULL, 10) : 0;
    k->poll_ns = (uint64_t)(ms > 0 ? ms : 10000) * 1000000u;
    const char *w = getenv("OPD_STREAM_WORDS");
    k->no_words = w != NULL && strcmp(w, "0") == 0;
    const char *il = getenv("OPD_STREAM_IDLE");
    k->no_idle = il != NULL && strcmp(il, "0") == 0;
    const char *wm = getenv("OPD_STREAM_WAIT_MS");
    long wms = wm != NULL ? strtol(wm, NULL, 10) : 0;
    k->wait_ms = wms > 0 && wms <= 86400000 ? (uint32_t)wms : 0;
    c->cuda_hooks = &hooks;
    __atomic_store_n(&c->cuda, k, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&make_mu);
  if (k == NULL) opd__fail(OPD_ENOMEM, "out of memory");
  return k;
}
