/* Chaos: connections that hold a frame half sent, or never say hello, are
 * closed by the daemon after --frame-timeout-ms / --handshake-timeout-ms;
 * a quiet session that did say hello is not.
 *
 * DESIGN
 * With both timeouts at 300 ms: K connections say hello and then send a
 * frame header announcing 1000 bytes and 10 of them; K more connect and
 * send nothing. Each must get a goodbye OPD_ETIMEDOUT naming the timeout
 * (its 300 ms or its option) and then EOF, not sooner than the timeout and
 * well within 3 s; stats "sessions" falls back. A session idle between
 * whole frames for longer than both timeouts still answers a ping
 * afterwards. A daemon with no such timeout held about 1 MiB per stuck
 * frame forever.
 */
#include <criterion/criterion.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/chaos/chaos.h"

enum { K = 16 };

/* Reads until EOF (within timeout_ms); returns the goodbye's code (0 if
 * none came) and its message in msg. Fails the test if the connection
 * stays open. */
static int expect_goodbye(int fd, int timeout_ms, char *msg, size_t cap) {
  int type, code, bye = 0;
  char m[512];
  msg[0] = '\0';
  while (ch_read_frame(fd, timeout_ms, &type, &code, m, sizeof m) == 0)
    if (type == OPD_MSG_GOODBYE) {
      bye = code;
      snprintf(msg, cap, "%s", m);
    }
  struct pollfd pfd = {.fd = fd, .events = POLLIN};
  char ch;
  cr_assert(poll(&pfd, 1, 0) > 0 && read(fd, &ch, 1) <= 0,
            "the daemon did not close the connection within %d ms",
            timeout_ms);
  close(fd);
  return bye;
}

Test(chaos, half_frames_and_silent_connections_time_out, .timeout = 60) {
  th_start((const char *[]){"--frame-timeout-ms", "300",
                            "--handshake-timeout-ms", "300", NULL});
  int quiet = th_raw_connect(); /* said hello, then idle between frames */
  th_raw_hello(quiet);
  int64_t before = th_wait_stat("sessions", 2, 2000);
  cr_assert_eq(before, 2, "sessions %lld: the quiet one and the asker",
               (long long)before);

  int half[K], silent[K];
  double t0 = ch_now();
  for (int i = 0; i < K; i++) {
    half[i] = th_raw_connect();
    th_raw_hello(half[i]);
    /* a 1000-byte frame: its header and 10 bytes of the payload */
    unsigned char part[4 + 10] = {0xe8, 0x03, 0, 0, 0x93, 0x08, 0x01, 0x80};
    th_raw_send(half[i], part, sizeof part, -1);
    silent[i] = th_raw_connect();
  }
  cr_assert_eq(th_stat("sessions"), 2 + 2 * K, "all connected");
  for (int i = 0; i < K; i++) {
    char msg[512];
    int code = expect_goodbye(half[i], 3000, msg, sizeof msg);
    cr_expect_eq(code, OPD_ETIMEDOUT, "half frame %d: goodbye %s (\"%s\"), "
                 "ETIMEDOUT expected", i, opd_errname(code), msg);
    cr_expect(strstr(msg, "300 ms") || strstr(msg, "--frame-timeout-ms"),
              "half frame %d: the goodbye \"%s\" names neither the 300 ms "
              "nor --frame-timeout-ms", i, msg);
    code = expect_goodbye(silent[i], 3000, msg, sizeof msg);
    cr_expect_eq(code, OPD_ETIMEDOUT, "no hello %d: goodbye %s (\"%s\"), "
                 "ETIMEDOUT expected", i, opd_errname(code), msg);
    cr_expect(strstr(msg, "300 ms") || strstr(msg, "--handshake-timeout-ms"),
              "no hello %d: the goodbye \"%s\" names neither the 300 ms "
              "nor --handshake-timeout-ms", i, msg);
  }
  double took = ch_now() - t0;
  cr_expect(took >= 0.25, "the stuck connections were closed after %.0f ms, "
            "before the 300 ms timeout", took * 1e3);
  int64_t after = th_wait_stat("sessions", 2, 2000);
  cr_expect_eq(after, 2, "stats \"sessions\" is %lld after the stuck "
               "connections were closed (2 expected)", (long long)after);

  /* the quiet session outlived both timeouts and is still served */
  ch_sleep_ms(400);
  th_raw_request(quiet, OPD_MSG_PING, 7, "\x80", 1, -1);
  th_reply_t r;
  cr_assert_eq(th_raw_reply(quiet, &r, 2000), 0, "the idle session (hello "
               "done, no partial frame) was closed");
  cr_assert_eq(r.type, OPD_MSG_REPLY);
  cr_assert_eq(r.code, 0, "%s", r.message);
  close(quiet);
  th_assert_alive();
  th_stop();
}
