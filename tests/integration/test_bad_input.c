/* Integration: every kind of bad input gets a clear error (or, when the
 * framing itself is broken, that one connection is closed) and the daemon
 * keeps serving everyone else. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/integration/harness.h"

TestSuite(bad, .init = th_start_default, .fini = th_stop_default,
          .timeout = 60);

/* A connection with one 64 KiB arena, for the request-level errors. */
typedef struct fixture {
  opd_client_t *c;
  uint64_t a;
  float *base;
} fixture_t;

static fixture_t fx(void) {
  fixture_t f;
  void *base;
  f.c = th_connect();
  f.a = th_arena(f.c, 65536, &base);
  f.base = base;
  return f;
}

Test(bad, unknown_op) {
  fixture_t f = fx();
  EXPECT_ERR(opd_run(f.c, "softmaxx", NULL, 0, NULL, 0, NULL, 0), OPD_ENOOP,
             "unknown operator \"softmaxx\" (did you mean \"softmax\"?");
  EXPECT_ERR(opd_run(f.c, "lyaernorm", NULL, 0, NULL, 0, NULL, 0), OPD_ENOOP,
             "did you mean \"layernorm\"?"); /* a swap is one edit */
  EXPECT_ERR(opd_run(f.c, "frobnicate", NULL, 0, NULL, 0, NULL, 0), OPD_ENOOP,
             "unknown operator \"frobnicate\" (`opctl ops` lists them)");
  cr_assert_eq(opd_ping(f.c), 0, "the session survives");
  th_assert_alive();
  opd_close(f.c);
}

Test(bad, wrong_number_of_inputs_and_outputs) {
  fixture_t f = fx();
  opd_tensor_t x = th_f32(f.a, 0, 1, (int64_t)4), y = th_f32(f.a, 64, 1, (int64_t)4);
  opd_tensor_t two[2] = {x, x};
  EXPECT_ERR(opd_run(f.c, "softmax", two, 2, &y, 1, NULL, 0), OPD_EARITY,
             "softmax: expects 1 input (x), got 2");
  EXPECT_ERR(opd_run(f.c, "softmax", &x, 1, NULL, 0, NULL, 0), OPD_EARITY,
             "softmax: expects 1 output (y), got 0");
  EXPECT_ERR(opd_run(f.c, "matmul", &x, 1, &y, 1, NULL, 0), OPD_EARITY,
             "matmul: expects 2 inputs");
  th_assert_alive();
  opd_close(f.c);
}

Test(bad, wrong_dtype) {
  fixture_t f = fx();
  int64_t sh[1] = {4};
  opd_tensor_t x, y = th_f32(f.a, 64, 1, (int64_t)4);
  opd_tensor_init(&x, f.a, 0, OPD_DTYPE_INT32, 1, sh);
  EXPECT_ERR(opd_run(f.c, "softmax", &x, 1, &y, 1, NULL, 0), OPD_EDTYPE,
             "softmax: input 0 (x) has dtype int32, expected float32");
  /* output dtype checked against the shape rule */
  opd_tensor_t xf = th_f32(f.a, 0, 1, (int64_t)4), yi;
  opd_tensor_init(&yi, f.a, 64, OPD_DTYPE_INT64, 1, sh);
  EXPECT_ERR(opd_run(f.c, "relu", &xf, 1, &yi, 1, NULL, 0), OPD_EDTYPE,
             "output 0 (y) has dtype int64");
  /* a dtype number that does not exist */
  x.dtype = 77;
  EXPECT_ERR(opd_run(f.c, "softmax", &x, 1, &y, 1, NULL, 0), OPD_EDTYPE,
             "unknown dtype 77");
  th_assert_alive();
  opd_close(f.c);
}

