/* CPU softmax, layernorm, rmsnorm and gelu bandwidth against memcpy,
 * in-process.
 *
 * DESIGN
 * For each shape, the kernels run straight from the op table (no daemon):
 * the fast variant through a pool of all cores, the reference serially.
 * Each timing is the median of several reps, each rep after the caches
 * were flushed by writing a 64 MiB scratch buffer. GB/s counts the bytes
 * the op must move: x read once and y written once (2 * numel * 4; the
 * (C) weight and bias of the norms are left out). memcpy_gbps is a copy
 * of a buffer of x's size through the same pool, with the same byte
 * count, measured in the same run, so ratio = gbps / memcpy_gbps says how
 * close a kernel comes to the machine's copy bandwidth.
 *
 * x holds values in [0, 10) (times `scale`: 1e20 puts every norm row
 * past float32's square, where the norms take their exact path).
 *
 * threads = 0 runs everything (fast, ref, memcpy) serially on the calling
 * thread and times it with that thread's CPU clock instead of the wall
 * clock: on a shared machine the time another process takes the core is
 * then not counted, so before/after comparisons of a kernel hold there
 * (caches are still shared).
 *
 * Usage: build/bench/bench_cpu_ops [threads [scale]]
 *        (default: all cores, scale 1)
 * Output: one line per case (gelu[tanh]: approximate="tanh"):
 *   bench op=softmax shape=4096x1024 impl=fast threads=2 gbps=... \
 *     memcpy_gbps=... ratio=...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "kernels/kernel.h"
#include "kernels/runtime/exec.h"
#include "kernels/runtime/opcheck.h"
#include "kernels/runtime/registry.h"

#define FLUSH_BYTES (64u << 20)

static char *flush_buf;

static clockid_t clock_id = CLOCK_MONOTONIC; /* thread CPU clock: threads 0 */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(clock_id, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void flush_caches(void) {
  static unsigned char v;
  memset(flush_buf, ++v, FLUSH_BYTES);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct copy_arg {
  char *dst;                       /* destination */
  const char *src;                 /* source */
} copy_arg_t;

static void copy_range(void *arg, int64_t b, int64_t e) {
  copy_arg_t *c = arg;
  memcpy(c->dst + b, c->src + b, (size_t)(e - b));
}

/* Median seconds of `reps` runs of the call's kernel (fast or ref). */
static double time_op(opd_kcall_t *call, int fast, int reps) {
  double t[16];
  int (*k)(opd_kcall_t *) = fast ? call->op->cpu_fast : call->op->cpu_ref;
  for (int r = 0; r < reps; r++) {
    flush_caches();
    double t0 = now_s();
    if (k(call)) {
      fprintf(stderr, "%s failed: %s\n", call->op->name, call->err);
      exit(1);
    }
    t[r] = now_s() - t0;
  }
  qsort(t, (size_t)reps, sizeof t[0], cmp_double);
  return t[reps / 2];
}

static double time_memcpy(const opd_exec_t *ex, char *dst, const char *src,
                          int64_t bytes, int reps) {
  double t[16];
  copy_arg_t c = {dst, src};
  for (int r = 0; r < reps; r++) {
    flush_caches();
    double t0 = now_s();
    ex->parallel_for(ex, bytes, 1 << 16, copy_range, &c);
    t[r] = now_s() - t0;
  }
  qsort(t, (size_t)reps, sizeof t[0], cmp_double);
  return t[reps / 2];
}

static void view(opd_tview_t *v, void *data, int rank, const int64_t *shape) {
  memset(v, 0, sizeof *v);
  v->data = data;
  v->dtype = OPD_DTYPE_FLOAT32;
  v->rank = rank;
  v->numel = 1;
  for (int d = rank - 1; d >= 0; d--) {
    v->shape[d] = shape[d];
    v->strides[d] = v->numel;
    v->numel *= shape[d];
  }
}

static void header(int threads) {
  char model[256] = "unknown", date[64];
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[512];
    while (fgets(line, sizeof line, f))
      if (strncmp(line, "model name", 10) == 0) {
        char *p = strchr(line, ':');
        if (p) {
          snprintf(model, sizeof model, "%s", p + 2);
          model[strcspn(model, "\n")] = '\0';
        }
        break;
      }
    fclose(f);
  }
  struct utsname u;
  uname(&u);
  time_t now = time(NULL);
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S%z", localtime(&now));
  printf("# bench_cpu_ops date=%s machine=%s cpu=\"%s\" nproc=%ld "
         "threads=%d\n",
         date, u.machine, model, sysconf(_SC_NPROCESSORS_ONLN), threads);
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : (int)sysconf(_SC_NPROCESSORS_ONLN);
  float scale = argc > 2 ? strtof(argv[2], NULL) : 1.0f;
  int serial = threads == 0;
  if (serial) clock_id = CLOCK_THREAD_CPUTIME_ID;
  if (threads < 1) threads = 1;
  header(threads);
  if (serial) printf("# serial on the calling thread, timed by its CPU clock\n");
  printf("# scale=%g\n", scale);
  flush_buf = malloc(FLUSH_BYTES);
  opd_exec_t pool;
  if (!flush_buf || opd__exec_pool_create(&pool, threads)) {
    fprintf(stderr, "setup failed\n");
    return 1;
  }
  static const int64_t shapes[][2] = {{64, 4096}, {4096, 1024},
                                      {1024, 65536}};
  const char *ops[] = {"softmax", "layernorm", "rmsnorm", "gelu", "gelu[tanh]"};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int64_t R = shapes[s][0], C = shapes[s][1], n = R * C;
    size_t bytes = (size_t)n * sizeof(float);
    float *x = malloc(bytes), *y = malloc(bytes);
    float *w = malloc((size_t)C * sizeof(float));
    float *b = malloc((size_t)C * sizeof(float));
    if (!x || !y || !w || !b) {
      printf("# shape %lldx%lld skipped: out of memory\n", (long long)R,
             (long long)C);
      free(x), free(y), free(w), free(b);
      continue;
    }
    for (int64_t i = 0; i < n; i++) x[i] = (float)((i * 7919) % 1000) * 0.01f * scale;
    for (int64_t i = 0; i < C; i++) w[i] = 1.0f, b[i] = 0.0f;
    memset(y, 0, bytes);
    int reps = n >= (1 << 24) ? 3 : n >= (1 << 20) ? 7 : 15;
    const opd_exec_t *ex = serial ? &opd__exec_serial : &pool;
    double tm = time_memcpy(ex, (char *)y, (const char *)x,
                            (int64_t)bytes, reps);
    double mgbps = 2.0 * (double)bytes / tm / 1e9;
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
      opd_kcall_t call;
      memset(&call, 0, sizeof call);
      int tanh_form = strcmp(ops[o], "gelu[tanh]") == 0;
      call.op = opd__op_find(tanh_form ? "gelu" : ops[o]);
      call.n_in = call.op->n_in_max;
      call.n_out = 1;
      view(&call.in[0], x, 2, shapes[s]);
      view(&call.out[0], y, 2, shapes[s]);
      if (call.n_in > 1) view(&call.in[1], w, 1, &C);
      if (call.n_in > 2) view(&call.in[2], b, 1, &C);
      for (int a = 0; a < call.op->n_attrs; a++)
        call.attr[a] = call.op->attrs[a].def;
      if (tanh_form) strcpy(call.attr[0].s, "tanh");
      for (int fast = 1; fast >= 0; fast--) {
        call.exec = fast ? ex : &opd__exec_serial;
        double t = time_op(&call, fast, fast ? reps : (reps + 1) / 2);
        double gbps = 2.0 * (double)bytes / t / 1e9;
        printf("bench op=%s shape=%lldx%lld impl=%s threads=%d gbps=%.2f "
               "memcpy_gbps=%.2f ratio=%.2f\n",
               ops[o], (long long)R, (long long)C, fast ? "fast" : "ref",
               fast ? threads : 1, gbps, mgbps, gbps / mgbps);
        fflush(stdout);
      }
    }
    free(x), free(y), free(w), free(b);
  }
  opd__exec_pool_destroy(&pool);
  free(flush_buf);
  return 0;
}
