/* scale: y = a*x + b, the smallest useful opd plugin (float32, any shape).
 * Build: make (CPU; and the CUDA kernel of scale.cu when nvcc is found).
 * Load:  opd --plugin ./hello.so      Call: opctl ops; client.scale(x, a=2) */
#include <opd/op.h>

typedef struct { const float *x; float *y; float a, b; } job_t;

static void range(void *arg, int64_t lo, int64_t hi) {
  const job_t *j = arg;
  for (int64_t i = lo; i < hi; i++) j->y[i] = j->a * j->x[i] + j->b;
}

static int scale_cpu(opd_kcall_t *call) { /* the reference; also the kernel */
  job_t j = {call->in[0].data, call->out[0].data, (float)call->attr[0].f,
             (float)call->attr[1].f};
  call->exec->parallel_for(call->exec, call->in[0].numel, 1 << 16, range, &j);
  return 0;
}

static int scale_shape(opd_kcall_t *call, opd_tshape_t *out) {
  out[0].dtype = call->in[0].dtype; /* y is x's dtype and shape */
  out[0].rank = call->in[0].rank;
  for (int d = 0; d < call->in[0].rank; d++) out[0].shape[d] = call->in[0].shape[d];
  return 0;
}

/* scale.cu's kernel; NULL (weak, undefined) in a build without CUDA */
__attribute__((weak)) int scale_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx);

static const opd_op_def_t scale_op = {
    .name = "scale",
    .summary = "y = a*x + b, elementwise (example plugin)",
    .n_in_min = 1, .n_in_max = 1, .n_out = 1,
    .in = {{"x", OPD_DT(FLOAT32), "(...)"}},
    .out = {{"y", OPD_DT(FLOAT32), "(...) same shape as x"}},
    .n_attrs = 2,
    .attrs = {{.name = "a", .type = OPD_ATTR_FLOAT, .doc = "factor",
               .def = {.type = OPD_ATTR_FLOAT, .f = 1.0}},
              {.name = "b", .type = OPD_ATTR_FLOAT, .doc = "offset",
               .def = {.type = OPD_ATTR_FLOAT, .f = 0.0}}},
    .flags = OPD_OPF_INPLACE, /* y may be x itself */
    .shape_doc = "x (...) -> y (...)",
    .shape = scale_shape,
    .cpu_ref = scale_cpu,
    .cuda = scale_cuda,
    .cuda_dtypes = OPD_DT(FLOAT32),
};

OPD_PLUGIN("hello", "1.0", &scale_op)
