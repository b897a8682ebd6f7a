/* Integration test harness; see harness.h. */
#include "tests/integration/harness.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

th_daemon_t th_d;

#define START_S 30 /* th_start: how long a daemon that neither answers nor
                      exits may take */

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void dump_log(void) {
  FILE *f = fopen(th_d.log, "r");
  char line[512];
  if (f == NULL) return;
  fprintf(stderr, "---- opd log (%s) ----\n", th_d.log);
  while (fgets(line, sizeof line, f)) fputs(line, stderr);
  fclose(f);
}

void th_start(const char *const *args) {
  /* a test that starts its own daemon (with options) replaces the suite's:
   * criterion runs the suite's .init even when the test sets .init = NULL */
  th_stop();
  const char *bin = getenv("OPD_BIN");
  if (bin == NULL) bin = "build/opd";
  snprintf(th_d.dir, sizeof th_d.dir, "/tmp/opd-test.XXXXXX");
  cr_assert_not_null(mkdtemp(th_d.dir), "mkdtemp: %s", strerror(errno));
  snprintf(th_d.sock, sizeof th_d.sock, "%s/opd.sock", th_d.dir);
  snprintf(th_d.log, sizeof th_d.log, "%s/opd.log", th_d.dir);

  const char *argv[32] = {bin, "--socket", th_d.sock, "--log-level", "debug"};
  int n = 5;
  /* the spin pass tests the spin transport: granted whatever the cores
   * (a test's own --spin comes later and wins) */
  const char *wait = getenv("OPD_WAIT");
  if (wait != NULL && strcmp(wait, "spin") == 0) {
    argv[n++] = "--spin";
    argv[n++] = "always";
  }
  for (int i = 0; args && args[i] && n < 31; i++) {
    argv[n++] = args[i];
    /* a test that names its own socket: the last --socket wins */
    if (strcmp(args[i], "--socket") == 0 && args[i + 1])
      snprintf(th_d.sock, sizeof th_d.sock, "%s", args[i + 1]);
  }
  argv[n] = NULL;
  pid_t parent = getpid();
  th_d.pid = fork();
  cr_assert(th_d.pid >= 0, "fork failed");
  if (th_d.pid == 0) {
    /* a test that dies before th_stop (a failed assertion, a crash, a
     * timeout) takes its daemon with it: none is left running */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    int fd = open(th_d.log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execv(bin, (char *const *)argv);
    _exit(127);
  }
  /* ready when it answers: no fixed time (a 2-core machine under load
   * took over 2 s to start it); the bound only catches a daemon that
   * hangs without exiting */
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (t = t0; t.tv_sec - t0.tv_sec < START_S; clock_gettime(CLOCK_MONOTONIC, &t)) {
    opd_client_t *c;
    if (opd_connect(th_d.sock, &c) == 0) {
      opd_close(c);
      return;
    }
    int status;
    if (waitpid(th_d.pid, &status, WNOHANG) == th_d.pid) {
      dump_log();
      th_d.pid = 0;
      cr_assert_fail("opd (%s) exited during start (status %d)", bin, status);
    }
    sleep_ms(10);
  }
  dump_log();
  cr_assert_fail("opd (pid %d) runs but did not answer on %s within %d s",
                 (int)th_d.pid, th_d.sock, START_S);
}

void th_start_default(void) { th_start(NULL); }

void th_stop(void) {
  int status = 0;
  if (th_d.pid <= 0) return;
  kill(th_d.pid, SIGTERM);
  for (int i = 0; i < 1000; i++) {
    if (waitpid(th_d.pid, &status, WNOHANG) == th_d.pid) break;
    sleep_ms(10);
    if (i == 999) {
      kill(th_d.pid, SIGKILL);
      waitpid(th_d.pid, &status, 0);
      dump_log();
      cr_assert_fail("opd did not stop within 10 s of SIGTERM");
    }
  }
  th_d.pid = 0;
  struct stat st;
  int left = stat(th_d.sock, &st) == 0;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || left) dump_log();
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "opd exited with status 0x%x", status);
  cr_expect(!left, "the socket file was left behind");
  unlink(th_d.log);
  rmdir(th_d.dir);
}

void th_stop_default(void) { th_stop(); }

opd_client_t *th_connect(void) {
  opd_client_t *c = NULL;
  int rc = opd_connect(th_d.sock, &c);
  cr_assert_eq(rc, 0, "connect: %s", opd_last_error());
  return c;
}

