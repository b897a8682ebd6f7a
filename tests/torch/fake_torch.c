/* libopd's C kernels for torch's dispatcher (client/torch/) without torch: this program defines the stable-ABI shims they look up
 * (aoti_torch_*, torch_*, and libstdc++'s throw, which here jumps back to
 * the test) over a toy tensor, registers the kernels and calls them as
 * torch's boxed dispatcher would, against a real daemon.
 *   fake_torch SOCKET [cpu]  (exit 0 when every check passed; cpu: the CPU key's too)
 * Run by tests/python/test_torch_c_kernels.py (CI: no GPU and a torch
 * without these shims). What it checks: the stack is read as torch lays it
 * out (Tensor, Tensor? boxed or null, int, float, bool, str and int[]
 * handles), the daemon's shape rule is asked once per signature, the
 * outputs are allocated with the shapes it gives, every handle the kernel
 * was given or made is released (also when it throws), and each error
 * names the op and the problem, for the functional, in-place (<op>_) and
 * out= (<op>_out) forms and a variadic (Tensor[]) op. Without a CUDA driver the run itself then
 * fails in libopd: that error is thrown too, and checked for. On the CPU key an arena tensor
 * runs for real (a torch_from_blob output block, given back); others go to the fallback.
 * Linked with -rdynamic so that dlsym(RTLD_DEFAULT) finds the shims.
 */
#include <setjmp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opd/opd.h"
#include "tests/gpu/check.h" /* CHECK: PASS/FAIL lines, counted */

typedef uint64_t siv_t;
typedef void (*boxed_fn)(siv_t *, uint64_t, uint64_t);

/* ---- the toy tensor and the shims --------------------------------------- */

typedef struct ft {
  int refs;
  int32_t dev_type, dev_index, dtype;
  int64_t dim, sizes[8];
  bool contig;
  char data[64];
  void *blob, *ctx;               /* torch_from_blob's memory (or NULL) */
  void (*deleter)(void *, void *); /* and what it calls with both */
} ft_t;

static int live;                 /* tensor objects alive */
static int64_t last_sizes[8], last_dim = -1; /* the last empty_strided */
static char thrown[512];
static jmp_buf back;

static ft_t *tensor(int32_t dev_type, int32_t dtype, int64_t dim,
                    const int64_t *sizes) {
  ft_t *t = calloc(1, sizeof *t);
  t->refs = 1, t->dev_type = dev_type, t->dtype = dtype, t->dim = dim;
  t->contig = true;
  for (int64_t i = 0; i < dim; i++) t->sizes[i] = sizes[i];
  live++;
  return t;
}
static void unref(ft_t *t) {
  if (--t->refs == 0) {
    if (t->deleter != NULL) t->deleter(t->blob, t->ctx);
    free(t);
    live--;
  }
}

int32_t aoti_torch_device_type_cuda(void) { return 1; }
int32_t aoti_torch_device_type_cpu(void) { return 0; }
int32_t aoti_torch_dtype_float32(void) { return 6; }
int32_t aoti_torch_dtype_float16(void) { return 5; }
int32_t aoti_torch_dtype_bfloat16(void) { return 15; }
int32_t aoti_torch_dtype_float64(void) { return 7; }
int32_t aoti_torch_dtype_int8(void) { return 1; }
int32_t aoti_torch_dtype_uint8(void) { return 0; }
int32_t aoti_torch_dtype_int32(void) { return 3; }
int32_t aoti_torch_dtype_int64(void) { return 4; }
int32_t aoti_torch_dtype_bool(void) { return 11; }

static boxed_fn registered[512];
static char reg_names[512][80];
static int n_registered;
static boxed_fn cpu_registered[512]; /* the CPU key's, while its library lives */
static char cpu_names[512][80];
static int n_cpu, cpu_libs;

