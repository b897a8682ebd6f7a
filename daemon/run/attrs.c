/* A run's attributes: the request's "attrs" map checked against the op's
 * schema and converted into the kernel call's values.
 *
 * DESIGN
 * Each attribute of the op starts at its default (a required one at
 * OPD_ATTR_NONE); each given one must be named by the schema, given once,
 * and convert to its type (int, float, bool, string: one of its choices
 * where the schema lists them, ints); a required one left unset is an
 * error. Messages
 * name the attribute ("attribute \"axis\" must be int, got str"); the
 * caller prefixes the op's name.
 */
#include <stdio.h>
#include <string.h>

#include "common/wire.h"
#include "daemon/run/attrs.h"

static const char *mp_type_name(const msgpack_object *o) {
  switch (o->type) {
    case MSGPACK_OBJECT_NIL: return "nil";
    case MSGPACK_OBJECT_BOOLEAN: return "bool";
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return "int";
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: return "float";
    case MSGPACK_OBJECT_STR: return "str";
    case MSGPACK_OBJECT_ARRAY: return "array";
    case MSGPACK_OBJECT_MAP: return "map";
    default: return "other";
  }
}

static int attr_convert(const opd_attr_spec_t *sp, const msgpack_object *v,
                        opd_attr_val_t *out, opd_err_t *err) {
  int64_t iv;
  memset(out, 0, sizeof *out);
  out->type = sp->type;
  switch (sp->type) {
    case OPD_ATTR_INT:
      if (opd__mp_int(v, &iv) != 0) break;
      out->i = iv;
      return 0;
    case OPD_ATTR_FLOAT:
      if (v->type == MSGPACK_OBJECT_FLOAT32 ||
          v->type == MSGPACK_OBJECT_FLOAT64) {
        out->f = v->via.f64;
        return 0;
      }
      if (opd__mp_int(v, &iv) != 0) break;
      out->f = (double)iv;
      return 0;
    case OPD_ATTR_BOOL:
      if (v->type != MSGPACK_OBJECT_BOOLEAN) break;
      out->i = v->via.boolean;
      return 0;
    case OPD_ATTR_STR:
      if (v->type != MSGPACK_OBJECT_STR) break;
      if (opd__mp_str(v, out->s, sizeof out->s) != 0)
        return opd__errf(err, OPD_EATTR,
                         "attribute \"%s\" is longer than %d bytes",
                         sp->name, OPD_MAX_NAME - 1);
      if (sp->choices != NULL) {
        /* choices is "a|b|c": match a whole word */
        const char *p = sp->choices;
        size_t n = strlen(out->s);
        int ok = 0;
        while (*p && !ok) {
          const char *bar = strchr(p, '|');
          size_t w = bar ? (size_t)(bar - p) : strlen(p);
          ok = w == n && strncmp(p, out->s, n) == 0;
          p += w + (bar != NULL);
        }
        if (!ok)
          return opd__errf(err, OPD_EATTR,
                           "attribute \"%s\" must be one of %.100s, got \"%.63s\"",
                           sp->name, sp->choices, out->s);
      }
      return 0;
    case OPD_ATTR_INTS:
      if (opd__mp_int(v, &iv) == 0) {
        out->n = 1;
        out->ints[0] = iv;
        return 0;
      }
      if (v->type != MSGPACK_OBJECT_ARRAY) break;
      if (v->via.array.size == 0 || v->via.array.size > OPD_MAX_RANK)
        return opd__errf(err, OPD_EATTR,
                         "attribute \"%s\" must hold 1 to %d ints",
                         sp->name, OPD_MAX_RANK);
      for (uint32_t i = 0; i < v->via.array.size; i++)
        if (opd__mp_int(&v->via.array.ptr[i], &out->ints[i]) != 0)
          return opd__errf(err, OPD_EATTR,
                           "attribute \"%s\" must hold ints", sp->name);
      out->n = (int32_t)v->via.array.size;
      return 0;
  }
  return opd__errf(err, OPD_EATTR,
                   "attribute \"%s\" must be %s, got %s", sp->name,
                   opd__attr_type_name(sp->type), mp_type_name(v));
}

int opd__attrs_resolve(const opd_op_def_t *op, const msgpack_object *attrs,
                       opd_kcall_t *call, opd_err_t *err) {
  int seen[OPD_MAX_ATTRS] = {0};
  for (int a = 0; a < op->n_attrs; a++) {
    call->attr[a] = op->attrs[a].def;
    call->attr[a].type = op->attrs[a].required ? OPD_ATTR_NONE
                                               : op->attrs[a].type;
  }
  if (attrs != NULL && attrs->type != MSGPACK_OBJECT_NIL) {
    if (attrs->type != MSGPACK_OBJECT_MAP)
      return opd__errf(err, OPD_EPROTO, "\"attrs\" must be a map");
    for (uint32_t k = 0; k < attrs->via.map.size; k++) {
      const msgpack_object_kv *kv = &attrs->via.map.ptr[k];
      char name[OPD_MAX_NAME];
      if (opd__mp_str(&kv->key, name, sizeof name) != 0)
        return opd__errf(err, OPD_EATTR,
                         "attribute names must be short strings");
      int a;
      for (a = 0; a < op->n_attrs; a++)
        if (strcmp(op->attrs[a].name, name) == 0) break;
      if (a == op->n_attrs) {
        char list[200];
        size_t len = 0;
        list[0] = '\0';
        for (int i = 0; i < op->n_attrs && len < sizeof list; i++)
          len += (size_t)snprintf(list + len, sizeof list - len, "%s%s",
                                  i ? ", " : "", op->attrs[i].name);
        if (op->n_attrs == 0)
          return opd__errf(err, OPD_EATTR,
                           "unknown attribute \"%s\" (takes none)", name);
        return opd__errf(err, OPD_EATTR,
                         "unknown attribute \"%s\" (takes %s)", name,
                         list);
      }
      if (seen[a]++)
        return opd__errf(err, OPD_EATTR, "attribute \"%s\" given twice", name);
      int rc = attr_convert(&op->attrs[a], &kv->val, &call->attr[a], err);
      if (rc != 0) return rc;
    }
  }
  for (int a = 0; a < op->n_attrs; a++)
    if (call->attr[a].type == OPD_ATTR_NONE)
      return opd__errf(err, OPD_EATTR, "attribute \"%s\" is required",
                       op->attrs[a].name);
  return 0;
}

