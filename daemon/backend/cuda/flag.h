/* The daemon's stream-ordering kernels (daemon/backend/cuda/flag.cu): the
 * flag word after a FLAG run, the wait for the client's word before a WORD
 * run, and the layout of a session's flag allocation they write in.
 *
 * DESIGN
 * Not operators: the CUDA backend calls these around an op's launch, on
 * the session's stream. Plain C, usable from the backend's C files; the
 * per-launch PDL offer that an op's kernel answers is the kernels' side
 * (kernels/cuda/cuda.h).
 */
#ifndef OPD_DAEMON_BACKEND_CUDA_FLAG_H
#define OPD_DAEMON_BACKEND_CUDA_FLAG_H

#include "opd/protocol.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A session's flag allocation (2 MiB of device memory, mapped by its
 * client), in 32-bit words: the daemon's word at 0 (FLAG runs write their
 * request id there after their work), the client's word of slot s at
 * s * OPD_CUDA_SLOT_WORDS for s in 1..OPD_RUN_WORD_SLOTS-1 (the client's
 * stream writes a WORD run's id there before it), the sticky word (a wait
 * of the session gave up). The first OPD_CUDA_FLAG_ZERO bytes are zeroed
 * before a client sees the allocation. */
#define OPD_CUDA_SLOT_WORDS (OPD_STREAM_SLOT_BYTES / 4)
#define OPD_CUDA_STICKY_WORD (64 * OPD_CUDA_SLOT_WORDS)
#define OPD_CUDA_FLAG_ZERO (4 * (OPD_CUDA_STICKY_WORD + OPD_CUDA_SLOT_WORDS))

/* A device's timeout board: pinned host memory, mapped on the device; a
 * wait for a client's word that gave up appends ((sid << 32) | want) at
 * rec[n++ % OPD_CUDA_BOARD_RECS]. */
#define OPD_CUDA_BOARD_RECS 255
typedef struct {
  unsigned n, pad;
  unsigned long long rec[OPD_CUDA_BOARD_RECS];
} opd_cuda_board_t;

/* Stores value to *word (device memory) on stream after its earlier work
 * (cuMemsetD32Async, else a one-thread kernel): 0 or
 * the cudaError_t / CUresult of the failure. */
int opd__cuda_set_flag(void *stream, unsigned *word, unsigned value);
/* 1: opd__cuda_set_flag writes with cuMemsetD32Async; 0: with a kernel. */
int opd__cuda_set_flag_how(void);
/* Makes stream wait (on the GPU) until *word - want >= 0 (signed, so it
 * wraps), or give up after timeout_ns (or at once when *sticky is set):
 * then *sticky = 1 and (sid, want) goes on board (device pointer). The
 * cudaError_t of the launch. */
int opd__cuda_wait_word(void *stream, const unsigned *word, unsigned want,
                        unsigned *sticky, opd_cuda_board_t *board, unsigned sid,
                        unsigned long long timeout_ns, unsigned long long *stamps);

/* Whether ops may go on as dependent launches on a device of compute
 * capability cc_major: sm_90 or later, and not OPD_PDL=0 in the daemon's
 * environment. */
int opd__cuda_pdl_enabled(int cc_major);
/* Stores value to *word as a one-thread dependent launch after the op that
 * took the PDL offer (kernels/cuda/cuda.h): resident while the op runs, it
 * stores once the op has ended. The cudaError_t of the launch. */
int opd__cuda_set_flag_pdl(void *stream, unsigned *word, unsigned value,
                           unsigned long long *stamps);
/* stamps (wait_word and set_flag_pdl): NULL, or the run's entry of the
 * daemon's GPU timestamps (OPD_GPU_STAMPS, include/opd/protocol.h): {wait
 * start, word seen} by the wait, {flag store, value} by the flag kernel. */

#ifdef __cplusplus
}
#endif

#endif /* OPD_DAEMON_BACKEND_CUDA_FLAG_H */