int32_t aoti_torch_library_init_impl(const char *ns, const char *k,
                                     const char *file, uint32_t line, void **ret) {
  (void)ns, (void)file, (void)line;
  *ret = strcmp(k, "CUDA") == 0 ? (void *)&registered
         : strcmp(k, "CPU") == 0 ? (void *)&cpu_registered : NULL;
  if (*ret == (void *)&cpu_registered) cpu_libs++, n_cpu = 0;
  return *ret ? 0 : 1;
}
int32_t aoti_torch_delete_library_object(void *lib) {
  return lib == (void *)&cpu_registered ? (cpu_libs--, n_cpu = 0) : 0;
}
int32_t aoti_torch_library_impl(void *lib, const char *name, boxed_fn fn) {
  if (lib == (void *)&cpu_registered) /* n_cpu < 512: the table's own bound */
    return snprintf(cpu_names[n_cpu], 80, "%s", name), cpu_registered[n_cpu++] = fn, 0;
  if (n_registered == 512) return 1;
  snprintf(reg_names[n_registered], sizeof reg_names[0], "%s", name);
  registered[n_registered++] = fn;
  return 0;
}
int32_t aoti_torch_get_data_ptr(void *h, void **p) {
  *p = ((ft_t *)h)->blob ? ((ft_t *)h)->blob : ((ft_t *)h)->data;
  return 0;
}
int32_t torch_from_blob(void *data, int64_t dim, const int64_t *sizes, const int64_t *strides,
                        int64_t off, int32_t dtype, int32_t dev_type, int32_t dev_index,
                        void **ret, int32_t layout, const uint8_t *meta, int64_t meta_n,
                        void (*deleter)(void *, void *), void *ctx) {
  (void)strides, (void)off, (void)layout, (void)meta, (void)meta_n;
  ft_t *t = tensor(dev_type, dtype, dim, sizes);
  t->dev_index = dev_index, t->blob = data, t->deleter = deleter, t->ctx = ctx;
  *ret = t;
  return 0;
}
int32_t aoti_torch_get_dim(void *h, int64_t *d) {
  *d = ((ft_t *)h)->dim;
  return 0;
}
int32_t aoti_torch_get_sizes(void *h, int64_t **s) {
  *s = ((ft_t *)h)->sizes;
  return 0;
}
int32_t aoti_torch_get_dtype(void *h, int32_t *d) {
  *d = ((ft_t *)h)->dtype;
  return 0;
}
int32_t aoti_torch_get_device_type(void *h, int32_t *d) {
  *d = ((ft_t *)h)->dev_type;
  return 0;
}
int32_t aoti_torch_get_device_index(void *h, int32_t *d) {
  *d = ((ft_t *)h)->dev_index;
  return 0;
}
int32_t aoti_torch_is_contiguous(void *h, bool *c) {
  *c = ((ft_t *)h)->contig;
  return 0;
}
int32_t aoti_torch_empty_strided(int64_t dim, const int64_t *sizes,
                                 const int64_t *strides, int32_t dtype,
                                 int32_t dev_type, int32_t dev_index, void **ret) {
  (void)strides;
  ft_t *t = tensor(dev_type, dtype, dim, sizes);
  t->dev_index = dev_index;
  last_dim = dim;
  memcpy(last_sizes, sizes, sizeof sizes[0] * (size_t)dim);
  *ret = t;
  return 0;
}
int32_t aoti_torch_new_tensor_handle(void *h, void **ret) {
  ((ft_t *)h)->refs++;
  *ret = h;
  return 0;
}
int32_t aoti_torch_delete_tensor_object(void *h) {
  unref(h);
  return 0;
}
int32_t aoti_torch_call_dispatcher(const char *op, const char *overload, siv_t *st) {
  (void)overload;
  ft_t *t = (ft_t *)(uintptr_t)st[0];
  if (strcmp(op, "aten::contiguous") == 0) {
    ft_t *c = tensor(t->dev_type, t->dtype, t->dim, t->sizes);
    unref(t); /* the stack's handle is consumed */
    st[0] = (siv_t)(uintptr_t)c;
    return 0;
  }
  if (strcmp(op, "aten::copy_") == 0) {
    unref((ft_t *)(uintptr_t)st[1]);
    return 0; /* st[0]: self, returned */
  }
  return 1;
}
int32_t aoti_torch_get_current_cuda_stream(int32_t dev, void **s) {
  (void)dev;
  *s = (void *)0x5157; /* never a real stream: the run fails in libopd */
  return 0;
}
typedef struct { char s[64]; } fstr_t;
int32_t torch_string_c_str(void *h, const char **s) {
  *s = ((fstr_t *)h)->s;
  return 0;
}
int32_t torch_delete_string(void *h) {
  free(h);
  live--;
  return 0;
}
typedef struct { size_t n; siv_t v[24]; } flist_t;
int32_t torch_list_size(void *h, size_t *n) {
  *n = ((flist_t *)h)->n;
  return 0;
}
int32_t torch_list_get_item(void *h, size_t i, siv_t *v) {
  *v = ((flist_t *)h)->v[i];
  return 0;
}
int32_t torch_delete_list(void *h) {
  free(h);
  live--;
  return 0;
}
/* ::operator delete of a Tensor? box */
void _ZdlPv(void *p) {
  free(p);
  live--;
}
/* libstdc++'s throw: the message goes back to the test */
char _ZTISt13runtime_error[16];
static char exc_buf[16];
void *__cxa_allocate_exception(size_t n) {
  (void)n;
  return exc_buf;
}
void _ZNSt13runtime_errorC1EPKc(void *self, const char *msg) {
  (void)self;
  snprintf(thrown, sizeof thrown, "%s", msg);
}
void _ZNSt13runtime_errorD1Ev(void *self) { (void)self; }
void __cxa_throw(void *e, void *ti, void (*d)(void *)) {
  (void)e, (void)ti, (void)d;
  longjmp(back, 1);
}

