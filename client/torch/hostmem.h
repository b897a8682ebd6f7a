/* Shared memory for the outputs of the CPU torch kernel (hostmem.c): the
 * contract.
 *
 * DESIGN
 * An output the daemon writes must lie in memory it maps: hostmem.c
 * carves 64-byte aligned blocks out of sealed memfd arenas it maps here
 * and registers with the kernels' connection (noted there too, so that
 * opd_arena_find places a later call's input in it). A block is a torch
 * tensor's storage (torch_from_blob) and comes back when torch frees it
 * (opd__torch_host_free, torch's deleter, on any thread).
 */
#ifndef OPD_CLIENT_TORCH_HOSTMEM_H
#define OPD_CLIENT_TORCH_HOSTMEM_H

#include <stdint.h>

#include "opd/opd.h"

#pragma GCC visibility push(hidden)

/* A block of at least nbytes for a run on connection c: *ptr its address
 * here, *arena and *offset its place for c's descriptors, *ctx what
 * opd__torch_host_free takes back. 0, or an OPD_E* code (the last error
 * says why) with nothing allocated. */
int opd__torch_host_alloc(opd_client_t *c, uint64_t nbytes, void **ptr,
                          uint64_t *arena, uint64_t *offset, void **ctx);
/* torch's deleter of a block's tensor: the block is free again. */
void opd__torch_host_free(void *data, void *ctx);
/* Connection c is closing: its registrations of the arenas are gone. */
void opd__torch_host_forget(opd_client_t *c);

#pragma GCC visibility pop

#endif
