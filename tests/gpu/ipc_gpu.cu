/* GPU machine: a CUDA-capable client hands the daemon its own device
 * memory by CUDA IPC handle (opd_import_cuda) and sees the results in
 * place; the import's error cases.
 *   build/tests/ipc_gpu SOCKET     (prints checks and "N passed, N failed")
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "opd/opd.h"

static int passed, failed;

#define CHECK(cond, ...)                                  \
  do {                                                    \
    if (cond) passed++, printf("PASS ");                  \
    else failed++, printf("FAIL ");                       \
    printf(__VA_ARGS__);                                  \
    printf("\n");                                         \
    fflush(stdout);                                       \
  } while (0)

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
  opd_close(c);
  cudaFree(d);
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
