/* SPSC message rings in shared memory; see ring.h for the DESIGN. */
#include "common/ring.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

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
  atomic_store(&h->head, 0);
  atomic_store(&h->tail, 0);
  atomic_store(&h->producer_sleeping, 0);
  atomic_store(&h->consumer_sleeping, 0);
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
  if (h->magic != OPD_RING_MAGIC || atomic_load(&h->head) != 0 ||
      atomic_load(&h->tail) != 0)
    return OPD_EPROTO;
  set_view(r, mem, n_slots, slot_size);
  return 0;
}

static unsigned char *slot(opd_ring_t *r, uint64_t seq) {
  return r->hdr->slots + (size_t)(seq & (r->n_slots - 1)) * r->slot_size;
}

/* Producer side: the consumer's tail, checked. 0 or OPD_EPROTO. */
static int read_tail(opd_ring_t *r, uint64_t *tail) {
  uint64_t t = atomic_load_explicit(&r->hdr->tail, memory_order_acquire);
  if (t < r->seen || t > r->mine) return OPD_EPROTO; /* backwards, or ahead
                                                        of what we wrote */
  r->seen = *tail = t;
  return 0;
}

/* Consumer side: the producer's head, checked. */
static int read_head(opd_ring_t *r, uint64_t *head) {
  uint64_t h = atomic_load_explicit(&r->hdr->head, memory_order_acquire);
  if (h < r->seen || h < r->mine || h - r->mine > r->n_slots)
    return OPD_EPROTO; /* backwards, or more than a ring's worth */
  r->seen = *head = h;
  return 0;
}

/* Wakes the other side if it said it sleeps on `flag`. The seq_cst fence
 * orders our counter store before the flag load (the sleeper orders its
 * flag store before its counter load the same way): one of us sees the
 * other, so no wake-up is lost. */
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

int opd__ring_push(opd_ring_t *r, const void *msg, uint32_t len) {
  uint64_t tail;
  if (len > opd__ring_max_msg(r)) return OPD_ETOOBIG;
  if (read_tail(r, &tail) != 0) return OPD_EPROTO;
  if (r->mine - tail >= r->n_slots) return 1; /* full */
  unsigned char *s = slot(r, r->mine);
  memcpy(s, &len, sizeof len);
  memcpy(s + 4, msg, len);
  r->mine++;
  atomic_store_explicit(&r->hdr->head, r->mine, memory_order_release);
  wake_if_sleeping(&r->hdr->consumer_sleeping, r->doorbell);
  return 0;
}

int opd__ring_pop(opd_ring_t *r, void *buf, uint32_t cap, uint32_t *len) {
  uint64_t head;
  uint32_t n;
  if (read_head(r, &head) != 0) return OPD_EPROTO;
  if (head == r->mine) return 1; /* empty */
  const unsigned char *s = slot(r, r->mine);
  memcpy(&n, s, sizeof n); /* read once: the producer may rewrite it */
  if (n > opd__ring_max_msg(r) || n > cap) return OPD_EPROTO;
  memcpy(buf, s + 4, n);   /* copied out before anyone parses it */
  *len = n;
  r->mine++;
  atomic_store_explicit(&r->hdr->tail, r->mine, memory_order_release);
  wake_if_sleeping(&r->hdr->producer_sleeping, -1);
  return 0;
}

uint64_t opd__ring_pending(opd_ring_t *r) {
  uint64_t head;
  return read_head(r, &head) == 0 ? head - r->mine : 0;
}

/* Waits until ready(r) says 1 (or an error): spin, then futex sleep. */
static int wait_for(opd_ring_t *r, int (*ready)(opd_ring_t *),
                    _Atomic uint32_t *flag, int64_t spin_ns,
                    int64_t timeout_ns) {
  uint64_t start = now_ns();
  for (;;) {
    int rc = ready(r);
    if (rc != 0) return rc > 0 ? 0 : rc;
    uint64_t waited = now_ns() - start;
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

/* 1 when a message is there, 0 when not, OPD_EPROTO if corrupt. */
static int has_message(opd_ring_t *r) {
  uint64_t head;
  if (read_head(r, &head) != 0) return OPD_EPROTO;
  return head != r->mine;
}

static int has_room(opd_ring_t *r) {
  uint64_t tail;
  if (read_tail(r, &tail) != 0) return OPD_EPROTO;
  return r->mine - tail < r->n_slots;
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
