/* Helpers for the operator tests; see optest.h. */
#include "tests/ops/optest.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/kutil.h"

typedef struct ot_call {
  opd_kcall_t k;                   /* first: the helpers cast back */
  void *owned[2 * OPD_MAX_TENSORS]; /* buffers to free */
  int n_owned;                     /* used entries of owned */
  struct ot_call *next, *prev;     /* live calls, freed at exit */
} ot_call_t;

static ot_call_t *live;            /* calls not yet ot_free'd */
static opd_exec_t pools[9];        /* ot_pool's, by thread count */

/* Frees what a test left behind, so that LeakSanitizer sees only real
 * leaks of the kernels. */
__attribute__((destructor)) static void cleanup(void) {
  while (live) ot_free(&live->k);
  for (int i = 0; i < 9; i++)
    if (pools[i].parallel_for) opd__exec_pool_destroy(&pools[i]);
}

static void *own(opd_kcall_t *c, size_t n) {
  ot_call_t *oc = (ot_call_t *)c;
  void *p = malloc(n ? n : 1);
  cr_assert(p, "out of memory");
  cr_assert(oc->n_owned < 2 * OPD_MAX_TENSORS, "too many buffers");
  oc->owned[oc->n_owned++] = p;
  return p;
}

opd_kcall_t *ot_new(const char *name) {
  const opd_op_def_t *op = opd__op_find(name);
  cr_assert(op, "op %s is not registered", name);
  ot_call_t *oc = calloc(1, sizeof *oc);
  cr_assert(oc);
  oc->next = live;
  if (live) live->prev = oc;
  live = oc;
  opd_kcall_t *c = &oc->k;
  c->op = op;
  c->n_out = op->n_out;
  c->exec = &opd__exec_serial;
  for (int i = 0; i < op->n_attrs; i++) c->attr[i] = op->attrs[i].def;
  return c;
}

void ot_free(opd_kcall_t *c) {
  ot_call_t *oc = (ot_call_t *)c;
  for (int i = 0; i < oc->n_owned; i++) free(oc->owned[i]);
  if (oc->prev)
    oc->prev->next = oc->next;
  else
    live = oc->next;
  if (oc->next) oc->next->prev = oc->prev;
  free(oc);
}

static void fill_view(opd_tview_t *v, int32_t dtype, int rank,
                      const int64_t *shape, void *data) {
  memset(v, 0, sizeof *v);
  v->dtype = dtype;
  v->rank = rank;
  v->data = data;
  v->numel = 1;
  for (int d = rank - 1; d >= 0; d--) {
    v->shape[d] = shape[d];
    v->strides[d] = v->numel;
    v->numel *= shape[d];
  }
}

void ot_in(opd_kcall_t *c, int i, int32_t dtype, int rank,
           const int64_t *shape, void *data) {
  fill_view(&c->in[i], dtype, rank, shape, data);
  if (c->n_in < i + 1) c->n_in = i + 1;
}

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

float *ot_in_rand(opd_kcall_t *c, int i, int rank, const int64_t *shape,
                  uint64_t seed, float lo, float hi) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= shape[d];
  float *p = own(c, (size_t)n * sizeof(float));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t k = 0; k < n; k++)
    p[k] = lo + (hi - lo) * (float)((rng_next(&s) >> 40) / 16777216.0);
  ot_in(c, i, OPD_DTYPE_FLOAT32, rank, shape, p);
  return p;
}

float *ot_in_vals(opd_kcall_t *c, int i, int rank, const int64_t *shape,
                  const float *data) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= shape[d];
  float *p = own(c, (size_t)n * sizeof(float));
  if (n) memcpy(p, data, (size_t)n * sizeof(float));
  ot_in(c, i, OPD_DTYPE_FLOAT32, rank, shape, p);
  return p;
}

static int attr_index(opd_kcall_t *c, const char *name) {
  for (int i = 0; i < c->op->n_attrs; i++)
    if (strcmp(c->op->attrs[i].name, name) == 0) return i;
  cr_assert_fail("op %s has no attr %s", c->op->name, name);
  return -1;
}

void ot_set_int(opd_kcall_t *c, const char *attr, int64_t v) {
  opd_attr_val_t *a = &c->attr[attr_index(c, attr)];
  a->type = OPD_ATTR_INT;
  a->i = v;
}

void ot_set_float(opd_kcall_t *c, const char *attr, double v) {
  opd_attr_val_t *a = &c->attr[attr_index(c, attr)];
  a->type = OPD_ATTR_FLOAT;
  a->f = v;
}

void ot_set_str(opd_kcall_t *c, const char *attr, const char *v) {
  opd_attr_val_t *a = &c->attr[attr_index(c, attr)];
  a->type = OPD_ATTR_STR;
  snprintf(a->s, sizeof a->s, "%s", v);
}

