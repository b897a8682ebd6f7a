/* SPSC message rings in shared memory; see ring.h for the DESIGN. */
#include "common/ring.h"
#include "common/clock.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Shared (not private) futexes: the word lives in memory two processes map. */
static void futex_wait(_Atomic uint32_t *addr, uint32_t val, int64_t ns) {
  struct timespec ts, *tp = NULL;
  if (ns >= 0) {
    ts.tv_sec = ns / 1000000000;
    ts.tv_nsec = ns % 1000000000;
    tp = &ts;
  }
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, tp, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *addr) {
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static int geometry_ok(uint32_t n_slots, uint32_t slot_size) {
  return n_slots >= 2 && n_slots <= (1u << 20) &&
         (n_slots & (n_slots - 1)) == 0 && slot_size >= 16 &&
         slot_size <= 65536 && slot_size % 8 == 0;
}

size_t opd__ring_bytes(uint32_t n_slots, uint32_t slot_size) {
  return sizeof(opd_ring_hdr_t) + (size_t)n_slots * slot_size;
}

static void set_view(opd_ring_t *r, void *mem, uint32_t n_slots,
                     uint32_t slot_size) {
  r->hdr = mem;
  r->n_slots = n_slots;
  r->slot_size = slot_size;
  r->mine = 0;
  r->seen = 0;
  r->doorbell = -1;
  r->wakes = 1;
}

/* A slot's sequence word: the low 32 bits of (message index + 1). */
static _Atomic uint32_t *slot_seq(unsigned char *slot) {
  return (_Atomic uint32_t *)slot;
}

int opd__ring_init(void *mem, size_t size, uint32_t n_slots, uint32_t slot_size,
                   opd_ring_t *r) {
  if (!geometry_ok(n_slots, slot_size) ||
      opd__ring_bytes(n_slots, slot_size) > size ||
      ((uintptr_t)mem % OPD_CACHELINE) != 0)
    return OPD_EINVAL;
  opd_ring_hdr_t *h = mem;
  memset(h, 0, sizeof *h);
  h->n_slots = n_slots;
  h->slot_size = slot_size;
  atomic_store(&h->tail, 0);
  atomic_store(&h->producer_sleeping, 0);
  atomic_store(&h->consumer_sleeping, 0);
  for (uint32_t i = 0; i < n_slots; i++)
    atomic_store(slot_seq(h->slots + (size_t)i * slot_size), 0);
  h->magic = OPD_RING_MAGIC;
  set_view(r, mem, n_slots, slot_size);
  return 0;
}

int opd__ring_attach(void *mem, size_t size, uint32_t n_slots,
                     uint32_t slot_size, opd_ring_t *r) {
  if (!geometry_ok(n_slots, slot_size) ||
      opd__ring_bytes(n_slots, slot_size) > size ||
      ((uintptr_t)mem % OPD_CACHELINE) != 0)
    return OPD_EINVAL;
  opd_ring_hdr_t *h = mem;
  if (h->magic != OPD_RING_MAGIC || atomic_load(&h->tail) != 0)
    return OPD_EPROTO;
  set_view(r, mem, n_slots, slot_size);
  return 0;
}

static unsigned char *slot(const opd_ring_t *r, uint64_t seq) {
  return r->hdr->slots + (size_t)(seq & (r->n_slots - 1)) * r->slot_size;
}

/* Producer side: the consumer's tail, checked. 0 or OPD_EPROTO. */
static int read_tail(opd_ring_t *r) {
  uint64_t t = atomic_load_explicit(&r->hdr->tail, memory_order_acquire);
  if (t < r->seen || t > r->mine) return OPD_EPROTO; /* backwards, or ahead
                                                        of what we wrote */
  r->seen = t;
  return 0;
}

/* Wakes the other side if it said it sleeps on `flag`. The seq_cst fence
 * orders our publication before the flag load (the sleeper orders its
 * flag store before its look at the ring the same way): one of us sees
 * the other, so no wake-up is lost. */
static void wake_if_sleeping(_Atomic uint32_t *flag, int doorbell) {
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(flag, memory_order_relaxed) &&
      atomic_exchange(flag, 0) == 1) {
    if (doorbell >= 0) {
      uint64_t one = 1;
      ssize_t n = write(doorbell, &one, sizeof one);
      (void)n; /* EAGAIN: the counter is already non-zero, it will wake */
    } else {
      futex_wake(flag);
    }
  }
}

