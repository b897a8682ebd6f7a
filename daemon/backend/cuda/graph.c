/* The CUDA backend's graphs: memory at define, a CUDA graph captured once
 * and launched per run.
 *
 * DESIGN
 * At define (opd__cu_graph_prepare) every node must have a CUDA kernel for
 * its dtype; the intermediates' buffer and one workspace (the largest any
 * node asks for, cuBLASLt's share included) are allocated once,
 * stream-ordered on the device's utility stream, and freed the same way
 * when the graph's last reference goes: nothing is allocated per run, so
 * the node launches can be captured. The nodes are cut into segments: runs
 * of nodes whose op may be captured, and single nodes whose op says it may
 * not (OPD_OPF_NO_CAPTURE). A run (opd__cu_graph_enqueue, from launch.c
 * once the run's ordering with the client is queued) stages host tensors
 * through device buffers the graph owns (so their addresses stay the
 * same), points the node calls at the run's device pointers
 * (opd__graph_bind) and, when they changed or nothing is captured yet,
 * captures each capturable segment on a private stream and instantiates it
 * (or updates the executable graph in place: launches already queued keep
 * the parameters they were launched with). Then one cudaGraphLaunch per
 * captured segment, and the uncaptured nodes launched between them, on the
 * session's stream. A capture that fails (a plugin that synchronizes
 * without saying so) is logged once and the graph runs its nodes
 * uncaptured from then on, with the same results.
 */
#include <stdlib.h>
#include <string.h>

#include "daemon/backend/cuda/state.h"
#include "daemon/graph/graph.h"
#include "daemon/log.h"
#include "kernels/runtime/opcheck.h"

typedef struct cu_seg {
  int first, end;                /* nodes [first, end), execution order */
  int capture;                   /* the ops may be captured */
  cudaGraphExec_t exec;          /* once captured */
} cu_seg_t;

typedef struct cu_graph {
  int dev;
  void *ws;                      /* the nodes' workspace */
  size_t ws_bytes;
  void *stage_in[OPD_MAX_TENSORS], *stage_out[OPD_MAX_TENSORS]; /* host
                                    tensors' device copies, made at need */
  cudaStream_t cap;              /* captures happen on it */
  int uncaptured;                /* a capture failed: run node by node */
  int n_seg;
  cu_seg_t seg[];
} cu_graph_t;

static size_t node_ws(const opd_kcall_t *c) {
  const opd_op_def_t *op = c->op;
  size_t scratch = op->cuda_workspace ? op->cuda_workspace(c) : 0;
  if (scratch > 0 || (op->flags & OPD_OPF_CUDA_BLASLT))
    return OPD_CUDA_LT_WORKSPACE + scratch;
  return 0;
}

static const cuda_dev_t *graph_dev(const opd_graph_t *g) {
  return &cuda_state(g->srv)->dev[g->device];
}

static void dev_free(const cuda_dev_t *d, void *p) {
  if (p != NULL) cudaFreeAsync(p, d->util);
}

void opd__cu_graph_release(opd_graph_t *g) {
  cu_graph_t *cg = g->backend;
  if (cg == NULL && g->temp == NULL) return;
  const cuda_dev_t *d = graph_dev(g);
  set_device(d->index);
  dev_free(d, g->temp);
  g->temp = NULL;
  if (cg != NULL) {
    for (int i = 0; i < cg->n_seg; i++)
      if (cg->seg[i].exec != NULL) cudaGraphExecDestroy(cg->seg[i].exec);
    dev_free(d, cg->ws);
    for (int k = 0; k < OPD_MAX_TENSORS; k++) {
      dev_free(d, cg->stage_in[k]);
      dev_free(d, cg->stage_out[k]);
    }
    if (cg->cap != NULL) cudaStreamDestroy(cg->cap);
    free(cg);
    g->backend = NULL;
  }
  (void)cudaGetLastError();
}

