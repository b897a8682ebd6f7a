/* Integration: lifetimes — a client that leaves with work in flight, a
 * big op that must not stall others, SIGTERM draining, socket files, the
 * command line. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/integration/harness.h"

TestSuite(lifecycle, .init = th_start_default, .fini = th_stop_default,
          .timeout = 120);

/* A matmul big enough to take a good fraction of a second on 2 cores. */
enum { BIG = 2048 };

static uint64_t submit_big(opd_client_t *c, uint64_t *req) {
  void *base;
  uint64_t bytes = (uint64_t)3 * BIG * BIG * 4;
  uint64_t a = th_arena(c, bytes, &base);
  float *f = base;
  for (uint64_t i = 0; i < (uint64_t)2 * BIG * BIG; i++) f[i] = (float)(i % 7) * 0.1f;
  opd_tensor_t in[2] = {th_f32(a, 0, 2, (int64_t)BIG, (int64_t)BIG),
                        th_f32(a, (uint64_t)BIG * BIG * 4, 2, (int64_t)BIG,
                               (int64_t)BIG)};
  opd_tensor_t out = th_f32(a, (uint64_t)2 * BIG * BIG * 4, 2, (int64_t)BIG,
                            (int64_t)BIG);
  cr_assert_eq(opd_submit(c, "matmul", in, 2, &out, 1, NULL, 0, req), 0, "%s",
               opd_last_error());
  return bytes;
}

Test(lifecycle, client_disconnects_with_work_in_flight) {
  opd_client_t *c = th_connect();
  uint64_t req, more;
  submit_big(c, &req);
  submit_big(c, &more); /* queued behind the first: dropped at the close */
  submit_big(c, &more);
  opd_close(c); /* gone while its matmul runs */
  th_assert_alive();
  /* once the matmul finished, everything of that session is released */
  cr_assert_eq(th_wait_stat("arenas", 0, 30000), 0, "arena not released");
  cr_assert_eq(th_wait_stat("bytes_mapped", 0, 1000), 0);
  cr_assert_eq(th_wait_stat("sessions", 1, 2000), 1);
}

Test(lifecycle, a_big_op_does_not_stall_other_clients) {
  opd_client_t *c = th_connect(), *other = th_connect();
  uint64_t req;
  submit_big(c, &req);
  /* round trips by another client while the matmul (~17 GFLOP) runs */
  for (int i = 0; i < 50; i++) cr_assert_eq(opd_ping(other), 0);
  void *base;
  uint64_t a = th_arena(other, 4096, &base);
  opd_tensor_t x = th_f32(a, 0, 1, (int64_t)16), y = th_f32(a, 64, 1, (int64_t)16);
  cr_assert_eq(opd_run(other, "relu", &x, 1, &y, 1, NULL, 0), 0);
  int still = opd_wait(c, req, 0);
  cr_expect_eq(still, OPD_ETIMEDOUT,
               "the matmul should still be running (got %s)", opd_errname(still));
  cr_assert_eq(opd_wait(c, req, 60000), 0, "%s", opd_last_error());
  opd_close(other);
  opd_close(c);
}

Test(lifecycle, sigterm_finishes_running_work_then_says_goodbye) {
  opd_client_t *c = th_connect();
  uint64_t req, queued;
  submit_big(c, &req);
  /* a second run queued behind the first */
  void *base;
  uint64_t a = th_arena(c, 4096, &base);
  opd_tensor_t x = th_f32(a, 0, 1, (int64_t)4), y = th_f32(a, 64, 1, (int64_t)4);
  cr_assert_eq(opd_submit(c, "relu", &x, 1, &y, 1, NULL, 0, &queued), 0);
  usleep(100 * 1000);
  kill(th_d.pid, SIGTERM);
  cr_assert_eq(opd_wait(c, req, 60000), 0, "the running matmul completes: %s",
               opd_last_error());
  int rc = opd_wait(c, queued, 10000);
  cr_assert(rc == OPD_ESHUTDOWN || rc == 0, "queued run: %s (%s)",
            opd_errname(rc), opd_last_error());
  rc = opd_ping(c);
  cr_assert(rc == OPD_ESHUTDOWN, "after the goodbye: %s (%s)", opd_errname(rc),
            opd_last_error());
  cr_assert(strstr(opd_last_error(), "shutting down") != NULL, "%s",
            opd_last_error());
  opd_close(c);
  th_stop(); /* asserts exit 0 and the socket file removed */
}

