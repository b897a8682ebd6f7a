/* opd__kerr: the error message of a kernel or shape rule (kernels/kernel.h).
 *
 * DESIGN
 * Every kernel and rule calls it, so it lives alone and depends on nothing
 * but libc: kernels never link against the registry or the runtime.
 */
#include <stdarg.h>
#include <stdio.h>

#include "kernels/kernel.h"

int opd__kerr(opd_kcall_t *call, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(call->err, sizeof call->err, fmt, ap);
  va_end(ap);
  return code;
}
