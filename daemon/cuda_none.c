/* The CUDA backend of a build without CUDA: no devices, every request for
 * one is refused with a clear reason. Same interface as daemon/cuda.c. */
#include <stdio.h>
#include <string.h>

#include "daemon/log.h"
#include "daemon/server.h"

int opd__cuda_init(opd_server_t *srv) {
  const char *spec = srv->cfg.devices;
  srv->healthy = 1;
  srv->n_devices = 0;
  if (spec[0] && strcmp(spec, "all") && strcmp(spec, "none")) {
    LOG_ERROR("--devices %s: no CUDA device %s (this opd was built without "
              "CUDA)", spec, spec);
    return OPD_EDEVICE;
  }
  return 0;
}

void opd__cuda_shutdown(opd_server_t *srv) { (void)srv; }

void opd__cuda_pack_devices(opd_server_t *srv, msgpack_packer *pk) {
  (void)srv;
  msgpack_pack_array(pk, 0);
}

int opd__cuda_host_register(opd_server_t *srv, opd_arena_t *a) {
  (void)srv, (void)a;
  return 0;
}

void opd__cuda_host_unregister(opd_arena_t *a) { (void)a; }

int opd__cuda_alloc(opd_server_t *srv, int dev, uint64_t size, void **ptr,
                    char *err, size_t errlen) {
  (void)srv, (void)size, (void)ptr;
  snprintf(err, errlen, "no device cuda:%d: this opd was built without CUDA",
           dev);
  return OPD_EDEVICE;
}

void opd__cuda_free(opd_server_t *srv, int dev, void *ptr) {
  (void)srv, (void)dev, (void)ptr;
}

const void *opd__cuda_kernel(const opd_op_def_t *op, int dtype, char *err,
                             size_t errlen) {
  (void)op, (void)dtype;
  snprintf(err, errlen, "this opd was built without CUDA");
  return NULL;
}

int opd__cuda_job_launch(opd_job_t *job) {
  snprintf(job->call.err, sizeof job->call.err,
           "this opd was built without CUDA");
  return OPD_EDEVICE;
}

void opd__cuda_session_release(opd_session_t *s) { (void)s; }

int opd__cuda_import(opd_server_t *srv, uint64_t session, int dev,
                     const void *handle, uint64_t offset, uint64_t size,
                     void **ptr, void **token, char *err, size_t errlen) {
  (void)srv, (void)session, (void)handle, (void)offset, (void)size;
  (void)ptr, (void)token;
  snprintf(err, errlen, "no device cuda:%d: this opd was built without CUDA",
           dev);
  return OPD_EDEVICE;
}

void opd__cuda_import_release(opd_server_t *srv, void *token) {
  (void)srv, (void)token;
}

int opd__cuda_alloc_vmm(opd_server_t *srv, int dev, uint64_t size, void **ptr,
                        void **token, char *err, size_t errlen) {
  return opd__cuda_alloc(srv, dev, size, ptr, err, errlen) ? OPD_EDEVICE
                                                           : (*token = NULL, 0);
}

void opd__cuda_free_vmm(opd_server_t *srv, void *token) {
  (void)srv, (void)token;
}

int opd__cuda_export(opd_server_t *srv, void *token, int *fd, char *err,
                     size_t errlen) {
  (void)srv, (void)token, (void)fd;
  snprintf(err, errlen, "this opd was built without CUDA");
  return OPD_EDEVICE;
}

uint64_t opd__cuda_vmm_size(void *token) {
  (void)token;
  return 0;
}


void opd__cuda_loop_polls(opd_server_t *srv, int on) { (void)srv, (void)on; }

int opd__cuda_poll(opd_server_t *srv) {
  (void)srv;
  return 0;
}

int opd__cuda_inflight(opd_server_t *srv) {
  (void)srv;
  return 0;
}