/* ---- the stack's values --------------------------------------------------- */

static siv_t T(ft_t *t) { return (siv_t)(uintptr_t)t; }
static siv_t OPT(ft_t *t) { /* Tensor?: a heap box, or 0 for None */
  if (t == NULL) return 0;
  siv_t *box = malloc(sizeof *box);
  *box = T(t);
  live++;
  return (siv_t)(uintptr_t)box;
}
static siv_t F(double f) {
  siv_t v;
  memcpy(&v, &f, sizeof v);
  return v;
}
static siv_t S(const char *s) {
  fstr_t *h = calloc(1, sizeof *h);
  snprintf(h->s, sizeof h->s, "%s", s);
  live++;
  return (siv_t)(uintptr_t)h;
}
static siv_t L2(int64_t a, int64_t b) {
  flist_t *h = calloc(1, sizeof *h);
  h->n = 2, h->v[0] = (siv_t)a, h->v[1] = (siv_t)b;
  live++;
  return (siv_t)(uintptr_t)h;
}
static siv_t TL(ft_t *const *ts, size_t n) { /* Tensor[]: a list handle */
  flist_t *h = calloc(1, sizeof *h);
  h->n = n;
  for (size_t i = 0; i < n; i++) h->v[i] = T(ts[i]);
  live++;
  return (siv_t)(uintptr_t)h;
}
static ft_t *cuda(int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  int64_t s[4] = {d0, d1, d2, d3};
  int dim = d3 ? 4 : d2 ? 3 : d1 ? 2 : 1;
  ft_t *t = tensor(1, 6, dim, s);
  t->refs++; /* the caller's own reference; the stack's is given away */
  return t;
}


static opd_client_t *the_client;
static int rebinds;
static void *bind_again(void) { /* opd.torch's _c_rebind */
  rebinds++;
  opd_torch_bind(the_client, NULL);
  return NULL;
}

