/* RUN and INFER: from a request body to a validated job.
 *
 * DESIGN
 * prepare() turns the request into an opd_kcall_t in a fixed order, each
 * step on private copies only: operator lookup, arity, attributes (types,
 * choices, required, defaults), then per input: descriptor decode, dtype
 * against the schema, arena lookup, bounds/overflow (opd__desc_validate),
 * layout (a strided tensor an op's kernel cannot take is marked for a
 * contiguous copy in the job: daemon/run/strided.h); then the op's shape
 * rule, and per output the same checks plus dtype and shape equal to what
 * the rule computed; finally aliasing between outputs and inputs. Every error message starts with the op name and
 * names the tensor ("softmax: input 0 (x) has dtype int32, expected
 * float32"). Kernels see only calls that passed all of it. The job it
 * fills is queued on its session (daemon/run/jobs.c), which runs it; a RUN
 * body is remembered by the run cache (daemon/run/runcache.c).
 */
#include <stdarg.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/clock.h" /* opd__now_ns */
#include "common/wire.h"
#include "daemon/backend/backend.h"
#include "daemon/graph/table.h"
#include "daemon/mem/arena.h"
#include "daemon/metrics.h"
#include "daemon/outbox.h"
#include "daemon/run/attrs.h"
#include "daemon/run/jobs.h"
#include "daemon/run/runcache.h"
#include "daemon/run/strided.h"
#include "daemon/run/validate.h"
#include "kernels/common/kutil.h"
#include "kernels/runtime/registry.h"
#include "kernels/runtime/opcheck.h"

/* "x, weight, bias" */
static void io_names(const opd_io_spec_t *io, int n, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && len < cap; i++)
    len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "",
                            io[i].name ? io[i].name : "?");
}

static int check_arity(const opd_op_def_t *op, const char *what, int given,
                       int lo, int hi, const opd_io_spec_t *io, opd_err_t *err) {
  char names[160];
  if (given >= lo && given <= hi) return 0;
  io_names(io, hi, names, sizeof names);
  if (lo == hi)
    return opd__errf(err, OPD_EARITY, "expects %d %s%s%s%s%s, got %d", lo, what,
                     lo == 1 ? "" : "s", hi ? " (" : "", names, hi ? ")" : "",
                     given);
  return opd__errf(err, OPD_EARITY,
                   "expects %d to %d %ss (%s), got %d", lo, hi, what,
                   names, given);
  (void)op;
}

/* ---- tensors ---------------------------------------------------------- */

typedef struct tref {
  opd_arena_t *arena;
  opd_desc_t d;
  uint64_t extent;
} tref_t;

/* Decodes and validates one tensor; fills view (data set when arena) and
 * marks in *strided a tensor the job copies around its kernel
 * (daemon/run/strided.h). */