int opd__ring_push2(opd_ring_t *r, const void *a, uint32_t alen, const void *b,
                    uint32_t blen) {
  uint32_t max = opd__ring_max_msg(r);
  if (alen > max || blen > max - alen) return OPD_ETOOBIG;
  uint32_t len = alen + blen;
  if (r->mine - r->seen >= r->n_slots) { /* full as last seen: look again */
    if (read_tail(r) != 0) return OPD_EPROTO;
    if (r->mine - r->seen >= r->n_slots) return 1;
  }
  unsigned char *s = slot(r, r->mine);
  memcpy(s + 4, &len, sizeof len);
  memcpy(s + OPD_RING_SLOT_HDR, a, alen);
  if (blen > 0) memcpy(s + OPD_RING_SLOT_HDR + alen, b, blen);
  r->mine++;
  atomic_store_explicit(slot_seq(s), (uint32_t)r->mine, memory_order_release);
  if (r->wakes) wake_if_sleeping(&r->hdr->consumer_sleeping, r->doorbell);
  return 0;
}

int opd__ring_push(opd_ring_t *r, const void *msg, uint32_t len) {
  return opd__ring_push2(r, msg, len, NULL, 0);
}

int opd__ring_ready(const opd_ring_t *r) {
  uint32_t want = (uint32_t)(r->mine + 1);
  uint32_t prev = r->mine >= r->n_slots ? (uint32_t)(r->mine + 1 - r->n_slots) : 0;
  uint32_t seq =
      atomic_load_explicit(slot_seq(slot(r, r->mine)), memory_order_acquire);
  if (seq == want) return 1;
  return seq == prev ? 0 : OPD_EPROTO; /* anything else: not our producer */
}

int opd__ring_pop(opd_ring_t *r, void *buf, uint32_t cap, uint32_t *len) {
  uint32_t n;
  int rc = opd__ring_ready(r);
  if (rc != 1) return rc == 0 ? 1 : rc;
  const unsigned char *s = slot(r, r->mine);
  memcpy(&n, s + 4, sizeof n); /* read once: the producer may rewrite it */
  if (n > opd__ring_max_msg(r) || n > cap) return OPD_EPROTO;
  memcpy(buf, s + OPD_RING_SLOT_HDR, n); /* copied out before anyone parses it */
  *len = n;
  r->mine++;
  atomic_store_explicit(&r->hdr->tail, r->mine, memory_order_release);
  if (r->wakes) wake_if_sleeping(&r->hdr->producer_sleeping, -1);
  return 0;
}

/* Waits until ready(r) says 1 (or an error): spin, then futex sleep. */
static int wait_for(opd_ring_t *r, int (*ready)(opd_ring_t *),
                    _Atomic uint32_t *flag, int64_t spin_ns,
                    int64_t timeout_ns) {
  uint64_t start = opd__now_ns();
  for (;;) {
    int rc = ready(r);
    if (rc != 0) return rc > 0 ? 0 : rc;
    uint64_t waited = opd__now_ns() - start;
    if (timeout_ns >= 0 && waited >= (uint64_t)timeout_ns) return 1;
    if (waited < (uint64_t)spin_ns) {
      cpu_relax();
      continue;
    }
    /* say we sleep, then look again before sleeping (see wake_if_sleeping) */
    atomic_store(flag, 1);
    atomic_thread_fence(memory_order_seq_cst);
    rc = ready(r);
    if (rc != 0) {
      atomic_store(flag, 0);
      return rc > 0 ? 0 : rc;
    }
    int64_t left = timeout_ns < 0 ? -1 : timeout_ns - (int64_t)waited;
    futex_wait(flag, 1, left);
    atomic_store(flag, 0);
  }
}

static int has_message(opd_ring_t *r) { return opd__ring_ready(r); }

static int has_room(opd_ring_t *r) {
  if (read_tail(r) != 0) return OPD_EPROTO;
  return r->mine - r->seen < r->n_slots;
}

int opd__ring_wait_message(opd_ring_t *r, int64_t spin_ns, int64_t timeout_ns) {
  return wait_for(r, has_message, &r->hdr->consumer_sleeping, spin_ns,
                  timeout_ns);
}

int opd__ring_arm_sleep(opd_ring_t *r) {
  atomic_store(&r->hdr->consumer_sleeping, 1);
  atomic_thread_fence(memory_order_seq_cst);
  int rc = has_message(r);
  if (rc != 0) atomic_store(&r->hdr->consumer_sleeping, 0);
  return rc;
}

int opd__ring_wait_room(opd_ring_t *r, int64_t spin_ns, int64_t timeout_ns) {
  return wait_for(r, has_room, &r->hdr->producer_sleeping, spin_ns,
                  timeout_ns);
}
