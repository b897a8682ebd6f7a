/* The CPU kernels of the ops that read strides themselves
 * (OPD_OPF_CPU_STRIDED: kernels/common/strided.h) on strided views against
 * the same kernels on contiguous tensors, in-process, same run.
 *
 * DESIGN
 * No daemon: each op's row kernel (cpu_fast) runs on float32 views laid
 * out as bench/bench_strided.py lays them out (a transposed x, every other
 * column of a wider x, an out= slice of a wider tensor, every tensor
 * transposed alike) plus a stride-0 broadcast operand, and its time is
 * set against the contiguous case of the same shape measured alternately
 * with it (blocks of reps, medians). With threads = 0 everything runs on
 * the calling thread and is timed with its CPU clock, so that another
 * process taking the core (a shared 2-core VM) is not counted; threads
 * N > 0 runs through a pool of N threads on the wall clock. Each case's
 * result is checked against the contiguous one within 1e-6 + 1e-5|ref|
 * (softmax of a transpose into a transposed out runs the kernel's
 * other-dim path, which sums in another order).
 *
 * Usage: build/bench/bench_strided_kern [threads [reps [op [layout]]]]
 *        (default 0 30, every op and layout)
 * Output: one line per case:
 *   strided_kern op=relu shape=1024x1024 layout=transpose threads=0 \
 *     contig_us=... strided_us=... ratio=... check=ok
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernel.h"
#include "kernels/runtime/exec.h"
#include "kernels/runtime/registry.h"

static clockid_t clock_id = CLOCK_THREAD_CPUTIME_ID;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(clock_id, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void view(opd_tview_t *v, float *data, int64_t r, int64_t c,
                 int64_t sr, int64_t sc) {
  memset(v, 0, sizeof *v);
  v->data = data, v->dtype = OPD_DTYPE_FLOAT32, v->rank = 2;
  v->shape[0] = r, v->shape[1] = c, v->strides[0] = sr, v->strides[1] = sc;
  v->numel = r * c;
}

/* One call of op on x (and b for add, w for layernorm) into y. */
static void setup(opd_kcall_t *k, const opd_op_def_t *op, const opd_exec_t *ex) {
  memset(k, 0, sizeof *k);
  k->op = op, k->exec = ex, k->n_out = 1;
  k->n_in = op->n_in_min;
  for (int a = 0; a < op->n_attrs; a++) k->attr[a] = op->attrs[a].def;
}

/* 64-byte aligned, as arena tensors are (a tensor's rows then start on
 * cache lines). */
static float *falloc(int64_t n) {
  float *p = aligned_alloc(64, ((size_t)n * sizeof(float) + 63) & ~(size_t)63);
  if (p == NULL) abort();
  return p;
}