static int load_tensor(opd_session_t *s, const opd_op_def_t *op,
                       const msgpack_object *o, int output, int idx,
                       const opd_io_spec_t *io, int infer, tref_t *ref,
                       opd_tview_t *view, uint32_t *strided, opd_err_t *err) {
  const char *what = output ? "output" : "input";
  char why[200];
  int64_t numel;
  int rc;
  /* the tensor's name in messages, formatted only on an error */
#define LABEL "%s %d (%s)"
#define LABEL_ARGS what, idx, io->name ? io->name : "?"
  if ((rc = opd__desc_decode(o, &ref->d, why, sizeof why)) != 0)
    return opd__errf(err, rc, LABEL ": %s", LABEL_ARGS, why);
  if (ref->d.dtype <= 0 || ref->d.dtype >= OPD_DTYPE_COUNT_)
    return opd__errf(err, OPD_EDTYPE, LABEL " has unknown dtype %d", LABEL_ARGS,
                     ref->d.dtype);
  if (!((io->dtypes >> ref->d.dtype) & 1)) {
    /* what the cpu takes, then what only a cuda device takes */
    uint32_t cpu = op->cpu_dtypes ? io->dtypes & op->cpu_dtypes : io->dtypes;
    char want[120], gpu[80];
    size_t len = 0, glen = 0;
    want[0] = gpu[0] = '\0';
#define X(name, val, size, str)                                             \
  if (((cpu >> val) & 1) && len < sizeof want)                              \
    len += (size_t)snprintf(want + len, sizeof want - len, "%s%s",         \
                            len ? " or " : "", str);                        \
  else if (((io->dtypes >> val) & 1) && glen < sizeof gpu)                  \
    glen += (size_t)snprintf(gpu + glen, sizeof gpu - glen, "%s%s",         \
                             glen ? " or " : "", str);
    OPD_DTYPE_MAP(X)
#undef X
    return opd__errf(err, OPD_EDTYPE,
                     LABEL " has dtype %s, expected %s%s%s%s%s", LABEL_ARGS,
                     opd__dtype_name(ref->d.dtype), want,
                     glen ? " (" : "", gpu, glen ? " on a cuda device)" : "",
                     ref->d.dtype == OPD_DTYPE_FLOAT64 &&
                             ((cpu >> OPD_DTYPE_FLOAT32) & 1)
                         ? "; convert float64 to float32"
                         : "");
  }
  uint64_t arena_size = UINT64_MAX;
  ref->arena = NULL;
  if (infer) {
    ref->d.offset = 0;
  } else {
    ref->arena = opd__arena_find(s, ref->d.arena);
    if (ref->arena == NULL)
      return opd__errf(err, OPD_EARENA,
                       LABEL ": unknown arena %llu (not registered by this session)",
                       LABEL_ARGS, (unsigned long long)ref->d.arena);
    arena_size = ref->arena->size;
  }
  if ((rc = opd__desc_validate(&ref->d, arena_size, &numel, &ref->extent, why,
                               sizeof why)) != 0)
    return opd__errf(err, rc, LABEL ": %s", LABEL_ARGS, why);
  view->data = ref->arena ? (char *)ref->arena->base + ref->d.offset : NULL;
  view->dtype = ref->d.dtype;
  view->rank = ref->d.rank;
  memcpy(view->shape, ref->d.shape, sizeof view->shape);
  memcpy(view->strides, ref->d.strides, sizeof view->strides);
  view->numel = numel;
  if (!ref->d.contiguous && !opd__view_contiguous(view)) {
    /* a strided input: read as it is (OPD_OPF_STRIDED) or copied into a
       contiguous one in the job; a strided output: written through a
       contiguous one, which needs one address per element */
    char sbuf[120];
    if (output && opd__view_self_overlaps(view))
      return opd__errf(err, OPD_ELAYOUT, LABEL " has strides %s under which "
                       "elements overlap (a stride 0, or dims interleaved); "
                       "an output needs one address per element", LABEL_ARGS,
                       opd__shape_str(sbuf, sizeof sbuf, ref->d.strides,
                                      ref->d.rank));
    if (output || !(op->flags & OPD_OPF_STRIDED))
      *strided |= 1u << (output ? OPD_STRIDED_OUT + idx : idx);
  }
  return 0;
#undef LABEL
#undef LABEL_ARGS
}

static int overlaps(const tref_t *a, const tref_t *b) {
  if (a->arena != b->arena || a->extent == 0 || b->extent == 0) return 0;
  return a->d.offset < b->d.offset + b->extent &&
         b->d.offset < a->d.offset + a->extent;
}

static int same_tensor(const tref_t *a, const tref_t *b) {
  return a->arena == b->arena && a->d.offset == b->d.offset &&
         a->d.dtype == b->d.dtype && a->d.rank == b->d.rank &&
         memcmp(a->d.shape, b->d.shape, sizeof(int64_t) * (size_t)a->d.rank) == 0 &&
         memcmp(a->d.strides, b->d.strides,
                sizeof(int64_t) * (size_t)a->d.rank) == 0;
}

static int place(opd_job_t *job, int req, tref_t *in, tref_t *out, opd_err_t *err);

