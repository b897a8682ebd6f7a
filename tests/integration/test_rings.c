/* Integration: the shared-memory transport. The whole suite also runs over
 * it (tests/run.sh sets OPD_WAIT=adaptive and spin); these tests drive the
 * rings directly, as a hostile or broken client would. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/ring.h"
#include "tests/integration/harness.h"

TestSuite(rings, .init = th_start_default, .fini = th_stop_default,
          .timeout = 60);

enum { SQN = 16, SQS = 256, CQN = 16, CQS = 256 };

typedef struct raw_ring {
  int fd;           /* the socket */
  void *base;
  size_t size;
  opd_ring_t sq, cq;
} raw_ring_t;

static size_t cq_off(void) {
  return (opd__ring_bytes(SQN, SQS) + 4095) & ~(size_t)4095;
}

/* Sends RING_SETUP for spin rings over a raw connection; returns the reply
 * code (0 on success) and fills r. `format` 0 leaves the region zeroed. */
static int raw_setup(raw_ring_t *r, const char *wait, int format, int pass) {
  r->fd = th_raw_connect();
  th_raw_hello(r->fd);
  r->size = cq_off() + opd__ring_bytes(CQN, CQS);
  int mfd = memfd_create("rings", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  cr_assert_eq(ftruncate(mfd, (off_t)r->size), 0);
  cr_assert_eq(fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  r->base = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
  cr_assert_neq(r->base, MAP_FAILED);
  if (format) {
    cr_assert_eq(opd__ring_init(r->base, cq_off(), SQN, SQS, &r->sq), 0);
    cr_assert_eq(opd__ring_init((char *)r->base + cq_off(), r->size - cq_off(),
                                CQN, CQS, &r->cq), 0);
  }
  th_pack_t p;
  th_pack_init(&p);
  msgpack_pack_map(&p.pk, 6);
  th_pack_str(&p, "size");
  msgpack_pack_uint64(&p.pk, r->size);
  th_pack_str(&p, "sq_slots");
  msgpack_pack_uint32(&p.pk, SQN);
  th_pack_str(&p, "sq_slot_size");
  msgpack_pack_uint32(&p.pk, SQS);
  th_pack_str(&p, "cq_slots");
  msgpack_pack_uint32(&p.pk, CQN);
  th_pack_str(&p, "cq_slot_size");
  msgpack_pack_uint32(&p.pk, CQS);
  th_pack_str(&p, "wait");
  th_pack_str(&p, wait);
  th_raw_request(r->fd, OPD_MSG_RING_SETUP, 2, p.sb.data, p.sb.size,
                 pass ? mfd : -1);
  th_pack_free(&p);
  close(mfd);
  th_reply_t rep;
  cr_assert_eq(th_raw_reply(r->fd, &rep, 2000), 0);
  return rep.code;
}

static void push_ping(raw_ring_t *r, uint64_t id) {
  unsigned char msg[16];
  size_t n = 0;
  msg[n++] = 0x93;            /* [type, id, {}] */
  msg[n++] = OPD_MSG_PING;
  msg[n++] = 0xcf;            /* uint64 id */
  for (int i = 7; i >= 0; i--) msg[n++] = (unsigned char)(id >> (8 * i));
  msg[n++] = 0x80;
  cr_assert_eq(opd__ring_push(&r->sq, msg, (uint32_t)n), 0);
}

/* Pops one reply within 2 s; returns its id (-1 on timeout). */
static int64_t pop_reply_id(raw_ring_t *r) {
  unsigned char buf[CQS];
  uint32_t len;
  for (int i = 0; i < 2000000; i++) {
    int rc = opd__ring_pop(&r->cq, buf, sizeof buf, &len);
    cr_assert_geq(rc, 0, "the daemon corrupted the completion ring");
    if (rc == 0) {
      msgpack_unpacked u;
      msgpack_unpacked_init(&u);
      size_t off = 0;
      cr_assert_eq(msgpack_unpack_next(&u, (const char *)buf, len, &off),
                   MSGPACK_UNPACK_SUCCESS);
      int64_t id = (int64_t)u.data.via.array.ptr[1].via.u64;
      cr_assert_eq(u.data.via.array.ptr[2].via.i64, 0, "reply code");
      msgpack_unpacked_destroy(&u);
      return id;
    }
    if (i % 1000 == 999) usleep(100);
  }
  return -1;
}

Test(rings, requests_and_replies_through_the_rings) {
  raw_ring_t r;
  cr_assert_eq(raw_setup(&r, "spin", 1, 1), 0);
  for (uint64_t i = 0; i < 100; i++) {
    push_ping(&r, 1000 + i);
    cr_assert_eq(pop_reply_id(&r), (int64_t)(1000 + i));
  }
  close(r.fd);
  th_assert_alive();
}

Test(rings, setup_errors_are_clear) {
  raw_ring_t r;
  cr_assert_eq(raw_setup(&r, "lazy", 1, 1), OPD_EINVAL);
  close(r.fd);
  cr_assert_eq(raw_setup(&r, "spin", 1, 0), OPD_EFD, "no memfd sent");
  close(r.fd);
  cr_assert_eq(raw_setup(&r, "spin", 0, 1), OPD_EINVAL, "not formatted");
  close(r.fd);
  cr_assert_eq(raw_setup(&r, "adaptive", 1, 1), OPD_EFD, "no eventfd");
  close(r.fd);
  th_assert_alive();
}

Test(rings, garbage_in_the_ring_closes_that_session_only) {
  opd_client_t *bystander = th_connect();
  raw_ring_t r;
  cr_assert_eq(raw_setup(&r, "spin", 1, 1), 0);
  opd_ring_hdr_t *h = r.base;
  /* a length far beyond the slot, then publish it (slot: seq, length) */
  uint32_t seq = 1, bad = 1u << 30;
  memcpy(h->slots + 4, &bad, 4);
  atomic_store((_Atomic uint32_t *)h->slots, seq);
  cr_assert_eq(th_raw_expect_close(r.fd, 3000), OPD_EPROTO);
  cr_assert_eq(opd_ping(bystander), 0, "others are not affected");
  /* a sequence word that is neither the next message nor the last lap's */
  cr_assert_eq(raw_setup(&r, "spin", 1, 1), 0);
  h = r.base;
  atomic_store((_Atomic uint32_t *)h->slots, 100000u);
  cr_assert_eq(th_raw_expect_close(r.fd, 3000), OPD_EPROTO);
  /* bytes in a slot that are not msgpack */
  cr_assert_eq(raw_setup(&r, "spin", 1, 1), 0);
  cr_assert_eq(opd__ring_push(&r.sq, "\xc1\xc1", 2), 0);
  cr_assert_eq(th_raw_expect_close(r.fd, 3000), OPD_EPROTO);
  cr_assert_eq(opd_ping(bystander), 0);
  opd_close(bystander);
  th_assert_alive();
}

Test(rings, a_client_that_stops_consuming_costs_bounded_memory) {
  raw_ring_t r;
  cr_assert_eq(raw_setup(&r, "spin", 1, 1), 0);
  /* far more requests than the completion ring holds; never pop */
  int pushed = 0;
  for (int i = 0; i < 2000; i++) {
    unsigned char msg[16] = {0x93, OPD_MSG_PING, 0x01, 0x80};
    if (opd__ring_push(&r.sq, msg, 4) == 0) pushed++;
    else usleep(200);
  }
  /* the daemon stopped taking submissions once replies backed up */
  cr_assert_lt(pushed, 2000, "every request was taken (%d)", pushed);
  th_assert_alive();
  close(r.fd);
  cr_assert_eq(th_wait_stat("sessions", 1, 3000), 1);
}

Test(rings, a_client_dying_with_entries_in_its_ring) {
  pid_t pid = fork();
  if (pid == 0) {
    opd_client_t *c;
    if (opd_connect_flags(th_d.sock, OPD_CONNECT_WAIT_ADAPTIVE, &c) != 0) _exit(1);
    void *base;
    uint64_t a;
    if (opd_arena_create(c, 1 << 20, &a, &base) != 0) _exit(2);
    int64_t n = 1 << 17;
    opd_tensor_t x, y;
    opd_tensor_init(&x, a, 0, OPD_DTYPE_FLOAT32, 1, &n);
    opd_tensor_init(&y, a, 1 << 19, OPD_DTYPE_FLOAT32, 1, &n);
    uint64_t req;
    for (int i = 0; i < 50; i++) opd_submit(c, "relu", &x, 1, &y, 1, NULL, 0, &req);
    _exit(0); /* no close, replies unread */
  }
  int status;
  waitpid(pid, &status, 0);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d", status);
  th_assert_alive();
  cr_assert_eq(th_wait_stat("arenas", 0, 5000), 0, "its memory is released");
  cr_assert_eq(th_wait_stat("sessions", 1, 3000), 1);
}

Test(rings, a_corrupt_completion_ring_gets_the_documented_goodbye) {
  opd_client_t *bystander = th_connect();
  raw_ring_t r;
  cr_assert_eq(raw_setup(&r, "spin", 1, 1), 0);
  /* the client's consumed count far past anything the daemon wrote: the
   * daemon finds it when the completion ring looks full */
  opd_ring_hdr_t *h = (opd_ring_hdr_t *)((char *)r.base + cq_off());
  atomic_store(&h->tail, (uint64_t)1 << 40);
  for (uint64_t i = 0; i < CQN + 4; i++) {
    unsigned char msg[16] = {0x93, OPD_MSG_PING, 0x01, 0x80};
    for (int t = 0; t < 100 && opd__ring_push(&r.sq, msg, 4) == 1; t++)
      usleep(1000); /* full: the daemon takes them as it replies */
  }
  cr_assert_eq(th_raw_expect_close(r.fd, 3000), OPD_EPROTO,
               "a goodbye naming the protocol error, then the close");
  cr_assert_eq(opd_ping(bystander), 0, "others are not affected");
  opd_close(bystander);
  th_assert_alive();
}

/* Spinning takes a core on each side; where the daemon has none to spare
 * (--spin auto on a small host, or --spin never) a spin client is given
 * adaptive, and libopd says so. */
Test(rings, spin_is_refused_where_cores_are_short, .init = NULL) {
  const char *args[] = {"--spin", "never", NULL};
  th_start(args);
  opd_client_t *c;
  cr_assert_eq(opd_connect_flags(th_d.sock, OPD_CONNECT_WAIT_SPIN, &c), 0,
               "%s", opd_last_error());
  cr_assert_str_eq(opd_transport(c), "adaptive");
  cr_assert(strstr(opd_transport_why(c), "--spin never") != NULL, "%s",
            opd_transport_why(c));
  cr_assert_eq(opd_ping(c), 0);
  opd_close(c);
  const char *always[] = {"--spin", "always", NULL};
  th_start(always);
  cr_assert_eq(opd_connect_flags(th_d.sock, OPD_CONNECT_WAIT_SPIN, &c), 0);
  cr_assert_str_eq(opd_transport(c), "spin");
  cr_assert_str_eq(opd_transport_why(c), "");
  opd_close(c);
}
