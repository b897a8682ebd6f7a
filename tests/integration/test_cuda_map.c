/* Integration (libopd alone, no daemon): opd_cuda_map_export and
 * opd_cuda_unmap (client/libopd/cuda.c) refuse what they must with a
 * message naming what was wrong, on a host with or without a CUDA driver:
 * NULL outputs, a device ordinal out of range, and a file descriptor that
 * is no exported allocation (no driver: the message says the driver or
 * its VMM calls are missing; a driver: it names the call that failed).
 * Nothing is left mapped by a refusal (*ptr and *handle untouched). */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <string.h>

#include "tests/integration/harness.h"

Test(cuda_map, null_outputs_are_refused) {
  uint64_t p = 0, h = 0;
  EXPECT_ERR(opd_cuda_map_export(-1, 4096, 0, NULL, &h), OPD_EINVAL, "ptr or handle is NULL");
  EXPECT_ERR(opd_cuda_map_export(-1, 4096, 0, &p, NULL), OPD_EINVAL, "ptr or handle is NULL");
}

Test(cuda_map, a_device_out_of_range_is_named) {
  uint64_t p = 7, h = 9;
  EXPECT_ERR(opd_cuda_map_export(-1, 4096, -1, &p, &h), OPD_EINVAL, "device -1 out of 0..15");
  EXPECT_ERR(opd_cuda_map_export(-1, 4096, 99, &p, &h), OPD_EINVAL, "device 99 out of 0..15");
  EXPECT_ERR(opd_cuda_unmap(0, 4096, 0, 16), OPD_EINVAL, "opd_cuda_unmap: device 16");
  cr_assert(p == 7 && h == 9, "a refusal wrote the outputs");
}

Test(cuda_map, a_bad_fd_is_refused_with_the_reason) {
  uint64_t p = 7, h = 9;
  void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (drv == NULL) drv = dlopen("libcuda.so.1", RTLD_NOW);
  int rc = opd_cuda_map_export(-1, 2 << 20, 0, &p, &h);
  cr_assert_eq(rc, OPD_EBACKEND, "got %s (%s)", opd_errname(rc), opd_last_error());
  if (drv == NULL)
    cr_assert(strstr(opd_last_error(), "needs the CUDA VMM calls of libcuda.so.1") != NULL,
              "%s", opd_last_error());
  else
    cr_assert(strstr(opd_last_error(), "cuda:0: ") != NULL, "%s", opd_last_error());
  cr_assert(p == 7 && h == 9, "a refusal wrote the outputs");
}
