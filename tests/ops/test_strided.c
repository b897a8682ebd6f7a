/* The kernels of the rows flagged OPD_OPF_CPU_STRIDED (unary, binary,
 * softmax, log_softmax, layernorm, rmsnorm) on strided views, against the
 * same kernels on contiguous copies: transposes, 3-D permutes, step
 * slices, stride-0 broadcasts, strided out= slices of a bigger tensor,
 * outputs laid out as their input, in place; float32, float64, float16,
 * bfloat16; cpu_ref serially and cpu_fast serially and on a pool of 2 and
 * 3 threads; the elements of an output's storage outside its view stay as
 * they were. Shapes cover the drivers' branches: rows shorter and longer
 * than ROW_DIRECT (256), several tiles, tails (kernels/common/strided.c).
 */
#include <math.h>
#include <string.h>

#include "kernels/common/cast.h"
#include "kernels/common/kutil.h"
#include "tests/ops/optest.h"

/* A strided view into a storage buffer of `storage` elements. */
typedef struct sv {
  int rank;
  int64_t shape[4];
  int64_t strides[4];
  int64_t offset;  /* elements into the storage */
  int64_t storage; /* elements of the storage */
} sv_t;

/* A contiguous view of a shape: storage = numel. */
static sv_t contig(int rank, const int64_t *shape) {
  sv_t v = {.rank = rank};
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) v.shape[d] = shape[d], v.strides[d] = s, s *= shape[d];
  v.storage = s;
  return v;
}

/* The view of shape `shape` reading a contiguous storage of the dims
 * permuted by perm (storage dim j is view dim perm[j]): a transpose when
 * perm = {1, 0}. */
static sv_t permuted(int rank, const int64_t *shape, const int *perm) {
  sv_t v = {.rank = rank};
  int64_t s = 1;
  for (int j = rank - 1; j >= 0; j--) {
    v.shape[perm[j]] = shape[perm[j]];
    v.strides[perm[j]] = s;
    s *= shape[perm[j]];
  }
  v.storage = s;
  return v;
}

static double get(const void *p, int32_t dt, int64_t i) {
  switch (dt) {
    case OPD_DTYPE_FLOAT64: return ((const double *)p)[i];
    case OPD_DTYPE_FLOAT16: return opd__f16_to_f32(((const uint16_t *)p)[i]);
    case OPD_DTYPE_BFLOAT16: return opd__bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
  }
}

static void put(void *p, int32_t dt, int64_t i, double v) {
  switch (dt) {
    case OPD_DTYPE_FLOAT64: ((double *)p)[i] = v; break;
    case OPD_DTYPE_FLOAT16: ((uint16_t *)p)[i] = opd__f32_to_f16((float)v); break;
    case OPD_DTYPE_BFLOAT16: ((uint16_t *)p)[i] = opd__f32_to_bf16((float)v); break;
    default: ((float *)p)[i] = (float)v;
  }
}

/* Element e (row-major over v's shape) of v: its storage index. */
static int64_t at(const sv_t *v, int64_t e) {
  int64_t off = v->offset;
  for (int d = v->rank - 1; d >= 0; d--) {
    off += e % v->shape[d] * v->strides[d];
    e /= v->shape[d];
  }
  return off;
}

static int64_t numel(const sv_t *v) {
  int64_t n = 1;
  for (int d = 0; d < v->rank; d++) n *= v->shape[d];
  return n;
}

static void set_view(opd_tview_t *t, void *base, int32_t dt, const sv_t *v) {
  memset(t, 0, sizeof *t);
  t->data = (char *)base + v->offset * (int64_t)opd__dtype_size(dt);
  t->dtype = dt, t->rank = v->rank, t->numel = numel(v);
  for (int d = 0; d < v->rank; d++) t->shape[d] = v->shape[d], t->strides[d] = v->strides[d];
}

#define MAXIN 3

/* One case: op with attrs set by `attrs`, inputs `in` (storage filled with
 * values from `seed`), output `out`; `inplace`: the output is input 0's
 * view. */
typedef struct scase {
  const char *op;
  int n_in;
  sv_t in[MAXIN];
  sv_t out;
  int inplace;
  void (*attrs)(opd_kcall_t *c);
} scase_t;

static double shift; /* added to every input value */

