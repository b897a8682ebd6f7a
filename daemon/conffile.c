/* The config file (opd.conf(5)): read with libinih, each key an option's
 * long name, each value set through the options table.
 *
 * DESIGN
 * A key is looked up in the table (daemon/options.c) and its value set by
 * the row's own parser, so the file is checked as the command line is. A
 * value that does not parse is an error naming file:line: key; every bad
 * line of a file is reported (inih itself stops at the first), and the
 * caller never uses a configuration with any error. Lines too long for
 * inih's buffer are reported rather than cut. Without libinih, a config
 * file is an error that says so.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon/conffile.h"
#include "daemon/options.h"

#ifdef OPD_HAVE_INIH
#include <ini.h>

typedef struct {
  opd_config_t *cfg;
  const char *file;
  FILE *f;
  int line;                      /* the line inih handles now */
  int errors;
  int last_err_line;             /* the last line we reported */
  opd_report_fn *report;         /* where errors go */
} ini_ctx_t;

/* inih's reader: fgets counting lines (its handler gets no line number),
 * and a line too long for inih's buffer reported rather than cut */
static char *ini_read(char *str, int num, void *stream) {
  ini_ctx_t *x = stream;
  if (fgets(str, num, x->f) == NULL) return NULL;
  x->line++;
  size_t n = strlen(str);
  if (n == (size_t)num - 1 && str[n - 1] != '\n' && !feof(x->f)) {
    int c;
    while ((c = fgetc(x->f)) != EOF && c != '\n') {
    }
    x->report("%s:%d: line longer than %d bytes", x->file, x->line, num - 2);
    x->errors++;
    x->last_err_line = x->line;
    strcpy(str, "\n");
    return str;
  }
  /* what inih would call a syntax error, reported here with its line so
   * that every one is (inih returns only the first error's line) */
  const char *p = str + strspn(str, " \t\r\n");
  if (*p && *p != '#' && *p != ';' && *p != '[' && strpbrk(p, "=:") == NULL) {
    x->report("%s:%d: not \"key = value\", a [section], a comment (# or ;) "
           "or blank: %.*s", x->file, x->line, (int)strcspn(p, "\r\n"), p);
    x->errors++;
    x->last_err_line = x->line;
    strcpy(str, "\n");
  }
  return str;
}

static int ini_entry(void *user, const char *section, const char *name,
                     const char *value) {
  ini_ctx_t *x = user;
  char err[512], val[512];
  const opd_opt_row_t *o = opd__opt_find(name);
  if (section[0] != '\0') {
    x->report("%s:%d: %s: keys go before any [section] (opd.conf has none; "
           "this one is in [%s])", x->file, x->line, name, section);
    goto bad;
  }
  if (o == NULL) {
    if (strcmp(name, "config") == 0 || strcmp(name, "check-config") == 0)
      x->report("%s:%d: %s: only on the command line", x->file, x->line, name);
    else
      x->report("%s:%d: unknown key \"%s\" (the keys are opd's long options: "
             "see opd --help)", x->file, x->line, name);
    goto bad;
  }
  /* "value" in double quotes: the quotes go */
  size_t n = strlen(value);
  if (n >= 2 && value[0] == '"' && value[n - 1] == '"') {
    snprintf(val, sizeof val, "%.*s", (int)(n - 2), value + 1);
    value = val;
  }
  if (o->parse(o, value, x->cfg, err, sizeof err) != 0) {
    x->report("%s:%d: %s %s", x->file, x->line, name, err);
    goto bad;
  }
  return 1;
bad:
  x->errors++;
  x->last_err_line = x->line;
  return 0;
}

int opd__conffile_load(const char *file, opd_config_t *cfg,
                       opd_report_fn *report) {
  ini_ctx_t x = {.cfg = cfg, .file = file, .report = report};
  x.f = fopen(file, "re");
  if (x.f == NULL) {
    report("cannot read the config file %s: %s", file, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fileno(x.f), &st) != 0 || !S_ISREG(st.st_mode)) {
    report("the config file %s is %s, not a file", file,
           S_ISDIR(st.st_mode) ? "a directory" : "something else");
    fclose(x.f);
    return -1;
  }
  int rc = ini_parse_stream(ini_read, &x, ini_entry, &x);
  fclose(x.f);
  if (rc > 0 && rc != x.last_err_line && x.errors == 0) {
    report("%s:%d: not \"key = value\", a comment (# or ;) or blank", file, rc);
    x.errors++;
  } else if (rc > 0 && x.errors == 0) {
    x.errors++;
  }
  return x.errors ? -1 : 0;
}
#else
int opd__conffile_load(const char *file, opd_config_t *cfg,
                       opd_report_fn *report) {
  (void)cfg;
  report("cannot read the config file %s: opd was built without libinih "
         "(install libinih-dev and rebuild)", file);
  return -1;
}
#endif

