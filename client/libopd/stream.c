/* libopd's runs ordered with a caller's CUDA stream: opd_run_stream*,
 * opd_enqueue_stream*, opd_run_prepared_stream, opd_synchronize.
 *
 * DESIGN
 * Stream order (opd_run_stream): per connection and device, an
 * interprocess event of ours, which the daemon opens (STREAM) and its
 * stream waits for before the run (OPD_RUN_F_WAIT), and the session's
 * interprocess event of the daemon, opened here, which the daemon records
 * after the run (OPD_RUN_F_SIGNAL). One call records ours on the caller's
 * stream, sends the run, and once the daemon answers that it enqueued it
 * makes the caller's stream wait for the daemon's: both waits happen on
 * the GPU, no thread waits for a kernel. A wait takes the event's latest
 * record at the time it is queued, so one pair serves every run, provided
 * the calls of one connection and device do not interleave: they are
 * serialized (struct opd_cuda's mu), which costs nothing the GPU would
 * not serialize anyway (a session has one stream per device). Those GPU
 * waits are cheap only when both processes' contexts are shared through
 * MPS: otherwise the GPU time-slices the two contexts and each wait costs
 * a context switch (about 140 us each way, 2026-12-02,
 * bench/results/2026-12-02-h200-words.txt). Without MPS the order is kept
 * on the host instead (gpu_order): the caller's stream is synchronized,
 * the run is answered when done. Enqueued runs (opd_enqueue_stream*) wait
 * on the GPU through the poll path instead of the daemon's answer
 * (poll.c); device pointers become tensors through imports.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/libopd/stream.h"

/* ---- stream order ------------------------------------------------------ */

typedef struct {
  const char *device;
  const cu_ipc_t *event;
  int flag;                      /* ask for the session's flag word */
  const cu_ipc_t *pool;          /* ... and the pool's handles */
  uint32_t wait_ms;              /* ... and WORD waits' timeout (0: none) */
} stream_args_t;

static void pack_stream(msgpack_packer *pk, const void *arg) {
  const stream_args_t *a = arg;
  msgpack_pack_map(pk, a->flag ? 4 + (a->wait_ms != 0) : 2);
  PACK_STR(pk, "device");
  PACK_STR(pk, a->device);
  PACK_STR(pk, "event");
  msgpack_pack_bin(pk, 64);
  msgpack_pack_bin_body(pk, a->event->bytes, 64);
  if (a->flag) {
    PACK_STR(pk, "flag");
    msgpack_pack_true(pk);
    PACK_STR(pk, "events");
    msgpack_pack_bin(pk, 64 * OPD_STREAM_EVENTS);
    msgpack_pack_bin_body(pk, a->pool, 64 * OPD_STREAM_EVENTS);
    if (a->wait_ms != 0) {
      PACK_STR(pk, "wait_ms");
      msgpack_pack_uint32(pk, a->wait_ms);
    }
  }
}

/* Whether device dev's runs are ordered on the GPU (events) or on the host
 * (the stream synchronized, the run answered when done). A GPU wait
 * across two processes costs a context switch each way (about 140 us,
 * see above) unless both share their contexts through MPS, so GPU order is
 * used when this process's context and the daemon's device are both
 * under MPS; OPD_STREAM_ORDER=gpu or =host decides instead. */
static int gpu_order(opd_client_t *c, int dev) {
  const char *env = getenv("OPD_STREAM_ORDER");
  if (env != NULL && strcmp(env, "gpu") == 0) return 1;
  if (env != NULL && strcmp(env, "host") == 0) return 0;
  int cdev = -1, mps = 0;
  if (opd__cu.ctx_get_device(&cdev) != 0 ||
      opd__cu.device_attr(&mps, CU_ATTR_MPS_ENABLED, cdev) != 0 || !mps)
    return 0;
  /* the daemon's hello: {"device":"cuda:N",...,"uuid":"GPU-...","mps":true} */
  char key[80];
  const char *u = opd__cuda_uuid(dev);
  if (u != NULL) snprintf(key, sizeof key, "\"uuid\":\"%s\"", u);
  else snprintf(key, sizeof key, "\"device\":\"cuda:%d\"", dev);
  const char *p = c->hello_json ? strstr(c->hello_json, key) : NULL;
  const char *end = p ? strchr(p, '}') : NULL;
  const char *m = p ? strstr(p, "\"mps\":true") : NULL;
  return m != NULL && end != NULL && m < end;
}