Test(bad, shapes_that_do_not_fit) {
  fixture_t f = fx();
  opd_tensor_t a = th_f32(f.a, 0, 2, (int64_t)3, (int64_t)4),
               b = th_f32(f.a, 1024, 2, (int64_t)5, (int64_t)6),
               o = th_f32(f.a, 4096, 2, (int64_t)3, (int64_t)6);
  opd_tensor_t ab[2] = {a, b};
  opd_tensor_t mismatch = th_f32(f.a, 4096, 2, (int64_t)3, (int64_t)6);
  cr_assert_neq(opd_run(f.c, "matmul", ab, 2, &o, 1, NULL, 0), 0);
  cr_assert_eq(opd_run(f.c, "matmul", ab, 2, &mismatch, 1, NULL, 0), OPD_ESHAPE,
               "%s", opd_last_error());
  cr_assert(strstr(opd_last_error(), "matmul:") == opd_last_error(), "%s",
            opd_last_error());
  /* output of the wrong shape */
  opd_tensor_t x = th_f32(f.a, 0, 2, (int64_t)2, (int64_t)8),
               y = th_f32(f.a, 1024, 2, (int64_t)2, (int64_t)9);
  EXPECT_ERR(opd_run(f.c, "softmax", &x, 1, &y, 1, NULL, 0), OPD_ESHAPE,
             "output 0 (y) has shape [2,9], expected [2,8]");
  /* conv2d channel mismatch */
  opd_tensor_t cx = th_f32(f.a, 0, 4, (int64_t)1, (int64_t)3, (int64_t)8, (int64_t)8),
               cw = th_f32(f.a, 4096, 4, (int64_t)4, (int64_t)2, (int64_t)3, (int64_t)3),
               cy = th_f32(f.a, 8192, 4, (int64_t)1, (int64_t)4, (int64_t)6, (int64_t)6);
  opd_tensor_t cin[2] = {cx, cw};
  cr_assert_eq(opd_run(f.c, "conv2d", cin, 2, &cy, 1, NULL, 0), OPD_ESHAPE,
               "%s", opd_last_error());
  th_assert_alive();
  opd_close(f.c);
}

Test(bad, descriptor_outside_arena_or_overflowing) {
  fixture_t f = fx();
  opd_tensor_t x = th_f32(f.a, 65536 - 8, 1, (int64_t)4),
               y = th_f32(f.a, 0, 1, (int64_t)4);
  EXPECT_ERR(opd_run(f.c, "relu", &x, 1, &y, 1, NULL, 0), OPD_EBOUNDS,
             "relu: input 0 (x): bytes [65528, 65528+16) lie outside the "
             "arena of 65536 bytes");
  /* an offset past the end of the arena */
  opd_tensor_t far = th_f32(f.a, (uint64_t)1 << 60, 1, (int64_t)1);
  EXPECT_ERR(opd_run(f.c, "relu", &far, 1, &y, 1, NULL, 0), OPD_EBOUNDS,
             "outside the arena");
  /* shape whose element count overflows */
  opd_tensor_t big = th_f32(f.a, 0, 3, (int64_t)1 << 31, (int64_t)1 << 31,
                            (int64_t)1 << 31);
  EXPECT_ERR(opd_run(f.c, "relu", &big, 1, &y, 1, NULL, 0), OPD_EOVERFLOW,
             "overflows");
  /* strides whose extent overflows */
  opd_tensor_t st = th_f32(f.a, 0, 2, (int64_t)4, (int64_t)4);
  st.strided = 1;
  st.strides[0] = INT64_MAX / 2;
  st.strides[1] = 1;
  EXPECT_ERR(opd_run(f.c, "copy", &st, 1, &y, 1, NULL, 0), OPD_EOVERFLOW,
             "overflow");
  /* negative dimensions, negative strides */
  opd_tensor_t neg = th_f32(f.a, 0, 1, (int64_t)-4);
  EXPECT_ERR(opd_run(f.c, "relu", &neg, 1, &y, 1, NULL, 0), OPD_ESHAPE,
             "negative dimension");
  opd_tensor_t nst = th_f32(f.a, 64, 1, (int64_t)4);
  nst.strided = 1;
  nst.strides[0] = -1;
  EXPECT_ERR(opd_run(f.c, "copy", &nst, 1, &y, 1, NULL, 0), OPD_ELAYOUT,
             "negative stride");
  /* misaligned offset */
  opd_tensor_t mis = th_f32(f.a, 2, 1, (int64_t)4);
  EXPECT_ERR(opd_run(f.c, "relu", &mis, 1, &y, 1, NULL, 0), OPD_ELAYOUT,
             "not aligned");
  /* an output whose elements overlap (stride 0): no address per element */
  opd_tensor_t nc = th_f32(f.a, 0, 2, (int64_t)4, (int64_t)4);
  opd_tensor_t y2 = th_f32(f.a, 4096, 2, (int64_t)4, (int64_t)4);
  y2.strided = 1;
  y2.strides[0] = 0;
  y2.strides[1] = 1;
  EXPECT_ERR(opd_run(f.c, "softmax", &nc, 1, &y2, 1, NULL, 0), OPD_ELAYOUT,
             "overlap");
  th_assert_alive();
  opd_close(f.c);
}