static double tol(int32_t dt) {
  switch (dt) {
    case OPD_DTYPE_FLOAT64: return 1e-12;
    case OPD_DTYPE_FLOAT16: return 2e-3;
    case OPD_DTYPE_BFLOAT16: return 1.6e-2;
    default: return 2e-5;
  }
}

static void run_case(const scase_t *k, int32_t dt, const char *what) {
  size_t esz = opd__dtype_size(dt);
  void *src[MAXIN], *flat[MAXIN];
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (const char *q = what; *q; q++) s = s * 31 + (unsigned char)*q;
  for (int i = 0; i < k->n_in; i++) {
    src[i] = malloc((size_t)k->in[i].storage * esz);
    for (int64_t e = 0; e < k->in[i].storage; e++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      put(src[i], dt, e, (double)((s >> 40) % 20000) / 2000.0 - 5.0 + shift);
    }
    int64_t n = numel(&k->in[i]);
    flat[i] = malloc((size_t)n * esz + 1);
    for (int64_t e = 0; e < n; e++) memcpy((char *)flat[i] + e * esz, (char *)src[i] + at(&k->in[i], e) * esz, esz);
  }
  sv_t ov = k->inplace ? k->in[0] : k->out;
  int64_t n = numel(&ov);
  sv_t oc = contig(ov.rank, ov.shape);
  for (int fast = 0; fast < 2; fast++) {
    /* the truth: the same kernel on contiguous copies */
    opd_kcall_t *ref = ot_new(k->op);
    if (k->attrs) k->attrs(ref);
    ref->n_in = k->n_in;
    for (int i = 0; i < k->n_in; i++) {
      sv_t fc = contig(k->in[i].rank, k->in[i].shape);
      set_view(&ref->in[i], flat[i], dt, &fc);
    }
    void *want = malloc((size_t)n * esz + 1);
    set_view(&ref->out[0], want, dt, &oc);
    cr_assert_eq(ot_run(ref, fast, &opd__exec_serial), 0, "%s: %s", what, ref->err);
    int nex = fast ? 3 : 1;
    for (int x = 0; x < nex; x++) {
      const opd_exec_t *ex = x == 0 ? &opd__exec_serial : ot_pool(x + 1);
      opd_kcall_t *c = ot_new(k->op);
      if (k->attrs) k->attrs(c);
      c->n_in = k->n_in;
      void *ins[MAXIN];
      for (int i = 0; i < k->n_in; i++) {
        ins[i] = malloc((size_t)k->in[i].storage * esz);
        memcpy(ins[i], src[i], (size_t)k->in[i].storage * esz);
        set_view(&c->in[i], ins[i], dt, &k->in[i]);
      }
      void *ob = k->inplace ? ins[0] : malloc((size_t)ov.storage * esz);
      if (!k->inplace)
        for (int64_t e = 0; e < ov.storage; e++) put(ob, dt, e, 77.0);
      set_view(&c->out[0], ob, dt, &ov);
      cr_assert_eq(ot_run(c, fast, ex), 0, "%s: %s", what, c->err);
      /* every element of the view, and nothing outside it */
      char *hit = calloc((size_t)ov.storage, 1);
      for (int64_t e = 0; e < n; e++) {
        int64_t j = at(&ov, e);
        hit[j] = 1;
        double g = get(ob, dt, j), w = get(want, dt, e);
        cr_assert(g == w || fabs(g - w) <= tol(dt) * (1 + fabs(w)) || (isnan(g) && isnan(w)),
                  "%s dtype %d fast %d exec %d: element %lld is %g, want %g", what, dt,
                  fast, x, (long long)e, g, w);
      }
      for (int64_t j = 0; j < ov.storage; j++) {
        if (hit[j]) continue;
        double g = get(ob, dt, j), w = k->inplace ? get(src[0], dt, j) : 77.0;
        cr_assert(g == w, "%s: storage element %lld outside the output changed", what,
                  (long long)j);
      }
      free(hit);
      for (int i = 0; i < k->n_in; i++) free(ins[i]);
      if (!k->inplace) free(ob);
      ot_free(c);
    }
    free(want);
    ot_free(ref);
  }
  for (int i = 0; i < k->n_in; i++) free(src[i]), free(flat[i]);
}

static const int32_t dtypes[] = {OPD_DTYPE_FLOAT32, OPD_DTYPE_FLOAT64, OPD_DTYPE_FLOAT16,
                                 OPD_DTYPE_BFLOAT16};