int opd__cu_graph_prepare(opd_graph_t *g, opd_err_t *err) {
  const cuda_dev_t *d = graph_dev(g);
  opd_err_t e;
  int n_seg = 0;
  size_t ws = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const opd_kcall_t *c = &g->nodes[i].call;
    if (opd__cuda_kernel(c->op, c->n_in > 0 ? c->in[0].dtype : 0, &e) == NULL)
      return opd__errf(err, OPD_EDEVICE, "node %d (%s): %s", g->nodes[i].def,
                       c->op->name, e.msg);
    size_t w = node_ws(c);
    if (w > ws) ws = w;
    int cap = !(c->op->flags & OPD_OPF_NO_CAPTURE);
    int prev = i > 0 && !(g->nodes[i - 1].call.op->flags & OPD_OPF_NO_CAPTURE);
    if (i == 0 || !cap || !prev) n_seg++;
  }
  cu_graph_t *cg = calloc(1, sizeof *cg + sizeof(cu_seg_t) * (size_t)n_seg);
  if (cg == NULL) return opd__errf(err, OPD_ENOMEM, "out of memory");
  g->backend = cg;
  cg->dev = g->device;
  for (int i = 0; i < g->n_nodes; i++) {
    int cap = !(g->nodes[i].call.op->flags & OPD_OPF_NO_CAPTURE);
    cu_seg_t *last = cg->n_seg ? &cg->seg[cg->n_seg - 1] : NULL;
    if (last != NULL && cap && last->capture) {
      last->end = i + 1;
    } else {
      cg->seg[cg->n_seg++] = (cu_seg_t){i, i + 1, cap, NULL};
    }
  }
  CU(set_device(d->index), err);
  CU(cudaStreamCreateWithFlags(&cg->cap, cudaStreamNonBlocking), err);
  if (g->temp_bytes > 0) CU(cudaMallocAsync(&g->temp, g->temp_bytes, d->util), err);
  if (ws > 0) CU(cudaMallocAsync(&cg->ws, ws, d->util), err);
  cg->ws_bytes = ws;
  CU(cudaStreamSynchronize(d->util), err);
  return 0;
}

/* Launches nodes [first, end) on stream s: 0, or the first failure. */
static int launch_nodes(opd_graph_t *g, int first, int end, cudaStream_t s,
                        opd_err_t *err) {
  cu_graph_t *cg = g->backend;
  const cuda_dev_t *d = graph_dev(g);
  opd_cuda_ctx_t ctx = {.stream = s, .cublaslt = d->lt, .workspace = cg->ws,
                        .workspace_bytes = cg->ws_bytes, .device = d->index};
  for (int i = first; i < end; i++) {
    opd_kcall_t *c = &g->nodes[i].call;
    c->err[0] = '\0';
    opd__cuda_pdl_offer(0); /* no dependent launches inside a graph */
    int rc = opd__kernel_rc(c, c->op->cuda(c, &ctx));
    if (rc != 0)
      return opd__errf(err, rc, "node %d (%s): %s", g->nodes[i].def,
                       c->op->name, c->err);
  }
  return 0;
}

/* Captures segment k and instantiates it (or updates its executable graph):
 * 0, or 1 when it cannot be captured (err says why). */
