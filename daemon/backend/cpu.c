/* The CPU backend: a run on host arenas executes on the loop thread when
 * it is tiny, else on libuv's thread pool with the kernel pool for
 * intra-op parallelism.
 *
 * DESIGN
 * A run whose tensors total at most --inline-bytes executes on the loop
 * thread: a thread hand-off would cost more than its kernel, and launch
 * returns OPD_LAUNCH_DONE. So does a larger run (up to 16 MiB) of an op
 * whose time its signature sets (OPD_OPF_STEADY_COST: products,
 * convolutions, poolings, reductions, gathers; or OPD_OPF_INPLACE, one
 * pass over contiguous data: relu, add, mul, gelu, softmax, the norms)
 * once earlier runs of the same signature (op, dtypes, shapes, strides,
 * attribute values) say its kernel takes at most --inline-us serially:
 * the hand-off and back cost 60-90 us on the 2-core VM, where a 64 KiB
 * add takes 3 (bench/results, "bench_cpu_torch.py"), and a thread's
 * wake-up alone about 45 there (a futex round trip between two threads,
 * two wake-ups, 85 us at p50 on 2026-12-08; a 64x64 matmul, 10-16 us of
 * kernel, took 110-130 us a call through the threads and 52-78 on the
 * loop).
 * The estimate (cpu_learn, on the loop thread as each run
 * completes) is a moving mean of the kernel's time (each run weighs 1/8;
 * a maximum followed every stray slow run and kept a 3 us relu on the
 * threads), kept per signature in a direct-mapped table of
 * OPD_COST_SLOTS (a signature that meets another's slot starts again); a
 * run on the kernel threads counts as nthreads times its time, since it
 * may have used them all, so a signature comes inline only when even that
 * fits, and stays while its serial runs do. Keyed by the exact signature,
 * a client cannot teach the daemon with cheap shapes and then send a
 * costly shape of the same size inline: a new shape goes to the threads
 * first. What is left is what the data does to one signature's time
 * (denormals), which the next run's estimate takes in; a run of at most
 * --inline-bytes already runs inline whatever its data. Ops whose time
 * the values set (nms, plugins without either flag) never come inline
 * this way. While nothing runs on the kernel threads (srv->pool_jobs 0)
 * and no latency-class client is connected, a run whose estimate (the
 * threads' time times their number, divided by it again: how long the
 * loop would be held) is within --idle-inline-us executes on the loop
 * too, through exec_loop (the pool, this thread its caller, the workers
 * helping): a VM's two thread wake-ups each way cost ~45 us apiece, a
 * large part of a run of a few hundred, and the only one kept waiting
 * is a request that comes meanwhile, for at most that long. Any other
 * run goes to libuv's pool
 * (uv_queue_work), so one client's big op never stalls another client's
 * I/O; after_work_cb calls the job's completion callback on the loop.
 * While such runs are out (srv->pool_jobs), the loop scheduler naps
 * instead of spinning (daemon/loop.c): their threads need the core.
 *
 * Classes of service (docs/scheduling.md): runs for libuv's pool go
 * through the class dispatch (daemon/sched.c: latency runs jump the
 * best-effort ones waiting for a thread); a best-effort run's kernels use
 * the pool's best-effort view (sliced, yielding to the latency class), and
 * a latency run marks latency work in progress (opd__exec_urgent) from
 * its launch to its completion, so best-effort slices stand back while
 * its thread wakes up and runs.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h" /* opd__now_ns */
#include "common/wire.h"
#include "daemon/backend/backend.h"
#include "daemon/devq.h" /* opd__devq_latency_users */
#include "daemon/graph/graph.h"
#include "daemon/run/strided.h"
#include "daemon/sched.h"
#include "daemon/ticks.h"
#include "daemon/types.h"
#include "kernels/runtime/exec.h"
#include "kernels/runtime/opcheck.h"

/* A graph's nodes back to back, on the run's tensors (daemon/graph/graph.h);
 * the first failure stops it, named by its node. */
static int run_graph(opd_job_t *job) {
  opd_graph_t *g = job->graph;
  void *in[OPD_MAX_TENSORS], *out[OPD_MAX_TENSORS];
  for (int k = 0; k < g->n_in; k++) in[k] = job->call.in[k].data;
  for (int k = 0; k < g->n_out; k++) out[k] = job->call.out[k].data;
  opd__graph_bind(g, in, out);
  for (int i = 0; i < g->n_nodes; i++) {
    opd_kcall_t *c = &g->nodes[i].call;
    const opd_op_def_t *op = c->op;
    c->exec = job->call.exec;
    c->err[0] = '\0';
    int rc = opd__kernel_rc(c, (op->cpu_fast ? op->cpu_fast : op->cpu_ref)(c));
    if (rc != 0) {
      snprintf(job->call.err, sizeof job->call.err, "node %d (%s): %.200s",
               g->nodes[i].def, op->name, c->err);
      return rc;
    }
  }
  return 0;
}