Test(lifecycle, stale_socket_file_is_replaced, .init = NULL) {
  char dir[] = "/tmp/opd-stale.XXXXXX", path[128];
  cr_assert_not_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/opd.sock", dir);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  strcpy(addr.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  cr_assert_eq(bind(fd, (struct sockaddr *)&addr, sizeof addr), 0);
  close(fd); /* the file stays, nobody listens: what a crash leaves */
  const char *args[] = {"--socket", path, NULL};
  th_start(args);
  th_assert_alive();
  struct stat st;
  cr_assert_eq(stat(th_d.sock, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0660, "socket mode %o", st.st_mode & 0777);
  th_stop();
  rmdir(dir);
}

static int run_opd(const char *const *argv, char *out, size_t cap) {
  const char *bin = getenv("OPD_BIN") ? getenv("OPD_BIN") : "build/opd";
  return th_run(bin, argv, out, cap);
}

Test(lifecycle, second_daemon_on_the_same_socket_refuses) {
  char out[4096];
  const char *argv[] = {"opd", "--socket", th_d.sock, NULL};
  cr_assert_eq(run_opd(argv, out, sizeof out), 1);
  cr_assert(strstr(out, "another opd is already serving") != NULL, "%s", out);
  th_assert_alive();
}

Test(lifecycle, command_line, .init = NULL, .fini = NULL) {
  char out[4096];
  const char *v[] = {"opd", "--version", NULL};
  cr_assert_eq(run_opd(v, out, sizeof out), 0);
  cr_assert(strstr(out, "opd " OPD_VERSION) != NULL, "%s", out);
  const char *h[] = {"opd", "--help", NULL};
  cr_assert_eq(run_opd(h, out, sizeof out), 0);
  cr_assert(strstr(out, "--socket PATH") != NULL, "%s", out);
  const char *bad[] = {"opd", "--threads", "zero", NULL};
  cr_assert_eq(run_opd(bad, out, sizeof out), 1);
  cr_assert(strstr(out, "--threads expects a number") != NULL, "%s", out);
  const char *lvl[] = {"opd", "--log-level", "loud", NULL};
  cr_assert_eq(run_opd(lvl, out, sizeof out), 1);
  /* with no GPU here, any device number is one that does not exist */
  const char *dev[] = {"opd", "--socket", "/tmp/opd-devtest.sock", "--devices",
                       "7", NULL};
  cr_assert_eq(run_opd(dev, out, sizeof out), 1);
  cr_assert(strstr(out, "--devices 7: no CUDA device 7") != NULL, "%s", out);
  const char *win[] = {"opd", "--spin-window-us", "0", NULL};
  cr_assert_eq(run_opd(win, out, sizeof out), 1);
  cr_assert(strstr(out, "--spin-window-us expects a number from 1") != NULL,
            "%s", out);
  const char *lin[] = {"opd", "--linger-us", "1000001", NULL};
  cr_assert_eq(run_opd(lin, out, sizeof out), 1);
  cr_assert(strstr(out, "--linger-us expects a number from 0") != NULL, "%s",
            out);
  /* a CPU this process may not run on: refused, and the socket is freed */
  const char *cpu[] = {"opd", "--socket", "/tmp/opd-cputest.sock",
                       "--devices", "none", "--loop-cpu", "1023", NULL};
  cr_assert_eq(run_opd(cpu, out, sizeof out), 1);
  cr_assert(strstr(out, "--loop-cpu 1023: Invalid argument") != NULL, "%s", out);
  cr_assert_neq(access("/tmp/opd-cputest.sock", F_OK), 0, "socket left behind");
}

/* --loop-cpu pins the loop thread and the daemon serves as usual */
Test(lifecycle, loop_cpu_pins_and_serves, .init = NULL, .fini = NULL) {
  const char *args[] = {"--loop-cpu", "0", "--spin-window-us", "50",
                        "--linger-us", "0", NULL};
  th_start(args);
  opd_client_t *c = th_connect();
  cr_assert_eq(opd_run(c, "noop", NULL, 0, NULL, 0, NULL, 0), 0, "%s",
               opd_last_error());
  opd_close(c);
  th_stop();
}

Test(lifecycle, no_daemon_gives_one_clear_sentence, .init = NULL, .fini = NULL) {
  opd_client_t *c = NULL;
  int rc = opd_connect("/tmp/opd-nonexistent-dir/opd.sock", &c);
  cr_assert_eq(rc, OPD_ECONNECT);
  cr_assert_null(c);
  cr_assert(strstr(opd_last_error(), "/tmp/opd-nonexistent-dir/opd.sock") != NULL);
  cr_assert(strstr(opd_last_error(), "Start it with `opd --socket") != NULL,
            "%s", opd_last_error());
}

Test(lifecycle, a_connection_is_not_used_across_fork) {
  opd_client_t *c = th_connect();
  pid_t pid = fork();
  if (pid == 0) {
    /* the parent's connection refuses to work here... */
    int rc = opd_ping(c);
    if (rc != OPD_ESTATE || strstr(opd_last_error(), "fork") == NULL) _exit(1);
    /* ...and a new one works */
    opd_client_t *mine;
    if (opd_connect(th_d.sock, &mine) != 0 || opd_ping(mine) != 0) _exit(2);
    opd_close(mine);
    _exit(0);
  }
  int status;
  waitpid(pid, &status, 0);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d",
            WEXITSTATUS(status));
  cr_assert_eq(opd_ping(c), 0, "the parent's connection still works");
  opd_close(c);
}

