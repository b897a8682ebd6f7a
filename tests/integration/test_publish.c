/* Integration: published arenas — one session's tensors attached
 * read-only by others, their errors and lifetime. Host arenas here (CI has
 * no GPU); tests/gpu/daemon_gpu.c does the same with device memory. */
#include <criterion/criterion.h>
#include <string.h>

#include "tests/integration/harness.h"

TestSuite(publish, .init = th_start_default, .fini = th_stop_default,
          .timeout = 60);

/* A publishes a weight vector w = [1, 2, 3, 4] as "w". */
static opd_client_t *publisher(uint64_t *arena) {
  opd_client_t *a = th_connect();
  void *base;
  *arena = th_arena(a, 4096, &base);
  float *w = base;
  for (int i = 0; i < 4; i++) w[i] = (float)(i + 1);
  cr_assert_eq(opd_publish(a, *arena, "w", "float32 [4] @0"), 0, "%s",
               opd_last_error());
  return a;
}

Test(publish, attach_and_use_read_only) {
  uint64_t pa;
  opd_client_t *a = publisher(&pa), *b = th_connect();
  uint64_t wa, size;
  char dev[16], meta[64];
  cr_assert_eq(opd_attach(b, "w", &wa, &size, dev, sizeof dev, meta, sizeof meta),
               0, "%s", opd_last_error());
  cr_assert_str_eq(meta, "float32 [4] @0", "the publisher's meta comes along");
  cr_assert_eq(size, 4096);
  cr_assert_str_eq(dev, "cpu");
  cr_assert_neq(wa, pa, "the attachment has its own id");
  /* b multiplies its x by the published w */
  void *base;
  uint64_t xa = th_arena(b, 4096, &base);
  float *x = base;
  for (int i = 0; i < 4; i++) x[i] = 10.0f;
  opd_tensor_t in[2] = {th_f32(xa, 0, 1, (int64_t)4), th_f32(wa, 0, 1, (int64_t)4)};
  opd_tensor_t out = th_f32(xa, 64, 1, (int64_t)4);
  cr_assert_eq(opd_run(b, "mul", in, 2, &out, 1, NULL, 0), 0, "%s",
               opd_last_error());
  for (int i = 0; i < 4; i++) cr_assert_float_eq(x[16 + i], 10.0f * (i + 1), 0);
  /* writing into the attachment is refused */
  opd_tensor_t into_w = th_f32(wa, 0, 1, (int64_t)4);
  EXPECT_ERR(opd_run(b, "mul", in, 2, &into_w, 1, NULL, 0), OPD_EREADONLY,
             "mul: output 0 (out) is in arena");
  EXPECT_ERR(opd_run(b, "relu", &in[0], 1, &into_w, 1, NULL, 0), OPD_EREADONLY,
             "attached read-only");
  /* an attachment cannot be republished */
  EXPECT_ERR(opd_publish(b, wa, "w2", NULL), OPD_EREADONLY, "attachment");
  cr_assert_eq(opd_arena_release(b, wa), 0);
  opd_close(b);
  opd_close(a);
}

Test(publish, names_and_errors) {
  uint64_t pa;
  opd_client_t *a = publisher(&pa), *b = th_connect();
  uint64_t wa;
  EXPECT_ERR(opd_attach(b, "nope", &wa, NULL, NULL, 0, NULL, 0), OPD_ENOENT,
             "attach: nothing is published as \"nope\"");
  EXPECT_ERR(opd_publish(a, pa, "w", NULL), OPD_EINVAL, "\"w\" is already published");
  EXPECT_ERR(opd_publish(a, 999999, "x", NULL), OPD_EARENA, "unknown arena 999999");
  EXPECT_ERR(opd_publish(a, pa, "", NULL), OPD_EINVAL, "the name is empty");
  EXPECT_ERR(opd_unpublish(b, "w"), OPD_EINVAL, "published by another session");
  cr_assert_eq(th_stat("published"), 1);
  cr_assert_eq(opd_unpublish(a, "w"), 0, "%s", opd_last_error());
  EXPECT_ERR(opd_attach(b, "w", &wa, NULL, NULL, 0, NULL, 0), OPD_ENOENT, "nothing");
  cr_assert_eq(th_stat("published"), 0);
  th_assert_alive();
  opd_close(b);
  opd_close(a);
}

Test(publish, memory_outlives_the_publisher_while_attached) {
  uint64_t pa;
  opd_client_t *a = publisher(&pa), *b = th_connect(), *c = th_connect();
  uint64_t wa;
  cr_assert_eq(opd_attach(b, "w", &wa, NULL, NULL, 0, NULL, 0), 0);
  opd_close(a); /* the name ends with its session... */
  cr_assert_eq(th_wait_stat("published", 0, 2000), 0);
  EXPECT_ERR(opd_attach(c, "w", &wa, NULL, NULL, 0, NULL, 0), OPD_ENOENT, "nothing");
  /* ...but b's attachment still reads the weights */
  void *base;
  uint64_t xa = th_arena(b, 4096, &base);
  float *x = base;
  opd_tensor_t w = th_f32(wa, 0, 1, (int64_t)4), y = th_f32(xa, 0, 1, (int64_t)4);
  cr_assert_eq(opd_run(b, "copy", &w, 1, &y, 1, NULL, 0), 0, "%s",
               opd_last_error());
  cr_assert_float_eq(x[3], 4.0f, 0);
  /* the last user gone: the memory is released */
  cr_assert_eq(opd_arena_release(b, wa), 0);
  opd_close(b);
  opd_close(c);
  cr_assert_eq(th_wait_stat("arenas", 0, 2000), 0);
}
