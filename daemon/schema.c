/* The OPS reply: every operator's schema (inputs and outputs with their
 * dtypes, attributes with types, defaults and choices, the backends that
 * run it), packed once at start from the operator rows (include/opd/op.h)
 * and sent as is to every client that asks.
 */
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"
#include "daemon/log.h"
#include "daemon/schema.h"
#include "kernels/runtime/registry.h"

static void pack_dtypes(msgpack_packer *pk, uint32_t mask) {
  int n = 0;
#define X(name, val, size, str) n += (mask >> val) & 1;
  OPD_DTYPE_MAP(X)
#undef X
  msgpack_pack_array(pk, (size_t)n);
#define X(name, val, size, str) \
  if ((mask >> val) & 1) PACK_STR(pk, str);
  OPD_DTYPE_MAP(X)
#undef X
}

static void pack_io(msgpack_packer *pk, const opd_io_spec_t *io, int n,
                    int n_min) {
  msgpack_pack_array(pk, (size_t)n);
  for (int i = 0; i < n; i++) {
    msgpack_pack_map(pk, 4);
    PACK_STR(pk, "name");
    PACK_STR(pk, io[i].name ? io[i].name : "");
    PACK_STR(pk, "dtypes");
    pack_dtypes(pk, io[i].dtypes);
    PACK_STR(pk, "shape");
    PACK_STR(pk, io[i].doc ? io[i].doc : "");
    PACK_STR(pk, "optional");
    if (i >= n_min) msgpack_pack_true(pk);
    else msgpack_pack_false(pk);
  }
}

static void pack_attr_val(msgpack_packer *pk, const opd_attr_val_t *v,
                          int type) {
  switch (type) {
    case OPD_ATTR_INT: msgpack_pack_int64(pk, v->i); break;
    case OPD_ATTR_FLOAT: msgpack_pack_double(pk, v->f); break;
    case OPD_ATTR_BOOL:
      if (v->i) msgpack_pack_true(pk);
      else msgpack_pack_false(pk);
      break;
    case OPD_ATTR_STR: PACK_STR(pk, v->s); break;
    case OPD_ATTR_INTS:
      msgpack_pack_array(pk, (size_t)v->n);
      for (int i = 0; i < v->n; i++) msgpack_pack_int64(pk, v->ints[i]);
      break;
    default: msgpack_pack_nil(pk);
  }
}

int opd__ops_pack(opd_server_t *srv) {
  msgpack_sbuffer sb;
  msgpack_packer pk;
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  msgpack_pack_map(&pk, 1);
  PACK_STR(&pk, "ops");
  msgpack_pack_array(&pk, (size_t)opd__n_ops);
  for (int i = 0; i < opd__n_ops; i++) {
    const opd_op_def_t *op = opd__ops[i];
    msgpack_pack_map(&pk, 13);
    PACK_STR(&pk, "name");
    PACK_STR(&pk, op->name);
    PACK_STR(&pk, "min_inputs");
    msgpack_pack_int32(&pk, op->n_in_min);
    PACK_STR(&pk, "max_inputs");
    msgpack_pack_int32(&pk, op->n_in_max);
    PACK_STR(&pk, "summary");
    PACK_STR(&pk, op->summary ? op->summary : "");
    /* a variadic op (noop) repeats its last input spec: list it once */
    int n_in = op->n_in_max;
    while (n_in > 1 && op->in[n_in - 1].name != NULL &&
           op->in[n_in - 2].name != NULL &&
           strcmp(op->in[n_in - 1].name, op->in[n_in - 2].name) == 0)
      n_in--;
    PACK_STR(&pk, "inputs");
    pack_io(&pk, op->in, n_in, op->n_in_min);
    PACK_STR(&pk, "outputs");
    pack_io(&pk, op->out, op->n_out, op->n_out);
    PACK_STR(&pk, "attrs");
    msgpack_pack_array(&pk, (size_t)op->n_attrs);
    for (int a = 0; a < op->n_attrs; a++) {
      const opd_attr_spec_t *sp = &op->attrs[a];
      msgpack_pack_map(&pk, 6);
      PACK_STR(&pk, "name");
      PACK_STR(&pk, sp->name);
      PACK_STR(&pk, "type");
      PACK_STR(&pk, opd__attr_type_name(sp->type));
      PACK_STR(&pk, "default");
      if (sp->required) msgpack_pack_nil(&pk);
      else pack_attr_val(&pk, &sp->def, sp->type);
      PACK_STR(&pk, "required");
      if (sp->required) msgpack_pack_true(&pk);
      else msgpack_pack_false(&pk);
      PACK_STR(&pk, "doc");
      PACK_STR(&pk, sp->doc ? sp->doc : "");
      PACK_STR(&pk, "choices");
      if (sp->choices) PACK_STR(&pk, sp->choices);
      else msgpack_pack_nil(&pk);
    }
    PACK_STR(&pk, "shape");
    PACK_STR(&pk, op->shape_doc ? op->shape_doc : "");
    PACK_STR(&pk, "inplace");
    if (op->flags & OPD_OPF_INPLACE) msgpack_pack_true(&pk);
    else msgpack_pack_false(&pk);
    PACK_STR(&pk, "strided");
    if (op->flags & OPD_OPF_STRIDED) msgpack_pack_true(&pk);
    else msgpack_pack_false(&pk);
    PACK_STR(&pk, "elementwise");
    if (op->flags & OPD_OPF_ELEMENTWISE) msgpack_pack_true(&pk);
    else msgpack_pack_false(&pk);
    PACK_STR(&pk, "cpu_strided");
    if (op->flags & OPD_OPF_CPU_STRIDED) msgpack_pack_true(&pk);
    else msgpack_pack_false(&pk);
    PACK_STR(&pk, "steady_cost");
    if (op->flags & OPD_OPF_STEADY_COST) msgpack_pack_true(&pk);
    else msgpack_pack_false(&pk);
  }
  if (sb.size > srv->cfg.limits.max_frame - 64) {
    LOG_ERROR("the operator list (%zu bytes) does not fit in a frame",
              sb.size);
    msgpack_sbuffer_destroy(&sb);
    return OPD_ELIMIT;
  }
  srv->ops_body = sb.data;
  srv->ops_body_len = sb.size;
  return 0;
}