static int prepare(opd_session_t *s, const opd_op_def_t *op,
                   const msgpack_object *body, int infer, int req,
                   opd_job_t *job, opd_tshape_t *expect, opd_err_t *err) {
  opd_kcall_t *call = &job->call;
  tref_t in[OPD_MAX_TENSORS], out[OPD_MAX_TENSORS];
  const msgpack_object *o_in = opd__mp_get(body, "in");
  const msgpack_object *o_out = opd__mp_get(body, "out");
  int n_in = 0, n_out = 0, rc;

  const msgpack_object *o_async = opd__mp_get(body, "async");
  uint64_t flags = 0;
  if (o_async != NULL &&
      (opd__mp_uint(o_async, &flags) != 0 ||
       (flags & ~(uint64_t)(OPD_RUN_F_ALL | OPD_RUN_SLOT_MASK)) != 0))
    return opd__errf(err, OPD_EPROTO, "\"async\" must be an unsigned of "
                     "OPD_RUN_F_* flags (ASYNC 1, WAIT 2, SIGNAL 4, FLAG 8, "
                     "WORD 16) and a WORD run's slot in bits 8..13");
  uint64_t slot = (flags & OPD_RUN_SLOT_MASK) >> OPD_RUN_SLOT_SHIFT;
  if ((flags & OPD_RUN_F_WORD) &&
      ((flags & (OPD_RUN_F_WAIT | OPD_RUN_F_FLAG)) != (OPD_RUN_F_WAIT | OPD_RUN_F_FLAG) ||
       slot == 0))
    return opd__errf(err, OPD_EPROTO, "\"async\": WORD (16) needs WAIT (2) and "
                     "FLAG (8), and a slot 1..%d in bits 8..13 (got 0x%llx)",
                     OPD_RUN_WORD_SLOTS - 1, (unsigned long long)flags);
  if (!(flags & OPD_RUN_F_WORD) && slot != 0)
    return opd__errf(err, OPD_EPROTO, "\"async\": a slot in bits 8..13 "
                     "without WORD (16) (got 0x%llx)", (unsigned long long)flags);
  job->flags = (uint32_t)flags;
  if (o_in != NULL && o_in->type != MSGPACK_OBJECT_NIL) {
    if (o_in->type != MSGPACK_OBJECT_ARRAY)
      return opd__errf(err, OPD_EPROTO, "\"in\" must be an array of tensors");
    n_in = (int)o_in->via.array.size;
  }
  if (!infer && o_out != NULL && o_out->type != MSGPACK_OBJECT_NIL) {
    if (o_out->type != MSGPACK_OBJECT_ARRAY)
      return opd__errf(err, OPD_EPROTO, "\"out\" must be an array of tensors");
    n_out = (int)o_out->via.array.size;
  }
  if (n_in + n_out > OPD_MAX_TENSORS)
    return opd__errf(err, OPD_ELIMIT,
                     "%d tensors exceed the limit of %d per run",
                     n_in + n_out, OPD_MAX_TENSORS);
  if ((rc = check_arity(op, "input", n_in, op->n_in_min, op->n_in_max,
                        op->in, err)) != 0)
    return rc;
  if (!infer && (rc = check_arity(op, "output", n_out, op->n_out, op->n_out,
                                  op->out, err)) != 0)
    return rc;
  call->op = op;
  call->n_in = n_in;
  call->n_out = infer ? op->n_out : n_out;
  call->err[0] = '\0';
  if ((rc = opd__attrs_resolve(op, opd__mp_get(body, "attrs"), call, err)) != 0)
    return rc;

  job->bytes = 0;
  job->strided = 0;
  for (int i = 0; i < n_in; i++) {
    /* a variadic op (noop) names its first inputs; the rest reuse the
       last named spec */
    int k = i;
    while (k > 0 && op->in[k].name == NULL) k--;
    const opd_io_spec_t *io = &op->in[k];
    rc = load_tensor(s, op, &o_in->via.array.ptr[i], 0, i, io, infer, &in[i],
                     &call->in[i], &job->strided, err);
    if (rc != 0) return rc;
    job->bytes += in[i].extent;
  }

  /* the shape rule sees shapes and dtypes only */
  void *data[OPD_MAX_TENSORS];
  for (int i = 0; i < n_in; i++) data[i] = call->in[i].data, call->in[i].data = NULL;
  rc = opd__op_shape(call, expect); /* the rule, its results checked */
  for (int i = 0; i < n_in; i++) call->in[i].data = data[i];
  if (rc != 0) return opd__errf(err, rc, "%s", call->err);
  if (infer) return 0;

  for (int i = 0; i < n_out; i++) {
    char a[120], b[120];
    rc = load_tensor(s, op, &o_out->via.array.ptr[i], 1, i, &op->out[i], 0,
                     &out[i], &call->out[i], &job->strided, err);
    if (rc != 0) return rc;
    if (out[i].arena->readonly)
      return opd__errf(err, OPD_EREADONLY,
                       "output %d (%s) is in arena %llu, attached read-only",
                       i, op->out[i].name, (unsigned long long)out[i].arena->id);
    if (out[i].d.dtype != expect[i].dtype)
      return opd__errf(err, OPD_EDTYPE,
                       "output %d (%s) has dtype %s, expected %s", i,
                       op->out[i].name, opd__dtype_name(out[i].d.dtype),
                       opd__dtype_name(expect[i].dtype));
    if (out[i].d.rank != expect[i].rank ||
        memcmp(out[i].d.shape, expect[i].shape,
               sizeof(int64_t) * (size_t)expect[i].rank) != 0)
      return opd__errf(err, OPD_ESHAPE,
                       "output %d (%s) has shape %s, expected %s", i,
                       op->out[i].name,
                       opd__shape_str(a, sizeof a, out[i].d.shape, out[i].d.rank),
                       opd__shape_str(b, sizeof b, expect[i].shape, expect[i].rank));
    job->bytes += out[i].extent;
  }
  for (int i = 0; i < n_out; i++) {
    for (int j = 0; j < i; j++)
      if (overlaps(&out[i], &out[j]))
        return opd__errf(err, OPD_EALIAS,
                         "outputs %d (%s) and %d (%s) overlap", j,
                         op->out[j].name, i, op->out[i].name);
    for (int j = 0; j < n_in; j++) {
      if (!overlaps(&out[i], &in[j])) continue;
      if ((op->flags & OPD_OPF_INPLACE) && same_tensor(&out[i], &in[j]))
        continue;
      return opd__errf(err, OPD_EALIAS,
                       "output %d (%s) overlaps input %d (%s)%s", i,
                       op->out[i].name, j, op->in[j].name,
                       (op->flags & OPD_OPF_INPLACE)
                       ? "; only an exact in-place output is allowed"
                       : "; this op cannot run in place");
    }
  }

  job->strided = opd__strided_flatten(call, job->strided);
  if ((rc = place(job, req, in, out, err)) != 0) return rc;
  if (job->device < 0 && (op->flags & OPD_OPF_CPU_STRIDED))
    job->strided = 0; /* its CPU kernels read the strides themselves */

  /* hold each distinct arena while the job exists */
  job->n_arenas = 0;
  for (int i = 0; i < n_in + n_out; i++) {
    opd_arena_t *a = i < n_in ? in[i].arena : out[i - n_in].arena;
    int k;
    for (k = 0; k < job->n_arenas && job->arenas[k] != a; k++) {
    }
    if (k == job->n_arenas) {
      job->arenas[job->n_arenas++] = a;
      a->refs++;
    }
  }
  return 0;
}