uint64_t th_arena(opd_client_t *c, uint64_t size, void **base) {
  uint64_t id;
  int rc = opd_arena_create(c, size, &id, base);
  cr_assert_eq(rc, 0, "arena_create: %s", opd_last_error());
  return id;
}

opd_tensor_t th_f32(uint64_t arena, uint64_t offset, int rank, ...) {
  opd_tensor_t t;
  int64_t shape[OPD_MAX_RANK];
  va_list ap;
  va_start(ap, rank);
  for (int i = 0; i < rank; i++) shape[i] = va_arg(ap, int64_t);
  va_end(ap);
  opd_tensor_init(&t, arena, offset, OPD_DTYPE_FLOAT32, rank, shape);
  return t;
}

void th_assert_alive(void) {
  opd_client_t *c = th_connect();
  cr_assert_eq(opd_ping(c), 0, "ping: %s", opd_last_error());
  void *base;
  uint64_t a = th_arena(c, 4096, &base);
  float *f = base;
  f[0] = 0.0f, f[1] = logf(3.0f);
  opd_tensor_t x = th_f32(a, 0, 1, (int64_t)2),
               y = th_f32(a, 64, 1, (int64_t)2);
  int rc = opd_run(c, "softmax", &x, 1, &y, 1, NULL, 0);
  cr_assert_eq(rc, 0, "softmax after the bad input: %s", opd_last_error());
  cr_assert_float_eq(f[16], 0.25f, 1e-6);
  cr_assert_float_eq(f[17], 0.75f, 1e-6);
  opd_close(c);
}

int64_t th_stat(const char *key) {
  opd_client_t *c = th_connect();
  char *json;
  size_t len;
  cr_assert_eq(opd_stats_json(c, &json, &len), 0, "%s", opd_last_error());
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(json, pat);
  cr_assert_not_null(p, "stats lack %s: %s", key, json);
  int64_t v = strtoll(p + strlen(pat), NULL, 10);
  opd_free(json);
  opd_close(c);
  return v;
}

int64_t th_wait_stat(const char *key, int64_t want, int timeout_ms) {
  int64_t v = th_stat(key);
  for (int t = 0; v != want && t < timeout_ms; t += 10) {
    sleep_ms(10);
    v = th_stat(key);
  }
  return v;
}

opd_client_t *th_connect_retry(int timeout_ms) {
  opd_client_t *c = NULL;
  for (int t = 0; t < timeout_ms; t += 10) {
    if (opd_connect(th_d.sock, &c) == 0) return c;
    sleep_ms(10);
  }
  cr_assert_fail("could not connect within %d ms: %s", timeout_ms,
                 opd_last_error());
  return NULL;
}

