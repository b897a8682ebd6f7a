/* The CUDA backend's runs: the plan (kernel, staging), the session's
 * streams, and launching a run's work.
 *
 * DESIGN
 * Each session gets its own non-blocking stream per device the first time
 * it runs there (high priority if it asked at hello), so one client's ops
 * stay ordered and different clients' ops overlap. A client that orders
 * runs with its own CUDA stream (STREAM, then runs with OPD_RUN_F_WAIT /
 * SIGNAL) gives the session an interprocess event of its own, which the
 * stream waits for before such a run, and gets the handle of the
 * session's interprocess event, recorded after it: the GPU orders both
 * ways, no thread waits. A run asked to be asynchronous whose tensors are
 * all device memory returns OPD_LAUNCH_ENQUEUED once queued. A run is launched from
 * the loop thread: host tensors are staged through stream-ordered scratch
 * (cudaMallocAsync, H2D copy from the pinned arena), strided tensors
 * an op's kernel cannot take get contiguous copies around it (strided.c),
 * the kernel gets a workspace the same way when it needs one (cuBLASLt,
 * im2col, nms masks: never shared between streams, and the pool recycles
 * it, so idle sessions hold no device memory), the kernel is launched,
 * outputs are
 * copied back, scratch is freed on the stream, and an event is recorded;
 * poller.c then watches that event. Nothing blocks the loop or other
 * clients on the GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h" /* opd__now_ns */
#include "common/wire.h"
#include "daemon/backend/cuda/state.h"
#include "daemon/log.h"
#include "daemon/run/strided.h"
#include "daemon/sched.h"
#include "kernels/cuda/cuda.h"
#include "kernels/runtime/opcheck.h"

/* Whether the op has a CUDA kernel for its input dtype, and the staging
 * plan: host tensors go through device scratch (H2D before, D2H after). */
int opd__cu_plan(opd_job_t *job, const opd_tplace_t *in,
                 const opd_tplace_t *out, opd_err_t *err) {
  opd_kcall_t *call = &job->call;
  cuda_job_t *cj = cuda_job(job);
  int dtype = call->n_in > 0 ? call->in[0].dtype : 0;
  /* a graph's nodes were checked at define (graph.c) */
  cj->kernel = job->graph ? call->op : opd__cuda_kernel(call->op, dtype, err);
  if (cj->kernel == NULL) return OPD_EDEVICE;
  cj->event = NULL;
  for (int i = 0; i < call->n_in; i++) {
    cj->host_in[i] = in[i].host ? call->in[i].data : NULL;
    cj->in_bytes[i] = in[i].host ? in[i].bytes : 0;
  }
  for (int i = 0; i < call->n_out; i++) {
    cj->host_out[i] = out[i].host ? call->out[i].data : NULL;
    cj->out_bytes[i] = out[i].host ? out[i].bytes : 0;
  }
  return 0;
}

/* The session's state on device dev, made the first time: its stream
 * (high priority if it asked at hello). */
static int session_dev(opd_session_t *s, int dev, cuda_sess_t **out,
                       opd_err_t *err) {
  cuda_state_t *st = cuda_state(s->srv);
  cuda_dev_t *d = &st->dev[dev];
  if (s->backend_session[dev] == NULL) {
    cuda_sess_t *cs = calloc(1, sizeof *cs);
    if (cs == NULL) return opd__errf(err, OPD_ENOMEM, "out of memory");
    cudaError_t e = cudaStreamCreateWithPriority(
        &cs->stream, cudaStreamNonBlocking,
        s->priority ? d->prio_high : d->prio_low);
    if (e != cudaSuccess) {
      free(cs);
      return opd__errf(err, cuda_code(e), "cuda:%d: cudaStreamCreate: %s",
                       dev, cudaGetErrorString(e));
    }
    cs->cur_cls = s->priority ? OPD_CLASS_LATENCY : OPD_CLASS_BE;
    cs->cls_stream[cs->cur_cls] = cs->stream;
    s->backend_session[dev] = cs;
  }
  *out = s->backend_session[dev];
  return 0;
}

/* Puts the session's runs on its stream of class cls (a graph of another
 * class than its session's: daemon/sched.h), made the first time with
 * that class's priority. The session's runs stay in order: the new stream
 * waits for everything queued on the other. */
