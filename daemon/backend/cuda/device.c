/* The CUDA backend: devices, start-up and shutdown, and its row of the
 * backend interface (daemon/backend/backend.h).
 *
 * DESIGN
 * One process owns every GPU: at start we create each selected device's
 * primary context, a cuBLASLt handle and a utility stream, and keep the
 * device's stream-ordered memory pool from returning memory to the driver
 * (allocations then cost no device-wide sync). The rest of the backend:
 * memory.c (arenas), launch.c (runs), poller.c (completions).
 *
 * Errors: every CUDA call is checked through CU(); a failure becomes the
 * job's error ("cuda:0: <what>: <cudaGetErrorString>"). An error that
 * poisons the context (illegal address and the like) is reported through
 * srv->poisoned (daemon/server.c): unhealthy in stats, CUDA work refused,
 * then a drain and exit status 3 for the init system to restart opd (a
 * context cannot be repaired in-process; see docs/operations.md).
 */
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"
#include "daemon/backend/cuda/state.h"
#include "daemon/log.h"

static void *driver_fn(const char *name) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault,
                                       &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess)
    return NULL;
  return fn;
}

/* Parses --devices: "all", "none", or "0,2". Fills use[], returns count or
 * -1 with err. */
static int parse_devices(const char *spec, int avail, int *use, opd_err_t *err) {
  int n = 0;
  if (spec[0] == '\0' || strcmp(spec, "all") == 0) {
    for (int i = 0; i < avail && i < OPD_MAX_DEVICES; i++) use[n++] = i;
    return n;
  }
  if (strcmp(spec, "none") == 0) return 0;
  const char *p = spec;
  while (*p) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 0 || v >= avail || n >= OPD_MAX_DEVICES) {
      opd__errf(err, OPD_EDEVICE, "--devices %s: no CUDA device %.*s (%d "
                "visible)", spec,
                (int)(end == p ? (long)strlen(p) : end - p), p, avail);
      return -1;
    }
    use[n++] = (int)v;
    p = *end == ',' ? end + 1 : end;
    if (*end != ',' && *end != '\0') {
      opd__errf(err, OPD_EDEVICE, "--devices expects all, none or a list "
                "like 0,1");
      return -1;
    }
  }
  return n;
}

static int dev_init(cuda_dev_t *d, int index, opd_err_t *err) {
  struct cudaDeviceProp prop;
  d->index = index;
  CU(set_device(index), err);
  CU(cudaFree(0), err); /* creates the primary context now */
  CU(cudaGetDeviceProperties(&prop, index), err);
  snprintf(d->name, sizeof d->name, "%s", prop.name);
  d->total_mem = prop.totalGlobalMem;
  int mps = 0; /* contexts shared through MPS: GPU-side stream order is
                  cheap across processes (docs/async.md) */
  if (cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, index) != cudaSuccess) {
    (void)cudaGetLastError();
    mps = 0;
  }
  d->mps = mps != 0;
  const unsigned char *u = (const unsigned char *)prop.uuid.bytes;
  snprintf(d->uuid, sizeof d->uuid,
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
           "%02x%02x%02x%02x%02x%02x",
           u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10],
           u[11], u[12], u[13], u[14], u[15]);
  d->cc_major = prop.major;
  d->pdl = opd__cuda_pdl_enabled(prop.major);
  d->cc_minor = prop.minor;
  CU(cudaDeviceGetStreamPriorityRange(&d->prio_low, &d->prio_high), err);
  CU(cudaStreamCreateWithFlags(&d->util, cudaStreamNonBlocking), err);
  cudaMemPool_t pool;
  CU(cudaDeviceGetDefaultMemPool(&pool, index), err);
  uint64_t keep = UINT64_MAX;
  CU(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
     err);
  cublasLtHandle_t lt;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
    return opd__errf(err, OPD_EBACKEND, "cublasLtCreate failed");
  }
  d->lt = lt;
  /* WORD waits' timeout board: without it (no mapped pinned memory) the
   * clients' streams are waited for through their events */
  void *b = NULL, *bd = NULL;
  if (cudaHostAlloc(&b, sizeof(opd_cuda_board_t),
                    cudaHostAllocMapped | cudaHostAllocPortable) == cudaSuccess &&
      cudaHostGetDevicePointer(&bd, b, 0) == cudaSuccess) {
    memset(b, 0, sizeof(opd_cuda_board_t));
    d->board = b;
    d->board_dev = bd;
  } else {
    (void)cudaGetLastError();
    if (b != NULL) cudaFreeHost(b);
    LOG_WARN("cuda:%d: no mapped pinned memory for the timeout board: enqueued "
             "runs wait for their clients' streams through events", index);
  }
  LOG_INFO("cuda:%d: enqueued runs: the daemon's flag word written by %s; the "
           "clients' streams waited for through %s", index,
           opd__cuda_set_flag_how() ? "cuMemsetD32Async" : "a kernel",
           d->board != NULL ? "their words (a poll kernel)" : "events");
  return 0;
}

