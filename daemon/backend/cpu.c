/* The CPU backend: a run on host arenas executes on the loop thread when
 * it is tiny, else on libuv's thread pool with the kernel pool for
 * intra-op parallelism.
 *
 * DESIGN
 * A run whose tensors total at most --inline-bytes executes on the loop
 * thread: a thread hand-off would cost more than its kernel, and launch
 * returns OPD_LAUNCH_DONE. A larger one goes to libuv's pool
 * (uv_queue_work), so one client's big op never stalls another client's
 * I/O; after_work_cb calls the job's completion callback on the loop.
 * While such runs are out (srv->pool_jobs), the loop scheduler naps
 * instead of spinning (daemon/loop.c): their threads need the core.
 */
#include <stdatomic.h>
#include <stdio.h>

#include "common/wire.h"
#include "daemon/backend/backend.h"
#include "daemon/server.h"

/* The kernel call and its time (kernel threads or the loop thread). */
void opd__cpu_run_kernel(opd_job_t *job) {
  const opd_op_def_t *op = job->call.op;
  uint64_t t0 = opd__ticks();
  job->rc = opd__kernel_rc(&job->call, (op->cpu_fast ? op->cpu_fast
                                                    : op->cpu_ref)(&job->call));
  uint64_t t1 = opd__ticks();
  job->ns = t1 > t0 ? opd__ticks_ns(t1 - t0) : 0; /* moved CPUs: no time */
}

int opd__cpu_inline(const opd_server_t *srv, const opd_job_t *job) {
  return job->device < 0 && job->bytes <= srv->cfg.limits.inline_bytes;
}

static void work_cb(uv_work_t *w) {
  opd_job_t *job = (opd_job_t *)w;
  opd__cpu_run_kernel(job);
  atomic_fetch_add_explicit(&job->s->srv->pool_done, 1, memory_order_relaxed);
}

static void after_work_cb(uv_work_t *w, int status) {
  opd_job_t *job = (opd_job_t *)w;
  (void)status; /* jobs are never cancelled */
  job->s->srv->pool_jobs--;
  job->done(job);
}

static int cpu_plan(opd_job_t *job, const opd_tplace_t *in,
                    const opd_tplace_t *out, opd_err_t *err) {
  const opd_kcall_t *call = &job->call;
  const opd_op_def_t *op = call->op;
  (void)in, (void)out;
  for (int i = 0; i < call->n_in && op->cpu_dtypes; i++)
    if (!((op->cpu_dtypes >> call->in[i].dtype) & 1)) {
      return opd__errf(err, OPD_EDTYPE,
                       "input %d has dtype %s, which the cpu backend "
                       "does not take; run it on a cuda device", i,
                       opd__dtype_name(call->in[i].dtype));
    }
  return 0;
}

static int cpu_launch(opd_job_t *job) {
  opd_server_t *srv = job->s->srv;
  if (opd__cpu_inline(srv, job)) {
    job->call.exec = &opd__exec_serial;
    opd__cpu_run_kernel(job);
    return OPD_LAUNCH_DONE;
  }
  job->call.exec = &srv->exec;
  int rc = uv_queue_work(srv->loop, &job->work, work_cb, after_work_cb);
  if (rc != 0) {
    snprintf(job->call.err, sizeof job->call.err, "uv_queue_work: %s",
             uv_strerror(rc));
    return OPD_EINTERNAL;
  }
  srv->pool_jobs++;
  return OPD_LAUNCH_QUEUED;
}

/* Host memory needs nothing from this backend; the device operations are
 * the device backend's (NULL here: generic code never asks the CPU
 * backend for them). */
const opd_backend_t opd__backend_cpu = {
    .name = "cpu", .plan = cpu_plan, .launch = cpu_launch};
