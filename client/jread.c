/* A minimal JSON reader for opctl: enough to walk libopd's output (the
 * daemon's own, well-formed JSON). client/jread.h says what it offers.
 *
 * DESIGN
 * A recursive-descent parser over a cursor into the text, building a tree
 * of jv_t nodes with their keys and strings copied; numbers keep their
 * text as well as their value. It reads what libopd writes and nothing
 * more is promised: opctl never hands it text from elsewhere.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "client/jread.h"

static const char *jp; /* the reader's cursor */

static void ws(void) { while (isspace((unsigned char)*jp)) jp++; }

static jv_t *jparse(void);

static char *jstring(void) {
  size_t cap = 16, n = 0;
  char *s = malloc(cap);
  jp++; /* opening quote */
  while (*jp && *jp != '"') {
    char ch = *jp++;
    if (ch == '\\' && *jp) {
      ch = *jp++;
      if (ch == 'n') ch = '\n';
      else if (ch == 't') ch = '\t';
      else if (ch == 'u') { /* control chars only, from our own encoder */
        ch = (char)strtol((char[]){jp[0], jp[1], jp[2], jp[3], 0}, NULL, 16);
        jp += 4;
      }
    }
    if (n + 2 > cap) s = realloc(s, cap *= 2);
    s[n++] = ch;
  }
  if (*jp == '"') jp++;
  s[n] = '\0';
  return s;
}

static jv_t *jparse(void) {
  jv_t *v = calloc(1, sizeof *v);
  ws();
  if (*jp == '{' || *jp == '[') {
    char close = *jp == '{' ? '}' : ']';
    v->type = *jp == '{' ? 'o' : 'a';
    jp++;
    ws();
    while (*jp && *jp != close) {
      v->keys = realloc(v->keys, sizeof(char *) * (size_t)(v->n + 1));
      v->vals = realloc(v->vals, sizeof(jv_t *) * (size_t)(v->n + 1));
      v->keys[v->n] = NULL;
      if (v->type == 'o') {
        v->keys[v->n] = jstring();
        ws();
        if (*jp == ':') jp++;
      }
      v->vals[v->n++] = jparse();
      ws();
      if (*jp == ',') jp++;
      ws();
    }
    if (*jp) jp++;
  } else if (*jp == '"') {
    v->type = 's';
    v->str = jstring();
  } else if (strncmp(jp, "true", 4) == 0 || strncmp(jp, "false", 5) == 0) {
    v->type = 'b';
    v->boolean = *jp == 't';
    jp += v->boolean ? 4 : 5;
  } else if (strncmp(jp, "null", 4) == 0) {
    v->type = 'z';
    jp += 4;
  } else {
    const char *start = jp;
    v->type = 'n';
    v->num = strtod(jp, (char **)&jp);
    if (jp == start) jp++; /* never loop on garbage */
    v->str = strndup(start, (size_t)(jp - start));
  }
  return v;
}

void jfree(jv_t *v) {
  if (v == NULL) return;
  for (int i = 0; i < v->n; i++) {
    if (v->keys) free(v->keys[i]);
    jfree(v->vals[i]);
  }
  free(v->keys);
  free(v->vals);
  free(v->str);
  free(v);
}

jv_t *jget(const jv_t *o, const char *key) {
  if (o == NULL || o->type != 'o') return NULL;
  for (int i = 0; i < o->n; i++)
    if (strcmp(o->keys[i], key) == 0) return o->vals[i];
  return NULL;
}

const char *jstr(const jv_t *v) {
  return v && (v->type == 's' || v->type == 'n') ? v->str : "";
}

/* Renders a scalar or a flat array as text ("[1,2]", "1e-05", "none"). */
void jtext(const jv_t *v, char *buf, size_t cap) {
  if (v == NULL || v->type == 'z') {
    snprintf(buf, cap, "-");
  } else if (v->type == 'b') {
    snprintf(buf, cap, "%s", v->boolean ? "true" : "false");
  } else if (v->type == 'a') {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < v->n && n < cap; i++)
      n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? "," : "",
                            jstr(v->vals[i]));
    if (n < cap) snprintf(buf + n, cap - n, "]");
  } else if (v->type == 'n' && strpbrk(v->str, ".eE") != NULL) {
    snprintf(buf, cap, "%g", v->num); /* 1.0000000000000001e-05 -> 1e-05 */
  } else {
    snprintf(buf, cap, "%s", v->str);
  }
}

jv_t *jread(const char *text) {
  jp = text;
  return jparse();
}