static int cuda_init(opd_server_t *srv) {
  int avail = 0, use[OPD_MAX_DEVICES];
  opd_err_t err;
  srv->healthy = 1;
  /* every kernel loaded at start: CUDA's default lazy loading loads a
   * module at its first launch, which waits for the context's work, and
   * an asynchronous run would then wait there for whatever its session's
   * stream is waiting for (a client's kernel); a resident daemon pays the
   * load once, up front. The environment may still say otherwise. */
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  /* one hardware work queue per stream for up to 32 streams (the driver's
   * default is 8): with more sessions than queues, streams share one, and
   * a latency session's kernel would wait behind a best-effort session's
   * queued in the same one, whatever the priorities (docs/scheduling.md) */
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  cudaError_t e = cudaGetDeviceCount(&avail);
  if (e != cudaSuccess) avail = 0;
  int n = parse_devices(srv->cfg.devices, avail, use, &err);
  if (n < 0) {
    LOG_ERROR("%s", err.msg);
    return OPD_EDEVICE;
  }
  if (n == 0) {
    if (strcmp(srv->cfg.devices, "none") != 0)
      LOG_INFO("no CUDA device (%s): running the cpu backend only",
               e != cudaSuccess ? cudaGetErrorString(e) : "none visible");
    return 0;
  }
  cuda_state_t *st = calloc(1, sizeof *st);
  if (st == NULL) return OPD_ENOMEM;
  pthread_mutex_init(&st->mu, NULL);
  for (int i = 0; i < n; i++) {
    if (dev_init(&st->dev[i], use[i], &err) != 0) {
      LOG_ERROR("cuda:%d: %s", use[i], err.msg);
      free(st);
      return OPD_EBACKEND;
    }
    LOG_INFO("cuda:%d: %s, %s, %.1f GiB, compute %d.%d%s%s", use[i],
             st->dev[i].name, st->dev[i].uuid,
             st->dev[i].total_mem / 1073741824.0, st->dev[i].cc_major,
             st->dev[i].cc_minor, st->dev[i].mps ? ", MPS" : "",
             st->dev[i].pdl ? ", dependent launches" : "");
    snprintf(srv->dev_uuid[i], sizeof srv->dev_uuid[i], "%s", st->dev[i].uuid);
  }
  /* the driver's calls we need, without linking libcuda */
  st->get_range = (get_range_fn)driver_fn("cuMemGetAddressRange");
  if (st->get_range == NULL)
    LOG_WARN("cuMemGetAddressRange unavailable: imported sizes unchecked");
  vmm_api_t *v = &st->vmm;
  *(void **)&v->create = driver_fn("cuMemCreate");
  *(void **)&v->release = driver_fn("cuMemRelease");
  *(void **)&v->reserve = driver_fn("cuMemAddressReserve");
  *(void **)&v->addr_free = driver_fn("cuMemAddressFree");
  *(void **)&v->map = driver_fn("cuMemMap");
  *(void **)&v->unmap = driver_fn("cuMemUnmap");
  *(void **)&v->set_access = driver_fn("cuMemSetAccess");
  *(void **)&v->export_fd = driver_fn("cuMemExportToShareableHandle");
  *(void **)&v->granularity = driver_fn("cuMemGetAllocationGranularity");
  if (!v->create || !v->release || !v->reserve || !v->addr_free || !v->map ||
      !v->unmap || !v->set_access || !v->export_fd || !v->granularity) {
    LOG_WARN("CUDA VMM calls unavailable: exportable arenas are refused");
    v->create = NULL;
  }
  srv->backend_state = st;
  srv->n_devices = n;
  return opd__cu_poller_start(srv);
}

