/* A RUN or INFER request checked and made a job (daemon/run/validate.c):
 * operator, devices, tensors, attributes, placement. */
#ifndef OPD_VALIDATE_H
#define OPD_VALIDATE_H

#include <msgpack.h>

#include "daemon/types.h"

#define OPD_DEV_ANY (-3)  /* "auto": as no device, but a run of host
                             tensors goes to the least-loaded GPU */
#define OPD_DEV_CPU (-2)
#define OPD_DEV_AUTO (-1) /* none given: where the tensors are, else cpu */

/* Parses a device name ("cpu", "auto", "cuda", "cuda:N", a UUID) into
 * *req: OPD_DEV_CPU, OPD_DEV_ANY or a CUDA device index of this daemon.
 * Returns 0 or OPD_EDEVICE with err set. */
int opd__device_parse(opd_server_t *srv, const char *dev, int *req, opd_err_t *err);
/* A RUN (infer 0: checked, queued on the session, remembered by the run
 * cache) or INFER (infer 1: its outputs' dtypes and shapes replied)
 * request; a refusal is replied here. */
void opd__run_request(const opd_req_t *r, const msgpack_object *body,
                      int infer);

#endif /* OPD_VALIDATE_H */
