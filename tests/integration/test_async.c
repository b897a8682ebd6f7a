/* Integration: the asynchronous-run interface on a daemon without a GPU
 * (CI). Runs asked to be asynchronous that are not on a CUDA device are
 * answered at completion as always, SYNC waits for the session's runs,
 * and every misuse (flags the daemon does not know, STREAM without a
 * device, stream order asked for without a STREAM, a cpu device for a
 * stream-ordered run) is a clear error. tests/gpu/ covers the GPU side:
 * return at enqueue, stream order, lifetimes, the bound. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "tests/integration/harness.h"

TestSuite(async, .init = th_start_default, .fini = th_stop_default,
          .timeout = 60);

static void fill(float *p, int n, float v) {
  for (int i = 0; i < n; i++) p[i] = v - (float)i;
}

Test(async, cpu_runs_asked_async_complete_before_the_answer) {
  opd_client_t *c = th_connect();
  void *base;
  uint64_t a = th_arena(c, 1 << 16, &base);
  float *f = base;
  fill(f, 256, 100.0f);
  opd_tensor_t x = th_f32(a, 0, 1, (int64_t)256);
  opd_tensor_t y = th_f32(a, 4096, 1, (int64_t)256);
  memset(f + 1024, 0xff, 1024);
  cr_assert_eq(opd_run_async(c, "cpu", "relu", &x, 1, &y, 1, NULL, 0), 0, "%s",
               opd_last_error());
  for (int i = 0; i < 256; i++)
    cr_assert_eq(f[1024 + i], f[i] > 0 ? f[i] : 0.0f, "element %d", i);
  /* pipelined: 200 asynchronous submissions, then one synchronize */
  uint64_t req[200];
  for (int k = 0; k < 200; k++) {
    opd_tensor_t o = th_f32(a, 8192 + (uint64_t)(k % 8) * 1024, 1, (int64_t)256);
    cr_assert_eq(opd_submit_async(c, NULL, "relu", &x, 1, &o, 1, NULL, 0,
                                  &req[k]), 0, "%s", opd_last_error());
  }
  cr_assert_eq(opd_synchronize(c), 0, "%s", opd_last_error());
  for (int k = 0; k < 200; k++) cr_assert_eq(opd_wait(c, req[k], 5000), 0);
  for (int i = 0; i < 256; i++)
    cr_assert_eq(f[2048 + 7 * 256 + i], f[i] > 0 ? f[i] : 0.0f);
  cr_assert_eq(opd_synchronize(c), 0, "an idle session syncs at once");
  /* prepared with OPD_RUN_ASYNC */
  opd_prepared_t *p;
  cr_assert_eq(opd_prepare_flags(c, NULL, "relu", &x, 1, &y, 1, NULL, 0,
                                 OPD_RUN_ASYNC, &p), 0, "%s", opd_last_error());
  memset(f + 1024, 0, 1024);
  cr_assert_eq(opd_run_prepared(c, p), 0, "%s", opd_last_error());
  cr_assert_eq(f[1024], 100.0f);
  opd_prepared_free(p);
  opd_close(c);
}