static void cuda_shutdown(opd_server_t *srv) {
  cuda_state_t *st = cuda_state(srv);
  if (st == NULL) return;
  opd__cu_poller_stop(srv);
  opd__cu_flags_free(srv);
  for (int i = 0; i < srv->n_devices; i++) {
    cuda_dev_t *d = &st->dev[i];
    set_device(d->index);
    cudaStreamSynchronize(d->util);
    cublasLtDestroy((cublasLtHandle_t)d->lt);
    cudaStreamDestroy(d->util);
    if (d->board != NULL) cudaFreeHost(d->board);
  }
  opd__cu_events_free(srv);
  pthread_cond_destroy(&st->cv);
  pthread_mutex_destroy(&st->mu);
  free(st);
  srv->backend_state = NULL;
  srv->n_devices = 0;
}

static void cuda_describe(opd_server_t *srv, msgpack_packer *pk) {
  cuda_state_t *st = cuda_state(srv);
  msgpack_pack_array(pk, (size_t)srv->n_devices);
  for (int i = 0; i < srv->n_devices; i++) {
    cuda_dev_t *d = &st->dev[i];
    char cc[16];
    snprintf(cc, sizeof cc, "%d.%d", d->cc_major, d->cc_minor);
    msgpack_pack_map(pk, 7);
    msgpack_pack_str_with_body(pk, "device", 6);
    char name[16];
    int n = snprintf(name, sizeof name, "cuda:%d", i);
    msgpack_pack_str_with_body(pk, name, (size_t)n);
    msgpack_pack_str_with_body(pk, "name", 4);
    msgpack_pack_str_with_body(pk, d->name, strlen(d->name));
    msgpack_pack_str_with_body(pk, "memory", 6);
    msgpack_pack_uint64(pk, d->total_mem);
    msgpack_pack_str_with_body(pk, "compute", 7);
    msgpack_pack_str_with_body(pk, cc, strlen(cc));
    msgpack_pack_str_with_body(pk, "uuid", 4);
    msgpack_pack_str_with_body(pk, d->uuid, strlen(d->uuid));
    msgpack_pack_str_with_body(pk, "mps", 3);
    if (d->mps) msgpack_pack_true(pk);
    else msgpack_pack_false(pk);
    msgpack_pack_str_with_body(pk, "runs", 4); /* launched there so far */
    msgpack_pack_uint64(pk, st->dev_runs[i]);
  }
}

const opd_backend_t opd__backend_dev = {
    .name = "cuda",
    .init = cuda_init,
    .shutdown = cuda_shutdown,
    .describe = cuda_describe,
    .plan = opd__cu_plan,
    .launch = opd__cu_launch,
    .stream = opd__cu_stream,
    .signal = opd__cu_signal,
    .session_end = opd__cu_session_end,
    .alloc = opd__cu_alloc,
    .import = opd__cu_import,
    .export = opd__cu_export,
    .pin = opd__cu_pin,
    .release = opd__cu_release,
    .load = opd__cu_load,
    .graph_prepare = opd__cu_graph_prepare,
    .graph_release = opd__cu_graph_release,
};
