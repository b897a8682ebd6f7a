/* Included by gpu_kernels.cu: the strided-to-strided copy behind the
 * daemon's gather and scatter of strided tensors (kernels/copy/copy.h),
 * CUDA against the CPU, byte for byte: every element size, src and dst
 * each transposed, sliced, stepped or broadcast (src only: stride 0), dst
 * inside a bigger buffer whose other bytes must stay as they were. */
#include "kernels/copy/copy.h"

static void check_copy_views(void) {
  if (!wanted("copy")) return;
  int dts[] = {OPD_DTYPE_UINT8, OPD_DTYPE_FLOAT16, OPD_DTYPE_FLOAT32, OPD_DTYPE_INT64};
  struct { const char *name; int rank; int64_t shape[3], ss[3], ds[3], sspan, dspan; } cases[] = {
      {"transpose->slice", 2, {5, 7}, {1, 5}, {16, 2}, 35, 80},
      {"contiguous->transpose", 2, {6, 9}, {9, 1}, {1, 6}, 54, 54},
      {"broadcast->step", 3, {3, 4, 5}, {0, 5, 1}, {60, 15, 3}, 20, 180},
      {"step->step", 2, {8, 3}, {6, 2}, {3, 1}, 48, 24},
      {"contiguous->contiguous", 1, {1000}, {1}, {1}, 1000, 1000},
  };
  for (int dt : dts)
    for (auto &v : cases) {
      size_t esz = opd__dtype_size(dt);
      std::vector<unsigned char> src((size_t)v.sspan * esz), want((size_t)v.dspan * esz),
          got((size_t)v.dspan * esz);
      for (auto &b : src) b = (unsigned char)frand(0, 256);
      for (auto &b : want) b = (unsigned char)frand(0, 256);
      void *dsrc, *ddst;
      CK(cudaMalloc(&dsrc, src.size()));
      CK(cudaMalloc(&ddst, want.size()));
      CK(cudaMemcpy(dsrc, src.data(), src.size(), cudaMemcpyHostToDevice));
      CK(cudaMemcpy(ddst, want.data(), want.size(), cudaMemcpyHostToDevice));
      opd_tview_t s{}, d{};
      set_view(&s, dt, v.rank, v.shape, src.data());
      set_view(&d, dt, v.rank, v.shape, want.data());
      for (int k = 0; k < v.rank; k++) s.strides[k] = v.ss[k], d.strides[k] = v.ds[k];
      int rc = opd__copy_views_cpu(&opd__exec_serial, &d, &s);
      s.data = dsrc;
      d.data = ddst;
      int rg = opd__copy_views_cuda(g_stream, &d, &s);
      CK(cudaStreamSynchronize(g_stream));
      CK(cudaMemcpy(got.data(), ddst, got.size(), cudaMemcpyDeviceToHost));
      bool ok = rc == 0 && rg == 0 && memcmp(got.data(), want.data(), got.size()) == 0;
      printf("gpu op=copy_views dtype=%s case=%s max_abs_err=%d max_rel_err=0 %s\n",
             opd__kdtype_name(dt), v.name, ok ? 0 : 1, ok ? "PASS" : "FAIL");
      ok ? g_pass++ : g_fail++;
      CK(cudaFree(dsrc));
      CK(cudaFree(ddst));
    }
}