void ot_set_ints(opd_kcall_t *c, const char *attr, int n, const int64_t *v) {
  opd_attr_val_t *a = &c->attr[attr_index(c, attr)];
  a->type = OPD_ATTR_INTS;
  a->n = n;
  for (int i = 0; i < n && i < OPD_MAX_RANK; i++) a->ints[i] = v[i];
}

int ot_shape(opd_kcall_t *c) {
  void *data[OPD_MAX_TENSORS];
  opd_tshape_t out[OPD_MAX_TENSORS];
  memset(out, 0, sizeof out);
  for (int i = 0; i < c->n_in; i++) {
    data[i] = c->in[i].data;
    c->in[i].data = NULL;
  }
  c->err[0] = '\0';
  int rc = c->op->shape(c, out);
  for (int i = 0; i < c->n_in; i++) c->in[i].data = data[i];
  if (rc) return rc;
  for (int i = 0; i < c->n_out; i++) {
    cr_assert(out[i].dtype != 0, "rule left output %d's dtype unset", i);
    fill_view(&c->out[i], out[i].dtype, out[i].rank, out[i].shape, NULL);
    size_t bytes = (size_t)c->out[i].numel * opd__dtype_size(out[i].dtype);
    c->out[i].data = own(c, bytes);
    memset(c->out[i].data, 0xff, bytes);
  }
  return 0;
}

void ot_ready(opd_kcall_t *c) {
  int rc = ot_shape(c);
  cr_assert_eq(rc, 0, "%s: shape rule failed (%d): %s", c->op->name, rc,
               c->err);
}

void ot_expect_err(opd_kcall_t *c, int code, ...) {
  int rc = ot_shape(c);
  cr_assert_eq(rc, code, "%s: rule returned %d, expected %d (msg: %s)",
               c->op->name, rc, code, c->err);
  va_list ap;
  va_start(ap, code);
  for (const char *w; (w = va_arg(ap, const char *));)
    cr_assert(strstr(c->err, w), "%s: message \"%s\" lacks \"%s\"",
              c->op->name, c->err, w);
  va_end(ap);
}

const opd_exec_t *ot_pool(int n) {
  cr_assert(n >= 1 && n <= 8);
  if (!pools[n].parallel_for)
    cr_assert_eq(opd__exec_pool_create(&pools[n], n), 0);
  return &pools[n];
}

int ot_run(opd_kcall_t *c, int fast, const opd_exec_t *ex) {
  c->exec = ex;
  int (*k)(opd_kcall_t *) = fast && c->op->cpu_fast ? c->op->cpu_fast
                                                      : c->op->cpu_ref;
  return k(c);
}

void ot_assert_close(const float *got, const float *want, int64_t n,
                     double atol, double rtol, const char *what) {
  for (int64_t i = 0; i < n; i++) {
    double g = got[i], w = want[i];
    if (isnan(w) && isnan(g)) continue;
    if (isinf(w) && g == w) continue;
    cr_assert(fabs(g - w) <= atol + rtol * fabs(w),
              "%s: element %lld is %.9g, expected %.9g (atol %g rtol %g)",
              what, (long long)i, g, w, atol, rtol);
  }
}

float *ot_out(opd_kcall_t *c, int i) { return c->out[i].data; }

void ot_check_fast(opd_kcall_t *c, double atol, double rtol) {
  void *ref[OPD_MAX_TENSORS];
  size_t bytes[OPD_MAX_TENSORS];
  int rc = ot_run(c, 0, &opd__exec_serial);
  cr_assert_eq(rc, 0, "%s ref failed: %s", c->op->name, c->err);
  for (int i = 0; i < c->n_out; i++) {
    bytes[i] = (size_t)c->out[i].numel * opd__dtype_size(c->out[i].dtype);
    ref[i] = malloc(bytes[i] ? bytes[i] : 1);
    memcpy(ref[i], c->out[i].data, bytes[i]);
  }
  const opd_exec_t *execs[3] = {&opd__exec_serial, ot_pool(2), ot_pool(4)};
  const char *names[3] = {"serial", "pool2", "pool4"};
  for (int e = 0; e < 3; e++) {
    for (int i = 0; i < c->n_out; i++) memset(c->out[i].data, 0xff, bytes[i]);
    rc = ot_run(c, 1, execs[e]);
    cr_assert_eq(rc, 0, "%s fast (%s) failed: %s", c->op->name, names[e],
                 c->err);
    for (int i = 0; i < c->n_out; i++) {
      char what[96];
      snprintf(what, sizeof what, "%s fast (%s) output %d", c->op->name,
               names[e], i);
      if (c->out[i].dtype == OPD_DTYPE_FLOAT32)
        ot_assert_close(c->out[i].data, ref[i], c->out[i].numel, atol, rtol,
                        what);
      else
        cr_assert(memcmp(c->out[i].data, ref[i], bytes[i]) == 0,
                  "%s differs from the reference", what);
    }
  }
  for (int i = 0; i < c->n_out; i++) {
    memcpy(c->out[i].data, ref[i], bytes[i]);
    free(ref[i]);
  }
}