/* A client that pipelines past --max-inflight: the daemon stops reading it
 * while its queue is full and resumes as runs complete; every request is
 * answered, in order, none dropped. (libopd itself never exceeds the limit,
 * so this client speaks the protocol directly.) */
Test(lifecycle, pipelining_past_max_inflight_is_flow_controlled, .init = NULL) {
  const char *args[] = {"--max-inflight", "2", "--inline-bytes", "0", NULL};
  th_start(args);
  int fd = th_raw_connect();
  th_raw_hello(fd);
  enum { N = 16384, REQS = 40 };
  int mfd = memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  cr_assert_eq(ftruncate(mfd, 2 * N * 4), 0);
  cr_assert_eq(fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  th_pack_t p;
  th_pack_init(&p);
  msgpack_pack_map(&p.pk, 1);
  th_pack_str(&p, "size");
  msgpack_pack_uint64(&p.pk, 2 * N * 4);
  th_raw_request(fd, OPD_MSG_ARENA_REGISTER, 2, p.sb.data, p.sb.size, mfd);
  th_pack_free(&p);
  close(mfd);
  th_reply_t r;
  cr_assert_eq(th_raw_reply(fd, &r, 2000), 0);
  cr_assert_eq(r.code, 0, "%s", r.message);
  /* the arena id is the first the daemon handed out in this test: 1 */
  unsigned char *all = NULL;
  size_t all_len = 0;
  for (int i = 0; i < REQS; i++) {
    th_pack_init(&p);
    msgpack_pack_array(&p.pk, 3);
    msgpack_pack_uint32(&p.pk, OPD_MSG_RUN);
    msgpack_pack_uint64(&p.pk, 100 + i);
    msgpack_pack_map(&p.pk, 3);
    th_pack_str(&p, "op");
    th_pack_str(&p, "relu");
    for (int k = 0; k < 2; k++) {
      th_pack_str(&p, k ? "out" : "in");
      msgpack_pack_array(&p.pk, 1);
      msgpack_pack_array(&p.pk, 5);
      msgpack_pack_uint64(&p.pk, 1);
      msgpack_pack_uint64(&p.pk, (uint64_t)k * N * 4);
      msgpack_pack_uint32(&p.pk, OPD_DTYPE_FLOAT32);
      msgpack_pack_array(&p.pk, 1);
      msgpack_pack_int64(&p.pk, N);
      msgpack_pack_nil(&p.pk);
    }
    all = realloc(all, all_len + 4 + p.sb.size);
    uint32_t n = (uint32_t)p.sb.size;
    memcpy(all + all_len, (unsigned char[]){n, n >> 8, n >> 16, n >> 24}, 4);
    memcpy(all + all_len + 4, p.sb.data, p.sb.size);
    all_len += 4 + p.sb.size;
    th_pack_free(&p);
  }
  th_raw_send(fd, all, all_len, -1); /* all 40 at once */
  free(all);
  for (int i = 0; i < REQS; i++) {
    cr_assert_eq(th_raw_reply(fd, &r, 10000), 0, "reply %d missing", i);
    cr_assert_eq(r.code, 0, "request %d: %s", i, r.message);
    cr_assert_eq(r.id, (uint64_t)(100 + i), "replies in order");
  }
  close(fd);
}
