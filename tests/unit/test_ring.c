/* Unit: the shared-memory SPSC rings (common/ring.c): order, full/empty,
 * wrap-around, a hostile peer's corrupt counters and lengths, and waiting
 * across threads and across processes (futex). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/ring.h"

static void *shm(size_t n) {
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                 -1, 0);
  cr_assert_neq(p, MAP_FAILED);
  return p;
}

Test(ring, geometry_is_checked) {
  void *m = shm(1 << 20);
  opd_ring_t r;
  cr_assert_eq(opd__ring_init(m, 1 << 20, 3, 64, &r), OPD_EINVAL, "not a power of two");
  cr_assert_eq(opd__ring_init(m, 1 << 20, 8, 60, &r), OPD_EINVAL, "slot not a multiple of 8");
  cr_assert_eq(opd__ring_init(m, 1 << 20, 8, 8, &r), OPD_EINVAL, "slot too small");
  cr_assert_eq(opd__ring_init(m, 4096, 1024, 64, &r), OPD_EINVAL, "does not fit");
  cr_assert_eq(opd__ring_init((char *)m + 8, 4096, 8, 64, &r), OPD_EINVAL, "misaligned");
  cr_assert_eq(opd__ring_init(m, 1 << 20, 8, 64, &r), 0);
  opd_ring_t peer;
  cr_assert_eq(opd__ring_attach(m, 1 << 20, 8, 64, &peer), 0);
  ((opd_ring_hdr_t *)m)->magic = 0;
  cr_assert_eq(opd__ring_attach(m, 1 << 20, 8, 64, &peer), OPD_EPROTO, "magic");
  munmap(m, 1 << 20);
}

Test(ring, order_full_empty_and_wraparound) {
  size_t n = opd__ring_bytes(4, 32);
  void *m = shm(n);
  opd_ring_t p, c;
  cr_assert_eq(opd__ring_init(m, n, 4, 32, &p), 0);
  cr_assert_eq(opd__ring_attach(m, n, 4, 32, &c), 0);
  char buf[64];
  uint32_t len;
  cr_assert_eq(opd__ring_pop(&c, buf, sizeof buf, &len), 1, "empty");
  cr_assert_eq(opd__ring_push(&p, buf, 25), OPD_ETOOBIG, "24 bytes at most");
  for (int round = 0; round < 50; round++) { /* wraps many times */
    for (int i = 0; i < 4; i++) {
      char msg[16];
      int k = snprintf(msg, sizeof msg, "m%d.%d", round, i);
      cr_assert_eq(opd__ring_push(&p, msg, (uint32_t)k), 0);
    }
    cr_assert_eq(opd__ring_push(&p, "x", 1), 1, "full");
    cr_assert_eq(opd__ring_ready(&c), 1);
    for (int i = 0; i < 4; i++) {
      char want[16];
      int k = snprintf(want, sizeof want, "m%d.%d", round, i);
      cr_assert_eq(opd__ring_pop(&c, buf, sizeof buf, &len), 0);
      cr_assert_eq(len, (uint32_t)k);
      cr_assert_eq(memcmp(buf, want, len), 0);
    }
    cr_assert_eq(opd__ring_pop(&c, buf, sizeof buf, &len), 1);
  }
  munmap(m, n);
}

static _Atomic uint32_t *seq_of(opd_ring_hdr_t *h, uint32_t slot_size, int i) {
  return (_Atomic uint32_t *)(h->slots + (size_t)i * slot_size);
}

