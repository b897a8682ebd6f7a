/* A minimal JSON reader for opctl (client/jread.c): a tree of values from
 * libopd's JSON output, and lookups in it.
 */
#ifndef OPD_JREAD_H
#define OPD_JREAD_H

#include <stddef.h>

typedef struct jv {
  char type;                       /* 'o' object, 'a' array, 's' string,
                                      'n' number, 'b' bool, 'z' null */
  char *str;                       /* 's' (unescaped), 'n' (text) */
  double num;
  int boolean;
  int n;                           /* children */
  char **keys;                     /* 'o' */
  struct jv **vals;                /* 'o' and 'a' */
} jv_t;

/* The tree of text (NULL: no memory); jfree frees it (NULL is fine). */
jv_t *jread(const char *text);
void jfree(jv_t *v);
/* o's member `key` (NULL: o is not an object or has no such key). */
jv_t *jget(const jv_t *o, const char *key);
/* v's text: a string's or a number's, "" for anything else or NULL. */
const char *jstr(const jv_t *v);
/* A scalar or a flat array as text into buf ("[1,2]", "1e-05", "-" for
 * null or NULL). */
void jtext(const jv_t *v, char *buf, size_t cap);

#endif
