/* The STATS reply: the daemon's counters, its devices and each
 * operator's calls.
 *
 * DESIGN
 * Every number is read from the structures their modules keep on the
 * loop thread (srv, the accounts, the op stats); nothing is computed or
 * kept here but the reply's layout (docs/protocol.md, STATS).
 */
#include "common/clock.h" /* opd__now_ns */
#include "common/wire.h"
#include "daemon/backend/backend.h"
#include "daemon/mem/shm.h"
#include "daemon/devq.h"
#include "daemon/sched.h"
#include "daemon/stats.h"
#include "kernels/runtime/registry.h"

void opd__stats_pack(opd_server_t *srv, msgpack_packer *pk) {
  msgpack_pack_map(pk, 27);
  PACK_STR(pk, "gpus"); /* the devices as the hello lists them, counters now */
  opd__backend_dev.describe(srv, pk);
  PACK_STR(pk, "imports"); /* CUDA IPC imports made since start */
  msgpack_pack_uint64(pk, srv->imports_total);
  PACK_STR(pk, "async"); /* runs answered at enqueue, not yet complete */
  msgpack_pack_uint32(pk, srv->async_now);
  PACK_STR(pk, "async_peak"); /* the most one session had at once */
  msgpack_pack_uint32(pk, srv->async_peak);
  PACK_STR(pk, "mappings"); /* host mmaps held for clients: arenas + rings */
  msgpack_pack_uint64(pk, srv->mappings);
  PACK_STR(pk, "mapped_bytes");
  msgpack_pack_uint64(pk, srv->host_bytes);
  PACK_STR(pk, "inflight");
  msgpack_pack_uint32(pk, srv->inflight);
  PACK_STR(pk, "uids");
  uint32_t nu = 0;
  for (const opd_acct_t *a = srv->accts; a; a = a->next) nu++;
  msgpack_pack_uint32(pk, nu);
  PACK_STR(pk, "reserved_sessions");
  msgpack_pack_uint32(pk, srv->n_reserved);
  PACK_STR(pk, "published");
  msgpack_pack_uint32(pk, srv->n_pubs);
  PACK_STR(pk, "devices");
  msgpack_pack_uint32(pk, (uint32_t)srv->n_devices);
  PACK_STR(pk, "sessions");
  msgpack_pack_uint32(pk, srv->n_sessions);
  PACK_STR(pk, "sessions_total");
  msgpack_pack_uint64(pk, srv->sessions_total);
  PACK_STR(pk, "requests");
  msgpack_pack_uint64(pk, srv->requests);
  PACK_STR(pk, "errors");
  msgpack_pack_uint64(pk, srv->errors);
  PACK_STR(pk, "run_cache_hits");
  msgpack_pack_uint64(pk, srv->run_cache_hits);
  PACK_STR(pk, "strided"); /* contiguous copies around kernels
                              (daemon/run/strided.h) */
  msgpack_pack_map(pk, 2);
  PACK_STR(pk, "copies");
  msgpack_pack_uint64(pk, srv->strided_copies);
  PACK_STR(pk, "bytes");
  msgpack_pack_uint64(pk, srv->strided_bytes);
  PACK_STR(pk, "arenas");
  msgpack_pack_uint64(pk, srv->arenas);
  PACK_STR(pk, "bytes_mapped");
  msgpack_pack_uint64(pk, srv->bytes_mapped);
  PACK_STR(pk, "uptime_ns");
  msgpack_pack_uint64(pk, opd__now_ns() - srv->start_ns);
  PACK_STR(pk, "healthy");
  if (srv->healthy) msgpack_pack_true(pk);
  else msgpack_pack_false(pk);
  PACK_STR(pk, "staging"); /* inputs clients copied into shared memory */
  msgpack_pack_map(pk, 2);
  PACK_STR(pk, "copies");
  msgpack_pack_uint64(pk, srv->staged_copies);
  PACK_STR(pk, "bytes");
  msgpack_pack_uint64(pk, srv->staged_bytes);
  PACK_STR(pk, "shm"); /* host arenas of unsealed shm files (daemon/mem/shm.c) */
  msgpack_pack_map(pk, 2);
  PACK_STR(pk, "mapped");
  msgpack_pack_uint64(pk, opd__shm_guarded());
  PACK_STR(pk, "faults");
  msgpack_pack_uint64(pk, opd__shm_faults());
  PACK_STR(pk, "graphs"); /* defined graphs and their runs (docs/graphs.md) */
  {
    const opd_op_stats_t *g = &srv->op_stats[opd__n_ops];
    msgpack_pack_map(pk, 6);
    PACK_STR(pk, "live");
    msgpack_pack_uint32(pk, srv->n_graphs);
    PACK_STR(pk, "defined");
    msgpack_pack_uint64(pk, srv->graphs_defined);
    PACK_STR(pk, "runs");
    msgpack_pack_uint64(pk, g->calls);
    PACK_STR(pk, "inline");
    msgpack_pack_uint64(pk, g->inlined);
    PACK_STR(pk, "errors");
    msgpack_pack_uint64(pk, g->errors);
    PACK_STR(pk, "ns");
    msgpack_pack_uint64(pk, g->ns);
  }
  PACK_STR(pk, "ops");
  msgpack_pack_map(pk, (size_t)opd__n_ops);
  for (int i = 0; i < opd__n_ops; i++) {
    PACK_STR(pk, opd__ops[i]->name);
    msgpack_pack_map(pk, 4);
    PACK_STR(pk, "calls");
    msgpack_pack_uint64(pk, srv->op_stats[i].calls);
    PACK_STR(pk, "inline"); /* of them, run on the loop thread */
    msgpack_pack_uint64(pk, srv->op_stats[i].inlined);
    PACK_STR(pk, "errors");
    msgpack_pack_uint64(pk, srv->op_stats[i].errors);
    PACK_STR(pk, "ns");
    msgpack_pack_uint64(pk, srv->op_stats[i].ns);
  }
  opd__sched_pack(srv, pk); /* "classes", last: the older keys come first */
  opd__devq_pack(srv, pk);  /* "device_queue" */
}