Test(ring, a_hostile_peer_is_detected) {
  size_t n = opd__ring_bytes(8, 64);
  void *m = shm(n);
  opd_ring_hdr_t *h = m;
  opd_ring_t p, c;
  char buf[64];
  uint32_t len;
  cr_assert_eq(opd__ring_init(m, n, 8, 64, &p), 0);
  cr_assert_eq(opd__ring_attach(m, n, 8, 64, &c), 0);
  /* a sequence word that is neither the next message nor the last lap's */
  atomic_store(seq_of(h, 64, 0), 9);
  cr_assert_eq(opd__ring_ready(&c), OPD_EPROTO);
  cr_assert_eq(opd__ring_pop(&c, buf, sizeof buf, &len), OPD_EPROTO);
  atomic_store(seq_of(h, 64, 0), 0);
  cr_assert_eq(opd__ring_ready(&c), 0, "empty again");
  /* a slot length beyond the slot */
  cr_assert_eq(opd__ring_push(&p, "hello", 5), 0);
  cr_assert_eq(opd__ring_ready(&c), 1);
  uint32_t bad = 4000;
  memcpy(h->slots + 4, &bad, 4);
  cr_assert_eq(opd__ring_pop(&c, buf, sizeof buf, &len), OPD_EPROTO);
  /* a length within the slot but over the reader's buffer */
  uint32_t big = 56;
  memcpy(h->slots + 4, &big, 4);
  cr_assert_eq(opd__ring_pop(&c, buf, 16, &len), OPD_EPROTO);
  bad = 5;
  memcpy(h->slots + 4, &bad, 4);
  cr_assert_eq(opd__ring_pop(&c, buf, sizeof buf, &len), 0);
  cr_assert_eq(memcmp(buf, "hello", 5), 0);
  /* the producer rewinding a consumed slot's sequence word */
  atomic_store(seq_of(h, 64, 1), 7);
  cr_assert_eq(opd__ring_pop(&c, buf, sizeof buf, &len), OPD_EPROTO);
  /* the consumer's tail ahead of what was written, seen once full */
  for (int i = 1; i < 9; i++) cr_assert_eq(opd__ring_push(&p, "x", 1), 0);
  atomic_store(&h->tail, 77);
  cr_assert_eq(opd__ring_push(&p, "x", 1), OPD_EPROTO);
  /* ... and moving backwards */
  atomic_store(&h->tail, 0);
  cr_assert_eq(opd__ring_push(&p, "x", 1), OPD_EPROTO);
  munmap(m, n);
}

typedef struct pc {
  opd_ring_t r;
  int n;
  int64_t spin_ns;
  int bad;
} pc_t;

static void *producer(void *arg) {
  pc_t *x = arg;
  for (int i = 0; i < x->n; i++) {
    int rc;
    while ((rc = opd__ring_push(&x->r, &i, sizeof i)) == 1)
      if (opd__ring_wait_room(&x->r, x->spin_ns, 1000000000) != 0) x->bad++;
    if (rc != 0) x->bad++;
  }
  return NULL;
}

static int consume(opd_ring_t *r, int n, int64_t spin_ns) {
  int bad = 0;
  for (int i = 0; i < n; i++) {
    int got;
    uint32_t len;
    int rc;
    while ((rc = opd__ring_pop(r, &got, sizeof got, &len)) == 1)
      if (opd__ring_wait_message(r, spin_ns, 1000000000) != 0) return -1;
    if (rc != 0 || len != sizeof got || got != i) bad++;
  }
  return bad;
}

Test(ring, threads_in_order_with_spinning_and_sleeping) {
  int64_t spins[2] = {20000, 0}; /* adaptive, then sleep at once */
  for (int k = 0; k < 2; k++) {
    size_t n = opd__ring_bytes(64, 16);
    void *m = shm(n);
    pc_t x = {.n = 200000, .spin_ns = spins[k]};
    opd_ring_t c;
    cr_assert_eq(opd__ring_init(m, n, 64, 16, &x.r), 0);
    cr_assert_eq(opd__ring_attach(m, n, 64, 16, &c), 0);
    pthread_t t;
    pthread_create(&t, NULL, producer, &x);
    int bad = consume(&c, x.n, spins[k]);
    pthread_join(t, NULL);
    cr_assert_eq(bad, 0, "spin %lld: %d out of order", (long long)spins[k], bad);
    cr_assert_eq(x.bad, 0);
    munmap(m, n);
  }
}

Test(ring, across_processes_through_futexes) {
  size_t n = opd__ring_bytes(16, 16);
  void *m = shm(n);
  pc_t x = {.n = 50000, .spin_ns = 0};
  opd_ring_t c;
  cr_assert_eq(opd__ring_init(m, n, 16, 16, &x.r), 0);
  cr_assert_eq(opd__ring_attach(m, n, 16, 16, &c), 0);
  pid_t pid = fork();
  if (pid == 0) {
    producer(&x);
    _exit(x.bad ? 1 : 0);
  }
  int bad = consume(&c, x.n, 0);
  int status;
  waitpid(pid, &status, 0);
  cr_assert_eq(bad, 0);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  munmap(m, n);
}