/* ---- the request ------------------------------------------------------ */

/* A device UUID as nvidia-smi and CUDA print it: "GPU-" (optional), then
 * 8-4-4-4-12 hex digits. */
static int is_uuid(const char *s) {
  if (strncasecmp(s, "GPU-", 4) == 0) s += 4;
  static const int group[5] = {8, 4, 4, 4, 12};
  for (int g = 0; g < 5; g++) {
    for (int k = 0; k < group[g]; k++, s++)
      if (!isxdigit((unsigned char)*s)) return 0;
    if (g < 4 && *s++ != '-') return 0;
  }
  return *s == '\0';
}

int opd__device_parse(opd_server_t *srv, const char *dev, int *req, opd_err_t *err) {
  *req = OPD_DEV_AUTO;
  if (strcmp(dev, "auto") == 0) {
    *req = OPD_DEV_ANY;
    return 0;
  }
  if (strcmp(dev, "cpu") == 0) {
    *req = OPD_DEV_CPU;
    return 0;
  }
  if (strcmp(dev, "cuda") == 0 || strncmp(dev, "cuda:", 5) == 0) {
    char *end = NULL;
    long n = dev[4] == ':' ? strtol(dev + 5, &end, 10) : 0;
    if (dev[4] == ':' && (end == dev + 5 || *end != '\0' || n < 0))
      return opd__errf(err, OPD_EDEVICE,
                       "device \"%s\" is not cuda, cuda:N, cpu or auto",
                       dev);
    if (n >= srv->n_devices)
      return opd__errf(err, OPD_EDEVICE,
                       srv->n_devices == 0
                       ? "device \"%s\" is not available: this daemon has no "
                       "CUDA device (backends: cpu)"
                       : "device \"%s\" does not exist: this daemon has %d "
                       "CUDA device(s)",
                       dev, srv->n_devices);
    *req = (int)n;
    return 0;
  }
  if (is_uuid(dev)) { /* the device's UUID, with or without "GPU-" */
    const char *want = strncasecmp(dev, "GPU-", 4) == 0 ? dev + 4 : dev;
    for (int i = 0; i < srv->n_devices; i++) {
      if (strcasecmp(srv->dev_uuid[i] + 4, want) == 0) {
        *req = i;
        return 0;
      }
    }
    if (srv->n_devices == 0)
      return opd__errf(err, OPD_EDEVICE, "no CUDA device with UUID %s: this "
                       "daemon has no CUDA device (backends: cpu)", dev);
    char have[OPD_MAX_DEVICES * 50];
    size_t o = 0;
    have[0] = '\0';
    for (int i = 0; i < srv->n_devices && o < sizeof have; i++)
      o += (size_t)snprintf(have + o, sizeof have - o, "%s%s", i ? ", " : "",
                            srv->dev_uuid[i]);
    return opd__errf(err, OPD_EDEVICE, "no CUDA device with UUID %s here "
                     "(this daemon's: %s)", dev, have);
  }
  return opd__errf(err, OPD_EDEVICE,
                   "unknown device \"%s\" (use cpu, cuda, cuda:N, a device "
                   "UUID or auto)", dev);
}