/* The kernel call and its time (kernel threads or the loop thread). */
static void run_kernel(opd_job_t *job) {
  const opd_op_def_t *op = job->call.op;
  job->t_start = opd__now_ns();
  uint64_t t0 = opd__ticks();
  opd_cpu_fn fn = op->cpu_fast ? op->cpu_fast : op->cpu_ref;
  if (job->graph != NULL)
    job->rc = run_graph(job);
  else if (job->strided) /* contiguous copies around it (run/strided.h) */
    job->rc = opd__kernel_rc(&job->call, opd__strided_cpu(&job->call, job->strided, fn));
  else
    job->rc = opd__kernel_rc(&job->call, fn(&job->call));
  uint64_t t1 = opd__ticks();
  job->ns = t1 > t0 ? opd__ticks_ns(t1 - t0) : 0; /* moved CPUs: no time */
}

#define INLINE_MAX_BYTES (16u << 20) /* past this, never by measure */

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

/* The run's signature: op, dtypes, shapes, strides (a strided run costs
 * what its layout makes it cost, copied around its kernel or read by it:
 * OPD_OPF_CPU_STRIDED) and attribute values; nonzero. */
static uint64_t signature(const opd_job_t *job) {
  const opd_kcall_t *c = &job->call;
  uint64_t h = mix(0x6f7064, (uint64_t)job->op_index);
  for (int i = 0; i < c->n_in + c->n_out; i++) {
    const opd_tview_t *t = i < c->n_in ? &c->in[i] : &c->out[i - c->n_in];
    h = mix(h, ((uint64_t)(uint32_t)t->dtype << 32) | (uint32_t)t->rank);
    for (int d = 0; d < t->rank; d++) h = mix(h, (uint64_t)t->shape[d]);
    for (int d = 0; d < t->rank; d++)
      h = mix(h, (uint64_t)t->strides[d]);
  }
  for (int a = 0; a < c->op->n_attrs && a < OPD_MAX_ATTRS; a++) {
    const opd_attr_val_t *v = &c->attr[a];
    uint64_t fb;
    memcpy(&fb, &v->f, sizeof fb);
    h = mix(mix(mix(h, (uint64_t)(uint32_t)v->type), (uint64_t)v->i), fb);
    for (int k = 0; k < v->n && k < OPD_MAX_RANK; k++) h = mix(h, (uint64_t)v->ints[k]);
    for (const char *p = v->s; p < v->s + sizeof v->s && *p; p++) h = mix(h, (unsigned char)*p);
  }
  return h ? h : 1;
}

/* Whether runs of this job's op may go inline by measure: a time its
 * signature sets (OPD_OPF_STEADY_COST, or one pass over contiguous data:
 * OPD_OPF_INPLACE, not OPD_OPF_STRIDED), on the CPU, at most
 * INLINE_MAX_BYTES. */
static int learns(const opd_job_t *job) {
  if (job->graph != NULL) return 1; /* its own estimate: graph->cost_ns */
  uint32_t f = job->call.op->flags;
  int steady = (f & OPD_OPF_STEADY_COST) ||
               ((f & OPD_OPF_INPLACE) && !(f & OPD_OPF_STRIDED));
  return job->device < 0 && steady && job->bytes <= INLINE_MAX_BYTES;
}

/* What earlier runs say this one takes (cpu_learn's moving mean: its
 * graph's, or its signature's), 0 when nothing was learnt. */
static uint64_t learnt_ns(const opd_server_t *srv, const opd_job_t *job) {
  if (job->graph != NULL) return job->graph->cost_ns;
  if (!learns(job)) return 0;
  uint64_t sig = signature(job);
  const opd_cost_t *e = &srv->cost[sig % OPD_COST_SLOTS];
  return e->sig == sig ? e->ns : 0;
}

/* Whether a run is cheap enough to execute on the loop thread
 * (--inline-bytes, --inline-us); est: learnt_ns. */
static int runs_inline(const opd_server_t *srv, const opd_job_t *job,
                       uint64_t est) {
  if (job->device >= 0) return 0;
  if (job->graph != NULL) /* a model's request: by its own time alone (its
                             tensors' bytes say nothing of its nodes') */
    return est > 0 && est <= srv->cfg.limits.graph_inline_us * 1000ull;
  if (job->bytes <= srv->cfg.limits.inline_bytes) return 1;
  return est > 0 && est <= srv->cfg.limits.inline_us * 1000ull;
}

/* Whether a run executes on the loop thread with the kernel threads
 * helping (--idle-inline-us): nothing runs on them, no latency-class
 * client is there to wait for the loop, the loop's current turn has not
 * spent that long already (a client that queued many runs would hold the
 * others' requests for all of them: past it, its runs go to the threads
 * and the loop moves on), and the run's estimate (its signature's, or its
 * graph's: the threads' time times their number) says it holds the loop
 * at most that long. */
static int runs_on_idle_loop(const opd_server_t *srv, const opd_job_t *job,
                             uint64_t est) {
  uint64_t lim = srv->cfg.limits.idle_inline_us * 1000ull;
  uint64_t n = srv->exec.nthreads > 1 ? (uint64_t)srv->exec.nthreads : 1;
  return lim > 0 && est > 0 && est / n <= lim && job->device < 0 &&
         srv->pool_jobs == 0 && opd__devq_latency_users(srv) == 0 &&
         opd__now_ns() - srv->turn_ns <= lim;
}

