/* A run's attributes (daemon/run/attrs.c): checked against the op's schema and
 * converted for its kernel call. */
#ifndef OPD_ATTRS_H
#define OPD_ATTRS_H

#include <msgpack.h>

#include "common/err.h"
#include "kernels/kernel.h"

/* Fills call->attr[0 .. op->n_attrs) from attrs (a map, or NULL / nil:
 * none given): the defaults, then each given value converted. 0, or
 * OPD_EATTR / OPD_EPROTO with err naming the attribute; call->attr is
 * then partly filled. */
int opd__attrs_resolve(const opd_op_def_t *op, const msgpack_object *attrs,
                       opd_kcall_t *call, opd_err_t *err);

#endif /* OPD_ATTRS_H */