Test(async, misuse_is_named) {
  opd_client_t *c = th_connect();
  void *base;
  uint64_t a = th_arena(c, 1 << 16, &base);
  opd_tensor_t x = th_f32(a, 0, 1, (int64_t)16), y = th_f32(a, 64, 1, (int64_t)16);
  opd_prepared_t *p = NULL;
  EXPECT_ERR(opd_prepare_flags(c, "cpu", "relu", &x, 1, &y, 1, NULL, 0,
                               OPD_RUN_STREAM, &p), OPD_EINVAL,
             "OPD_RUN_STREAM needs device \"cuda\"");
  EXPECT_ERR(opd_prepare_flags(c, "GPU-0000", "relu", &x, 1, &y, 1, NULL, 0,
                               OPD_RUN_STREAM, &p), OPD_EINVAL,
             "\"cuda:N\" or a UUID");
  /* a UUID is taken (sent as it is without a driver) */
  cr_assert_eq(opd_prepare_flags(c, "GPU-00000000-0000-0000-0000-000000000000",
                                 "relu", &x, 1, &y, 1, NULL, 0, OPD_RUN_STREAM,
                                 &p), 0, "%s", opd_last_error());
  opd_prepared_free(p);
  p = NULL;
  EXPECT_ERR(opd_prepare_flags(c, NULL, "relu", &x, 1, &y, 1, NULL, 0, 0x80, &p),
             OPD_EINVAL, "only OPD_RUN_ASYNC and OPD_RUN_STREAM");
  EXPECT_ERR(opd_run_stream(c, "cpu", NULL, "relu", &x, 1, &y, 1, NULL, 0),
             OPD_EINVAL, "device \"cpu\" is not \"cuda\", \"cuda:N\"");
  EXPECT_ERR(opd_run_stream(c, "cuda:99", NULL, "relu", &x, 1, &y, 1, NULL, 0),
             OPD_EINVAL, "cuda:99");
  /* no driver (CI), or a driver without this pointer: either way named */
  opd_tensor_t t = th_f32(0, 0, 1, (int64_t)16);
  int rc = opd_tensor_cuda(c, "cuda:0", base, &t);
  cr_assert(rc == OPD_EBACKEND || rc == OPD_EINVAL, "%s", opd_errname(rc));
  cr_assert(strstr(opd_last_error(), "opd_tensor_cuda") != NULL, "%s",
            opd_last_error());
  rc = opd_run_stream(c, "cuda:0", NULL, "relu", &x, 1, &y, 1, NULL, 0);
  cr_assert(rc == OPD_EBACKEND || rc == OPD_EINVAL || rc == OPD_EDEVICE, "%s",
            opd_errname(rc));
  /* this process's device as the daemon is sent it: its UUID where the
   * driver can tell, "cuda:N" here without one */
  char name[48];
  cr_assert_eq(opd_cuda_device_name(0, name, sizeof name), 0, "%s",
               opd_last_error());
  cr_assert(strcmp(name, "cuda:0") == 0 || strncmp(name, "GPU-", 4) == 0, "%s",
            name);
  EXPECT_ERR(opd_cuda_device_name(-1, name, sizeof name), OPD_EINVAL,
             "device -1 out of 0..15");
  EXPECT_ERR(opd_cuda_device_name(0, name, 3), OPD_ELIMIT, "3 bytes of room");
  /* batches (opd_batch_begin / _end): misuse named, no driver named */
  EXPECT_ERR(opd_batch_end(c), OPD_ESTATE, "no batch is open on this connection");
  EXPECT_ERR(opd_batch_end(NULL), OPD_EINVAL, "no connection");
  EXPECT_ERR(opd_batch_begin(NULL, NULL), OPD_EINVAL, "no connection");
  rc = opd_batch_begin(c, NULL); /* no driver here (CI): named */
  if (rc == 0) {                 /* a driver with a current context */
    cr_assert_eq(opd_batch_end(c), 0, "%s", opd_last_error());
  } else {
    cr_assert(rc == OPD_EBACKEND || rc == OPD_EINVAL, "%s", opd_errname(rc));
    cr_assert(strstr(opd_last_error(), "opd_batch_begin") != NULL, "%s",
              opd_last_error());
  }
  EXPECT_ERR(opd_batch_end(c), OPD_ESTATE, "no batch is open");
  /* a UUID: without a driver EBACKEND, with one EDEVICE naming it */
  rc = opd_run_stream(c, "GPU-00000000-0000-0000-0000-000000000000", NULL,
                      "relu", &x, 1, &y, 1, NULL, 0);
  cr_assert(rc == OPD_EBACKEND || rc == OPD_EDEVICE, "%s", opd_errname(rc));
  th_assert_alive();
  opd_close(c);
}

/* The wire: flags the daemon does not know, STREAM without a GPU or with
 * a malformed body, WAIT asked on the cpu (ignored: nothing to order). */
