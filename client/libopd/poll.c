/* libopd's poll path: what an enqueued run (opd_enqueue_stream*) puts on
 * the caller's stream so that its later work waits, on the GPU, for the
 * run, and where that goes on the legacy default stream.
 *
 * DESIGN
 * Per connection and device (cevents_t, stream.h), made in the caller's
 * context at the first ordered call: the session's flag word (device
 * memory of the daemon, opened here by IPC handle), the poll kernel
 * (ptx.c) loaded into the context, pinned host words the kernel sets when
 * its wait times out, and a pool of interprocess events for streams past
 * the WORD slots. A call's poll kernel waits until the daemon's word
 * reaches the call's request id (opd__poll_launch); its answer is read
 * later, in batches (opd__lazy_reap), and what the daemon refused is told
 * by the next call (opd__lazy_error). A batch (batch.c) has one poll
 * kernel, for its last run, at its join (opd__batch_join_locked).
 * OPD_STREAM_LEGACY says where this goes when the caller's stream is
 * CUDA's legacy default stream: pdl (the default) or direct in every
 * build, the placements compared against them in bench builds only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/libopd/stream.h"

/* ---- OPD_STREAM_LEGACY ------------------------------------------------- */

/* The process's LEGACY_* mode: OPD_STREAM_LEGACY when first asked, or
 * (bench builds) what opd__stream_legacy set: the benchmarks compare the
 * modes in one process (docs/records/2026-12-01-stream-ordered-cost/probe_level.py). A build without OPD_BENCH
 * knows direct and pdl only. */
static int legacy_mode = -1;

#ifdef OPD_BENCH
static const char *const legacy_name[] = {"direct", "side", "fork", "busy", "word",
                                            "kernel", "pdl"};
#define LEGACY_WORDS "direct, side, fork, busy, word, kernel or pdl"
#else
static const char *const legacy_name[] = {"direct", NULL, NULL, NULL, NULL,
                                            NULL, "pdl"};
#define LEGACY_WORDS "direct or pdl"
#endif

static int legacy_parse(const char *v) {
  if (v == NULL) return LEGACY_DEFAULT;
  for (int i = 0; i < (int)(sizeof legacy_name / sizeof legacy_name[0]); i++)
    if (legacy_name[i] != NULL && strcmp(v, legacy_name[i]) == 0) return i;
  return -1;
}

int opd__legacy(void) {
  int m = __atomic_load_n(&legacy_mode, __ATOMIC_RELAXED);
  if (m < 0) {
    const char *env = getenv("OPD_STREAM_LEGACY");
    m = legacy_parse(env);
    if (m < 0) {
      fprintf(stderr, "opd: OPD_STREAM_LEGACY=%s is not " LEGACY_WORDS
              ": using %s\n", env, legacy_name[LEGACY_DEFAULT]);
      m = LEGACY_DEFAULT;
    }
    __atomic_store_n(&legacy_mode, m, __ATOMIC_RELAXED);
  }
  return m;
}

#ifdef OPD_BENCH
int opd__stream_legacy(const char *mode) {
  if (mode == NULL) return opd__legacy();
  int m = legacy_parse(mode);
  if (m < 0)
    return opd__fail(OPD_EINVAL, "OPD_STREAM_LEGACY: \"%s\" is not "
                     LEGACY_WORDS, mode);
  __atomic_store_n(&legacy_mode, m, __ATOMIC_RELAXED);
  return 0;
}
#endif

/* e's pool of interprocess events (any context may destroy them). */
static void pool_destroy(cevents_t *e) {
  for (int i = 0; i < OPD_STREAM_EVENTS; i++)
    if (e->pool[i] != NULL) {
      opd__cu.event_destroy(e->pool[i]);
      e->pool[i] = NULL;
    }
}

/* e's poll path forgotten (its context gone: what it held went with it) */
static void poll_forget(cevents_t *e) {
  pool_destroy(e);
  e->flag = 0;
  e->mod = e->fn = e->fn_st = e->fn_w = e->mod90 = e->fn_wp = NULL;
  e->err = NULL;
  e->err_dev = 0;
  e->polled = 0;
  e->side = e->fork_ev = e->join_ev = NULL;
  e->side_failed = 0;
}

