/* Integration: bad input, continued: broken framing closes that one
 * connection and the rest go on; limits per session, uid and daemon;
 * stray and pipelined fds; client strings in the log. The suite's
 * fixtures: test_bad_input.c. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/integration/harness.h"

/* ---- framing errors: that connection is closed, the rest go on -------- */

static void send_raw_frame(int fd, const void *payload, uint32_t len) {
  unsigned char h[4] = {(unsigned char)len, (unsigned char)(len >> 8),
                        (unsigned char)(len >> 16), (unsigned char)(len >> 24)};
  th_raw_send(fd, h, 4, -1);
  if (len) th_raw_send(fd, payload, len, -1);
}

Test(bad, frame_larger_than_the_limit) {
  opd_client_t *bystander = th_connect();
  int fd = th_raw_connect();
  th_raw_hello(fd);
  unsigned char h[4] = {0xff, 0xff, 0xff, 0x7f};
  th_raw_send(fd, h, 4, -1);
  cr_assert_eq(th_raw_expect_close(fd, 2000), OPD_ETOOBIG);
  cr_assert_eq(opd_ping(bystander), 0, "others keep their sessions");
  th_assert_alive();
  opd_close(bystander);
}

Test(bad, bytes_that_are_not_msgpack) {
  int fd = th_raw_connect();
  send_raw_frame(fd, "\xc1\xc1\xc1", 3); /* 0xc1 is never used */
  cr_assert_eq(th_raw_expect_close(fd, 2000), OPD_EPROTO);
  fd = th_raw_connect();
  send_raw_frame(fd, "\x93\x01", 2); /* truncated array */
  cr_assert_eq(th_raw_expect_close(fd, 2000), OPD_EPROTO);
  fd = th_raw_connect();
  send_raw_frame(fd, "\x2a", 1); /* valid msgpack, not [type, id, body] */
  cr_assert_eq(th_raw_expect_close(fd, 2000), OPD_EPROTO);
  th_assert_alive();
}

Test(bad, count_larger_than_the_bytes_left) {
  int fd = th_raw_connect();
  /* array32 claiming 2^32-1 elements in a 5-byte frame */
  send_raw_frame(fd, "\xdd\xff\xff\xff\xff", 5);
  cr_assert_eq(th_raw_expect_close(fd, 2000), OPD_EPROTO);
  fd = th_raw_connect();
  /* map32 claiming 10^9 entries */
  send_raw_frame(fd, "\x93\x01\x01\xdf\x3b\x9a\xca\x00", 8);
  cr_assert_eq(th_raw_expect_close(fd, 2000), OPD_EPROTO);
  /* str32 longer than the frame */
  fd = th_raw_connect();
  send_raw_frame(fd, "\xdb\x00\x10\x00\x00" "ab", 7);
  cr_assert_eq(th_raw_expect_close(fd, 2000), OPD_EPROTO);
  th_assert_alive();
}

Test(bad, nesting_deeper_than_the_protocol_allows) {
  int fd = th_raw_connect();
  unsigned char deep[64];
  for (int i = 0; i < 63; i++) deep[i] = 0x91; /* [[[[...]]]] */
  deep[63] = 0x01;
  send_raw_frame(fd, deep, sizeof deep);
  cr_assert_eq(th_raw_expect_close(fd, 2000), OPD_EPROTO);
  th_assert_alive();
}

