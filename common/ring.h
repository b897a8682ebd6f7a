/* Single-producer single-consumer message rings in shared memory, for the
 * shared-memory transport.
 *
 * DESIGN
 * A ring lives in memory both processes map (a sealed memfd, like an
 * arena). Each slot is a u32 sequence word, a u32 length and up to
 * slot_size - 8 bytes of one message (the same msgpack payload a socket
 * frame carries). The producer fills slot (i mod n) with message i and
 * publishes it by a release store of seq = i + 1 (low 32 bits) into that
 * slot; the consumer watches the next slot's seq, so a message and its
 * publication travel in the same cache line(s) and a round trip moves the
 * fewest lines between the cores. The consumer frees slots with a release
 * store of `tail` (messages consumed) on a line of its own that the
 * producer reads only when its cached copy says the ring is full, so in
 * the common case neither side touches a line the other one writes
 * except the slot itself.
 *
 * The other side may be hostile or buggy, so nothing read from shared
 * memory is trusted: the geometry comes from the setup message and is kept
 * in the private opd_ring_t, a slot's seq must be the expected value or
 * the previous lap's, `tail` may only move forward and never past what was
 * written, every length is checked against the slot, and a message is
 * copied out of the slot before anyone looks at it. A check that fails
 * returns OPD_EPROTO: the caller closes that session.
 *
 * Waiting: each side has a futex word in the header, each on its own
 * cache line. A side about to sleep sets its `sleeping` flag, re-checks the
 * ring, then FUTEX_WAITs; the other side, after publishing, wakes it only
 * when the flag is set, so a spinning peer costs no system call.
 */
#ifndef OPD_RING_H
#define OPD_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "opd/protocol.h"

#define OPD_RING_MAGIC 0x4f50444fu /* "OPDO": slot sequence words */
#define OPD_CACHELINE 64
#define OPD_RING_SLOT_HDR 8        /* u32 seq + u32 length */

/* How a session's two sides wait on its rings, as the client asks in
 * RING_SETUP's "wait" and the daemon grants (0: no rings, the socket).
 * Spin: both sides busy-poll; adaptive: a short spin, then the ring's
 * futex (the daemon's side: the eventfd doorbell). */
enum { OPD_RING_ADAPTIVE = 1, OPD_RING_SPIN = 2 };

/* The wire name of a ring mode ("spin" or "adaptive"). */
static inline const char *opd__ring_mode_name(int mode) {
  return mode == OPD_RING_SPIN ? "spin" : "adaptive";
}

/* The ring mode a wire name names, or 0 for any other string. */
static inline int opd__ring_mode_from_name(const char *name) {
  return strcmp(name, "spin") == 0       ? OPD_RING_SPIN
         : strcmp(name, "adaptive") == 0 ? OPD_RING_ADAPTIVE
                                         : 0;
}

typedef struct opd_ring_hdr {
  uint32_t magic;                        /* written by the creator */
  uint32_t n_slots;                      /* informational: never trusted */
  uint32_t slot_size;
  uint32_t pad0_;
  _Alignas(OPD_CACHELINE) _Atomic uint64_t tail; /* messages consumed */
  _Alignas(OPD_CACHELINE) _Atomic uint32_t consumer_sleeping; /* futex word:
                                            the consumer waits for messages */
  _Alignas(OPD_CACHELINE) _Atomic uint32_t producer_sleeping; /* futex word:
                                            the producer waits for room */
  _Alignas(OPD_CACHELINE) unsigned char slots[]; /* n_slots * slot_size */
} opd_ring_hdr_t;

/* One side's private view. Geometry and the counters it owns live here;
 * the shared copies are only ever compared against these. */
typedef struct opd_ring {
  opd_ring_hdr_t *hdr;                   /* shared */
  uint32_t n_slots;                      /* power of two */
  uint32_t slot_size;                    /* bytes per slot, multiple of 8 */
  uint64_t mine;                         /* messages produced / consumed */
  uint64_t seen;                         /* producer: the consumer's tail as
                                            last read */
  int doorbell;                          /* producer: an eventfd to write
                                            instead of FUTEX_WAKE when the
                                            consumer sleeps (the daemon waits
                                            in epoll, not on a futex); -1 */
  int wakes;                             /* 1 (the default): the other side
                                            may sleep on this ring, so each
                                            push / pop looks at its flag
                                            (a full fence and a load); 0:
                                            it never sleeps (a spinning peer,
                                            or the daemon as producer) */
} opd_ring_t;

/* Bytes a ring of this geometry needs (header + slots). */
size_t opd__ring_bytes(uint32_t n_slots, uint32_t slot_size);

/* Formats a ring in mem (size bytes) and fills *r for the producer or
 * consumer side. Returns 0, or OPD_EINVAL if the geometry is not a power of
 * two of slots of 16..65536 bytes (multiple of 8) fitting in size. */
int opd__ring_init(void *mem, size_t size, uint32_t n_slots, uint32_t slot_size,
                   opd_ring_t *r);

/* Attaches to a ring the other side formatted, with the geometry agreed in
 * the setup message (not read from the ring). Returns 0, or OPD_EINVAL /
 * OPD_EPROTO (bad geometry, wrong magic, tail not at zero). */
int opd__ring_attach(void *mem, size_t size, uint32_t n_slots,
                     uint32_t slot_size, opd_ring_t *r);

/* Largest message a slot holds. */
static inline uint32_t opd__ring_max_msg(const opd_ring_t *r) {
  return r->slot_size - OPD_RING_SLOT_HDR;
}

/* Producer: copies msg into the next slot and publishes it. Returns 0,
 * 1 when the ring is full (nothing written), OPD_ETOOBIG for a message over
 * opd__ring_max_msg, or OPD_EPROTO when the consumer's counter is corrupt
 * (it is read only when the ring looks full).
 * Wakes a sleeping consumer. */
int opd__ring_push(opd_ring_t *r, const void *msg, uint32_t len);
/* The same for a message in two parts (a head and a body), written
 * straight into the slot. */
int opd__ring_push2(opd_ring_t *r, const void *a, uint32_t alen, const void *b,
                    uint32_t blen);

/* Consumer: copies the next message into buf (cap bytes) and frees its
 * slot. Returns 0 with *len set, 1 when the ring is empty, or OPD_EPROTO
 * when the slot's sequence word or length is corrupt (or the length is
 * larger than cap). Wakes a sleeping producer. */
int opd__ring_pop(opd_ring_t *r, void *buf, uint32_t cap, uint32_t *len);

/* Consumer: 1 when the next message is there, 0 when not, OPD_EPROTO when
 * its slot is corrupt. One load of the slot's sequence word. */
int opd__ring_ready(const opd_ring_t *r);

/* Blocking helpers. Consumer: waits until a message is there, spinning
 * spin_ns first, then sleeping on the futex (timeout_ns < 0: forever).
 * Producer: the same until there is room. Return 0, 1 on timeout, or
 * OPD_EPROTO. */
int opd__ring_wait_message(opd_ring_t *r, int64_t spin_ns, int64_t timeout_ns);
int opd__ring_wait_room(opd_ring_t *r, int64_t spin_ns, int64_t timeout_ns);

/* Consumer about to sleep elsewhere (the daemon in epoll, woken through
 * the producer's doorbell): says so in the ring, then looks again. Returns
 * 1 if a message is already there (the flag is cleared: do not sleep), 0 if
 * the producer will ring the doorbell, or OPD_EPROTO. */
int opd__ring_arm_sleep(opd_ring_t *r);

#endif /* OPD_RING_H */