/* The event pair of device dev in context ctx (k->mu held, ctx current):
 * made, and exchanged with the daemon (STREAM), the first time. */
static int events_for(opd_client_t *c, struct opd_cuda *k, int dev, void *ctx,
                      cevents_t **out) {
  cevents_t *e = &k->ev[dev];
  *out = e;
  if (e->ctx == ctx) return 0;
  if (e->ctx != NULL) { /* the caller's context changed: a new pair */
    opd__poll_free(e);
    opd__cu.event_destroy(e->mine);
    opd__cu.event_destroy(e->theirs);
    memset(e, 0, sizeof *e);
  }
  void *mine = NULL, *theirs = NULL;
  cu_ipc_t h;
  cu_result r = opd__cu.event_create(&mine, CU_EV_FLAGS);
  if (r == 0) r = opd__cu.ipc_get_event(&h, mine);
  if (r != 0) {
    if (mine) opd__cu.event_destroy(mine);
    return opd__fail(OPD_EBACKEND, "opd_run_stream: an interprocess event "
                     "(cuEventCreate, cuIpcGetEventHandle): %s", opd__cu_str(r));
  }
  char buf[16];
  int gpu = gpu_order(c, dev);
  static __thread cu_ipc_t ph[OPD_STREAM_EVENTS]; /* 4 KiB: not the stack */
  stream_args_t a = {opd__cuda_wire_name(dev, buf), &h, gpu && opd__cu.poll_ok && !k->no_poll, ph,
                     k->wait_ms};
  if (a.flag && (r = opd__pool_make(e, ph)) != 0) {
    a.flag = 0;
    if (TRACING(k))
      fprintf(stderr, "opd: no poll path, enqueued runs wait for their "
              "answers: the event pool: %s\n", opd__cu_str(r));
  }
  reply_t rep = {.payload = NULL};
  int rc = opd__call(c, OPD_MSG_STREAM, pack_stream, &a, -1, &rep.payload,
                     &rep.len);
  if (rc == 0) {
    const msgpack_object *body = opd__reply_decode(&rep);
    const msgpack_object *ev = body ? opd__mp_get(body, "event") : NULL;
    if (ev == NULL || ev->type != MSGPACK_OBJECT_BIN || ev->via.bin.size != 64) {
      rc = opd__fail(OPD_EPROTO, "stream: the reply has no 64-byte event");
    } else {
      cu_ipc_t th;
      memcpy(th.bytes, ev->via.bin.ptr, 64);
      if ((r = opd__cu.ipc_open_event(&theirs, th)) != 0)
        rc = opd__fail(OPD_EBACKEND, "opd_run_stream: the daemon's event does "
                       "not open here (cuIpcOpenEventHandle: %s)", opd__cu_str(r));
    }
    if (rc == 0 && a.flag) {
      opd__poll_setup(k, e, opd__mp_get(body, "flag"));
      const msgpack_object *w = opd__mp_get(body, "words");
      e->words = e->flag && opd__cu.memset_d32 != NULL && !k->no_words && w != NULL &&
                 w->type == MSGPACK_OBJECT_BOOLEAN && w->via.boolean;
    }
  }
  opd__reply_free(&rep);
  if (rc != 0) {
    opd__cu.event_destroy(mine);
    opd__poll_free(e); /* e->ctx is not ctx yet: only the pool goes */
    return rc;
  }
  e->ctx = ctx;
  e->mine = mine;
  e->theirs = theirs;
  e->gpu = gpu;
  return 0;
}

/* What opd_run_stream and opd_run_prepared_stream share: the events
 * around `send` (which submits the run and waits for its answer: at
 * enqueue when gpu, at completion when not; with lazy not NULL it submits
 * a FLAG run, *lazy its id, and does not wait). */
typedef int (*send_fn)(opd_client_t *c, const void *arg, int gpu,
                       const char *wire, uint64_t *lazy, uint32_t extra);



/* Device pointers to point descriptors at, inside ordered (k->mu held). */
typedef struct {
  void *const *ptrs;
  opd_tensor_t *t;
  uint32_t n;
} ptrs_t;