int th_run(const char *bin, const char *const *argv, char *out, size_t cap) {
  int p[2];
  cr_assert_eq(pipe(p), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(p[1], 1);
    dup2(p[1], 2);
    execv(bin, (char *const *)argv);
    _exit(127);
  }
  close(p[1]);
  size_t n = 0;
  ssize_t r;
  while (n + 1 < cap && (r = read(p[0], out + n, cap - 1 - n)) > 0) n += (size_t)r;
  out[n] = '\0';
  close(p[0]);
  int status;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

void th_tool(const char *name, char *path, size_t cap) {
  const char *bin = getenv("OPD_BIN") ? getenv("OPD_BIN") : "build/opd";
  const char *slash = strrchr(bin, '/');
  snprintf(path, cap, "%.*s%s", slash ? (int)(slash - bin + 1) : 0, bin, name);
}

/* ---- raw socket ------------------------------------------------------------ */

int th_raw_connect(void) {
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  strcpy(addr.sun_path, th_d.sock);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cr_assert(fd >= 0);
  cr_assert_eq(connect(fd, (struct sockaddr *)&addr, sizeof addr), 0,
               "connect: %s", strerror(errno));
  return fd;
}

void th_raw_send(int fd, const void *buf, size_t len, int pass_fd) {
  union {
    char b[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } cbuf;
  struct iovec iov = {(void *)buf, len};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
  if (pass_fd >= 0) {
    memset(&cbuf, 0, sizeof cbuf);
    msg.msg_control = cbuf.b;
    msg.msg_controllen = sizeof cbuf.b;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
  }
  ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
  cr_assert_eq((size_t)n, len, "sendmsg: %s", strerror(errno));
}

void th_raw_request(int fd, int type, uint64_t id, const void *body,
                    size_t body_len, int pass_fd) {
  th_pack_t p;
  th_pack_init(&p);
  msgpack_pack_array(&p.pk, 3);
  msgpack_pack_uint32(&p.pk, (uint32_t)type);
  msgpack_pack_uint64(&p.pk, id);
  msgpack_sbuffer_write(&p.sb, body, body_len);
  unsigned char *frame = malloc(p.sb.size + 4);
  uint32_t n = (uint32_t)p.sb.size;
  frame[0] = (unsigned char)n;
  frame[1] = (unsigned char)(n >> 8);
  frame[2] = (unsigned char)(n >> 16);
  frame[3] = (unsigned char)(n >> 24);
  memcpy(frame + 4, p.sb.data, p.sb.size);
  th_raw_send(fd, frame, p.sb.size + 4, pass_fd);
  free(frame);
  th_pack_free(&p);
}

void th_raw_hello(int fd) {
  th_pack_t p;
  th_pack_init(&p);
  msgpack_pack_map(&p.pk, 1);
  th_pack_str(&p, "protocol");
  msgpack_pack_uint32(&p.pk, OPD_PROTOCOL_VERSION);
  th_raw_request(fd, OPD_MSG_HELLO, 1, p.sb.data, p.sb.size, -1);
  th_pack_free(&p);
  th_reply_t r;
  cr_assert_eq(th_raw_reply(fd, &r, 2000), 0, "no hello reply");
  cr_assert_eq(r.code, 0, "hello failed: %s", r.message);
}

static int read_full(int fd, void *buf, size_t len, int timeout_ms) {
  size_t got = 0;
  while (got < len) {
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (poll(&pfd, 1, timeout_ms) <= 0) return -1;
    ssize_t n = read(fd, (char *)buf + got, len - got);
    if (n <= 0) return -1;
    got += (size_t)n;
  }
  return 0;
}

int th_raw_reply(int fd, th_reply_t *r, int timeout_ms) {
  unsigned char h[4];
  memset(r, 0, sizeof *r);
  if (read_full(fd, h, 4, timeout_ms) != 0) return -1;
  uint32_t len = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 |
                 (uint32_t)h[3] << 24;
  cr_assert(len < (1u << 24), "reply frame of %u bytes", len);
  char *buf = malloc(len);
  if (read_full(fd, buf, len, timeout_ms) != 0) {
    free(buf);
    return -1;
  }
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  cr_assert_eq(msgpack_unpack_next(&u, buf, len, &off), MSGPACK_UNPACK_SUCCESS);
  msgpack_object o = u.data;
  cr_assert(o.type == MSGPACK_OBJECT_ARRAY && o.via.array.size == 4);
  r->type = (int)o.via.array.ptr[0].via.u64;
  r->id = o.via.array.ptr[1].via.u64;
  r->code = (int)o.via.array.ptr[2].via.i64;
  msgpack_object body = o.via.array.ptr[3];
  for (uint32_t i = 0; body.type == MSGPACK_OBJECT_MAP && i < body.via.map.size;
       i++) {
    msgpack_object k = body.via.map.ptr[i].key, v = body.via.map.ptr[i].val;
    if (k.type == MSGPACK_OBJECT_STR && k.via.str.size == 7 &&
        memcmp(k.via.str.ptr, "message", 7) == 0 &&
        v.type == MSGPACK_OBJECT_STR) {
      size_t n = v.via.str.size < sizeof r->message - 1 ? v.via.str.size
                                                         : sizeof r->message - 1;
      memcpy(r->message, v.via.str.ptr, n);
    }
  }
  msgpack_unpacked_destroy(&u);
  free(buf);
  return 0;
}

int th_raw_expect_close(int fd, int timeout_ms) {
  th_reply_t r;
  int code = 0;
  while (th_raw_reply(fd, &r, timeout_ms) == 0) {
    if (r.type == OPD_MSG_GOODBYE) code = r.code;
  }
  /* th_raw_reply failed: EOF or timeout; tell them apart */
  struct pollfd pfd = {.fd = fd, .events = POLLIN};
  int ready = poll(&pfd, 1, 0);
  char ch;
  cr_assert(ready > 0 && read(fd, &ch, 1) == 0,
            "the daemon did not close the connection");
  close(fd);
  return code;
}

void th_pack_init(th_pack_t *p) {
  msgpack_sbuffer_init(&p->sb);
  msgpack_packer_init(&p->pk, &p->sb, msgpack_sbuffer_write);
}

void th_pack_str(th_pack_t *p, const char *s) {
  msgpack_pack_str_with_body(&p->pk, s, strlen(s));
}

void th_pack_free(th_pack_t *p) { msgpack_sbuffer_destroy(&p->sb); }