static int on_cpu; /* call() takes the CPU key's kernels */
static boxed_fn kernel_of(const char *name) {
  for (int i = 0; on_cpu && i < n_cpu; i++)
    if (strcmp(cpu_names[i], name) == 0) return cpu_registered[i];
  for (int i = 0; !on_cpu && i < n_registered; i++)
    if (strcmp(reg_names[i], name) == 0) return registered[i];
  return NULL;
}

/* the CPU kernel's fallback (opd.torch's Python kernel): takes the
 * handles over, answers a functional form with an (8, 300) tensor */
static int fb_calls, fb_fail, fb_keep, fb_form, fb_io;
static int64_t fb_dim;
static int fallback(const char *op, int form, void **in, uint32_t n_in,
                    void **out, uint32_t n_out, const opd_attr_t *attrs,
                    uint32_t n_attrs, void **ret, char *msg, size_t cap) {
  int64_t sz[2] = {8, 300};
  fb_calls++, fb_form = form, fb_io = (int)(n_in * 10 + n_out);
  fb_dim = n_attrs ? attrs[0].i : -99;
  for (uint32_t i = 0; i < n_in + n_out; i++) /* NULL: a None input */
    if ((i < n_in ? in[i] : out[i - n_in]) != NULL) unref(i < n_in ? in[i] : out[i - n_in]);
  if (fb_fail) snprintf(msg, cap, "%s: refused by the fallback", op);
  else if (form == OPD_TORCH_FUNCTIONAL) ret[0] = tensor(0, 6, 2, sz);
  return fb_fail ? 1 : fb_keep;
}

/* Calls kernel `name` on stack st; returns 1 if it threw (message in
 * thrown), 0 if it returned. */
static int call(const char *name, siv_t *st, uint64_t n_args, uint64_t n_ret) {
  boxed_fn fn = kernel_of(name);
  thrown[0] = '\0';
  if (fn == NULL) {
    snprintf(thrown, sizeof thrown, "no kernel %s", name);
    return 1;
  }
  if (setjmp(back) != 0) return 1;
  fn(st, n_args, n_ret);
  return 0;
}