static double time_run(opd_kcall_t *k, int reps) {
  double *t = malloc(sizeof(double) * (size_t)reps);
  for (int i = 0; i < reps; i++) {
    double t0 = now_s();
    k->op->cpu_fast(k);
    t[i] = now_s() - t0;
  }
  qsort(t, (size_t)reps, sizeof *t, cmp_double);
  double m = t[reps / 2];
  free(t);
  return m;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 0, reps = argc > 2 ? atoi(argv[2]) : 30;
  opd_exec_t pool;
  const opd_exec_t *ex = &opd__exec_serial;
  if (threads > 0) {
    if (opd__exec_pool_create(&pool, threads) != 0) return 1;
    ex = &pool;
    clock_id = CLOCK_MONOTONIC;
  }
  const char *ops[] = {"relu", "add", "softmax", "layernorm"};
  const char *layouts[] = {"transpose", "step", "out_slice", "transpose_all", "broadcast"};
  int64_t shapes[][2] = {{64, 1024}, {1024, 1024}};
  int bad = 0;
  for (int s = 0; s < 2; s++) {
    int64_t R = shapes[s][0], C = shapes[s][1], n = R * C;
    float *a = falloc(n), *at = falloc(n), *b = falloc(n), *bt = falloc(n);
    float *wide = falloc(2 * n), *w = falloc(C), *y = falloc(n), *ys = falloc(2 * n);
    for (int64_t i = 0; i < n; i++) {
      a[i] = (float)sin((double)i * 0.37) * 3.0f;
      b[i] = (float)cos((double)i * 0.11) * 2.0f;
    }
    for (int64_t r = 0; r < R; r++)
      for (int64_t c = 0; c < C; c++) {
        at[c * R + r] = a[r * C + c], bt[c * R + r] = b[r * C + c];
        wide[r * 2 * C + 2 * c] = wide[r * 2 * C + 2 * c + 1] = a[r * C + c];
      }
    for (int64_t c = 0; c < C; c++) w[c] = 1.0f + 0.001f * (float)c;
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
      const opd_op_def_t *op = opd__op_find(ops[o]);
      if (argc > 3 && strcmp(argv[3], ops[o]) != 0) continue;
      for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
        const char *lay = layouts[l];
        if (argc > 4 && strcmp(argv[4], lay) != 0) continue;
        opd_kcall_t kc, ks;
        setup(&kc, op, ex), setup(&ks, op, ex);
        view(&kc.in[0], a, R, C, C, 1);
        view(&kc.out[0], y, R, C, C, 1);
        if (op->n_in_min == 2) view(&kc.in[1], b, R, C, C, 1);
        if (strcmp(ops[o], "layernorm") == 0) {
          kc.n_in = 2;
          memset(&kc.in[1], 0, sizeof kc.in[1]);
          kc.in[1].data = w, kc.in[1].dtype = OPD_DTYPE_FLOAT32, kc.in[1].rank = 1;
          kc.in[1].shape[0] = C, kc.in[1].strides[0] = 1, kc.in[1].numel = C;
        }
        ks = kc;
        float *sy = ys; /* the strided case's output and its row stride */
        int64_t ysr = C, ysc = 1, yoff = 0;
        if (strcmp(lay, "transpose") == 0) {
          view(&ks.in[0], at, R, C, 1, R);
        } else if (strcmp(lay, "step") == 0) {
          view(&ks.in[0], wide, R, C, 2 * C, 2);
        } else if (strcmp(lay, "out_slice") == 0) {
          ysr = 2 * C, yoff = C / 2;
        } else if (strcmp(lay, "transpose_all") == 0) {
          view(&ks.in[0], at, R, C, 1, R);
          if (op->n_in_min == 2) view(&ks.in[1], bt, R, C, 1, R);
          ysr = 1, ysc = R;
        } else { /* broadcast: x's first row for every row (stride 0) */
          if (strcmp(ops[o], "relu") == 0 || strcmp(ops[o], "add") == 0)
            view(&ks.in[op->n_in_min - 1], op->n_in_min == 2 ? b : a, R, C, 0, 1);
          else
            view(&ks.in[0], a, R, C, 0, 1);
        }
        view(&ks.out[0], sy + yoff, R, C, ysr, ysc);
        /* the reference: the same values contiguous */
        float *xr = falloc(n), *br = NULL;
        opd_kcall_t kr = kc;
        for (int64_t r = 0; r < R; r++)
          for (int64_t c = 0; c < C; c++)
            xr[r * C + c] = ((float *)ks.in[0].data)[r * ks.in[0].strides[0] + c * ks.in[0].strides[1]];
        kr.in[0].data = xr;
        if (op->n_in_min == 2) {
          br = falloc(n);
          for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++)
              br[r * C + c] = ((float *)ks.in[1].data)[r * ks.in[1].strides[0] + c * ks.in[1].strides[1]];
          kr.in[1].data = br;
        }
        op->cpu_fast(&kr);
        op->cpu_fast(&ks);
        int ok = 1;
        for (int64_t r = 0; r < R && ok; r++)
          for (int64_t c = 0; c < C && ok; c++)
            ok = fabsf(y[r * C + c] - sy[yoff + r * ysr + c * ysc]) <=
                 1e-6f + 1e-5f * fabsf(y[r * C + c]);
        bad += !ok;
        double tc = 0, ts = 0;
        double bc[3], bs[3];
        for (int k = 0; k < 3; k++) {
          bc[k] = time_run(&kc, reps);
          bs[k] = time_run(&ks, reps);
        }
        qsort(bc, 3, sizeof(double), cmp_double);
        qsort(bs, 3, sizeof(double), cmp_double);
        tc = bc[1], ts = bs[1];
        printf("strided_kern op=%s shape=%lldx%lld layout=%s threads=%d contig_us=%.1f "
               "strided_us=%.1f ratio=%.2f check=%s\n",
               ops[o], (long long)R, (long long)C, lay, threads, tc * 1e6, ts * 1e6,
               ts / tc, ok ? "ok" : "FAIL");
        fflush(stdout);
        free(xr);
        free(br);
      }
    }
    free(a), free(at), free(b), free(bt), free(wide), free(w), free(y), free(ys);
  }
  if (threads > 0) opd__exec_pool_destroy(&pool);
  return bad ? 1 : 0;
}