Test(async, raw_requests_get_clear_errors) {
  int fd = th_raw_connect();
  th_raw_hello(fd);
  th_reply_t r;
  th_pack_t p;

  /* a flag the daemon does not know; WORD (the client's word of a slot)
   * needs WAIT, FLAG and a slot; a slot needs WORD; a well-formed WORD run
   * gets past the flags */
  const uint32_t ord = OPD_RUN_F_ASYNC | OPD_RUN_F_WAIT | OPD_RUN_F_FLAG;
  const struct { uint32_t flags; int code; const char *msg; } wd[] = {
      {32, OPD_EPROTO, "\"async\" must be an unsigned of OPD_RUN_F_"},
      {OPD_RUN_F_WORD | (5u << OPD_RUN_SLOT_SHIFT), OPD_EPROTO, "WORD (16) needs WAIT (2)"},
      {ord | OPD_RUN_F_WORD, OPD_EPROTO, "and a slot 1..63 in bits 8..13"},
      {ord | (5u << OPD_RUN_SLOT_SHIFT), OPD_EPROTO, "a slot in bits 8..13 without WORD"},
      {ord | OPD_RUN_F_WORD | (64u << OPD_RUN_SLOT_SHIFT), OPD_EPROTO,
       "\"async\" must be an unsigned of OPD_RUN_F_"},
      {ord | OPD_RUN_F_WORD | (63u << OPD_RUN_SLOT_SHIFT), OPD_EARITY, "expects 1 input"},
  };
  for (int k = 0; k < 6; k++) {
    th_pack_init(&p);
    msgpack_pack_map(&p.pk, 4);
    th_pack_str(&p, "op");
    th_pack_str(&p, "relu");
    th_pack_str(&p, "in");
    msgpack_pack_array(&p.pk, 0);
    th_pack_str(&p, "out");
    msgpack_pack_array(&p.pk, 0);
    th_pack_str(&p, "async");
    msgpack_pack_uint32(&p.pk, wd[k].flags);
    th_raw_request(fd, OPD_MSG_RUN, 2, p.sb.data, p.sb.size, -1);
    th_pack_free(&p);
    cr_assert_eq(th_raw_reply(fd, &r, 2000), 0);
    cr_assert_eq(r.code, wd[k].code, "case %d: %d %s", k, r.code, r.message);
    cr_assert(strstr(r.message, wd[k].msg) != NULL, "case %d: %s", k, r.message);
  }

  th_pack_init(&p);
  msgpack_pack_map(&p.pk, 2);
  th_pack_str(&p, "device");
  th_pack_str(&p, "cuda:0");
  th_pack_str(&p, "event");
  msgpack_pack_bin(&p.pk, 64);
  msgpack_pack_bin_body(&p.pk, (const char[64]){0}, 64);
  th_raw_request(fd, OPD_MSG_STREAM, 3, p.sb.data, p.sb.size, -1);
  th_pack_free(&p);
  cr_assert_eq(th_raw_reply(fd, &r, 2000), 0);
  cr_assert_eq(r.code, OPD_EDEVICE, "%d %s", r.code, r.message);
  cr_assert(strstr(r.message, "stream: device \"cuda:0\" is not available") !=
                NULL, "%s", r.message);

  th_pack_init(&p);
  msgpack_pack_map(&p.pk, 1);
  th_pack_str(&p, "event");
  msgpack_pack_bin(&p.pk, 12);
  msgpack_pack_bin_body(&p.pk, "twelve bytes", 12);
  th_raw_request(fd, OPD_MSG_STREAM, 4, p.sb.data, p.sb.size, -1);
  th_pack_free(&p);
  cr_assert_eq(th_raw_reply(fd, &r, 2000), 0);
  cr_assert_eq(r.code, OPD_EPROTO, "%d %s", r.code, r.message);
  cr_assert(strstr(r.message, "64 bytes of a cudaIpcEventHandle_t") != NULL,
            "%s", r.message);

  /* a refused FLAG run (its stream would poll the flag word): the refusal
   * is its answer, here with no GPU to write a word on */
  const char *devs[2] = {NULL, "cuda:0"};
  for (int k = 0; k < 2; k++) {
    th_pack_init(&p);
    msgpack_pack_map(&p.pk, devs[k] ? 3 : 2);
    th_pack_str(&p, "op");
    th_pack_str(&p, "no_such_op");
    th_pack_str(&p, "async");
    msgpack_pack_uint32(&p.pk, OPD_RUN_F_ASYNC | OPD_RUN_F_WAIT | OPD_RUN_F_FLAG);
    if (devs[k]) {
      th_pack_str(&p, "device");
      th_pack_str(&p, devs[k]);
    }
    th_raw_request(fd, OPD_MSG_RUN, 5 + (uint64_t)k, p.sb.data, p.sb.size, -1);
    th_pack_free(&p);
    cr_assert_eq(th_raw_reply(fd, &r, 2000), 0);
    cr_assert_eq(r.code, OPD_ENOOP, "%d %s", r.code, r.message);
  }
  /* STREAM asking for the flag word: its body is checked first (EPROTO
   * naming what is wrong), then the device (none here) */
  static const char zeros[65 * 64];
  const struct { int flag_kind; uint32_t events; int64_t wait_ms; int code; const char *msg; } st[] = {
      {1, 0, -1, OPD_EPROTO, "\"flag\" must be true or false"},
      {0, 0, -1, OPD_EPROTO, "\"flag\" needs \"events\": 1..64 event handles"},
      {0, 65, -1, OPD_EPROTO, "\"flag\" needs \"events\": 1..64 event handles"},
      {0, 64, 0, OPD_EPROTO, "\"wait_ms\" must be 1..60000 (the daemon's --stream-wait-ms)"},
      {0, 64, 60001, OPD_EPROTO, "\"wait_ms\" must be 1..60000"},
      {0, 64, 100, OPD_EDEVICE, "is not available"},
      {0, 64, -1, OPD_EDEVICE, "is not available"},
  };
  for (int k = 0; k < 7; k++) {
    th_pack_init(&p);
    msgpack_pack_map(&p.pk, (st[k].events ? 4 : 3) + (st[k].wait_ms >= 0));
    if (st[k].wait_ms >= 0) {
      th_pack_str(&p, "wait_ms");
      msgpack_pack_int64(&p.pk, st[k].wait_ms);
    }
    th_pack_str(&p, "device");
    th_pack_str(&p, "cuda:0");
    th_pack_str(&p, "event");
    msgpack_pack_bin(&p.pk, 64);
    msgpack_pack_bin_body(&p.pk, zeros, 64);
    th_pack_str(&p, "flag");
    if (st[k].flag_kind) th_pack_str(&p, "yes");
    else msgpack_pack_true(&p.pk);
    if (st[k].events) {
      th_pack_str(&p, "events");
      msgpack_pack_bin(&p.pk, 64 * st[k].events);
      msgpack_pack_bin_body(&p.pk, zeros, 64 * st[k].events);
    }
    th_raw_request(fd, OPD_MSG_STREAM, 7, p.sb.data, p.sb.size, -1);
    th_pack_free(&p);
    cr_assert_eq(th_raw_reply(fd, &r, 2000), 0);
    cr_assert_eq(r.code, st[k].code, "case %d: %d %s", k, r.code, r.message);
    cr_assert(strstr(r.message, st[k].msg) != NULL, "case %d: %s", k, r.message);
  }

  /* SYNCs: answered in order, each at once on an idle session */
  for (uint64_t id = 10; id < 20; id++)
    th_raw_request(fd, OPD_MSG_SYNC, id, "\x80", 1, -1);
  for (uint64_t id = 10; id < 20; id++) {
    cr_assert_eq(th_raw_reply(fd, &r, 2000), 0);
    cr_assert_eq(r.id, id);
    cr_assert_eq(r.code, 0, "%d %s", r.code, r.message);
  }
  close(fd);
  th_assert_alive();
}

