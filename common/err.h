/* The error carrier: one opd_err_t passed down a call path, one idiom to
 * fill it (as SQLite's sqlite3ErrorMsg):
 *
 *   return opd__errf(e, OPD_EDTYPE, "input %d has dtype %s", i, name);
 *
 * sets e's code and message and returns the code, so a check and its
 * error are one statement. The message names what was wrong; callers
 * higher up prefix what they were doing ("run: softmax: ...") when they
 * reply with it; the returned code, not e->code, is what callers test.
 * The daemon's functions all take an opd_err_t *err; the leaf helpers in
 * common/ that libopd shares (wire.h, memfd.h, paths.h) write into a
 * (buffer, size) pair, which the daemon passes as err->msg. */
#ifndef OPD_COMMON_ERR_H
#define OPD_COMMON_ERR_H

#define OPD_ERR_MAX 400

typedef struct opd_err {
  int code;                      /* the OPD_E* code opd__errf set */
  char msg[OPD_ERR_MAX];
} opd_err_t;

int opd__errf(opd_err_t *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* OPD_COMMON_ERR_H */
