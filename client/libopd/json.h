/* msgpack -> JSON text (json.c), for replies libopd hands out as JSON
 * (ops, stats, server info) so that C callers print them and Python
 * parses them with the standard library. Used by conn.c (the hello) and
 * control.c; internal to libopd. */
#ifndef OPD_CLIENT_JSON_H
#define OPD_CLIENT_JSON_H

#include <msgpack.h>
#include <stddef.h>

#pragma GCC visibility push(hidden)

/* Writes o as JSON into a malloc'ed, NUL-terminated *out (*len without the
 * NUL). Map keys that are not strings are written as strings; bin and ext
 * become null; NaN and infinities become null. Returns 0 or -1 (no
 * memory; *out is then NULL). */
int opd__json_from_msgpack(const msgpack_object *o, char **out, size_t *len);

#pragma GCC visibility pop

#endif