static int capture(opd_graph_t *g, cu_seg_t *sg, opd_err_t *err) {
  cu_graph_t *cg = g->backend;
  cudaGraph_t graph = NULL;
  cudaError_t e = cudaStreamBeginCapture(cg->cap, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) {
    opd__errf(err, cuda_code(e), "cudaStreamBeginCapture: %s", cudaGetErrorString(e));
    return 1;
  }
  int rc = launch_nodes(g, sg->first, sg->end, cg->cap, err);
  e = cudaStreamEndCapture(cg->cap, &graph);
  if (rc == 0 && e != cudaSuccess)
    opd__errf(err, cuda_code(e), "cudaStreamEndCapture: %s", cudaGetErrorString(e));
  if (rc != 0 || e != cudaSuccess) {
    if (graph != NULL) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    return 1;
  }
  if (sg->exec != NULL) {
    cudaGraphExecUpdateResultInfo info;
    if (cudaGraphExecUpdate(sg->exec, graph, &info) == cudaSuccess) {
      cudaGraphDestroy(graph);
      return 0;
    }
    (void)cudaGetLastError(); /* the topology changed: a new one, below */
    cudaGraphExecDestroy(sg->exec); /* launches queued complete first */
    sg->exec = NULL;
  }
  e = cudaGraphInstantiate(&sg->exec, graph, 0);
  cudaGraphDestroy(graph);
  if (e != cudaSuccess) {
    sg->exec = NULL;
    opd__errf(err, cuda_code(e), "cudaGraphInstantiate: %s", cudaGetErrorString(e));
    (void)cudaGetLastError();
    return 1;
  }
  return 0;
}

/* A device buffer of the graph for a host tensor: made once. */
static int stage(const cuda_dev_t *d, void **slot, uint64_t bytes, opd_err_t *err) {
  if (*slot != NULL) return 0;
  CU(cudaMallocAsync(slot, bytes, d->util), err);
  CU(cudaStreamSynchronize(d->util), err);
  return 0;
}

int opd__cu_graph_enqueue(opd_job_t *job, cudaStream_t stream, int *host,
                          opd_err_t *err) {
  opd_graph_t *g = job->graph;
  cu_graph_t *cg = g->backend;
  const cuda_dev_t *d = graph_dev(g);
  cuda_job_t *cj = cuda_job(job);
  opd_kcall_t *call = &job->call;
  void *in[OPD_MAX_TENSORS], *out[OPD_MAX_TENSORS];
  int rc;
  *host = 0;
  for (int k = 0; k < call->n_in; k++) {
    in[k] = call->in[k].data;
    if (cj->host_in[k] == NULL) continue;
    *host = 1;
    if ((rc = stage(d, &cg->stage_in[k], cj->in_bytes[k], err)) != 0) return rc;
    CU(cudaMemcpyAsync(cg->stage_in[k], cj->host_in[k], cj->in_bytes[k],
                       cudaMemcpyHostToDevice, stream), err);
    in[k] = cg->stage_in[k];
  }
  for (int k = 0; k < call->n_out; k++) {
    out[k] = call->out[k].data;
    if (cj->host_out[k] == NULL) continue;
    *host = 1;
    if ((rc = stage(d, &cg->stage_out[k], cj->out_bytes[k], err)) != 0) return rc;
    out[k] = cg->stage_out[k];
  }
  int fresh = 0;
  for (int i = 0; i < cg->n_seg && !fresh; i++)
    fresh = cg->seg[i].capture && cg->seg[i].exec == NULL;
  if ((opd__graph_bind(g, in, out) || fresh) && !cg->uncaptured) {
    for (int i = 0; i < cg->n_seg; i++) {
      opd_err_t why;
      if (!cg->seg[i].capture || capture(g, &cg->seg[i], &why) == 0) continue;
      LOG_WARN("graph %llu (%s): nodes %d.. could not be captured (%s); it "
               "runs node by node from now on", (unsigned long long)g->id,
               g->name, g->nodes[cg->seg[i].first].def, why.msg);
      cg->uncaptured = 1;
      break;
    }
  }
  for (int i = 0; i < cg->n_seg; i++) {
    cu_seg_t *sg = &cg->seg[i];
    if (sg->capture && sg->exec != NULL && !cg->uncaptured)
      CU(cudaGraphLaunch(sg->exec, stream), err);
    else if ((rc = launch_nodes(g, sg->first, sg->end, stream, err)) != 0)
      return rc;
  }
  for (int k = 0; k < call->n_out; k++)
    if (cj->host_out[k] != NULL)
      CU(cudaMemcpyAsync(cj->host_out[k], cg->stage_out[k], cj->out_bytes[k],
                         cudaMemcpyDeviceToHost, stream), err);
  return 0;
}