static void all_dtypes(const scase_t *k, const char *what) {
  for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) run_case(k, dtypes[d], what);
}

/* A wider storage holding v's rows: every row `pad` elements longer, the
 * view starting `off` elements in (an out= slice of a bigger tensor). */
static sv_t sliced(sv_t v, int64_t pad, int64_t off) {
  int last = v.rank - 1;
  int64_t row = v.shape[last] + pad, s = row;
  v.strides[last] = 1;
  for (int d = last - 1; d >= 0; d--) v.strides[d] = s, s *= v.shape[d];
  v.offset = off;
  v.storage = s;
  return v;
}

/* Every other element along the last dim, from element `off`. */
static sv_t stepped(sv_t v, int64_t off) {
  int last = v.rank - 1;
  int64_t s = 2 * v.shape[last];
  v.strides[last] = 2;
  for (int d = last - 1; d >= 0; d--) v.strides[d] = s, s *= v.shape[d];
  v.offset = off;
  v.storage = s + off;
  return v;
}

/* v's first row (dims before the last: stride 0). */
static sv_t broadcast_rows(sv_t v) {
  for (int d = 0; d < v.rank - 1; d++) v.strides[d] = 0;
  v.strides[v.rank - 1] = 1;
  v.storage = v.shape[v.rank - 1];
  v.offset = 0;
  return v;
}

static const int T2[] = {1, 0};
static const int P3[] = {2, 0, 1}; /* storage (C, A, B) read as (A, B, C) */

/* The layouts of one shape for a one-input op. */
static void unary_layouts(const char *op, void (*attrs)(opd_kcall_t *), int rank,
                          const int64_t *shape) {
  sv_t c = contig(rank, shape);
  sv_t t = permuted(rank, shape, rank == 2 ? T2 : P3);
  scase_t cases[] = {
      {op, 1, {t}, c, 0, attrs},                    /* transpose / permute */
      {op, 1, {stepped(c, 1)}, c, 0, attrs},        /* step slice */
      {op, 1, {broadcast_rows(c)}, c, 0, attrs},    /* stride-0 rows */
      {op, 1, {c}, sliced(c, 9, 4), 0, attrs},      /* out= slice */
      {op, 1, {c}, t, 0, attrs},                    /* transposed out= */
      {op, 1, {t}, t, 0, attrs},                    /* laid out alike */
      {op, 1, {t}, sliced(c, 3, 1), 0, attrs},      /* both strided */
      {op, 1, {stepped(c, 0)}, c, 1, attrs},        /* in place, strided */
  };
  const char *names[] = {"transpose", "step", "broadcast", "out_slice", "out_transposed",
                         "alike", "both", "in_place"};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char what[96];
    snprintf(what, sizeof what, "%s %s %lldx%lld", op, names[i], (long long)shape[0],
             (long long)shape[1]);
    all_dtypes(&cases[i], what);
  }
}

static void gelu_tanh(opd_kcall_t *c) { ot_set_str(c, "approximate", "tanh"); }

Test(strided, unary) {
  const int64_t shapes[][3] = {{7, 13, 0}, {37, 300, 0}, {300, 40, 0}, {3, 10, 280}};
  for (size_t s = 0; s < 4; s++) {
    int rank = shapes[s][2] ? 3 : 2;
    unary_layouts("relu", NULL, rank, shapes[s]);
    unary_layouts("gelu", gelu_tanh, rank, shapes[s]);
  }
  unary_layouts("sigmoid", NULL, 2, OT_SHAPE(33, 270));
  unary_layouts("neg", NULL, 2, OT_SHAPE(9, 20));
}

static void alpha2(opd_kcall_t *c) { ot_set_float(c, "alpha", 2.5); }

