/* msgpack -> JSON: libopd's replies handed out as JSON text (json.h).
 *
 * DESIGN
 * One recursive writer into a growing buffer; what JSON cannot say
 * (non-string keys, bin, ext, NaN) is written as json.h describes rather
 * than refused, since the text is for printing and parsing, not for a
 * round trip. */
#include "client/libopd/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sbuf {
  char *p;
  size_t n, cap;
  int oom;
} sbuf_t;

static void put(sbuf_t *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n + 1) cap *= 2;
    char *np = realloc(b->p, cap);
    if (np == NULL) {
      b->oom = 1;
      return;
    }
    b->p = np;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = '\0';
}

static void puts_(sbuf_t *b, const char *s) { put(b, s, strlen(s)); }

static void put_str(sbuf_t *b, const char *s, size_t n) {
  put(b, "\"", 1);
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    char esc[8];
    if (ch == '"' || ch == '\\') {
      esc[0] = '\\', esc[1] = (char)ch;
      put(b, esc, 2);
    } else if (ch < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", ch);
      put(b, esc, 6);
    } else {
      put(b, (const char *)&ch, 1);
    }
  }
  put(b, "\"", 1);
}

static void emit(sbuf_t *b, const msgpack_object *o) {
  char num[40];
  switch (o->type) {
    case MSGPACK_OBJECT_NIL: puts_(b, "null"); break;
    case MSGPACK_OBJECT_BOOLEAN: puts_(b, o->via.boolean ? "true" : "false"); break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
      snprintf(num, sizeof num, "%llu", (unsigned long long)o->via.u64);
      puts_(b, num);
      break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
      snprintf(num, sizeof num, "%lld", (long long)o->via.i64);
      puts_(b, num);
      break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
      if (!isfinite(o->via.f64)) {
        puts_(b, "null");
      } else {
        snprintf(num, sizeof num, "%.17g", o->via.f64);
        /* keep it a float for JSON readers: 1 -> 1.0 */
        if (strpbrk(num, ".eE") == NULL) strcat(num, ".0");
        puts_(b, num);
      }
      break;
    case MSGPACK_OBJECT_STR: put_str(b, o->via.str.ptr, o->via.str.size); break;
    case MSGPACK_OBJECT_ARRAY:
      put(b, "[", 1);
      for (uint32_t i = 0; i < o->via.array.size; i++) {
        if (i) put(b, ",", 1);
        emit(b, &o->via.array.ptr[i]);
      }
      put(b, "]", 1);
      break;
    case MSGPACK_OBJECT_MAP:
      put(b, "{", 1);
      for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object *k = &o->via.map.ptr[i].key;
        if (i) put(b, ",", 1);
        if (k->type == MSGPACK_OBJECT_STR) {
          put_str(b, k->via.str.ptr, k->via.str.size);
        } else {
          sbuf_t kb = {0};
          emit(&kb, k);
          put_str(b, kb.p ? kb.p : "", kb.n);
          free(kb.p);
        }
        put(b, ":", 1);
        emit(b, &o->via.map.ptr[i].val);
      }
      put(b, "}", 1);
      break;
    default: puts_(b, "null");
  }
}

int opd__json_from_msgpack(const msgpack_object *o, char **out, size_t *len) {
  sbuf_t b = {0};
  emit(&b, o);
  if (b.oom || b.p == NULL) {
    free(b.p);
    *out = NULL;
    return -1;
  }
  *out = b.p;
  if (len) *len = b.n;
  return 0;
}
