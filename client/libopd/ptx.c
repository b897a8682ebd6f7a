/* libopd's poll kernel: the PTX text an enqueued run's wait runs, loaded
 * once per context by poll.c (poll_setup).
 *
 * DESIGN
 * Text, not a compiled object: libopd links no CUDA library, and the
 * driver JITs the PTX for whatever device the caller's context is on. The
 * entries share one body (POLL_ENTRY) and differ only in what they do
 * first or last; the text is byte for byte the one measured in
 * bench/results/2026-12-05-h200-legacy-pdl.txt.
 */
#include "client/libopd/stream.h"

/* The kernel an enqueued run (opd_enqueue_stream*) puts on the caller's
 * stream: one thread polls the daemon's flag word (mapped here by IPC
 * handle) until it reaches `want` (the run's request id, low 32 bits;
 * signed difference, so it wraps), or until timeout_ns of %globaltimer
 * have passed: then err[0] = 1, err[1] = want (pinned host memory that
 * the next call reads) and the stream goes on. PTX 7.0 for sm_70 and
 * later (ld.acquire.sys), loaded once per context (cuModuleLoadData: the
 * driver JITs it for the device). Its source:
 *   extern "C" __global__ void opd_poll(const unsigned *word, unsigned want,
 *                                       unsigned *err, unsigned long long t) {
 *     t0 = globaltimer;
 *     for (;;) { x = ld.acquire.sys(word); if ((int)(x - want) >= 0) return;
 *                if (globaltimer - t0 > t) { err[0] = 1; err[1] = want;
 *                                            membar.sys; return; } } }
 * Why a kernel: stream memory operations (cuStreamWaitValue32) are not
 * supported on the GPU machine opd is measured on (2026-12-02,
 * bench/results/2026-12-02-h200-words.txt), and an event cannot be waited
 * for before the daemon has recorded it, which is what made the call wait
 * for the daemon's answer (bench/bench_handoff.cu measures both ways). */
/* ... as a PTX entry NAME; EXTRA_PARAM, LOAD_EXTRA and AT_DONE add to it
 * (the stamped form below) */
#define POLL_ENTRY(NAME, EXTRA_PARAM, LOAD_EXTRA, AT_DONE)                  \
  ".visible .entry " NAME "(.param .u64 p_word, .param .u32 p_want,\n"     \
  "    .param .u64 p_err, .param .u64 p_timeout" EXTRA_PARAM ")\n"         \
  "{\n"                                                                    \
  "  .reg .pred %p<3>;\n"                                                  \
  "  .reg .b32 %r<5>;\n"                                                   \
  "  .reg .b64 %rd<12>;\n"                                                 \
  "  ld.param.u64 %rd3, [p_word];\n"                                       \
  "  ld.param.u32 %r1, [p_want];\n"                                        \
  "  ld.param.u64 %rd6, [p_err];\n"                                        \
  "  ld.param.u64 %rd4, [p_timeout];\n" LOAD_EXTRA                         \
  "  cvta.to.global.u64 %rd1, %rd6;\n"                                     \
  "  mov.u64 %rd5, %globaltimer;\n"                                        \
  "LOOP:\n"                                                                \
  "  ld.acquire.sys.global.u32 %r2, [%rd3];\n"                             \
  "  sub.s32 %r3, %r2, %r1;\n"                                             \
  "  setp.gt.s32 %p1, %r3, -1;\n"                                          \
  "  @%p1 bra DONE;\n"                                                     \
  "  mov.u64 %rd8, %globaltimer;\n"                                        \
  "  sub.s64 %rd9, %rd8, %rd5;\n"                                          \
  "  setp.le.u64 %p2, %rd9, %rd4;\n"                                       \
  "  @%p2 bra LOOP;\n"                                                     \
  "  st.global.u32 [%rd1+4], %r1;\n"                                       \
  "  mov.u32 %r4, 1;\n"                                                    \
  "  st.global.u32 [%rd1], %r4;\n"                                         \
  "  membar.sys;\n"                                                        \
  "DONE:\n" AT_DONE                                                        \
  "  ret;\n"                                                               \
  "}\n"

/* LOAD_EXTRA of the forms that write the caller's word (p_mine) first */
#define STORE_MINE                                                         \
  "  ld.param.u64 %rd10, [p_mine];\n"                                      \
  "  membar.sys;\n"                                                        \
  "  st.release.sys.global.u32 [%rd10], %r1;\n"

const char opd__poll_ptx[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    POLL_ENTRY("opd_poll", "", "", "")
    /* the same, stamping %globaltimer at its start and once it saw the
     * word into st[0], st[1] (OPD_STREAM_STAMPS; include/opd/protocol.h) */
    POLL_ENTRY("opd_poll_st", ", .param .u64 p_st", "  ld.param.u64 %rd10, [p_st];\n",
               "  mov.u64 %rd11, %globaltimer;\n"
               "  st.global.u64 [%rd10], %rd5;\n"
               "  st.global.u64 [%rd10+8], %rd11;\n")
    /* the same, first writing `want` to the caller's stream's word at
     * p_mine (OPD_STREAM_LEGACY=kernel: the word and the wait one
     * operation on the stream, not a memset and a kernel) */
    POLL_ENTRY("opd_poll_w", ", .param .u64 p_mine", STORE_MINE, "");

/* opd_poll_w as a programmatic dependent launch's (sm_90 and later; PTX
 * 7.8): it first waits for the grids before it on the stream to end and
 * their writes to be seen (griddepcontrol.wait), then writes the word.
 * Loaded where the device takes it (OPD_STREAM_LEGACY=pdl). */
const char opd__poll_ptx90[] =
    ".version 7.8\n"
    ".target sm_90\n"
    ".address_size 64\n"
    POLL_ENTRY("opd_poll_wp", ", .param .u64 p_mine",
               "  griddepcontrol.wait;\n" STORE_MINE, "");