/* ... released in the current context. */
static void poll_release(cevents_t *e) {
  if (e->flag) opd__cu.ipc_close_mem(e->flag);
  if (e->mod) opd__cu.module_unload(e->mod);
  if (e->mod90) opd__cu.module_unload(e->mod90);
  if (e->err) opd__cu.mem_free_host((void *)e->err);
  if (e->side) opd__cu.stream_destroy(e->side);
  if (e->fork_ev) opd__cu.event_destroy(e->fork_ev);
  if (e->join_ev) opd__cu.event_destroy(e->join_ev);
  poll_forget(e);
}

/* ... in its own context (best effort: at exit the context may be gone,
 * and what it held with it). A poll kernel still queued reads the flag
 * word and writes the error words: the context finishes its work first. */
void opd__poll_free(cevents_t *e) {
  if (e->flag == 0 && e->mod == NULL && e->err == NULL && e->pool[0] == NULL &&
      e->side == NULL)
    return;
  void *old;
  if (e->ctx != NULL && opd__cu.ctx_push(e->ctx) == 0) {
    if (e->polled) opd__cu.ctx_synchronize();
    poll_release(e);
    opd__cu.ctx_pop(&old);
    return;
  }
  poll_forget(e);
}

/* The pool of e (ctx current) and its handles into h: 0, or the driver's
 * error (nothing kept). */
cu_result opd__pool_make(cevents_t *e, cu_ipc_t *h) {
  cu_result r = 0;
  for (int i = 0; i < OPD_STREAM_EVENTS && r == 0; i++) {
    r = opd__cu.event_create(&e->pool[i], CU_EV_FLAGS);
    if (r == 0) r = opd__cu.ipc_get_event(&h[i], e->pool[i]);
  }
  if (r != 0) pool_destroy(e);
  return r;
}

/* The poll path of e (ctx current): the daemon's flag word by its IPC
 * handle, the poll kernel, the pinned error words. Any failure leaves e
 * without it (enqueued runs then wait for their answers) and says why
 * under OPD_STREAM_TRACE. */
void opd__poll_setup(struct opd_cuda *k, cevents_t *e, const msgpack_object *fh) {
  cu_ipc_t h;
  const char *step = "the reply has no 64-byte \"flag\"";
  cu_result r = 0;
  void *p = NULL;
  if (fh != NULL && fh->type == MSGPACK_OBJECT_BIN && fh->via.bin.size == 64) {
    memcpy(h.bytes, fh->via.bin.ptr, 64);
    step = "cuIpcOpenMemHandle";
    if ((r = opd__cu.ipc_open_mem(&e->flag, h, 1 /* LAZY_ENABLE_PEER_ACCESS */)) == 0) {
      step = "cuModuleLoadData";
      if ((r = opd__cu.module_load_data(&e->mod, opd__poll_ptx)) == 0) {
        step = "cuModuleGetFunction";
        if ((r = opd__cu.module_get_function(&e->fn, e->mod, "opd_poll")) == 0) {
          if (STAMPING(k) && opd__cu.module_get_function(&e->fn_st, e->mod, "opd_poll_st") != 0)
            e->fn_st = NULL;
          if (opd__cu.module_get_function(&e->fn_w, e->mod, "opd_poll_w") != 0)
            e->fn_w = NULL;
          /* not before sm_90: left NULL */
          if (opd__cu.launch_kernel_ex != NULL &&
              opd__cu.module_load_data(&e->mod90, opd__poll_ptx90) == 0 &&
              opd__cu.module_get_function(&e->fn_wp, e->mod90, "opd_poll_wp") != 0)
            e->fn_wp = NULL;
          step = "cuMemHostAlloc";
          if ((r = opd__cu.mem_host_alloc(&p, 64, 0x1 | 0x2 /* PORTABLE|DEVICEMAP */)) == 0) {
            e->err = p;
            e->err[0] = e->err[1] = 0;
            step = "cuMemHostGetDevicePointer";
            if ((r = opd__cu.mem_host_device_ptr(&e->err_dev, p, 0)) == 0) return;
          }
        }
      }
    }
  }
  if (TRACING(k))
    fprintf(stderr, "opd: no poll path, enqueued runs wait for their answers: "
            "%s%s%s\n", step, r ? ": " : "", r ? opd__cu_str(r) : "");
  poll_release(e);
}

/* Reads the answers of the oldest enqueued runs until at most `keep` are
 * unread (k->mu held); the first error is kept for the next call. */