/* A SYNC is answered after the runs sent before it: their answers are in
 * by the time it returns. */
Test(async, sync_waits_for_the_runs_before_it) {
  opd_client_t *c = th_connect();
  void *base;
  enum { M = 512 };
  uint64_t a = th_arena(c, 3ull * M * M * 4, &base);
  opd_tensor_t t[3];
  for (int i = 0; i < 3; i++)
    t[i] = th_f32(a, (uint64_t)i * M * M * 4, 2, (int64_t)M, (int64_t)M);
  uint64_t run[4];
  for (int k = 0; k < 4; k++)
    cr_assert_eq(opd_submit(c, "matmul", t, 2, &t[2], 1, NULL, 0, &run[k]), 0,
                 "%s", opd_last_error());
  cr_assert_eq(opd_synchronize(c), 0, "%s", opd_last_error());
  for (int k = 0; k < 4; k++)
    cr_assert_eq(opd_wait(c, run[k], 0), 0, "run %d answered before the SYNC",
                 k);
  opd_close(c);
}

typedef struct {
  opd_client_t *c;
  int rc;
  char msg[256];
} sync_arg_t;

static void *sync_thread(void *p) {
  sync_arg_t *a = p;
  a->rc = opd_synchronize(a->c);
  snprintf(a->msg, sizeof a->msg, "%s", a->rc ? opd_last_error() : "");
  return NULL;
}

