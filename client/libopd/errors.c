/* libopd errors and names: the thread's last error, error and dtype names.
 *
 * DESIGN
 * Every failing libopd call returns a negative OPD_E* code and leaves a
 * message in a thread-local buffer (opd_last_error), written by opd__fail
 * in one place, so that the message a caller reads is always its own
 * thread's last failure. Codes, dtypes and message names come from the
 * X-macro tables of include/opd/protocol.h through common/wire.c and
 * common/dtype.h, the same ones the daemon uses.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/libopd/internal.h"
#include "common/dtype.h"
#include "common/paths.h"

static __thread char last_error[OPD_ERRMSG_CAP];

int opd__fail(int code, const char *fmt, ...) {
  char msg[sizeof last_error]; /* arguments may point into last_error */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  memcpy(last_error, msg, sizeof msg);
  return code;
}

const char *opd_last_error(void) { return last_error; }
const char *opd_strerror(int code) { return opd__errdefault(code); }
const char *opd_errname(int code) { return opd__errname(code); }
const char *opd_dtype_name(int32_t dtype) { return opd__dtype_name(dtype); }
int32_t opd_dtype_size(int32_t dtype) {
  return (int32_t)opd__dtype_size(dtype);
}
int32_t opd_dtype_from_name(const char *name) {
  return name ? opd__dtype_from_name(name) : 0;
}
const char *opd_version(void) { return OPD_VERSION; }
void opd_free(void *p) { free(p); }

int opd_socket_path(const char *given, char *buf, size_t cap) {
  return opd__socket_path_client(given, buf, cap);
}