static int ordered(opd_client_t *c, const char *who, const char *device,
                   void *stream, send_fn send, const void *arg,
                   const ptrs_t *at, int lazy) {
  int dev, rc = opd__check_usable(c);
  if (rc == 0) rc = opd__cuda_index(who, device, &dev);
  if (rc == 0) rc = opd__cu_ready(who);
  struct opd_cuda *k = rc == 0 ? opd__cuda_of(c) : NULL;
  if (rc != 0 || k == NULL) return rc ? rc : OPD_ENOMEM;
  void *ctx = NULL;
  cu_result r = opd__cu.stream_get_ctx(stream, &ctx);
  if (r != 0 || ctx == NULL)
    return opd__fail(OPD_EINVAL, "%s: %p is not a CUDA stream of this "
                     "process with a context (cuStreamGetCtx: %s)", who,
                     stream, r ? opd__cu_str(r) : "no context");
  pthread_mutex_lock(&k->mu);
  int pushed = opd__ctx_enter(ctx);
  int sdev = -1;
  if (opd__cu.ctx_get_device(&sdev) == 0 && strcmp(device, "cuda") == 0)
    dev = sdev; /* "cuda": the stream's */
  else if (sdev >= 0 && sdev != dev) {
    opd__ctx_leave(pushed);
    pthread_mutex_unlock(&k->mu);
    return opd__fail(OPD_EINVAL, "%s: the stream is on cuda:%d of this "
                     "process, the run names cuda:%d (\"%s\")", who, sdev,
                     dev, device);
  }
  char buf[16];
  const char *wire = opd__cuda_wire_name(dev, buf);
  cevents_t *e;
  uint64_t t[5] = {TRACING(k) ? opd__now_ns() : 0};
  rc = opd__lazy_error(k);
  if (rc == 0) rc = events_for(c, k, dev, ctx, &e);
  for (uint32_t i = 0; at != NULL && rc == 0 && i < at->n; i++)
    if (at->ptrs[i] != NULL)
      rc = opd__tensor_at(c, k, dev, device, at->ptrs[i], &at->t[i]);
  if (rc == 0 && e->gpu && lazy && e->flag) {
    /* enqueued: the stream polls the flag word the daemon writes after
     * the run; its answer is read later */
    if (k->n_lazy == LAZY) opd__lazy_reap(c, k, LAZY / 2);
    /* this id's pool event was last recorded for an id OPD_STREAM_EVENTS
     * before: that run's answer says the daemon queued its wait on it */
    uint64_t id = opd__new_id(c);
    /* a batch's run after its first: ordered after that one on the
     * daemon's stream, the caller's stream not waited for (the batch's
     * contract, opd_batch_begin) */
    batch_t *b = &k->batch;
    int in_batch = b->open && b->stream == stream && b->dev == dev;
    int after = in_batch && b->runs > 0;
    /* a stream whose work is all done (as if synchronized): the run needs
     * no wait; else the stream's word, else an event of the pool */
    int on_legacy = opd__is_legacy(stream);
    int idle = !after && opd__cu.stream_query != NULL && !k->no_idle &&
               !(opd__legacy() >= LEGACY_WORD && on_legacy) &&
               opd__cu.stream_query(stream) == 0;
    int slot = !after && !idle && e->words ? opd__slot_for(e, stream) : 0;
    while (!after && !idle && slot == 0 && k->n_lazy > 0 &&
           k->lazy[0] + OPD_STREAM_EVENTS <= id)
      opd__lazy_reap(c, k, k->n_lazy - 1);
    if (TRACING(k)) t[1] = opd__now_ns();
    /* LEGACY_KERNEL: the poll kernel writes the word (not stamped; not in
     * a batch, whose runs get their poll kernel only at the join) */
    cu_ptr_t mine = slot != 0 && !in_batch && on_legacy && opd__legacy() >= LEGACY_KERNEL &&
                            e->fn_w != NULL && !STAMPING(k)
                        ? e->flag + (cu_ptr_t)slot * OPD_STREAM_SLOT_BYTES
                        : 0;
    if (after) {
      b->n_runs++;
    } else if (idle) {
      k->idle++;
    } else if (mine != 0) {
      /* written by the poll kernel below, as it starts */
    } else if (slot != 0) { /* the stream's word: the daemon's stream polls it */
      /* LEGACY_FORK: written on libopd's stream once it reached here */
      void *on = opd__legacy() == LEGACY_FORK ? opd__side_for(k, e, stream) : stream;
      if (on != stream && ((r = opd__cu.event_record(e->fork_ev, stream)) != 0 ||
                           (r = opd__cu.stream_wait_event(on, e->fork_ev, 0)) != 0))
        rc = opd__fail(OPD_EBACKEND, "%s: the caller's stream's event for "
                       "libopd's (cuEventRecord, cuStreamWaitEvent): %s", who,
                       opd__cu_str(r));
      else if ((r = opd__cu.memset_d32(e->flag + (cu_ptr_t)slot * OPD_STREAM_SLOT_BYTES,
                                  (unsigned)id, 1, on)) != 0)
        rc = opd__fail(OPD_EBACKEND, "%s: cuMemsetD32Async on %s: %s", who,
                       on == stream ? "the caller's stream" : "libopd's stream",
                       opd__cu_str(r));
    } else if ((r = opd__cu.event_record(e->pool[id % OPD_STREAM_EVENTS], stream)) != 0) {
      rc = opd__fail(OPD_EBACKEND, "%s: cuEventRecord on the caller's "
                     "stream: %s", who, opd__cu_str(r));
    }
    if (TRACING(k)) t[2] = opd__now_ns();
    uint32_t extra = after || idle ? 0 : slot ? OPD_RUN_F_WAIT | OPD_RUN_F_WORD |
                                                    ((uint32_t)slot << OPD_RUN_SLOT_SHIFT)
                                              : OPD_RUN_F_WAIT;
    if (rc == 0) rc = send(c, arg, 1, wire, &id, extra);
    if (TRACING(k)) t[3] = opd__now_ns();
    if (rc == 0 && in_batch) { /* the stream waits at the join */
      k->lazy[k->n_lazy++] = id;
      b->runs++;
      b->last = id;
      b->e = e;
      if (b->runs >= BATCH_RUNS) rc = opd__batch_join_locked(c, k, who);
    } else if (rc == 0) {
      rc = opd__poll_launch(c, k, e, stream, id, 1, idle, mine, who);
    }
    if (TRACING(k) && rc == 0) {
      t[4] = opd__now_ns();
      opd__steps_add(&k->steps, t);
      if (k->steps.n % 2000 == 0) opd__trace_print(k);
    }
  } else if (rc == 0 && e->gpu) {
    if (TRACING(k)) t[1] = opd__now_ns();
    if ((r = opd__cu.event_record(e->mine, stream)) != 0)
      rc = opd__fail(OPD_EBACKEND, "%s: cuEventRecord on the caller's "
                     "stream: %s", who, opd__cu_str(r));
    if (TRACING(k)) t[2] = opd__now_ns();
    if (rc == 0) rc = send(c, arg, 1, wire, NULL, 0);
    if (TRACING(k)) t[3] = opd__now_ns();
    /* only a run the daemon took has recorded its event */
    if (rc == 0 && (r = opd__cu.stream_wait_event(stream, e->theirs, 0)) != 0)
      rc = opd__fail(OPD_EBACKEND, "%s: cuStreamWaitEvent on the caller's "
                     "stream: %s", who, opd__cu_str(r));
    if (TRACING(k) && rc == 0) {
      t[4] = opd__now_ns();
      opd__steps_add(&k->steps, t);
      if (k->steps.n % 2000 == 0) opd__trace_print(k);
    }
  } else if (rc == 0) { /* host order: the stream's work done first */
    if ((r = opd__cu.stream_sync(stream)) != 0)
      rc = opd__fail(OPD_EBACKEND, "%s: cuStreamSynchronize: %s", who,
                     opd__cu_str(r));
    if (rc == 0) rc = send(c, arg, 0, wire, NULL, 0);
  }
  opd__ctx_leave(pushed);
  pthread_mutex_unlock(&k->mu);
  return rc;
}