static int parse_device(opd_server_t *srv, const msgpack_object *o, int *req,
                        opd_err_t *err) {
  char dev[OPD_MAX_NAME];
  *req = OPD_DEV_AUTO;
  if (o == NULL || o->type == MSGPACK_OBJECT_NIL) return 0;
  if (opd__mp_str(o, dev, sizeof dev) != 0)
    return opd__errf(err, OPD_EPROTO, "\"device\" must be a short string");
  return opd__device_parse(srv, dev, req, err);
}

/* The GPU with the fewest runs launched and not yet complete; among equal
 * ones the next after the last pick, so that runs placed while the GPUs
 * are idle spread over them too. */
static int least_loaded(opd_server_t *srv) {
  int best = -1, best_load = 0;
  for (int k = 1; k <= srv->n_devices; k++) {
    int d = (srv->auto_last + k) % srv->n_devices;
    int load = opd__backend_dev.load(srv, d);
    if (best < 0 || load < best_load) best = d, best_load = load;
  }
  srv->auto_last = best;
  return best;
}

/* Picks where the job runs from the request and where its tensors live;
 * that backend then checks the op runs there and plans the run (staging:
 * daemon/backend/). */
static int place(opd_job_t *job, int req, tref_t *in, tref_t *out, opd_err_t *err) {
  opd_kcall_t *call = &job->call;
  int n = call->n_in + call->n_out, dev = -1, who = -1;

  for (int i = 0; i < n; i++) {
    const tref_t *t = i < call->n_in ? &in[i] : &out[i - call->n_in];
    int d = t->arena ? t->arena->device : -1;
    if (d < 0) continue;
    if (dev >= 0 && d != dev) {
      int j = i < call->n_in ? i : i - call->n_in;
      return opd__errf(err, OPD_EDEVICE,
                       "%s %d is on cuda:%d but %s %d is on cuda:%d",
                       i < call->n_in ? "input" : "output", j, d,
                       who < call->n_in ? "input" : "output",
                       who < call->n_in ? who : who - call->n_in, dev);
    }
    dev = d, who = i;
  }
  if (req == OPD_DEV_CPU && dev >= 0)
    return opd__errf(err, OPD_EDEVICE,
                     "%s %d is on cuda:%d; run it with device cuda:%d or auto",
                     who < call->n_in ? "input" : "output",
                     who < call->n_in ? who : who - call->n_in, dev, dev);
  if (req >= 0 && dev >= 0 && req != dev)
    return opd__errf(err, OPD_EDEVICE,
                     "device cuda:%d was asked for, but %s %d is on "
                     "cuda:%d", req, who < call->n_in ? "input" : "output",
                     who < call->n_in ? who : who - call->n_in, dev);
  if (req >= 0) dev = req;
  job->device = dev;
  job->by_load = 0;

  /* the backend checks the op can run there and plans the staging */
  opd_tplace_t pin[OPD_MAX_TENSORS], pout[OPD_MAX_TENSORS];
  for (int i = 0; i < call->n_in; i++)
    pin[i] = (opd_tplace_t){in[i].arena != NULL && in[i].arena->device < 0,
                            in[i].extent};
  for (int i = 0; i < call->n_out; i++)
    pout[i] = (opd_tplace_t){out[i].arena != NULL && out[i].arena->device < 0,
                             out[i].extent};
  if (dev < 0 && req == OPD_DEV_ANY && job->s->srv->n_devices > 0) {
    /* "auto" with host tensors only: the least-loaded GPU that takes the
     * run, else the cpu as with no device */
    job->device = least_loaded(job->s->srv);
    opd_err_t gpu_err;
    if (opd__backend_dev.plan(job, pin, pout, &gpu_err) == 0) {
      job->by_load = 1;
      return 0;
    }
    job->device = -1;
  }
  return opd__backend_for(dev)->plan(job, pin, pout, err);
}

