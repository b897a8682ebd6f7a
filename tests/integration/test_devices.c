/* Integration: device selection on a daemon without CUDA devices (CI has
 * no GPU; tests/gpu/ covers the GPU machine): every request for a device
 * gets a clear EDEVICE and the cpu backend keeps working. */
#include <criterion/criterion.h>
#include <string.h>

#include "tests/integration/harness.h"

TestSuite(devices, .init = th_start_default, .fini = th_stop_default,
          .timeout = 60);

Test(devices, cuda_requests_without_a_gpu_are_refused_clearly) {
  opd_client_t *c = th_connect();
  void *base;
  uint64_t a = th_arena(c, 4096, &base);
  opd_tensor_t x = th_f32(a, 0, 1, (int64_t)4), y = th_f32(a, 64, 1, (int64_t)4);
  EXPECT_ERR(opd_run_on(c, "cuda", "relu", &x, 1, &y, 1, NULL, 0), OPD_EDEVICE,
             "relu: device \"cuda\" is not available");
  EXPECT_ERR(opd_run_on(c, "cuda:3", "relu", &x, 1, &y, 1, NULL, 0),
             OPD_EDEVICE, "cuda:3");
  EXPECT_ERR(opd_run_on(c, "cuda:x", "relu", &x, 1, &y, 1, NULL, 0),
             OPD_EDEVICE, "is not cuda, cuda:N, cpu or auto");
  EXPECT_ERR(opd_run_on(c, "tpu", "relu", &x, 1, &y, 1, NULL, 0), OPD_EDEVICE,
             "unknown device \"tpu\"");
  /* a device by UUID, with or without "GPU-": named, refused */
  EXPECT_ERR(opd_run_on(c, "GPU-cf2acb7f-3742-2fd9-e71f-713aa12e33e3", "relu",
                        &x, 1, &y, 1, NULL, 0), OPD_EDEVICE,
             "no CUDA device with UUID GPU-cf2acb7f-3742-2fd9-e71f-713aa12e33e3: "
             "this daemon has no CUDA device");
  EXPECT_ERR(opd_run_on(c, "CF2ACB7F-3742-2FD9-E71F-713AA12E33E3", "relu", &x, 1,
                        &y, 1, NULL, 0), OPD_EDEVICE, "no CUDA device with UUID");
  EXPECT_ERR(opd_run_on(c, "GPU-cf2acb7f-3742", "relu", &x, 1, &y, 1, NULL, 0),
             OPD_EDEVICE, "unknown device \"GPU-cf2acb7f-3742\" (use cpu, cuda, "
             "cuda:N, a device UUID or auto)");
  /* cpu and auto run (auto: host tensors on the cpu, as there is no GPU) */
  cr_assert_eq(opd_run_on(c, "cpu", "relu", &x, 1, &y, 1, NULL, 0), 0);
  cr_assert_eq(opd_run_on(c, "auto", "relu", &x, 1, &y, 1, NULL, 0), 0);
  uint64_t dev;
  EXPECT_ERR(opd_alloc(c, "cuda", 1024, &dev), OPD_EDEVICE,
             "alloc: device \"cuda\" is not available");
  EXPECT_ERR(opd_alloc(c, "cpu", 1024, &dev), OPD_EDEVICE,
             "is not a cuda device");
  EXPECT_ERR(opd_alloc(c, "auto", 1024, &dev), OPD_EDEVICE,
             "alloc: device \"auto\" is not a cuda device");
  unsigned char handle[64] = {0};
  EXPECT_ERR(opd_import_cuda(c, handle, 64, 0, 4096, "cuda:0", &dev), OPD_EDEVICE,
             "import: device \"cuda:0\" is not available");
  EXPECT_ERR(opd_import_cuda(c, handle, 32, 0, 4096, "cuda:0", &dev), OPD_EINVAL,
             "64-byte handle");
  th_assert_alive();
  opd_close(c);
}

Test(devices, hello_lists_backends_and_devices) {
  opd_client_t *c;
  cr_assert_eq(opd_connect_flags(th_d.sock, OPD_CONNECT_HIGH_PRIORITY, &c), 0,
               "%s", opd_last_error());
  char *json;
  size_t len;
  cr_assert_eq(opd_server_info(c, &json, &len), 0);
  cr_assert(strstr(json, "\"devices\":[]") != NULL, "%s", json);
  opd_free(json);
  cr_assert_eq(opd_stats_json(c, &json, &len), 0);
  cr_assert(strstr(json, "\"devices\":0") != NULL, "%s", json);
  cr_assert(strstr(json, "\"healthy\":true") != NULL, "%s", json);
  opd_free(json);
  opd_close(c);
}

Test(devices, devices_none_and_bad_lists, .init = NULL) {
  const char *args[] = {"--devices", "none", NULL};
  th_start(args);
  th_assert_alive();
}