typedef struct {
  const char *device, *op;
  const opd_tensor_t *in, *out;
  uint32_t n_in, n_out, n_attrs;
  const opd_attr_t *attrs;
} run_args_t;

static int send_run(opd_client_t *c, const void *arg, int gpu,
                    const char *wire, uint64_t *lazy, uint32_t extra) {
  const run_args_t *a = arg;
  if (lazy != NULL) /* *lazy: the id, given */
    return opd__submit_flags_id(c, wire, OPD_RUN_F_ASYNC | OPD_RUN_F_FLAG | extra,
                                a->op, a->in, a->n_in, a->out,
                                a->n_out, a->attrs, a->n_attrs, *lazy);
  return opd__run_flags(c, wire, gpu ? OPD_RUN_F_ASYNC | OPD_RUN_F_WAIT |
                        OPD_RUN_F_SIGNAL : 0, a->op, a->in, a->n_in, a->out,
                        a->n_out, a->attrs, a->n_attrs);
}

int opd_run_stream(opd_client_t *c, const char *device, void *stream,
                   const char *op, const opd_tensor_t *in, uint32_t n_in,
                   const opd_tensor_t *out, uint32_t n_out,
                   const opd_attr_t *attrs, uint32_t n_attrs) {
  run_args_t a = {device, op, in, out, n_in, n_out, n_attrs, attrs};
  return ordered(c, "opd_run_stream", device, stream, send_run, &a, NULL, 0);
}