static int class_stream(opd_session_t *s, cuda_sess_t *cs, int dev, int cls,
                        opd_err_t *err) {
  if (cls == cs->cur_cls) return 0;
  cuda_dev_t *d = &cuda_state(s->srv)->dev[dev];
  cudaError_t e = cudaSuccess;
  if (cs->cls_stream[cls] == NULL)
    e = cudaStreamCreateWithPriority(&cs->cls_stream[cls], cudaStreamNonBlocking,
                                     cls == OPD_CLASS_LATENCY ? d->prio_high
                                                              : d->prio_low);
  if (e == cudaSuccess && cs->switch_ev == NULL)
    e = cudaEventCreateWithFlags(&cs->switch_ev, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventRecord(cs->switch_ev, cs->stream);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(cs->cls_stream[cls], cs->switch_ev, 0);
  if (e != cudaSuccess)
    return opd__errf(err, cuda_code(e), "cuda:%d: the %s class's stream: %s", dev,
                     opd__class_name(cls), cudaGetErrorString(e));
  cs->stream = cs->cls_stream[cls];
  cs->cur_cls = cls;
  return 0;
}

/* Opens n interprocess events by their handles (64 bytes each) into ev:
 * 0, or the client's error naming the kind of event needed. */
static int open_events(int dev, const unsigned char *h, uint32_t n,
                       cudaEvent_t *ev, opd_err_t *err) {
  for (uint32_t i = 0; i < n; i++) {
    cudaIpcEventHandle_t eh;
    memcpy(&eh, h + 64 * (size_t)i, sizeof eh);
    cudaError_t e = cudaIpcOpenEventHandle(&ev[i], eh);
    if (e != cudaSuccess) {
      (void)cudaGetLastError(); /* not sticky: the handle was bad */
      while (i > 0) cudaEventDestroy(ev[--i]);
      return opd__errf(err, OPD_EINVAL, "cuda:%d: the event handle does not "
                       "open (cudaIpcOpenEventHandle: %s): it must be a "
                       "cudaIpcGetEventHandle of an event created with "
                       "cudaEventInterprocess | cudaEventDisableTiming, in a "
                       "live process, on this device", dev,
                       cudaGetErrorString(e));
    }
  }
  return 0;
}

/* OPD_GPU_STAMPS=DIR (diagnosis, docs/async.md "Timestamps"): the
 * ordered runs' kernels stamp %globaltimer into the session's flag
 * allocation, written to DIR at the session's end; NULL: off. */
static const char *stamps_dir(void) {
  static const char *dir;
  static int looked;
  if (!looked) {
    const char *e = getenv("OPD_GPU_STAMPS");
    dir = e != NULL && e[0] != '\0' ? e : NULL;
    looked = 1;
  }
  return dir;
}

_Static_assert(OPD_STAMPS_END <= (2u << 20), "the stamps lie inside the 2 MiB flag allocation");

/* The daemon's stamps entry of request id, or NULL (off) */
static unsigned long long *stamps_of(const cuda_sess_t *cs, uint32_t id) {
  if (stamps_dir() == NULL) return NULL;
  return (unsigned long long *)((char *)cs->flag + OPD_STAMPS_DAEMON +
                                32u * (id % OPD_STAMPS_N));
}

/* Writes the session's stamps (both sides') to the directory, one line per
 * run that has them: request id, the client's poll start and seen, the
 * daemon's wait start, word seen, flag store (ns of %globaltimer). Waits for
 * the session's stream: for diagnosis only. */
static void stamps_write(const opd_session_t *s, int dev, cuda_sess_t *cs) {
  size_t n = OPD_STAMPS_END - OPD_STAMPS_OFFSET;
  unsigned long long *h = malloc(n);
  if (h == NULL) return;
  if (cudaStreamSynchronize(cs->stream) != cudaSuccess ||
      cudaMemcpy(h, (char *)cs->flag + OPD_STAMPS_OFFSET, n, cudaMemcpyDeviceToHost) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    free(h);
    return;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/stamps-%ld-%u-%d.txt", stamps_dir(), (long)getpid(),
           (unsigned)s->id, dev);
  FILE *f = fopen(path, "w");
  if (f != NULL) {
    fprintf(f, "# req poll_start poll_seen wait_start word_seen flag_store\n");
    const unsigned long long *c = h, *d = h + 2 * OPD_STAMPS_N;
    for (uint32_t i = 0; i < OPD_STAMPS_N; i++) {
      const unsigned long long *e = d + 4 * i;
      if (e[1] == 0 && e[2] == 0) continue;
      fprintf(f, "%llu %llu %llu %llu %llu %llu\n", e[3], c[2 * i], c[2 * i + 1], e[0],
              e[1], e[2]);
    }
    fclose(f);
  }
  free(h);
}

/* Zeroes a flag word before its client can read it, on the device's
 * utility stream, waited for: the client's poll kernels are not ordered
 * with any stream of the daemon (and the session's own stream may hold
 * its runs: the utility stream only ever holds short zeroings). */
static cudaError_t flag_zero(cuda_state_t *st, int dev, void *p) {
  cudaStream_t u = st->dev[dev].util;
  cudaError_t e = cudaMemsetAsync(p, 0, OPD_CUDA_FLAG_ZERO, u);
  if (e == cudaSuccess && stamps_dir() != NULL)
    e = cudaMemsetAsync((char *)p + OPD_STAMPS_OFFSET, 0,
                        OPD_STAMPS_END - OPD_STAMPS_OFFSET, u);
  return e == cudaSuccess ? cudaStreamSynchronize(u) : e;
}

/* The session's flag word on dev: an ended session's of the same uid
 * whose stream is done, zeroed, else a new 2 MiB allocation (the driver's
 * granule: its handle maps this word and nothing of another allocation). */
static int flag_make(opd_session_t *s, int dev, cuda_sess_t *cs, opd_err_t *err) {
  cuda_state_t *st = cuda_state(s->srv);
  for (cuda_spare_flag_t **pp = &st->spare_flags; *pp != NULL; pp = &(*pp)->next) {
    cuda_spare_flag_t *f = *pp;
    if (f->uid != s->uid || f->dev != dev || cudaEventQuery(f->done) != cudaSuccess)
      continue;
    (void)cudaGetLastError(); /* a query's cudaErrorNotReady */
    cudaError_t e = flag_zero(st, dev, f->p);
    if (e != cudaSuccess)
      return opd__errf(err, cuda_code(e), "cuda:%d: the session's flag word "
                       "(cudaMemsetAsync): %s", dev, cudaGetErrorString(e));
    *pp = f->next;
    cs->flag = f->p;
    memcpy(cs->flag_handle, f->handle, 64);
    cudaEventDestroy(f->done);
    free(f);
    return 0;
  }
  (void)cudaGetLastError();
  void *p = NULL;
  cudaIpcMemHandle_t fh;
  cudaError_t e = cudaMalloc(&p, (size_t)2 << 20);
  if (e == cudaSuccess) e = flag_zero(st, dev, p);
  if (e == cudaSuccess) e = cudaIpcGetMemHandle(&fh, p);
  if (e != cudaSuccess) {
    if (p != NULL) cudaFree(p);
    return opd__errf(err, cuda_code(e), "cuda:%d: the session's flag word "
                     "(cudaMalloc, cudaIpcGetMemHandle): %s", dev,
                     cudaGetErrorString(e));
  }
  cs->flag = p;
  memcpy(cs->flag_handle, &fh, sizeof fh);
  return 0;
}

/* STREAM: opens the client's interprocess event (WAIT waits for it) and
 * makes, once, the session's own (SIGNAL records it; its handle goes
 * back); with flag, the pool of the client's events FLAG runs wait on and
 * the session's flag word (FLAG writes it). A handle that does not open is
 * the client's error: it names the kind of event needed. */
int opd__cu_stream(opd_session_t *s, int dev, const opd_stream_req_t *rq,
                   opd_stream_rep_t *rp, opd_err_t *err) {
  cuda_state_t *st = cuda_state(s->srv);
  if (dev < 0 || dev >= s->srv->n_devices)
    return opd__errf(err, OPD_EDEVICE, "no device cuda:%d (%d here)", dev,
                     s->srv->n_devices);
  if (!s->srv->healthy)
    return opd__errf(err, OPD_EBACKEND, "cuda:%d: %s", dev,
                     s->srv->goodbye_why);
  cudaError_t e = set_device(st->dev[dev].index);
  if (e != cudaSuccess)
    return opd__errf(err, cuda_code(e), "cuda:%d: cudaSetDevice: %s", dev,
                     cudaGetErrorString(e));
  cuda_sess_t *cs;
  int rc = session_dev(s, dev, &cs, err);
  if (rc != 0) return rc;
  cudaEvent_t ev, pool[OPD_STREAM_EVENTS];
  if ((rc = open_events(dev, rq->event, 1, &ev, err)) != 0) return rc;
  if (rq->flag && (rc = open_events(dev, rq->events, rq->n_events, pool, err)) != 0) {
    cudaEventDestroy(ev);
    return rc;
  }
  if (cs->signal_ev == NULL) {
    cudaEvent_t mine;
    cudaIpcEventHandle_t mh;
    e = cudaEventCreateWithFlags(&mine, cudaEventInterprocess | cudaEventDisableTiming);
    if (e == cudaSuccess && (e = cudaIpcGetEventHandle(&mh, mine)) != cudaSuccess)
      cudaEventDestroy(mine);
    if (e == cudaSuccess) {
      cs->signal_ev = mine;
      memcpy(cs->signal_handle, &mh, sizeof mh);
    }
  }
  if (e == cudaSuccess && rq->flag && cs->flag == NULL) {
    rc = flag_make(s, dev, cs, err);
    if (rc != 0) e = cudaErrorUnknown; /* err set */
  }
  if (e != cudaSuccess) {
    cudaEventDestroy(ev);
    for (uint32_t i = 0; rq->flag && i < rq->n_events; i++) cudaEventDestroy(pool[i]);
    return rc != 0 ? rc : opd__errf(err, cuda_code(e), "cuda:%d: the session's "
                                    "event (cudaIpcGetEventHandle): %s", dev,
                                    cudaGetErrorString(e));
  }
  /* a wait already queued on the old ones stays as it was */
  if (cs->wait_ev != NULL) cudaEventDestroy(cs->wait_ev);
  cs->wait_ev = ev;
  if (rq->flag) {
    for (int i = 0; i < cs->n_pool; i++) cudaEventDestroy(cs->pool[i]);
    memcpy(cs->pool, pool, sizeof pool[0] * rq->n_events);
    cs->n_pool = (int)rq->n_events;
    cs->wait_ns = (uint64_t)(rq->wait_ms ? rq->wait_ms : s->srv->cfg.limits.stream_wait_ms) *
                  1000000u;
  }
  memcpy(rp->event, cs->signal_handle, 64);
  if (rq->flag) memcpy(rp->flag, cs->flag_handle, 64);
  rp->words = rq->flag && st->dev[dev].board != NULL;
  return 0;
}

/* Writes value to cs's flag word on its stream (set_device done): 0, or
 * the launch's error. The word only grows (mod 2^32) as the client polls
 * it with a signed difference: request ids come in order. dependent: the
 * kernel just queued was a dependent launch that lets the next start
 * (kernels/cuda/cuda.h), so a one-thread dependent kernel writes it. */
static cudaError_t flag_write(cuda_sess_t *cs, uint32_t value, int dependent) {
  if (dependent)
    return (cudaError_t)opd__cuda_set_flag_pdl(cs->stream, cs->flag, value,
                                               stamps_of(cs, value));
  return (cudaError_t)opd__cuda_set_flag(cs->stream, cs->flag, value);
}

/* What a FLAG run writes: its request id, or that of a later FLAG run
 * refused while this one was queued (validate.c), which covers both. */
static uint32_t flag_of(const opd_job_t *job) {
  return (uint32_t)(job->flag_after ? job->flag_after : job->req_id);
}

/* A WORD run's wait (include/opd/protocol.h): the session's stream polls
 * the client's word of the run's slot for the request id. */
static cudaError_t word_wait(const cuda_dev_t *d, cuda_sess_t *cs,
                             const opd_job_t *job, unsigned sid) {
  unsigned slot = (job->flags & OPD_RUN_SLOT_MASK) >> OPD_RUN_SLOT_SHIFT;
  return (cudaError_t)opd__cuda_wait_word(
      cs->stream, cs->flag + slot * OPD_CUDA_SLOT_WORDS, (unsigned)job->req_id,
      cs->flag + OPD_CUDA_STICKY_WORD, d->board_dev, sid, cs->wait_ns,
      stamps_of(cs, (uint32_t)job->req_id));
}

void opd__cu_signal(opd_session_t *s, int dev, uint32_t value) {
  cuda_state_t *st = cuda_state(s->srv);
  if (st == NULL || dev < 0 || dev >= s->srv->n_devices || !s->srv->healthy)
    return;
  cuda_sess_t *cs = cuda_sess(s, dev);
  if (cs == NULL || cs->flag == NULL) return;
  if (set_device(st->dev[dev].index) != cudaSuccess) return;
  cudaError_t e = flag_write(cs, value, 0);
  if (e != cudaSuccess) {
    LOG_WARN("cuda:%d: the flag word's write failed: %s", dev,
             cudaGetErrorString(e));
    if (is_sticky(e)) s->srv->poisoned(s->srv, cudaGetErrorString(e));
  }
}

/* An ended session's flag word goes to the spares (cuda_spare_flag_t),
 * its stream's end recorded (before the stream is destroyed); without
 * the event it is simply kept. */
static void flag_keep(cuda_state_t *st, opd_session_t *s, int dev, cuda_sess_t *cs) {
  cuda_spare_flag_t *f = calloc(1, sizeof *f);
  if (f == NULL) return; /* 2 MiB stay mapped until the daemon exits */
  f->p = cs->flag;
  memcpy(f->handle, cs->flag_handle, 64);
  f->uid = s->uid;
  f->dev = dev;
  if (cudaEventCreateWithFlags(&f->done, cudaEventDisableTiming) != cudaSuccess ||
      cudaEventRecord(f->done, cs->stream) != cudaSuccess) {
    (void)cudaGetLastError();
    if (f->done != NULL) cudaEventDestroy(f->done);
    free(f); /* never reused */
    return;
  }
  f->next = st->spare_flags;
  st->spare_flags = f;
}

void opd__cu_flags_free(opd_server_t *srv) {
  cuda_state_t *st = cuda_state(srv);
  while (st->spare_flags != NULL) {
    cuda_spare_flag_t *f = st->spare_flags;
    st->spare_flags = f->next;
    set_device(st->dev[f->dev].index);
    cudaEventDestroy(f->done); /* the memory goes with the process: a
                                  cudaFree would wait for every stream */
    free(f);
  }
}

void opd__cu_session_end(opd_session_t *s) {
  cuda_state_t *st = cuda_state(s->srv);
  if (st == NULL) return;
  for (int i = 0; i < s->srv->n_devices; i++) {
    cuda_sess_t *cs = s->backend_session[i];
    if (cs == NULL) continue;
    set_device(st->dev[i].index);
    if (cs->flag != NULL && stamps_dir() != NULL) stamps_write(s, i, cs);
    if (cs->flag != NULL) flag_keep(st, s, i, cs); /* records on the stream */
    /* each returns at once; work drains (the current one last) */
    for (int c = 0; c < 2; c++)
      if (cs->cls_stream[c] != NULL) cudaStreamDestroy(cs->cls_stream[c]);
    if (cs->switch_ev != NULL) cudaEventDestroy(cs->switch_ev);
    if (cs->wait_ev != NULL) cudaEventDestroy(cs->wait_ev);
    if (cs->signal_ev != NULL) cudaEventDestroy(cs->signal_ev);
    for (int k = 0; k < cs->n_pool; k++) cudaEventDestroy(cs->pool[k]);
    free(cs);
    s->backend_session[i] = NULL;
  }
}

/* Launches everything of one job on the session's stream. On error the
 * scratch already allocated is freed on the stream; nothing was queued
 * that would call back. */
int opd__cu_launch(opd_job_t *job) {
  opd_session_t *s = job->s;
  cuda_state_t *st = cuda_state(s->srv);
  cuda_job_t *cj = cuda_job(job);
  opd_kcall_t *call = &job->call;
  opd_err_t err = {.code = 0, .msg = ""}; /* into call->err at the end */
  int dev = job->device;
  cuda_dev_t *d = &st->dev[dev];
  cudaStream_t stream = NULL;
  void *scratch[2 * OPD_MAX_TENSORS];
  int n_scratch = 0, rc = 0;

  if (!s->srv->healthy) {
    rc = opd__errf(&err, OPD_EBACKEND, "cuda:%d: %s", dev, s->srv->goodbye_why);
    goto out;
  }
  cudaError_t ce = set_device(d->index);
  if (ce != cudaSuccess) {
    rc = opd__errf(&err, cuda_code(ce), "cuda:%d: cudaSetDevice: %s", dev,
                   cudaGetErrorString(ce));
    goto out;
  }
  cuda_sess_t *cs;
  if ((rc = session_dev(s, dev, &cs, &err)) != 0) goto out;
  if ((rc = class_stream(s, cs, dev, opd__job_class(job), &err)) != 0) goto out;
  stream = cs->stream;
  if ((job->flags & (OPD_RUN_F_WAIT | OPD_RUN_F_SIGNAL | OPD_RUN_F_FLAG)) &&
      cs->wait_ev == NULL) {
    rc = opd__errf(&err, OPD_ESTATE, "cuda:%d: the run asks to be ordered "
                   "with the client's stream (async WAIT/SIGNAL/FLAG), but "
                   "this session sent no STREAM for cuda:%d", dev, dev);
    goto out;
  }
  if ((job->flags & OPD_RUN_F_FLAG) && (cs->flag == NULL || cs->n_pool == 0)) {
    rc = opd__errf(&err, OPD_ESTATE, "cuda:%d: the run asks for the flag "
                   "word (async FLAG), but this session's STREAM for cuda:%d "
                   "did not ask for one", dev, dev);
    goto out;
  }
  if ((job->flags & OPD_RUN_F_WORD) && d->board == NULL) {
    rc = opd__errf(&err, OPD_ESTATE, "cuda:%d: the run asks to wait on the "
                   "client's word (async WORD), but STREAM's reply said "
                   "\"words\": false", dev);
    goto out;
  }
  job->t_start = opd__now_ns();

#define STEP(x)                                                      \
  do {                                                               \
    cudaError_t e_ = (x);                                            \
    if (e_ != cudaSuccess) {                                         \
      rc = opd__errf(&err, cuda_code(e_), "cuda:%d: %s: %s", dev, #x, \
                     cudaGetErrorString(e_));                        \
      goto fail;                                                     \
    }                                                                \
  } while (0)

  uint64_t t_step[5] = {job->t_start}; /* the ordered steps' ends */
  /* the client's work queued before the run, on the GPU */
  if (job->flags & OPD_RUN_F_WORD) { /* the client's word of its slot */
    cj->wait_ms = (uint32_t)(cs->wait_ns / 1000000u);
    STEP(word_wait(d, cs, job, (unsigned)s->id));
  } else if (job->flags & OPD_RUN_F_WAIT) /* a FLAG run: its event of the pool */
    STEP(cudaStreamWaitEvent(stream, (job->flags & OPD_RUN_F_FLAG)
                                         ? cs->pool[job->req_id % (uint64_t)cs->n_pool]
                                         : cs->wait_ev, 0));
  t_step[1] = opd__now_ns();
  int host = 0; /* host tensors: answered at completion */
  int pdl = 0;
  if (job->graph != NULL) { /* a graph: its captured work (graph.c) */
    if ((rc = opd__cu_graph_enqueue(job, stream, &host, &err)) != 0) goto fail;
    t_step[2] = opd__now_ns();
    goto enqueued;
  }
  for (int i = 0; i < call->n_in; i++) {
    if (cj->host_in[i] == NULL || cj->in_bytes[i] == 0) continue;
    void *p;
    host = 1;
    STEP(cudaMallocAsync(&p, cj->in_bytes[i], stream));
    scratch[n_scratch++] = p;
    STEP(cudaMemcpyAsync(p, cj->host_in[i], cj->in_bytes[i],
                         cudaMemcpyHostToDevice, stream));
    call->in[i].data = p;
  }
  for (int i = 0; i < call->n_out; i++) {
    if (cj->host_out[i] == NULL || cj->out_bytes[i] == 0) continue;
    void *p;
    host = 1;
    STEP(cudaMallocAsync(&p, cj->out_bytes[i], stream));
    scratch[n_scratch++] = p;
    if (job->strided >> (OPD_STRIDED_OUT + i) & 1) /* its gaps kept */
      STEP(cudaMemcpyAsync(p, cj->host_out[i], cj->out_bytes[i],
                           cudaMemcpyHostToDevice, stream));
    call->out[i].data = p;
  }
  const opd_op_def_t *op = cj->kernel;
  size_t scratch_bytes = op->cuda_workspace ? op->cuda_workspace(call) : 0;
  size_t ws_bytes = 0;
  if (scratch_bytes > 0 || (op->flags & OPD_OPF_CUDA_BLASLT))
    ws_bytes = OPD_CUDA_LT_WORKSPACE + scratch_bytes;
  void *ws = NULL;
  if (ws_bytes > 0) {
    STEP(cudaMallocAsync(&ws, ws_bytes, stream));
    scratch[n_scratch++] = ws;
  }
  opd_strided_save_t sv; /* strided tensors: contiguous copies */
  if (job->strided) {
    void *p = NULL;
    rc = opd__cu_strided_gather(job, stream, &p, &sv, &err);
    if (p != NULL) scratch[n_scratch++] = p;
    if (rc != 0) goto fail;
  }
  opd_cuda_ctx_t ctx = {.stream = stream, .cublaslt = d->lt, .workspace = ws,
                        .workspace_bytes = ws_bytes, .device = d->index};
  /* its message, if any, in call->err; a plugin's result checked. A
   * built-in kernel may go on as a dependent launch (kernels/cuda/cuda.h) */
  opd__cuda_pdl_offer(d->pdl && !job->strided); /* not behind a copy */
  rc = opd__kernel_rc(call, op->cuda(call, &ctx));
  pdl = opd__cuda_pdl_taken();
  if (job->strided) { /* the outputs scattered, the views put back */
    if (rc != 0) opd__strided_restore(call, job->strided, &sv);
    else if ((rc = opd__cu_strided_scatter(job, stream, &sv, &err)) != 0) goto fail;
  }
  if (rc != 0) goto fail;
  t_step[2] = opd__now_ns();
  for (int i = 0; i < call->n_out; i++) {
    if (cj->host_out[i] == NULL || cj->out_bytes[i] == 0) continue;
    STEP(cudaMemcpyAsync(cj->host_out[i], call->out[i].data,
                         cj->out_bytes[i], cudaMemcpyDeviceToHost, stream));
  }
  for (int i = 0; i < n_scratch; i++) cudaFreeAsync(scratch[i], stream);
  n_scratch = 0;
enqueued:
  /* the client's later work waits for this, on the GPU */
  if (job->flags & OPD_RUN_F_SIGNAL) STEP(cudaEventRecord(cs->signal_ev, stream));
  if (job->flags & OPD_RUN_F_FLAG) /* right after the op: not past SIGNAL's record */
    STEP(flag_write(cs, flag_of(job), pdl && !(job->flags & OPD_RUN_F_SIGNAL)));
  t_step[3] = opd__now_ns();
  cudaEvent_t ev;
  if (opd__cu_event_take(st, dev, &ev) != 0) {
    rc = opd__errf(&err, OPD_EBACKEND, "cuda:%d: cudaEventCreate: %s", dev,
                   cudaGetErrorString(cudaGetLastError()));
    goto fail;
  }
  cudaError_t er = cudaEventRecord(ev, stream);
  if (er != cudaSuccess) {
    opd__cu_event_give(st, dev, ev);
    rc = opd__errf(&err, cuda_code(er), "cuda:%d: cudaEventRecord: %s", dev,
                   cudaGetErrorString(er));
    goto fail;
  }
  cj->event = ev;
  cj->t_launched = t_step[4] = opd__now_ns();
  if (job->flags & OPD_RUN_F_WAIT) opd__steps_add(&st->ordered, t_step);
  opd__cu_pending_add(s->srv, job);
  return (job->flags & OPD_RUN_F_ASYNC) && !host ? OPD_LAUNCH_ENQUEUED
                                                 : OPD_LAUNCH_QUEUED;
fail:
#undef STEP
  for (int i = 0; i < n_scratch; i++) cudaFreeAsync(scratch[i], stream);
  cudaError_t sticky = cudaGetLastError();
  if (is_sticky(sticky)) s->srv->poisoned(s->srv, cudaGetErrorString(sticky));
out:
  /* refused: the client's stream polls for this run's word all the same */
  if (job->flags & OPD_RUN_F_FLAG) opd__cu_signal(s, dev, flag_of(job));
  if (err.msg[0]) snprintf(call->err, sizeof call->err, "%s", err.msg);
  return rc;
}
