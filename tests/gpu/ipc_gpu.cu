/* GPU machine: a CUDA-capable client hands the daemon its own device
 * memory by CUDA IPC handle (opd_import_cuda) and sees the results in
 * place; the import's error cases; and the other direction: a daemon
 * device arena exported as a CUDA VMM fd (opd_export_cuda), mapped here,
 * sees the daemon's later writes with no copy.
 *   build/tests/ipc_gpu SOCKET     (prints checks and "N passed, N failed")
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "opd/opd.h"
#include "tests/gpu/check.h"


int main(int argc, char **argv) {
  const char *sock = argc > 1 ? argv[1] : NULL;
  opd_client_t *c;
  if (opd_connect(sock, &c) != 0) {
    fprintf(stderr, "%s\n", opd_last_error());
    return 1;
  }
  enum { N = 1 << 20 };
  float *d, h[1024];
  cudaMalloc((void **)&d, 2 * N * sizeof(float));
  for (int i = 0; i < 1024; i++) h[i] = (float)(i - 512);
  for (int k = 0; k < N / 1024; k++)
    cudaMemcpy(d + k * 1024, h, sizeof h, cudaMemcpyHostToDevice);
  cudaIpcMemHandle_t handle;
  cudaIpcGetMemHandle(&handle, d);

  uint64_t arena, arena2;
  int rc = opd_import_cuda(c, &handle, sizeof handle, 0, 2 * N * sizeof(float),
                           "cuda:0", &arena);
  CHECK(rc == 0, "import a cudaMalloc'ed buffer: %s", rc ? opd_last_error() : "ok");
  int64_t n = N;
  opd_tensor_t x, y;
  opd_tensor_init(&x, arena, 0, OPD_DTYPE_FLOAT32, 1, &n);
  opd_tensor_init(&y, arena, N * sizeof(float), OPD_DTYPE_FLOAT32, 1, &n);
  rc = opd_run(c, "relu", &x, 1, &y, 1, NULL, 0);
  CHECK(rc == 0, "relu on the client's memory: %s", rc ? opd_last_error() : "ok");
  float back[1024];
  cudaMemcpy(back, d + N + 5 * 1024, sizeof back, cudaMemcpyDeviceToHost);
  int ok = 1;
  for (int i = 0; i < 1024; i++) ok &= back[i] == (h[i] > 0 ? h[i] : 0);
  CHECK(ok, "the result is in the client's buffer, no copy");
  rc = opd_run(c, "relu", &x, 1, &x, 1, NULL, 0);
  CHECK(rc == 0, "in place on imported memory: %s", rc ? opd_last_error() : "ok");

  /* the same handle again: opened once, a second arena */
  rc = opd_import_cuda(c, &handle, sizeof handle, 4096, 4096, "cuda:0", &arena2);
  CHECK(rc == 0 && arena2 != arena, "a second range of the same handle: %s",
        rc ? opd_last_error() : "ok");
  /* more than the allocation */
  rc = opd_import_cuda(c, &handle, sizeof handle, 0, (uint64_t)64 << 20,
                       "cuda:0", &arena2);
  CHECK(rc == OPD_EBOUNDS, "a size beyond the allocation is refused: %s (%s)",
        opd_errname(rc), opd_last_error());
  /* garbage */
  unsigned char junk[64];
  memset(junk, 0x5a, sizeof junk);
  rc = opd_import_cuda(c, junk, sizeof junk, 0, 4096, "cuda:0", &arena2);
  CHECK(rc == OPD_EINVAL, "a handle that does not open is refused: %s (%s)",
        opd_errname(rc), opd_last_error());
  rc = opd_import_cuda(c, &handle, sizeof handle, 0, 4096, "cuda:7", &arena2);
  CHECK(rc == OPD_EDEVICE, "a device that does not exist: %s", opd_last_error());
  rc = opd_ping(c);
  CHECK(rc == 0, "the daemon serves on: %s", rc ? opd_last_error() : "ok");
  CHECK(opd_arena_release(c, arena) == 0, "release the import");

  /* export: daemon memory mapped here */
  {
    uint64_t ex, host, plain;
    void *hbase;
    rc = opd_alloc_flags(c, "cuda:0", 1 << 20, OPD_ALLOC_EXPORTABLE, &ex);
    CHECK(rc == 0, "exportable device arena: %s", rc ? opd_last_error() : "ok");
    rc = opd_arena_create(c, 1 << 20, &host, &hbase);
    float *hf = (float *)hbase;
    for (int i = 0; i < 1024; i++) hf[i] = (float)(i - 512);
    int64_t m = 1024;
    opd_tensor_t hx, dx;
    opd_tensor_init(&hx, host, 0, OPD_DTYPE_FLOAT32, 1, &m);
    opd_tensor_init(&dx, ex, 0, OPD_DTYPE_FLOAT32, 1, &m);
    rc |= opd_run_on(c, "cuda", "copy", &hx, 1, &dx, 1, NULL, 0);
    int fd = -1;
    uint64_t alloc_size = 0;
    rc |= opd_export_cuda(c, ex, &fd, &alloc_size);
    CHECK(rc == 0 && fd >= 0 && alloc_size >= (1 << 20),
          "export gives an fd: %s (fd %d, %llu bytes)", rc ? opd_last_error() : "ok",
          fd, (unsigned long long)alloc_size);
    CUmemGenericAllocationHandle hnd;
    CUdeviceptr p = 0;
    CUresult r = cuMemImportFromShareableHandle(
        &hnd, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r == CUDA_SUCCESS) r = cuMemAddressReserve(&p, alloc_size, 0, 0, 0);
    if (r == CUDA_SUCCESS) r = cuMemMap(p, alloc_size, 0, hnd, 0);
    CUmemAccessDesc acc = {};
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = 0;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (r == CUDA_SUCCESS) r = cuMemSetAccess(p, alloc_size, &acc, 1);
    CHECK(r == CUDA_SUCCESS, "mapped here with cuMemMap (CUresult %d)", (int)r);
    if (r == CUDA_SUCCESS) {
      float got[1024];
      cudaMemcpy(got, (void *)p, sizeof got, cudaMemcpyDeviceToHost);
      int same = 1;
      for (int i = 0; i < 1024; i++) same &= got[i] == hf[i];
      CHECK(same, "the mapping holds what the daemon copied in");
      rc = opd_run(c, "relu", &dx, 1, &dx, 1, NULL, 0);
      cudaMemcpy(got, (void *)p, sizeof got, cudaMemcpyDeviceToHost);
      same = rc == 0;
      for (int i = 0; i < 1024; i++) same &= got[i] == (hf[i] > 0 ? hf[i] : 0);
      CHECK(same, "the daemon's later relu is visible here, no copy");
      cuMemUnmap(p, alloc_size);
      cuMemAddressFree(p, alloc_size);
      cuMemRelease(hnd);
    }
    if (fd >= 0) close(fd);
    rc = opd_alloc(c, "cuda:0", 4096, &plain);
    rc = opd_export_cuda(c, plain, &fd, &alloc_size);
    CHECK(rc == OPD_EINVAL, "a plain device arena is not exportable: %s",
          opd_last_error());
  }
  opd_close(c);
  cudaFree(d);
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