int opd_enqueue_stream(opd_client_t *c, const char *device, void *stream,
                       const char *op, const opd_tensor_t *in, uint32_t n_in,
                       const opd_tensor_t *out, uint32_t n_out,
                       const opd_attr_t *attrs, uint32_t n_attrs) {
  run_args_t a = {device, op, in, out, n_in, n_out, n_attrs, attrs};
  return ordered(c, "opd_enqueue_stream", device, stream, send_run, &a, NULL, 1);
}

static int stream_ptrs(opd_client_t *c, const char *who, const char *device,
                       void *stream, const char *op, void *const *ptrs,
                       opd_tensor_t *t, uint32_t n_in, uint32_t n_out,
                       const opd_attr_t *attrs, uint32_t n_attrs, int lazy) {
  if (n_in + n_out > 0 && (ptrs == NULL || t == NULL))
    return opd__fail(OPD_EINVAL, "%s: NULL ptrs or tensors with %u of them",
                     who, n_in + n_out);
  run_args_t a = {device, op, t, t + n_in, n_in, n_out, n_attrs, attrs};
  ptrs_t at = {ptrs, t, n_in + n_out};
  return ordered(c, who, device, stream, send_run, &a, &at, lazy);
}

int opd_run_stream_ptrs(opd_client_t *c, const char *device, void *stream,
                        const char *op, void *const *ptrs, opd_tensor_t *t,
                        uint32_t n_in, uint32_t n_out, const opd_attr_t *attrs,
                        uint32_t n_attrs) {
  return stream_ptrs(c, "opd_run_stream_ptrs", device, stream, op, ptrs, t,
                     n_in, n_out, attrs, n_attrs, 0);
}

int opd_enqueue_stream_ptrs(opd_client_t *c, const char *device, void *stream,
                            const char *op, void *const *ptrs, opd_tensor_t *t,
                            uint32_t n_in, uint32_t n_out,
                            const opd_attr_t *attrs, uint32_t n_attrs) {
  return stream_ptrs(c, "opd_enqueue_stream_ptrs", device, stream, op, ptrs, t,
                     n_in, n_out, attrs, n_attrs, 1);
}

static int send_prepared(opd_client_t *c, const void *arg, int gpu,
                         const char *wire, uint64_t *lazy, uint32_t extra) {
  (void)wire, (void)lazy, (void)extra; /* the prepared frame names it
                                          (opd__cuda_wire) */
  int rc = opd_run_prepared(c, arg); /* answered at enqueue */
  return rc == 0 && !gpu ? opd_synchronize(c) : rc;
}

int opd_run_prepared_stream(opd_client_t *c, const opd_prepared_t *p,
                            void *stream) {
  const char *device = opd__prepared_device(p);
  if (p != NULL && !(opd__prepared_flags(p) & OPD_RUN_F_WAIT))
    return opd__fail(OPD_EINVAL, "opd_run_prepared_stream: the run was not "
                     "prepared with OPD_RUN_STREAM");
  return ordered(c, "opd_run_prepared_stream", device, stream, send_prepared,
                 p, NULL, 0);
}

int opd_synchronize(opd_client_t *c) {
  int rc = opd__check_usable(c);
  if (rc) return rc;
  struct opd_cuda *k = __atomic_load_n(&c->cuda, __ATOMIC_ACQUIRE);
  if (k != NULL) { /* the enqueued runs' answers first */
    pthread_mutex_lock(&k->mu);
    opd__lazy_reap(c, k, 0);
    pthread_mutex_unlock(&k->mu);
  }
  rc = opd__call(c, OPD_MSG_SYNC, NULL, NULL, -1, NULL, NULL);
  if (k != NULL) {
    pthread_mutex_lock(&k->mu);
    int lr = opd__lazy_error(k);
    pthread_mutex_unlock(&k->mu);
    if (rc == 0) rc = lr;
  }
  return rc;
}