static uint64_t requests(opd_client_t *c) {
  char *json = NULL;
  size_t len = 0;
  uint64_t n = 0;
  if (opd_stats_json(c, &json, &len) == 0) {
    const char *p = strstr(json, "\"requests\":");
    if (p) n = strtoull(p + 11, NULL, 10);
    opd_free(json);
  }
  return n;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: fake_torch SOCKET\n");
    return 2;
  }
  char why[200];
  CHECK(opd_torch_available(why, sizeof why) == 1, "the shims are found: %s",
        opd_torch_available(why, sizeof why) ? "yes" : why);
  opd_client_t *c = NULL;
  if (opd_connect(argv[1], &c) != 0) {
    printf("FAIL connect: %s\n", opd_last_error());
    return 1;
  }
  opd_torch_bind(c, NULL);
  const char *eps[] = {"eps"}, *dim[] = {"dim"}, *appr[] = {"approximate"};
  const char *conv[] = {"stride", "padding", "dilation"};
  const int32_t f1[] = {2}, i1[] = {1}, s1[] = {4}, ints3[] = {5, 5, 5};
  int rc = opd_torch_kernel("opd", "softmax", 0, 1, 1, 1, 1, dim, i1) |
           opd_torch_kernel("opd", "layernorm", 0, 3, 1, 1, 1, eps, f1) |
           opd_torch_kernel("opd", "gelu", 0, 1, 1, 1, 1, appr, s1) |
           opd_torch_kernel("opd", "conv2d", 0, 3, 2, 1, 3, conv, ints3) |
           opd_torch_kernel("opd", "relu", 1, 1, 1, 1, 0, NULL, NULL) |
           opd_torch_kernel("opd", "add", 1, 2, 2, 1, 0, NULL, NULL);
  CHECK(rc == 0 && n_registered == 6, "6 kernels registered (%s)",
        rc ? opd_last_error() : "ok");
  CHECK(opd_torch_kernel("opd", "bad", 1, 0, 0, 1, 0, NULL, NULL) == OPD_EINVAL,
        "an in-place form with no input is refused: %s", opd_last_error());

  /* softmax: the shape rule once per signature, then the run fails here
   * (no CUDA driver, or the toy pointers are not device memory) */
  ft_t *x = cuda(8, 300, 0, 0);
  uint64_t r0 = requests(c);
  siv_t st[8] = {T(x), (siv_t)-1};
  int threw = call("softmax", st, 2, 1);
  uint64_t r1 = requests(c);
  CHECK(threw && strstr(thrown, "opd: softmax: ") == thrown,
        "softmax: the run's failure is thrown, naming the op: %s", thrown);
  CHECK(last_dim == 2 && last_sizes[0] == 8 && last_sizes[1] == 300,
        "softmax: the output allocated as the shape rule says (8, 300)");
  siv_t st2[8] = {T(x), (siv_t)-1};
  x->refs++;
  call("softmax", st2, 2, 1);
  uint64_t r2 = requests(c);
  CHECK(r2 - r1 < r1 - r0, "softmax: the second call of the signature asks "
        "no shape rule (%llu requests, first call %llu)",
        (unsigned long long)(r2 - r1), (unsigned long long)(r1 - r0));
  unref(x);
  CHECK(live == 0, "softmax: every handle released (%d alive)", live);

  /* layernorm: Tensor? boxed, a float attribute; a bad weight is the
   * daemon's shape rule's error */
  ft_t *h = cuda(4, 96, 0, 0), *w = cuda(32, 0, 0, 0), *b = cuda(32, 0, 0, 0);
  siv_t ln[4] = {T(h), OPT(w), OPT(b), F(1e-5)};
  threw = call("layernorm", ln, 4, 1);
  CHECK(threw && strstr(thrown, "layernorm") && strstr(thrown, "32"),
        "layernorm: a weight of 32 for 96 columns: %s", thrown);
  h->refs++;
  siv_t ln2[4] = {T(h), OPT(NULL), OPT(b), F(1e-5)};
  b->refs++;
  threw = call("layernorm", ln2, 4, 1);
  CHECK(threw && strstr(thrown, "input 1 is None but a later input is given"),
        "layernorm: None before a given input: %s", thrown);
  ft_t *wc = cuda(96, 0, 0, 0);
  wc->dev_type = 0; /* a CPU tensor */
  h->refs++;
  siv_t ln3[4] = {T(h), OPT(wc), OPT(NULL), F(1e-5)};
  threw = call("layernorm", ln3, 4, 1);
  CHECK(threw && strstr(thrown, "input 1 is not a CUDA tensor"),
        "layernorm: a CPU weight: %s", thrown);
  unref(h), unref(w), unref(b), unref(wc);
  CHECK(live == 0, "layernorm: every handle and box released (%d alive)", live);

  /* gelu: a str attribute; conv2d: int[] attributes and bias None */
  x = cuda(8, 300, 0, 0);
  siv_t ge[2] = {T(x), S("tanh")};
  threw = call("gelu", ge, 2, 1);
  CHECK(threw && last_dim == 2, "gelu approximate=\"tanh\": planned, "
        "output allocated (%s)", thrown);
  x->refs++;
  siv_t ge2[2] = {T(x), S("bogus")};
  threw = call("gelu", ge2, 2, 1);
  CHECK(threw && strstr(thrown, "bogus"), "gelu approximate=\"bogus\": %s", thrown);
  unref(x);
  ft_t *cx = cuda(2, 8, 16, 16), *cw = cuda(4, 8, 3, 3);
  siv_t cv[6] = {T(cx), T(cw), OPT(NULL), L2(2, 2), L2(1, 1), L2(1, 1)};
  last_dim = -1;
  threw = call("conv2d", cv, 6, 1);
  CHECK(threw && last_dim == 4 && last_sizes[0] == 2 && last_sizes[1] == 4 &&
            last_sizes[2] == 8 && last_sizes[3] == 8,
        "conv2d stride [2, 2] padding [1, 1]: output (2, 4, 8, 8) allocated");
  unref(cx), unref(cw);
  CHECK(live == 0, "gelu, conv2d: every handle, string and list released "
        "(%d alive)", live);

  /* in place: the output must be the first input's; a non-contiguous one
   * goes through a contiguous copy */
  ft_t *a = cuda(3, 4, 0, 0), *bb = cuda(4, 0, 0, 0);
  siv_t ad[2] = {T(bb), T(a)};
  threw = call("add_", ad, 2, 0);
  CHECK(threw && strstr(thrown, "add_: output 0 has dtype float32 and shape "
                        "(4,); the op's output here is float32 (3, 4)"),
        "add_ broadcasting into the smaller one: %s", thrown);
  a->contig = false;
  a->refs++;
  siv_t re[1] = {T(a)};
  int before = live;
  threw = call("relu_", re, 1, 0);
  CHECK(threw && live == before, "relu_ on a non-contiguous tensor: its "
        "contiguous copy released (%s)", thrown);
  unref(a), unref(bb);
  CHECK(live == 0, "in place: every handle released (%d alive)", live);

  /* out= forms: the given tensor is checked against the shape rule and
   * written in place (contiguous) or through a temporary copied back */
  rc = opd_torch_kernel("opd", "softmax", OPD_TORCH_OUT, 1, 1, 1, 1, dim, i1) |
       opd_torch_kernel("opd", "noop", OPD_TORCH_VARIADIC, 1, 0, 0, 0, NULL, NULL);
  CHECK(rc == 0 && kernel_of("softmax_out") && kernel_of("noop"),
        "softmax_out and the variadic noop registered (%s)",
        rc ? opd_last_error() : "ok");
  CHECK(opd_torch_kernel("opd", "noop", OPD_TORCH_OUT, 1, 0, 0, 0, NULL, NULL) ==
                OPD_EINVAL &&
            opd_torch_kernel("opd", "relu", OPD_TORCH_INPLACE | OPD_TORCH_VARIADIC,
                             1, 1, 1, 0, NULL, NULL) == OPD_EINVAL,
        "an out= form with no output and a variadic in-place form are refused");
  x = cuda(8, 300, 0, 0);
  ft_t *y = cuda(8, 300, 0, 0);
  siv_t so[3] = {T(x), T(y), (siv_t)-1};
  last_dim = -1;
  threw = call("softmax_out", so, 3, 0);
  CHECK(threw && strstr(thrown, "opd: softmax_out: ") == thrown && last_dim == -1,
        "softmax_out into a contiguous tensor: no output allocated, the run "
        "tried (%s)", thrown);
  ft_t *y3 = cuda(3, 0, 0, 0);
  x->refs++;
  siv_t so2[3] = {T(x), T(y3), (siv_t)-1};
  threw = call("softmax_out", so2, 3, 0);
  CHECK(threw && strstr(thrown, "softmax_out: output 0 has dtype float32 and "
                        "shape (3,); the op's output here is float32 (8, 300)"),
        "softmax_out into a (3,): %s", thrown);
  y->contig = false;
  x->refs++, y->refs++;
  siv_t so3[3] = {T(x), T(y), (siv_t)-1};
  threw = call("softmax_out", so3, 3, 0);
  CHECK(threw && last_dim == 2 && last_sizes[0] == 8 && last_sizes[1] == 300,
        "softmax_out into a non-contiguous tensor: a temporary (8, 300) (%s)",
        thrown);
  ft_t *yc = cuda(8, 300, 0, 0);
  yc->dev_type = 0;
  x->refs++;
  siv_t so4[3] = {T(x), T(yc), (siv_t)-1};
  threw = call("softmax_out", so4, 3, 0);
  CHECK(threw && strstr(thrown, "output 0 is not a CUDA tensor"),
        "softmax_out into a CPU tensor: %s", thrown);
  unref(x), unref(y), unref(y3), unref(yc);
  CHECK(live == 0, "out=: every handle released (%d alive)", live);

  /* a variadic op: its inputs are one Tensor[]; each handle in it is ours */
  ft_t *v[17];
  for (int i = 0; i < 17; i++) v[i] = cuda(3, 0, 0, 0);
  siv_t nv[1] = {TL(v, 2)};
  threw = call("noop", nv, 1, 0);
  CHECK(threw && strstr(thrown, "opd: noop: ") == thrown &&
            !strstr(thrown, "not the one registered"),
        "noop on a list of 2: read and run (%s)", thrown);
  for (int i = 2; i < 17; i++) v[i]->refs--; /* the list gives them away */
  for (int i = 0; i < 17; i++) v[i]->refs++;
  siv_t nv2[1] = {TL(v, 17)};
  threw = call("noop", nv2, 1, 0);
  CHECK(threw && strstr(thrown, "more than 16 tensors"), "noop on 17: %s", thrown);
  for (int i = 0; i < 17; i++) unref(v[i]);
  CHECK(live == 0, "variadic: every handle and the list released (%d alive)",
        live);

  /* hostile stacks: a schema other than the one registered is refused
   * before the stack is read; an int[] over the rank limit is named, and
   * everything still released */
  x = cuda(8, 300, 0, 0);
  siv_t st4[2] = {T(x), (siv_t)-1};
  threw = call("softmax", st4, 1, 1);
  CHECK(threw && strstr(thrown, "not the one registered"),
        "softmax called with 1 argument: %s", thrown);
  unref(x); /* the kernel left the stack alone: both references are ours */
  unref(x);
  cx = cuda(2, 8, 16, 16), cw = cuda(4, 8, 3, 3);
  flist_t *big = calloc(1, sizeof *big);
  big->n = 9;
  for (int i = 0; i < 9; i++) big->v[i % 8] = 1;
  live++;
  siv_t cv2[6] = {T(cx), T(cw), OPT(NULL), (siv_t)(uintptr_t)big, L2(0, 0),
                  L2(1, 1)};
  threw = call("conv2d", cv2, 6, 1);
  CHECK(threw && strstr(thrown, "attribute stride has more than 8 values"),
        "conv2d with 9 strides: %s", thrown);
  unref(cx), unref(cw);
  CHECK(live == 0, "hostile stacks: every handle released (%d alive)", live);

  /* the connection: unbound, with no way to bind one, says so */
  opd_torch_unbind(c);
  x = cuda(8, 300, 0, 0);
  siv_t st3[2] = {T(x), (siv_t)-1};
  threw = call("softmax", st3, 2, 1);
  CHECK(threw && strstr(thrown, "no connection to a daemon is bound"),
        "no connection bound: %s", thrown);
  unref(x);
  CHECK(live == 0, "every handle released (%d alive)", live);

  /* with the callback opd.torch gives: the call asks it for a connection
   * (as after fork() or a close) and goes on with the one it binds */
  the_client = c;
  opd_torch_bind(NULL, bind_again);
  x = cuda(8, 300, 0, 0);
  siv_t st5[2] = {T(x), (siv_t)-1};
  threw = call("softmax", st5, 2, 1);
  CHECK(rebinds == 1 && threw && !strstr(thrown, "no connection"),
        "unbound, the callback binds one and the call goes on: %s", thrown);
  unref(x);

  /* the CPU key (cpukern.c): a signature's first call, one outside arenas
   * and one of a signature kept (2) go to the fallback; later ones run in
   * C, their output a torch_from_blob block given back when it dies */
  int n = 0;
  if (argc < 3 || strcmp(argv[2], "cpu") != 0) goto bound;
  uint64_t aid = 0, sz[2] = {8, 300};
  float *base = NULL, *blob[3] = {NULL, NULL, NULL};
  CHECK(opd_torch_cpu_kernels("opd", 1, fallback) == 0 && cpu_libs == 1 &&
            n_cpu == n_registered && opd_arena_create(c, 1 << 20, &aid, (void **)&base) == 0,
        "CPU kernels on: %d of %d registered (%s)", n_cpu, n_registered, opd_last_error());
  ft_t *xa = tensor(0, 6, 2, (int64_t *)sz), *xp = cuda(8, 300, 0, 0), *yp = cuda(8, 300, 0, 0);
  xa->blob = base, xa->refs = 9, xp->dev_type = yp->dev_type = 0, on_cpu = 1; /* 8 stacks, ours */
  for (int i = 0; i < 3; i++) { /* the 3rd gets the 2nd's block */
    siv_t cs[2] = {T(xa), (siv_t)-1};
    float *yv = (threw = call("softmax", cs, 2, 1)) ? NULL : ((ft_t *)(uintptr_t)cs[0])->blob;
    CHECK(!threw && fb_calls == 1 && (i == 0 || (yv && yv[0] > 0.0033f && yv[0] < 0.0034f &&
              yv[8 * 300 - 1] > 0.0033f && (i == 1 || yv == blob[1]))),
          "softmax on an arena tensor, call %d: the first to the fallback, then C (%s)", i, thrown);
    if ((blob[i] = yv) != NULL || !threw) unref((ft_t *)(uintptr_t)cs[0]);
  }
  siv_t ri[1] = {T(xa)}, ri2[1] = {T(xa)};
  threw = (base[5] = -2.0f, call("relu_", ri, 1, 0)) | call("relu_", ri2, 1, 0);
  CHECK(!threw && base[5] == 0.0f && fb_calls == 2, "relu_: the fallback, then in "
        "place in the arena (%s)", thrown);
  for (int i = (fb_keep = 2, 0); i < 2; i++) { /* a signature kept: dim=0 */
    siv_t kp[2] = {T(xa), (siv_t)0};
    CHECK(!(threw = call("softmax", kp, 2, 1)) && fb_calls == 3 + i, "softmax "
          "dim=0, kept by the fallback: call %d to it too (%s)", i, thrown);
    if (!threw) unref((ft_t *)(uintptr_t)kp[0]);
  }
  siv_t cs3[2] = {T(xp), (siv_t)1}, so5[3] = {T(xa), T(yp), (siv_t)-1}, cs4[2] = {T(xp), (siv_t)-1};
  CHECK(!(threw = call("softmax", cs3, 2, 1)) && fb_calls == 5 && fb_form == 0 &&
            fb_io == 10 && fb_dim == 1, "a plain CPU tensor: to the fallback, "
        "dim=1 (%s)", thrown);
  if (!threw) unref((ft_t *)(uintptr_t)cs3[0]);
  CHECK(!call("softmax_out", so5, 3, 0) && fb_calls == 6 && fb_form == OPD_TORCH_OUT && fb_io == 11,
        "softmax_out into a plain tensor: to the fallback with it (%s)", thrown);
  fb_fail = 1, xp->refs++;
  CHECK(call("softmax", cs4, 2, 1) && !strcmp(thrown, "opd: softmax: refused by "
        "the fallback"), "the fallback's error is thrown: %s", thrown);
  on_cpu = 0, unref(xa), unref(xp), unref(yp);
  CHECK(opd_torch_cpu_kernels("opd", 0, NULL) == 0 && cpu_libs == 0 && live == 0,
        "CPU kernels off: the library deleted, every handle released (%d alive)", live);

bound: /* the kernel table's bound */
  while ((rc = opd_torch_kernel("opd", "relu", 0, 1, 1, 1, 0, NULL, NULL)) == 0)
    n++;
  CHECK(rc == OPD_ELIMIT && strstr(opd_last_error(), "more than"),
        "after %d more kernels: %s", n, opd_last_error());
  CHECK(live == 0, "every handle released (%d alive)", live);
  opd_close(c);
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