/* A refused RUN that asked for FLAG (OPD_RUN_F_FLAG) on a cuda device:
 * the client's stream polls the session's flag word for its id, so the
 * word is written all the same, in order: after the last FLAG run of that
 * device still queued in the session (which then writes this id), else
 * now on the session's stream (after everything launched). A body too
 * broken to say either is the client's own stall: its poll times out. */
static void flag_refused(const opd_req_t *r, const msgpack_object *body) {
  opd_session_t *s = r->s;
  uint64_t flags = 0;
  int dev;
  opd_err_t err;
  const msgpack_object *o = opd__mp_get(body, "async");
  if (o == NULL || opd__mp_uint(o, &flags) != 0 || !(flags & OPD_RUN_F_FLAG) ||
      parse_device(s->srv, opd__mp_get(body, "device"), &dev, &err) != 0 ||
      dev < 0)
    return;
  if (!opd__runq_flag_after(s, dev, r->id))
    opd__backend_dev.signal(s, dev, (uint32_t)r->id);
}

/* A RUN naming a graph (daemon/graph/grun.c checks it): queued, or refused. */
static void graph_request(const opd_req_t *r, const msgpack_object *body) {
  opd_server_t *srv = r->s->srv;
  int slot = opd__n_ops; /* graph runs' stats */
  opd_err_t err;
  opd_job_t *job = opd__job_alloc(srv);
  int rc = job == NULL ? opd__errf(&err, OPD_ENOMEM, "out of memory") : 0;
  if (rc == 0) {
    job->s = r->s;
    job->req_id = r->id;
    job->via = r->via;
    job->op_index = slot;
    job->t_recv = opd__now_ns();
    rc = opd__graph_run(r, body, job, &err);
  }
  if (rc != 0) {
    srv->op_stats[slot].errors++;
    opd__reply_error(r, rc, "graph: %s", err.msg);
    if (job) opd__job_recycle(srv, job);
    return;
  }
  opd__run_cache_store(r, job);
  opd__runq_push(r->s, job);
}

