/* The device backend of a build without CUDA: no devices, and every
 * request for one is refused with a reason. The same row of operations as
 * daemon/backend/cuda/ (daemon/backend/backend.h). */
#include <stdio.h>
#include <string.h>

#include "daemon/backend/backend.h"
#include "daemon/log.h"
#include "daemon/types.h"

#define NO_CUDA "this opd was built without CUDA"

static int none_init(opd_server_t *srv) {
  const char *spec = srv->cfg.devices;
  srv->n_devices = 0;
  if (spec[0] && strcmp(spec, "all") && strcmp(spec, "none")) {
    LOG_ERROR("--devices %s: no CUDA device %s (" NO_CUDA ")", spec, spec);
    return OPD_EDEVICE;
  }
  return 0;
}

static void none_shutdown(opd_server_t *srv) { (void)srv; }

static void none_describe(opd_server_t *srv, msgpack_packer *pk) {
  (void)srv;
  msgpack_pack_array(pk, 0);
}

const void *opd__cuda_kernel(const opd_op_def_t *op, int dtype,
                             opd_err_t *err) {
  (void)op, (void)dtype;
  opd__errf(err, OPD_EDEVICE, NO_CUDA);
  return NULL;
}

static int none_plan(opd_job_t *job, const opd_tplace_t *in,
                     const opd_tplace_t *out, opd_err_t *err) {
  (void)job, (void)in, (void)out;
  return opd__errf(err, OPD_EDEVICE, NO_CUDA);
}

static int none_launch(opd_job_t *job) {
  snprintf(job->call.err, sizeof job->call.err, NO_CUDA);
  return OPD_EDEVICE;
}

static void none_session_end(opd_session_t *s) { (void)s; }

static int none_stream(opd_session_t *s, int dev, const opd_stream_req_t *rq,
                       opd_stream_rep_t *rp, opd_err_t *err) {
  (void)s, (void)rq, (void)rp;
  return opd__errf(err, OPD_EDEVICE, "no device cuda:%d: " NO_CUDA, dev);
}

static void none_signal(opd_session_t *s, int dev, uint32_t value) {
  (void)s, (void)dev, (void)value;
}

static int none_alloc(opd_server_t *srv, int dev, uint64_t size,
                      int exportable, void **ptr, void **token, opd_err_t *err) {
  (void)srv, (void)size, (void)exportable, (void)ptr, (void)token;
  return opd__errf(err, OPD_EDEVICE, "no device cuda:%d: " NO_CUDA, dev);
}

static int none_import(opd_server_t *srv, uint64_t session, int dev,
                       const void *handle, uint64_t offset, uint64_t size,
                       void **ptr, void **token, opd_err_t *err) {
  (void)srv, (void)session, (void)handle, (void)offset, (void)size;
  (void)ptr, (void)token;
  return opd__errf(err, OPD_EDEVICE, "no device cuda:%d: " NO_CUDA, dev);
}

static int none_export(opd_server_t *srv, void *token, int *fd,
                       uint64_t *bytes, opd_err_t *err) {
  (void)srv, (void)token, (void)fd, (void)bytes;
  return opd__errf(err, OPD_EDEVICE, NO_CUDA);
}

static void none_pin(opd_server_t *srv, opd_arena_t *a) { (void)srv, (void)a; }
static void none_release(opd_arena_t *a) { (void)a; }

static int none_graph_prepare(opd_graph_t *g, opd_err_t *err) {
  (void)g;
  return opd__errf(err, OPD_EDEVICE, NO_CUDA);
}

static void none_graph_release(opd_graph_t *g) { (void)g; }

static int none_load(const opd_server_t *srv, int dev) {
  (void)srv, (void)dev;
  return 0;
}

const opd_backend_t opd__backend_dev = {
    .name = "none",
    .init = none_init,
    .shutdown = none_shutdown,
    .describe = none_describe,
    .plan = none_plan,
    .launch = none_launch,
    .stream = none_stream,
    .signal = none_signal,
    .session_end = none_session_end,
    .alloc = none_alloc,
    .import = none_import,
    .export = none_export,
    .pin = none_pin,
    .release = none_release,
    .load = none_load,
    .graph_prepare = none_graph_prepare,
    .graph_release = none_graph_release,
};