void opd__lazy_reap(opd_client_t *c, struct opd_cuda *k, int keep) {
  int i = 0;
  for (; k->n_lazy - i > keep; i++) {
    int rc = opd__wait_reply(c, k->lazy[i], -1, NULL, NULL, NULL);
    if (rc != 0 && k->lazy_rc == 0) {
      k->lazy_rc = rc;
      snprintf(k->lazy_msg, sizeof k->lazy_msg, "an enqueued run (request "
               "%llu) failed: %s", (unsigned long long)k->lazy[i],
               opd_last_error());
    }
  }
  memmove(k->lazy, k->lazy + i, sizeof k->lazy[0] * (size_t)(k->n_lazy - i));
  k->n_lazy -= i;
}

/* The error an enqueued run left for the next call (k->mu held), told
 * once: a refusal the daemon answered, or a poll kernel that timed out on
 * any device of the connection. */
int opd__lazy_error(struct opd_cuda *k) {
  if (k->lazy_rc != 0) {
    int rc = opd__fail(k->lazy_rc, "%s", k->lazy_msg);
    k->lazy_rc = 0;
    return rc;
  }
  for (int d = 0; d < OPD_CUDA_DEVICES; d++) {
    cevents_t *e = &k->ev[d];
    if (e->err != NULL && e->err[0] != 0) {
      e->err[0] = 0;
      return opd__fail(OPD_ETIMEDOUT, "the GPU wait for enqueued run "
                       "(request %u, cuda:%d) gave up after %llu ms: the "
                       "daemon had not finished it (stopped, or its GPU "
                       "failed; OPD_STREAM_POLL_TIMEOUT_MS), so work queued "
                       "after it on the stream did not wait for it",
                       e->err[1], d,
                       (unsigned long long)(k->poll_ns / 1000000u));
    }
  }
  return 0;
}

/* The WORD slot of stream in e (k->mu held): its own, a new one, or 0 when
 * all are taken (its runs wait through the pool's events). */
int opd__slot_for(cevents_t *e, void *stream) {
  for (int i = 1; i <= e->n_slots; i++)
    if (e->slot_stream[i] == stream) return i;
  if (e->n_slots + 1 >= OPD_RUN_WORD_SLOTS) return 0;
  e->slot_stream[++e->n_slots] = stream;
  return e->n_slots;
}

/* The stream libopd's part of a call goes on instead of the caller's
 * `stream` (e's context current, k->mu held): stream itself, or where it
 * is the legacy default stream and OPD_STREAM_LEGACY asks for it, a
 * non-blocking stream of libopd's, made (with its two events) the first
 * time. Why: under MPS, ResNet-18 with its ReLUs through opd ran 1.09x
 * torch's forward on torch's default stream and 1.03x with the whole
 * forward on a stream of its own (docs/records/2026-12-01-stream-ordered-cost/probe_level.py); which of libopd's
 * operations on the legacy stream costs that is not known yet, and the
 * modes are there to find out (docs/async.md "The legacy default
 * stream"). Anything that fails to be made leaves the legacy stream in use
 * (said once under OPD_STREAM_TRACE). */
void *opd__side_for(struct opd_cuda *k, cevents_t *e, void *stream) {
#ifndef OPD_BENCH
  (void)k, (void)e; /* the modes that use libopd's stream: bench builds */
  return stream;
#else
  int m = opd__legacy();
  if ((m != LEGACY_SIDE && m != LEGACY_FORK && m != LEGACY_BUSY) || !opd__is_legacy(stream) ||
      e->side_failed || opd__cu.stream_create == NULL || opd__cu.stream_destroy == NULL)
    return stream;
  if (e->side != NULL) return e->side;
  cu_result r = opd__cu.stream_create(&e->side, 0x1 /* CU_STREAM_NON_BLOCKING */);
  if (r == 0) r = opd__cu.event_create(&e->join_ev, 0x2 /* DISABLE_TIMING */);
  if (r == 0) r = opd__cu.event_create(&e->fork_ev, 0x2);
  if (r == 0) return e->side;
  if (TRACING(k))
    fprintf(stderr, "opd: calls on the legacy default stream stay on it: no "
            "stream of libopd's (cuStreamCreate, cuEventCreate: %s)\n", opd__cu_str(r));
  if (e->side) opd__cu.stream_destroy(e->side);
  if (e->join_ev) opd__cu.event_destroy(e->join_ev);
  if (e->fork_ev) opd__cu.event_destroy(e->fork_ev);
  e->side = e->join_ev = e->fork_ev = NULL;
  e->side_failed = 1;
  return stream;
#endif
}

