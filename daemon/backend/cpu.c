/* The CPU backend: a run on host arenas executes on the loop thread when
 * it is tiny, else on libuv's thread pool with the kernel pool for
 * intra-op parallelism.
 *
 * DESIGN
 * A run whose tensors total at most --inline-bytes executes on the loop
 * thread: a thread hand-off would cost more than its kernel, and launch
 * returns OPD_LAUNCH_DONE. So does a larger run (up to 16 MiB) of an op
 * flagged OPD_OPF_INPLACE (one pass over its data: relu, add, mul, gelu,
 * softmax, the norms; its time grows with its bytes, whatever its
 * arguments) once the runs of that op and size class so far say its
 * kernel takes at most --inline-us serially: the hand-off and back cost
 * 60-90 us on the 2-core VM, where a 64 KiB relu takes 3 (bench/results,
 * "bench_cpu_torch.py"). The estimate (opd__cpu_learn, on the loop thread
 * as every run completes) is per op and power-of-two size class, in ns
 * per KiB; a run on the kernel threads counts as nthreads times its time
 * (it may have used them all), so an op comes inline only when even that
 * fits, and stays while its serial runs do. It is a moving mean (each
 * run weighs 1/8): a maximum followed every stray slow run (a preempted
 * thread, a cold cache) and kept a 3 us relu on the threads on the VM.
 * So a run the loop chose may take longer than --inline-us: by what one
 * op's runs of one size class differ (the erf gelu ~2.5x the tanh one,
 * softmax by its row length), and by what the machine adds. Ops
 * whose cost is not linear in their bytes (matmul, conv2d, nms, plugins
 * without the flag) never come inline this way. A larger one goes to libuv's pool
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

/* The size class of a run of `bytes`, or -1 outside them. */
static int cost_class(uint64_t bytes) {
  if (bytes < (1u << OPD_COST_LG0)) return -1;
  int lg = 63 - __builtin_clzll(bytes);
  return lg - OPD_COST_LG0 < OPD_COST_CLASSES ? lg - OPD_COST_LG0 : -1;
}

static int learns(const opd_job_t *job) {
  return job->device < 0 && (job->call.op->flags & OPD_OPF_INPLACE) &&
         cost_class(job->bytes) >= 0;
}

int opd__cpu_inline(const opd_server_t *srv, const opd_job_t *job) {
  if (job->device >= 0) return 0;
  if (job->bytes <= srv->cfg.limits.inline_bytes) return 1;
  if (srv->cfg.limits.inline_us == 0 || !learns(job)) return 0;
  uint64_t per = srv->op_stats[job->op_index].cpu_ns_kib[cost_class(job->bytes)];
  return per != 0 && per * job->bytes / 1024 <= srv->cfg.limits.inline_us * 1000ull;
}

void opd__cpu_learn(opd_server_t *srv, const opd_job_t *job) {
  if (job->rc != 0 || job->ns == 0 || !learns(job)) return;
  uint64_t ns = job->ns;
  if (job->call.exec != &opd__exec_serial && srv->exec.nthreads > 1)
    ns *= (uint64_t)srv->exec.nthreads;
  uint64_t per = ns * 1024 / job->bytes;
  if (per == 0) per = 1;
  if (per > UINT32_MAX) per = UINT32_MAX;
  uint32_t *e = &srv->op_stats[job->op_index].cpu_ns_kib[cost_class(job->bytes)];
  if (*e == 0) *e = (uint32_t)per;
  else *e = (uint32_t)(((uint64_t)*e * 7 + per + 7) / 8);
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
