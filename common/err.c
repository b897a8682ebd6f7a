/* The error carrier (common/err.h). */
#include <stdarg.h>
#include <stdio.h>

#include "common/err.h"

int opd__errf(opd_err_t *e, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  e->code = code;
  return code;
}