/* Nine SYNCs while long runs execute: eight wait, the ninth is refused at
 * once (at most 8 wait per session), and the eight return after the runs. */
Test(async, at_most_eight_syncs_wait) {
  opd_client_t *c = th_connect();
  void *base;
  enum { M = 1536, RUNS = 6, SYNCS = 9 };
  uint64_t a = th_arena(c, 3ull * M * M * 4, &base);
  opd_tensor_t t[3];
  for (int i = 0; i < 3; i++)
    t[i] = th_f32(a, (uint64_t)i * M * M * 4, 2, (int64_t)M, (int64_t)M);
  uint64_t run[RUNS];
  for (int k = 0; k < RUNS; k++)
    cr_assert_eq(opd_submit(c, "matmul", t, 2, &t[2], 1, NULL, 0, &run[k]), 0,
                 "%s", opd_last_error());
  pthread_t th[SYNCS];
  sync_arg_t arg[SYNCS];
  for (int k = 0; k < SYNCS; k++) {
    arg[k].c = c;
    pthread_create(&th[k], NULL, sync_thread, &arg[k]);
  }
  int ok = 0, refused = 0;
  for (int k = 0; k < SYNCS; k++) {
    pthread_join(th[k], NULL);
    if (arg[k].rc == 0) ok++;
    else if (arg[k].rc == OPD_ELIMIT &&
             strstr(arg[k].msg, "8 SYNCs of this session are waiting") != NULL)
      refused++;
    else
      cr_assert_fail("sync %d: %s (%s)", k, opd_errname(arg[k].rc), arg[k].msg);
  }
  cr_assert_eq(refused, 1, "%d refused, %d answered", refused, ok);
  cr_assert_eq(ok, 8);
  for (int k = 0; k < RUNS; k++) cr_assert_eq(opd_wait(c, run[k], 0), 0);
  cr_assert_eq(opd_cuda_forget(c), 0, "nothing imported: nothing to forget");
  opd_close(c);
}

Test(async, hello_reports_max_async, .init = NULL) {
  const char *args[] = {"--max-async", "7", "--word-ahead", "1", NULL};
  th_start(args);
  opd_client_t *c = th_connect();
  char *json;
  size_t len;
  cr_assert_eq(opd_server_info(c, &json, &len), 0);
  cr_assert(strstr(json, "\"max_async\":7") != NULL, "%s", json);
  cr_assert(strstr(json, "\"word_ahead\":1") != NULL, "%s", json);
  opd_free(json);
  opd_close(c);
}
