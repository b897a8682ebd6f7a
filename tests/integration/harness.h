/* Integration test harness: a real opd daemon as a helper process, libopd
 * clients, and raw-socket helpers for sending what libopd never would.
 *
 * DESIGN
 * Each test starts its own daemon (build/opd, path from $OPD_BIN) on a
 * socket in a fresh temporary directory, so tests are independent and may
 * run in parallel. th_stop() sends SIGTERM and checks the daemon drained:
 * exit status 0 and the socket file gone.
 */
#ifndef OPD_TEST_HARNESS_H
#define OPD_TEST_HARNESS_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "opd/opd.h"

typedef struct th_daemon {
  pid_t pid;
  char dir[64];
  char sock[128];
  char log[128];
} th_daemon_t;

extern th_daemon_t th_d; /* the daemon of the running test */

/* Starts a daemon with extra args (NULL-terminated list, may be NULL);
 * waits until it answers. Fails the test if it does not. */
void th_start(const char *const *args);
void th_start_default(void); /* criterion .init */
/* SIGTERM, wait; asserts exit 0 and the socket removed. */
void th_stop(void);
void th_stop_default(void); /* criterion .fini */

opd_client_t *th_connect(void);

/* An arena of `size` bytes; *base gets the mapping. */
uint64_t th_arena(opd_client_t *c, uint64_t size, void **base);

/* Fills a contiguous float32 descriptor at `offset` of `arena`. */
opd_tensor_t th_f32(uint64_t arena, uint64_t offset, int rank, ...);

/* Asserts the daemon still serves a fresh client (hello + ping + a run). */
void th_assert_alive(void);

/* Reads an integer field of the daemon's stats. */
int64_t th_stat(const char *key);
/* Polls th_stat(key) until it equals want or timeout_ms passes; returns the
 * last value read (sessions close asynchronously in the daemon). */
int64_t th_wait_stat(const char *key, int64_t want, int timeout_ms);
/* Connects, retrying while the daemon refuses (closed sessions not yet
 * reaped); asserts success within timeout_ms. */
opd_client_t *th_connect_retry(int timeout_ms);

/* Asserts that `call` returns `code` and that the message of the failed
 * call (opd_last_error) contains `needle`. */
#define EXPECT_ERR(call, code, needle)                                      \
  do {                                                                      \
    int rc_ = (call);                                                       \
    cr_assert_eq(rc_, (code), "expected %s, got %s (%s)", opd_errname(code), \
                 opd_errname(rc_), opd_last_error());                       \
    cr_assert(strstr(opd_last_error(), (needle)) != NULL,                   \
              "message \"%s\" lacks \"%s\"", opd_last_error(), (needle));   \
  } while (0)

/* Runs `bin` with argv (NULL-terminated, argv[0] included), stdout and
 * stderr into out (cap bytes, NUL-terminated); returns its exit status
 * (128 if killed). */
int th_run(const char *bin, const char *const *argv, char *out, size_t cap);

/* The path of a tool built next to the daemon under test ("opctl"). */
void th_tool(const char *name, char *path, size_t cap);

/* ---- raw socket ---------------------------------------------------------- */

int th_raw_connect(void);
/* Sends raw bytes, optionally with an fd (SCM_RIGHTS); -1 for none. */
void th_raw_send(int fd, const void *buf, size_t len, int pass_fd);
/* Frames and sends [type, id, body] where body is packed by the caller into
 * `body` (msgpack bytes). */
void th_raw_request(int fd, int type, uint64_t id, const void *body,
                    size_t body_len, int pass_fd);
/* Says hello on a raw connection and checks the reply. */
void th_raw_hello(int fd);

typedef struct th_reply {
  int type;
  uint64_t id;
  int code;
  char message[512];
} th_reply_t;

/* Reads one frame within timeout_ms; returns 0, or -1 on EOF/timeout. */
int th_raw_reply(int fd, th_reply_t *r, int timeout_ms);
/* Asserts the daemon closes this connection within timeout_ms (possibly
 * after a goodbye, whose code is returned; 0 if none came). */
int th_raw_expect_close(int fd, int timeout_ms);

/* msgpack helpers for building bodies. */
typedef struct th_pack {
  msgpack_sbuffer sb;
  msgpack_packer pk;
} th_pack_t;
void th_pack_init(th_pack_t *p);
void th_pack_str(th_pack_t *p, const char *s);
void th_pack_free(th_pack_t *p);

#endif