Test(bad, rank_above_the_maximum) {
  int fd = th_raw_connect();
  th_raw_hello(fd);
  th_pack_t p;
  th_pack_init(&p);
  msgpack_pack_map(&p.pk, 3);
  th_pack_str(&p, "op");
  th_pack_str(&p, "relu");
  th_pack_str(&p, "in");
  msgpack_pack_array(&p.pk, 1);
  msgpack_pack_array(&p.pk, 5);
  msgpack_pack_uint64(&p.pk, 1);
  msgpack_pack_uint64(&p.pk, 0);
  msgpack_pack_uint32(&p.pk, OPD_DTYPE_FLOAT32);
  msgpack_pack_array(&p.pk, 9);
  for (int i = 0; i < 9; i++) msgpack_pack_int(&p.pk, 1);
  msgpack_pack_nil(&p.pk);
  th_pack_str(&p, "out");
  msgpack_pack_array(&p.pk, 1);
  msgpack_pack_array(&p.pk, 5);
  msgpack_pack_uint64(&p.pk, 1);
  msgpack_pack_uint64(&p.pk, 0);
  msgpack_pack_uint32(&p.pk, OPD_DTYPE_FLOAT32);
  msgpack_pack_array(&p.pk, 0);
  msgpack_pack_nil(&p.pk);
  th_raw_request(fd, OPD_MSG_RUN, 9, p.sb.data, p.sb.size, -1);
  th_pack_free(&p);
  th_reply_t r;
  cr_assert_eq(th_raw_reply(fd, &r, 2000), 0);
  cr_assert_eq(r.code, OPD_ELIMIT, "%s", r.message);
  cr_assert(strstr(r.message, "relu: input 0 (x): tensor rank 9 exceeds the "
                              "maximum of 8") != NULL, "%s", r.message);
  close(fd);
}

Test(bad, malformed_run_bodies_get_error_replies) {
  int fd = th_raw_connect();
  th_raw_hello(fd);
  th_reply_t r;
  /* op missing */
  th_raw_request(fd, OPD_MSG_RUN, 10, "\x80", 1, -1);
  cr_assert_eq(th_raw_reply(fd, &r, 2000), 0);
  cr_assert_eq(r.code, OPD_EPROTO);
  cr_assert(strstr(r.message, "\"op\" (a string) is required") != NULL, "%s",
            r.message);
  /* a tensor that is not [arena, offset, dtype, shape, strides] */
  th_pack_t p;
  th_pack_init(&p);
  msgpack_pack_map(&p.pk, 3);
  th_pack_str(&p, "op");
  th_pack_str(&p, "relu");
  th_pack_str(&p, "in");
  msgpack_pack_array(&p.pk, 1);
  th_pack_str(&p, "tensor");
  th_pack_str(&p, "out");
  msgpack_pack_array(&p.pk, 1);
  th_pack_str(&p, "tensor");
  th_raw_request(fd, OPD_MSG_RUN, 11, p.sb.data, p.sb.size, -1);
  th_pack_free(&p);
  cr_assert_eq(th_raw_reply(fd, &r, 2000), 0);
  cr_assert_eq(r.code, OPD_EPROTO);
  cr_assert(strstr(r.message, "[arena, offset, dtype, shape, strides]") != NULL,
            "%s", r.message);
  close(fd);
}

Test(bad, client_closes_mid_request) {
  int fd = th_raw_connect();
  th_raw_hello(fd);
  /* the header of a 100-byte frame and half of it, then gone */
  unsigned char part[54] = {100, 0, 0, 0, 0x93, 0x04, 0x01, 0x85};
  th_raw_send(fd, part, sizeof part, -1);
  close(fd);
  th_assert_alive();
  cr_assert_eq(th_wait_stat("sessions", 1, 2000), 1,
               "only th_stat's own session is left");
}

Test(bad, arena_limit, .init = NULL) {
  const char *args[] = {"--max-arenas", "2", "--max-arena-bytes", "1048576",
                        NULL};
  th_start(args);
  opd_client_t *c = th_connect();
  void *b;
  uint64_t id;
  cr_assert_eq(opd_arena_create(c, 4096, &id, &b), 0);
  cr_assert_eq(opd_arena_create(c, 4096, &id, &b), 0);
  EXPECT_ERR(opd_arena_create(c, 4096, &id, &b), OPD_ELIMIT,
             "session has 2 arenas, the limit");
  cr_assert_eq(opd_arena_release(c, id), 0);
  EXPECT_ERR(opd_arena_create(c, 2 << 20, &id, &b), OPD_ELIMIT,
             "exceeds the limit of 1048576");
  opd_close(c);
}

Test(bad, too_many_clients, .init = NULL) {
  const char *args[] = {"--max-clients", "2", NULL};
  th_start(args);
  /* sessions of closed probes may not be reaped yet: retry a and b */
  opd_client_t *a = th_connect_retry(2000), *b = th_connect_retry(2000), *c = NULL;
  EXPECT_ERR(opd_connect(th_d.sock, &c), OPD_ELIMIT, "too many clients (limit 2)");
  cr_assert_null(c);
  opd_close(b);
  cr_assert_eq(opd_ping(a), 0);
  opd_close(a);
}