/* A completed CPU run's kernel time into its signature's estimate (on the
 * loop thread, as the run completes, before its job->done or launch's
 * OPD_LAUNCH_DONE: the backend learns from its own runs). */
static void cpu_learn(opd_server_t *srv, const opd_job_t *job) {
  if (job->rc != 0 || job->ns == 0 || !learns(job) ||
      (job->graph == NULL && job->bytes <= srv->cfg.limits.inline_bytes))
    return;
  uint64_t ns = job->ns;
  if (job->call.exec != &opd__exec_serial && srv->exec.nthreads > 1)
    ns *= (uint64_t)srv->exec.nthreads;
  if (job->graph != NULL) { /* the same moving mean, kept by the graph */
    uint64_t *e = &job->graph->cost_ns;
    *e = *e == 0 ? ns : (*e * 7 + ns + 7) / 8;
    return;
  }
  uint64_t sig = signature(job);
  opd_cost_t *e = &srv->cost[sig % OPD_COST_SLOTS];
  if (e->sig != sig) { /* a new signature, or another one's slot */
    e->sig = sig;
    e->ns = ns;
  } else {
    e->ns = (e->ns * 7 + ns + 7) / 8;
  }
}

static void work_cb(uv_work_t *w) {
  opd_job_t *job = (opd_job_t *)w;
  run_kernel(job);
  atomic_fetch_add_explicit(&job->s->srv->pool_done, 1, memory_order_relaxed);
}

static void after_work_cb(uv_work_t *w, int status) {
  opd_job_t *job = (opd_job_t *)w;
  (void)status; /* jobs are never cancelled */
  job->s->srv->pool_jobs--;
  if (opd__job_class(job) == OPD_CLASS_LATENCY) opd__exec_urgent(&job->s->srv->exec, -1);
  opd__sched_done(job->s->srv, job);
  cpu_learn(job->s->srv, job);
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
  int urgent = opd__job_class(job) == OPD_CLASS_LATENCY;
  /* the estimate once (a signature's hash), not for a run small enough
     by its bytes */
  uint64_t est = job->graph == NULL && job->bytes <= srv->cfg.limits.inline_bytes
                     ? 0 : learnt_ns(srv, job);
  if (runs_inline(srv, job, est)) {
    job->call.exec = &opd__exec_serial;
    if (urgent) opd__exec_urgent(&srv->exec, 1);
    run_kernel(job);
    if (urgent) opd__exec_urgent(&srv->exec, -1);
    cpu_learn(srv, job);
    return OPD_LAUNCH_DONE;
  }
  if (!urgent && runs_on_idle_loop(srv, job, est)) {
    job->call.exec = &srv->exec_loop; /* the pool, this thread its caller */
    run_kernel(job);
    cpu_learn(srv, job);
    return OPD_LAUNCH_DONE;
  }
  if (job->now) return OPD_LAUNCH_LATER; /* not on the caller's stack */
  job->call.exec = urgent ? &srv->exec : &srv->exec_be;
  int rc = opd__sched_submit(srv, job, work_cb, after_work_cb);
  if (rc == 0 && urgent) /* from now: a thread must wake up for it */
    opd__exec_urgent(&srv->exec, 1);
  if (rc != 0) {
    snprintf(job->call.err, sizeof job->call.err, "uv_queue_work: %s",
             uv_strerror(rc));
    return OPD_EINTERNAL;
  }
  srv->pool_jobs++;
  return OPD_LAUNCH_QUEUED;
}

/* A graph on the cpu: each node's dtypes taken by its CPU kernels, and
 * the intermediates' buffer. */
static int cpu_graph_prepare(opd_graph_t *g, opd_err_t *err) {
  for (int i = 0; i < g->n_nodes; i++) {
    const opd_kcall_t *c = &g->nodes[i].call;
    for (int k = 0; k < c->n_in && c->op->cpu_dtypes; k++)
      if (!((c->op->cpu_dtypes >> c->in[k].dtype) & 1))
        return opd__errf(err, OPD_EDTYPE, "node %d (%s): input %d has dtype "
                         "%s, which the cpu backend does not take; define the "
                         "graph on a cuda device", g->nodes[i].def, c->op->name,
                         k, opd__dtype_name(c->in[k].dtype));
  }
  if (g->temp_bytes > 0 &&
      (g->temp = aligned_alloc(64, (g->temp_bytes + 63) / 64 * 64)) == NULL)
    return opd__errf(err, OPD_ENOMEM, "out of memory for %llu bytes of "
                     "intermediates", (unsigned long long)g->temp_bytes);
  return 0;
}

static void cpu_graph_release(opd_graph_t *g) {
  free(g->temp);
  g->temp = NULL;
}

/* Host memory needs nothing from this backend; the device operations are
 * the device backend's (NULL here: generic code never asks the CPU
 * backend for them). */
const opd_backend_t opd__backend_cpu = {
    .name = "cpu", .plan = cpu_plan, .launch = cpu_launch,
    .graph_prepare = cpu_graph_prepare, .graph_release = cpu_graph_release};