void opd__run_request(const opd_req_t *r, const msgpack_object *body,
                      int infer) {
  opd_session_t *s = r->s;
  opd_server_t *srv = s->srv;
  uint64_t id = r->id;
  const char *what = infer ? "infer" : "run";
  char name[OPD_MAX_NAME];
  opd_err_t err;
  opd_tshape_t expect[OPD_MAX_TENSORS];

  if (opd__mp_get(body, "graph") != NULL) {
    if (infer)
      opd__reply_error(r, OPD_EPROTO, "infer: a graph's output shapes are "
                       "in its define reply");
    else
      graph_request(r, body);
    return;
  }

  if (opd__mp_str(opd__mp_get(body, "op"), name, sizeof name) != 0) {
    opd__reply_error(r, OPD_EPROTO, "%s: \"op\" (a string) is required",
                     what);
    if (!infer) flag_refused(r, body);
    return;
  }
  int idx = opd__op_index(name);
  if (idx < 0) {
    const char *near = opd__op_nearest(name);
    opd__reply_error(r, OPD_ENOOP,
                     "unknown operator \"%s\" (%s%s%s`opctl ops` lists them)",
                     name, near ? "did you mean \"" : "", near ? near : "",
                     near ? "\"? " : "");
    if (!infer) flag_refused(r, body);
    return;
  }
  const opd_op_def_t *op = opd__ops[idx];
  int req;
  int rc = parse_device(srv, opd__mp_get(body, "device"), &req, &err);
  opd_job_t *job = rc == 0 ? opd__job_alloc(srv) : NULL;
  if (rc == 0 && job == NULL)
    rc = opd__errf(&err, OPD_ENOMEM, "out of memory");
  if (rc == 0) {
    job->s = s;
    job->req_id = id;
    job->via = r->via;
    job->op_index = idx;
    job->t_recv = opd__now_ns();
    rc = prepare(s, op, body, infer, req, job, expect, &err);
  }
  if (rc != 0) {
    srv->op_stats[idx].errors++;
    if (opd__metrics_on) opd__metrics_rejected(idx, rc);
    opd__reply_error(r, rc, "%s: %s", op->name, err.msg);
    if (job) opd__job_recycle(srv, job);
    if (!infer) flag_refused(r, body);
    return;
  }
  if (infer) {
    msgpack_packer pk;
    msgpack_sbuffer_clear(&srv->scratch);
    msgpack_packer_init(&pk, &srv->scratch, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str_with_body(&pk, "out", 3);
    msgpack_pack_array(&pk, (size_t)op->n_out);
    for (int i = 0; i < op->n_out; i++) {
      msgpack_pack_array(&pk, 2);
      msgpack_pack_uint32(&pk, (uint32_t)expect[i].dtype);
      msgpack_pack_array(&pk, (size_t)expect[i].rank);
      for (int d = 0; d < expect[i].rank; d++)
        msgpack_pack_int64(&pk, expect[i].shape[d]);
    }
    opd__reply(r, srv->scratch.data, srv->scratch.size);
    opd__job_recycle(srv, job);
    return;
  }
  if (!job->by_load) opd__run_cache_store(r, job); /* a load is not the body's */
  opd__runq_push(s, job);
}