/* A sealed 4 KiB memfd, as a client registers. */
static int sealed_memfd(void) {
  int fd = memfd_create("stray", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  cr_assert_geq(fd, 0);
  cr_assert_eq(ftruncate(fd, 4096), 0);
  cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  return fd;
}

Test(bad, a_stray_fd_is_never_taken_by_a_later_registration) {
  int fd = th_raw_connect();
  th_raw_hello(fd);
  /* a memfd sent with a ping: it belongs to the ping, which takes none */
  int mfd = sealed_memfd();
  th_raw_request(fd, OPD_MSG_PING, 2, "\x80", 1, mfd);
  close(mfd);
  th_reply_t r;
  cr_assert_eq(th_raw_reply(fd, &r, 2000), 0);
  cr_assert_eq(r.code, 0);
  /* a registration sent without one must not get the ping's */
  th_pack_t p;
  th_pack_init(&p);
  msgpack_pack_map(&p.pk, 1);
  th_pack_str(&p, "size");
  msgpack_pack_uint64(&p.pk, 4096);
  th_raw_request(fd, OPD_MSG_ARENA_REGISTER, 3, p.sb.data, p.sb.size, -1);
  th_pack_free(&p);
  cr_assert_eq(th_raw_reply(fd, &r, 2000), 0);
  cr_assert_eq(r.code, OPD_EFD, "the stray fd was taken: %s", r.message);
  cr_assert(strstr(r.message, "no file descriptor") != NULL, "%s", r.message);
  close(fd);
  cr_assert_eq(th_wait_stat("arenas", 0, 2000), 0);
}

/* Reads the daemon's log into buf (NUL-terminated). */
static void read_log(char *buf, size_t cap) {
  FILE *f = fopen(th_d.log, "r");
  cr_assert_not_null(f);
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = '\0';
  fclose(f);
}

Test(bad, client_strings_cannot_forge_log_lines) {
  int fd = th_raw_connect();
  th_pack_t p;
  th_pack_init(&p);
  msgpack_pack_map(&p.pk, 2);
  th_pack_str(&p, "protocol");
  msgpack_pack_uint32(&p.pk, OPD_PROTOCOL_VERSION);
  th_pack_str(&p, "client");
  th_pack_str(&p, "w\n2026-01-01T00:00:00Z opd[error] FORGED\x1b[2J");
  th_raw_request(fd, OPD_MSG_HELLO, 1, p.sb.data, p.sb.size, -1);
  th_pack_free(&p);
  th_reply_t r;
  cr_assert_eq(th_raw_reply(fd, &r, 2000), 0);
  cr_assert_eq(r.code, 0, "%s", r.message);
  close(fd);
  cr_assert_eq(th_wait_stat("sessions", 1, 2000), 1); /* th_stat's own */
  static char log[1 << 20];
  read_log(log, sizeof log);
  cr_assert(strstr(log, "\nFORGED") == NULL && strstr(log, "\n2026-01-01") == NULL,
            "a client's newline started a log line");
  cr_assert(strchr(log, '\x1b') == NULL, "an escape sequence reached the log");
  cr_assert(strstr(log, "w\\x0a2026-01-01") != NULL, "the name, escaped");
}

Test(bad, the_goodbye_log_line_is_a_clean_string) {
  /* a goodbye longer than 31 bytes (a str8 in msgpack) */
  int fd = th_raw_connect();
  th_raw_send(fd, "\xff\xff\xff\x7f", 4, -1);
  cr_assert_eq(th_raw_expect_close(fd, 3000), OPD_ETOOBIG);
  cr_assert_eq(th_wait_stat("sessions", 1, 2000), 1); /* th_stat's own */
  static char log[1 << 20];
  read_log(log, sizeof log);
  const char *at = strstr(log, "closing: ");
  cr_assert_not_null(at, "%s", log);
  at += strlen("closing: ");
  const char *want = "frame of 2147483647 bytes exceeds the limit of";
  cr_assert(strncmp(at, want, strlen(want)) == 0, "line: %.120s", at - 9);
  const char *eol = strchr(at, '\n');
  cr_assert_not_null(eol);
  for (const char *q = at; q < eol; q++)
    cr_assert(*q >= 0x20 && *q < 0x7f, "byte 0x%02x in the line",
              (unsigned char)*q);
  cr_assert(strncmp(eol - 5, "bytes", 5) == 0, "line ends: %.*s",
            (int)(eol - at), at);
}

/* A frame sent without fds and then one with its memfd may arrive in one
 * read (the kernel hands the fds over with the read that reaches their
 * sendmsg): the fds are the second frame's, never the first's. */
Test(bad, pipelined_frames_keep_their_own_fds) {
  int fd = th_raw_connect();
  th_raw_hello(fd);
  enum { N = 50 };
  th_pack_t p;
  th_pack_init(&p);
  msgpack_pack_map(&p.pk, 1);
  th_pack_str(&p, "size");
  msgpack_pack_uint64(&p.pk, 4096);
  for (int i = 0; i < N; i++) {
    th_raw_request(fd, OPD_MSG_PING, 100 + (uint64_t)i, "\x80", 1, -1);
    int mfd = sealed_memfd();
    th_raw_request(fd, OPD_MSG_ARENA_REGISTER, 1000 + (uint64_t)i, p.sb.data,
                   p.sb.size, mfd);
    close(mfd);
  }
  th_pack_free(&p);
  for (int i = 0; i < 2 * N; i++) {
    th_reply_t r;
    cr_assert_eq(th_raw_reply(fd, &r, 5000), 0, "reply %d missing", i);
    cr_assert_eq(r.code, 0, "request %llu: %s", (unsigned long long)r.id,
                 r.message);
  }
  close(fd);
}

/* The uid's and the daemon's arena limits, across sessions of one uid. */
Test(bad, arena_limits_per_uid_and_daemon, .init = NULL) {
  const char *args[] = {"--max-uid-arenas", "3", NULL};
  th_start(args);
  opd_client_t *a = th_connect(), *b = th_connect();
  void *base;
  th_arena(a, 4096, &base);
  th_arena(a, 4096, &base);
  th_arena(b, 4096, &base);
  uint64_t id;
  EXPECT_ERR(opd_arena_create(b, 4096, &id, &base), OPD_ELIMIT, "--max-uid-arenas");
  opd_close(a); /* its two arenas go back to the uid once it is reaped */
  cr_assert_eq(th_wait_stat("arenas", 1, 2000), 1);
  th_arena(b, 4096, &base);
  opd_close(b);
  const char *total[] = {"--max-total-arenas", "2", NULL};
  th_start(total);
  a = th_connect();
  b = th_connect();
  th_arena(a, 4096, &base);
  th_arena(b, 4096, &base);
  EXPECT_ERR(opd_arena_create(a, 4096, &id, &base), OPD_ELIMIT, "--max-total-arenas");
  opd_close(a);
  opd_close(b);
}

/* At the uid's run limit a session is not read, not failed, and is read
 * again when another session's run ends: every run of both completes. */
Test(bad, runs_over_the_uid_limit_wait_and_complete, .init = NULL) {
  const char *args[] = {"--max-uid-inflight", "2", NULL};
  th_start(args);
  enum { N = 1 << 18, RUNS = 12 };
  opd_client_t *c[2] = {th_connect(), th_connect()};
  uint64_t req[2][RUNS];
  for (int k = 0; k < 2; k++) {
    void *base;
    uint64_t a = th_arena(c[k], (uint64_t)2 * N * 4, &base);
    opd_tensor_t x = th_f32(a, 0, 1, (int64_t)N), y = th_f32(a, (uint64_t)N * 4, 1, (int64_t)N);
    for (int i = 0; i < RUNS; i++)
      cr_assert_eq(opd_submit(c[k], "relu", &x, 1, &y, 1, NULL, 0, &req[k][i]), 0,
                   "%s", opd_last_error());
  }
  for (int i = 0; i < RUNS; i++)
    for (int k = 0; k < 2; k++)
      cr_assert_eq(opd_wait(c[k], req[k][i], 20000), 0, "client %d run %d: %s", k,
                   i, opd_last_error());
  cr_assert_eq(th_wait_stat("inflight", 0, 2000), 0);
  opd_close(c[0]);
  opd_close(c[1]);
}
