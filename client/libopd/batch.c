/* libopd's batches: enqueued runs on one stream ordered among themselves
 * on the daemon's stream and joined back to the caller's stream once
 * (opd_batch_begin, opd_batch_end), and what torch's kernels keep alive
 * for them (opd__batch_keep, opd__batch_join, opd__batch_open).
 *
 * DESIGN
 * A connection has at most one open batch (batch_t in struct opd_cuda,
 * changed under its mu). Its runs after the first are not ordered after
 * the caller's stream, only after each other; the join (poll.c's
 * opd__batch_join_locked) puts one poll kernel for the last run on the
 * stream, then drops what was kept. At BATCH_RUNS runs, or when the kept
 * objects would not fit, the batch joins by itself and goes on.
 */
#include "client/libopd/stream.h"

int opd_batch_begin(opd_client_t *c, void *stream) {
  int rc = opd__check_usable(c);
  if (rc == 0) rc = opd__cu_ready("opd_batch_begin");
  struct opd_cuda *k = rc == 0 ? opd__cuda_of(c) : NULL;
  if (rc != 0 || k == NULL) return rc ? rc : OPD_ENOMEM;
  void *ctx = NULL;
  cu_result r = opd__cu.stream_get_ctx(stream, &ctx);
  if (r != 0 || ctx == NULL)
    return opd__fail(OPD_EINVAL, "opd_batch_begin: %p is not a CUDA stream "
                     "of this process with a context (cuStreamGetCtx: %s)",
                     stream, r ? opd__cu_str(r) : "no context");
  pthread_mutex_lock(&k->mu);
  batch_t *b = &k->batch;
  if (b->open) {
    rc = opd__fail(OPD_ESTATE, "opd_batch_begin: a batch is already open on "
                   "this connection (stream %p); end it first (batches do not "
                   "nest)", b->stream);
  } else {
    int pushed = opd__ctx_enter(ctx), sdev = -1;
    if (opd__cu.ctx_get_device(&sdev) != 0 || sdev < 0 || sdev >= OPD_CUDA_DEVICES)
      rc = opd__fail(OPD_EINVAL, "opd_batch_begin: the stream's device is "
                     "unknown or past cuda:%d", OPD_CUDA_DEVICES - 1);
    opd__ctx_leave(pushed);
    if (rc == 0) {
      b->open = 1, b->stream = stream, b->ctx = ctx, b->dev = sdev;
      b->runs = 0, b->n_keep = 0, b->e = NULL;
    }
  }
  pthread_mutex_unlock(&k->mu);
  return rc;
}

int opd_batch_end(opd_client_t *c) {
  int rc = opd__check_usable(c);
  if (rc) return rc;
  struct opd_cuda *k = __atomic_load_n(&c->cuda, __ATOMIC_ACQUIRE);
  if (k != NULL) pthread_mutex_lock(&k->mu);
  if (k == NULL || !k->batch.open) {
    rc = opd__fail(OPD_ESTATE, "opd_batch_end: no batch is open on this "
                   "connection (opd_batch_begin)");
  } else {
    rc = opd__batch_join_in(c, k, "opd_batch_end");
    k->batch.open = 0;
  }
  if (k != NULL) pthread_mutex_unlock(&k->mu);
  return rc;
}

int opd__batch_keep(opd_client_t *c, void *stream, void *obj,
                    void (*drop)(void *)) {
  struct opd_cuda *k = c != NULL ? __atomic_load_n(&c->cuda, __ATOMIC_ACQUIRE) : NULL;
  if (k == NULL) return 0;
  pthread_mutex_lock(&k->mu);
  batch_t *b = &k->batch;
  int kept = b->open && b->stream == stream;
  /* full: join, then keep on; a failed join waited for the runs on the
   * host (poll_launch's fallback): nothing to keep */
  if (kept && b->n_keep == BATCH_KEEP && opd__batch_join_in(c, k, "opd_batch") != 0)
    kept = 0;
  if (kept) {
    b->keep[b->n_keep].obj = obj;
    b->keep[b->n_keep++].drop = drop;
  }
  pthread_mutex_unlock(&k->mu);
  return kept;
}

int opd__batch_join(opd_client_t *c, void *stream) {
  struct opd_cuda *k = c != NULL ? __atomic_load_n(&c->cuda, __ATOMIC_ACQUIRE) : NULL;
  if (k == NULL) return 0;
  pthread_mutex_lock(&k->mu);
  int rc = k->batch.open && k->batch.stream == stream
               ? opd__batch_join_in(c, k, "opd_batch") : 0;
  pthread_mutex_unlock(&k->mu);
  return rc;
}

int opd__batch_open(opd_client_t *c, void *stream) {
  struct opd_cuda *k = c != NULL ? __atomic_load_n(&c->cuda, __ATOMIC_ACQUIRE) : NULL;
  if (k == NULL) return 0;
  pthread_mutex_lock(&k->mu);
  int open = k->batch.open && k->batch.stream == stream;
  pthread_mutex_unlock(&k->mu);
  return open;
}