Test(bad, output_aliasing_an_input) {
  fixture_t f = fx();
  opd_tensor_t a = th_f32(f.a, 0, 2, (int64_t)4, (int64_t)4),
               b = th_f32(f.a, 64, 2, (int64_t)4, (int64_t)4),
               o = th_f32(f.a, 32, 2, (int64_t)4, (int64_t)4);
  opd_tensor_t ab[2] = {a, b};
  EXPECT_ERR(opd_run(f.c, "matmul", ab, 2, &o, 1, NULL, 0), OPD_EALIAS,
             "cannot run in place");
  /* exact in-place is fine for elementwise ops */
  cr_assert_eq(opd_run(f.c, "relu", &a, 1, &a, 1, NULL, 0), 0, "%s",
               opd_last_error());
  /* partial overlap is not */
  EXPECT_ERR(opd_run(f.c, "relu", &a, 1, &o, 1, NULL, 0), OPD_EALIAS,
             "only an exact in-place output");
  opd_close(f.c);
}

Test(bad, attributes) {
  fixture_t f = fx();
  opd_tensor_t x = th_f32(f.a, 0, 1, (int64_t)4), y = th_f32(f.a, 64, 1, (int64_t)4);
  opd_attr_t unknown = {.name = "epsilon", .type = OPD_ATTR_FLOAT, .f = 1};
  EXPECT_ERR(opd_run(f.c, "layernorm", &x, 1, &y, 1, &unknown, 1), OPD_EATTR,
             "unknown attribute \"epsilon\" (takes eps, ndims)");
  opd_attr_t wrong_type = {.name = "eps", .type = OPD_ATTR_STR, .s = "tiny"};
  EXPECT_ERR(opd_run(f.c, "layernorm", &x, 1, &y, 1, &wrong_type, 1),
             OPD_EATTR, "attribute \"eps\" must be float, got str");
  opd_attr_t choice = {.name = "approximate", .type = OPD_ATTR_STR, .s = "fast"};
  EXPECT_ERR(opd_run(f.c, "gelu", &x, 1, &y, 1, &choice, 1), OPD_EATTR,
             "must be one of none|tanh, got \"fast\"");
  opd_attr_t dim = {.name = "dim", .type = OPD_ATTR_INT, .i = 2}; /* rank 2 */
  opd_tensor_t x2 = th_f32(f.a, 0, 2, (int64_t)2, (int64_t)2),
               y2 = th_f32(f.a, 64, 2, (int64_t)2, (int64_t)2);
  cr_assert_eq(opd_run(f.c, "softmax", &x2, 1, &y2, 1, &dim, 1), OPD_EATTR);
  /* nms without its required threshold */
  opd_tensor_t boxes = th_f32(f.a, 0, 2, (int64_t)2, (int64_t)4),
               scores = th_f32(f.a, 64, 1, (int64_t)2);
  int64_t n2 = 2, n1 = 1;
  opd_tensor_t out[2];
  opd_tensor_init(&out[0], f.a, 128, OPD_DTYPE_INT64, 1, &n2);
  opd_tensor_init(&out[1], f.a, 256, OPD_DTYPE_INT64, 1, &n1);
  opd_tensor_t in[2] = {boxes, scores};
  EXPECT_ERR(opd_run(f.c, "nms", in, 2, out, 2, NULL, 0), OPD_EATTR,
             "attribute \"iou_threshold\" is required");
  opd_attr_t twice[2] = {{.name = "eps", .type = OPD_ATTR_FLOAT, .f = 1},
                         {.name = "eps", .type = OPD_ATTR_FLOAT, .f = 2}};
  EXPECT_ERR(opd_run(f.c, "layernorm", &x, 1, &y, 1, twice, 2), OPD_EATTR,
             "given twice");
  th_assert_alive();
  opd_close(f.c);
}

Test(bad, unknown_arena_or_another_sessions_arena) {
  fixture_t f = fx(), g = fx();
  opd_tensor_t x = th_f32(12345, 0, 1, (int64_t)4), y = th_f32(f.a, 64, 1, (int64_t)4);
  EXPECT_ERR(opd_run(f.c, "relu", &x, 1, &y, 1, NULL, 0), OPD_EARENA,
             "unknown arena 12345 (not registered by this session)");
  /* g's arena, used from f's session */
  opd_tensor_t theirs = th_f32(g.a, 0, 1, (int64_t)4);
  EXPECT_ERR(opd_run(f.c, "relu", &theirs, 1, &y, 1, NULL, 0), OPD_EARENA,
             "not registered by this session");
  EXPECT_ERR(opd_arena_release(f.c, g.a), OPD_EARENA, "unknown arena");
  /* g still owns and can use it */
  opd_tensor_t gy = th_f32(g.a, 64, 1, (int64_t)4);
  cr_assert_eq(opd_run(g.c, "relu", &theirs, 1, &gy, 1, NULL, 0), 0);
  opd_close(f.c);
  opd_close(g.c);
}