Test(strided, binary) {
  const int64_t shapes[][2] = {{7, 13}, {37, 300}, {300, 40}};
  for (size_t s = 0; s < 3; s++) {
    const int64_t *sh = shapes[s];
    sv_t c = contig(2, sh), t = permuted(2, sh, T2), row = contig(1, sh + 1);
    sv_t b1 = contig(2, OT_SHAPE(1, sh[1]));
    scase_t cases[] = {
        {"add", 2, {t, c}, c, 0, NULL},                  /* a transposed */
        {"sub", 2, {c, t}, c, 0, alpha2},                /* b transposed */
        {"mul", 2, {t, row}, c, 0, NULL},                /* broadcast (C,) */
        {"add", 2, {stepped(c, 1), b1}, c, 0, alpha2},   /* step, (1, C) */
        {"mul", 2, {c, broadcast_rows(c)}, c, 0, NULL},  /* stride 0 */
        {"div", 2, {c, t}, sliced(c, 5, 2), 0, NULL},    /* out= slice */
        {"add", 2, {t, t}, t, 0, NULL},                  /* laid out alike */
        {"mul", 2, {t, c}, t, 1, NULL},                  /* in place on a */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      char what[96];
      snprintf(what, sizeof what, "binary case %zu %lldx%lld", i, (long long)sh[0],
               (long long)sh[1]);
      all_dtypes(&cases[i], what);
    }
  }
}

static void dim0(opd_kcall_t *c) { ot_set_int(c, "dim", 0); }
static void dim1(opd_kcall_t *c) { ot_set_int(c, "dim", 1); }

Test(strided, softmax) {
  const int64_t shapes[][3] = {{7, 13, 0}, {37, 300, 0}, {300, 40, 0}, {3, 10, 280}};
  for (size_t s = 0; s < 4; s++) {
    int rank = shapes[s][2] ? 3 : 2;
    unary_layouts("softmax", NULL, rank, shapes[s]);
    unary_layouts("log_softmax", NULL, rank, shapes[s]);
    unary_layouts("softmax", dim0, rank, shapes[s]);
  }
  unary_layouts("log_softmax", dim1, 3, OT_SHAPE(4, 6, 5));
}

static void ndims2(opd_kcall_t *c) { ot_set_int(c, "ndims", 2); }

Test(strided, norms) {
  const int64_t shapes[][3] = {{7, 13, 0}, {37, 300, 0}, {300, 40, 0}, {3, 10, 280}};
  for (size_t s = 0; s < 4; s++) {
    int rank = shapes[s][2] ? 3 : 2;
    const int64_t *sh = shapes[s];
    int64_t C = sh[rank - 1];
    unary_layouts("layernorm", NULL, rank, sh);
    unary_layouts("rmsnorm", NULL, rank, sh);
    sv_t c = contig(rank, sh), t = permuted(rank, sh, rank == 2 ? T2 : P3);
    sv_t w = contig(1, &C), ws = stepped(contig(1, &C), 1);
    scase_t cases[] = {
        {"layernorm", 3, {t, w, w}, c, 0, NULL},                /* x transposed */
        {"layernorm", 3, {c, ws, w}, sliced(c, 4, 3), 0, NULL}, /* strided weight */
        {"layernorm", 3, {t, w, ws}, t, 0, NULL},               /* laid out alike */
        {"rmsnorm", 2, {stepped(c, 0), ws}, c, 0, NULL},        /* step slice */
        {"rmsnorm", 2, {t, w}, t, 1, NULL},                     /* in place */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      char what[96];
      snprintf(what, sizeof what, "norm case %zu shape %zu", i, s);
      all_dtypes(&cases[i], what);
    }
  }
  /* laid out alike, far from 0: the columns' mean kept as hi + lo */
  for (int rms = 0; rms < 2; rms++) {
    sv_t t = permuted(2, OT_SHAPE(40, 300), T2);
    scase_t k = {rms ? "rmsnorm" : "layernorm", 1, {t}, t, 0, NULL};
    shift = 1e5;
    run_case(&k, OPD_DTYPE_FLOAT32, rms ? "rmsnorm alike, shifted" : "layernorm alike, shifted");
    run_case(&k, OPD_DTYPE_FLOAT64, rms ? "rmsnorm alike, shifted" : "layernorm alike, shifted");
    shift = 0;
  }
  /* over two trailing dims, x permuted */
  sv_t t3 = permuted(3, OT_SHAPE(4, 6, 5), P3);
  sv_t w2 = contig(2, OT_SHAPE(6, 5));
  scase_t k2 = {"layernorm", 2, {t3, w2}, contig(3, OT_SHAPE(4, 6, 5)), 0, NULL};
  all_dtypes(&k2, "layernorm over (6, 5), x permuted");
  scase_t k3 = {"rmsnorm", 1, {t3}, sliced(contig(3, OT_SHAPE(4, 6, 5)), 2, 1), 0, ndims2};
  all_dtypes(&k3, "rmsnorm ndims=2, x permuted, out= slice");
}