/* Queues libopd's poll kernel on stream (e's context current, k->mu
 * held): work queued there later waits, on the GPU, until the daemon's
 * flag word reaches id (the enqueued run `id` and those before it on the
 * session's stream ended). fresh: id was just sent, its answer is read
 * later (k->lazy); else (a batch's join) it is there already, or read. If
 * the kernel does not launch, the runs' end is waited for on the host and
 * the call fails. */
int opd__poll_launch(opd_client_t *c, struct opd_cuda *k, cevents_t *e,
                     void *stream, uint64_t id, int fresh, int idle,
                     cu_ptr_t mine, const char *who) {
  uint32_t want = (uint32_t)id;
  unsigned long long ns = k->poll_ns;
  cu_ptr_t st = e->flag + OPD_STAMPS_OFFSET + 16u * (want % OPD_STAMPS_N);
  void *args[5] = {&e->flag, &want, &e->err_dev, &ns, mine ? &mine : &st};
  void *fn = mine ? e->fn_w : STAMPING(k) && e->fn_st != NULL ? e->fn_st : e->fn;
  void *on = idle && opd__legacy() == LEGACY_BUSY ? stream : opd__side_for(k, e, stream);
  cu_result r;
  if (mine && opd__legacy() == LEGACY_PDL && e->fn_wp != NULL) {
    cu_launch_attr_t at = {.id = CU_LAUNCH_ATTR_PROGRAMMATIC_SERIALIZATION,
                           .value.allowed = 1};
    cu_launch_config_t cfg = {{1, 1, 1}, {1, 1, 1}, 0, on, &at, 1};
    r = opd__cu.launch_kernel_ex(&cfg, e->fn_wp, args, NULL);
  } else {
    r = opd__cu.launch_kernel(fn, 1, 1, 1, 1, 1, 1, 0, on, args, NULL);
  }
  const char *what = on == stream ? "the poll kernel did not launch on the "
                                    "caller's stream (cuLaunchKernel"
                                  : "the poll kernel did not launch on libopd's "
                                    "stream (cuLaunchKernel";
  if (r == 0) e->polled = 1;
  /* on libopd's stream: the caller's waits for it */
  if (r == 0 && on != stream) {
    what = "the caller's stream could not be made to wait for the poll "
           "kernel (cuEventRecord, cuStreamWaitEvent";
    if ((r = opd__cu.event_record(e->join_ev, on)) == 0)
      r = opd__cu.stream_wait_event(stream, e->join_ev, 0);
  }
  if (r == 0) {
    if (fresh) k->lazy[k->n_lazy++] = id;
    return 0;
  }
  /* no GPU wait: the runs' end on the host, then the stream (the word the
   * kernel would have written, written so the daemon's stream goes on) */
  if (mine != 0 && on == stream) (void)opd__cu.memset_d32(mine, want, 1, stream);
  int rc = fresh ? opd__wait_reply(c, id, -1, NULL, NULL, NULL) : 0;
  if (!fresh) opd__lazy_reap(c, k, 0);
  if (rc == 0) rc = opd__call(c, OPD_MSG_SYNC, NULL, NULL, -1, NULL, NULL);
  if (rc == 0)
    rc = opd__fail(OPD_EBACKEND, "%s: %s: %s); the run%s completed, the "
                   "stream did not wait for %s", who, what, opd__cu_str(r),
                   fresh ? "" : "s", fresh ? "it" : "them");
  return rc;
}

/* The batch's runs so far joined back to its stream (k->mu held, its
 * context current): one poll kernel for the last; then what was kept for
 * them is dropped (work queued on the stream after this waits for them,
 * torch's caching allocator's reuse included). */
int opd__batch_join_locked(opd_client_t *c, struct opd_cuda *k, const char *who) {
  batch_t *b = &k->batch;
  int rc = 0;
  if (b->runs > 0) {
    rc = opd__poll_launch(c, k, b->e, b->stream, b->last, 0, 0, 0, who);
    b->runs = 0;
    b->n_joins++;
  }
  for (int i = 0; i < b->n_keep; i++) b->keep[i].drop(b->keep[i].obj);
  b->n_keep = 0;
  return rc;
}

/* batch_join with the batch's context current (k->mu held) */
int opd__batch_join_in(opd_client_t *c, struct opd_cuda *k, const char *who) {
  int pushed = k->batch.runs > 0 ? opd__ctx_enter(k->batch.ctx) : 0;
  int rc = opd__batch_join_locked(c, k, who);
  opd__ctx_leave(pushed);
  return rc;
}