Test(bad, fd_that_is_not_a_sealed_memfd) {
  opd_client_t *c = th_connect();
  uint64_t id;
  /* a regular file */
  char path[] = "/tmp/opd-notmemfd.XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  unlink(path);
  cr_assert_eq(ftruncate(fd, 4096), 0);
  EXPECT_ERR(opd_arena_register_fd(c, fd, 4096, &id), OPD_EFD,
             "not a memfd");
  close(fd);
  /* a pipe */
  int p[2];
  cr_assert_eq(pipe(p), 0);
  EXPECT_ERR(opd_arena_register_fd(c, p[0], 4096, &id), OPD_EFD, "not a memfd");
  close(p[0]);
  close(p[1]);
  /* a memfd without seals */
  fd = memfd_create("unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  cr_assert_eq(ftruncate(fd, 4096), 0);
  EXPECT_ERR(opd_arena_register_fd(c, fd, 4096, &id), OPD_EFD,
             "lacks F_SEAL_SHRINK|F_SEAL_GROW");
  /* sealed against shrinking only */
  cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  EXPECT_ERR(opd_arena_register_fd(c, fd, 4096, &id), OPD_EFD, "lacks");
  /* both seals, but a size that is not the memfd's */
  cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_GROW), 0);
  EXPECT_ERR(opd_arena_register_fd(c, fd, 8192, &id), OPD_EINVAL,
             "claimed size 8192 but the memfd holds 4096 bytes");
  cr_assert_eq(opd_arena_register_fd(c, fd, 4096, &id), 0, "%s",
               opd_last_error());
  close(fd);
  th_assert_alive();
  opd_close(c);
}

Test(bad, register_without_an_fd) {
  int fd = th_raw_connect();
  th_raw_hello(fd);
  th_pack_t p;
  th_pack_init(&p);
  msgpack_pack_map(&p.pk, 1);
  th_pack_str(&p, "size");
  msgpack_pack_uint64(&p.pk, 4096);
  th_raw_request(fd, OPD_MSG_ARENA_REGISTER, 2, p.sb.data, p.sb.size, -1);
  th_pack_free(&p);
  th_reply_t r;
  cr_assert_eq(th_raw_reply(fd, &r, 2000), 0);
  cr_assert_eq(r.code, OPD_EFD);
  cr_assert(strstr(r.message, "no file descriptor") != NULL, "%s", r.message);
  close(fd);
}

Test(bad, hello_first_and_version_mismatch) {
  int fd = th_raw_connect();
  th_raw_request(fd, OPD_MSG_STATS, 5, "\x80", 1, -1);
  th_reply_t r;
  cr_assert_eq(th_raw_reply(fd, &r, 2000), 0);
  cr_assert_eq(r.id, 5);
  cr_assert_eq(r.code, OPD_ESTATE);
  cr_assert(strstr(r.message, "stats: send hello first") != NULL, "%s", r.message);
  th_pack_t p;
  th_pack_init(&p);
  msgpack_pack_map(&p.pk, 1);
  th_pack_str(&p, "protocol");
  msgpack_pack_uint32(&p.pk, 99);
  th_raw_request(fd, OPD_MSG_HELLO, 6, p.sb.data, p.sb.size, -1);
  th_pack_free(&p);
  cr_assert_eq(th_raw_reply(fd, &r, 2000), 0);
  cr_assert_eq(r.code, OPD_EVERSION);
  cr_assert(strstr(r.message, "protocol 1, the client 99") != NULL, "%s",
            r.message);
  /* a wrong message type is an error reply, not a disconnect */
  th_raw_hello(fd);
  th_raw_request(fd, 42, 7, "\x80", 1, -1);
  cr_assert_eq(th_raw_reply(fd, &r, 2000), 0);
  cr_assert_eq(r.code, OPD_EPROTO);
  cr_assert(strstr(r.message, "unknown message type 42") != NULL);
  close(fd);
}
