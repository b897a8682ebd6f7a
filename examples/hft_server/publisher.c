/* publisher: the model owner of examples/hft_server. Makes the MLP's
 * weights from a seed, writes them into one arena, publishes that arena
 * under a name, and stays up until SIGINT or SIGTERM.
 *
 *   ./publisher --socket /tmp/opd.sock --name hft_mlp [--seed 42]
 *               [--device cpu|cuda|cuda:N]
 *
 * DESIGN
 * A published name lasts while the connection that published it is open,
 * so this process is the weights' lifetime: clients attach the name
 * read-only (no copy: the daemon hands them the same memory) and build
 * their graphs on it; their graphs keep the memory alive even after the
 * publisher goes. The meta string (JSON) says what the arena holds: one
 * float32 vector of all the weights (dtype, shape, offset: the Python
 * package types an attachment from these), the model's dims, and the seed
 * that mlp.h makes every weight from, for clients to check against. With --device cuda the weights are copied once
 * into device memory the daemon owns and that arena is published, so a
 * CUDA graph reads them where they are. It prints "published NAME" and
 * flushes once the name can be attached: run.sh waits for that line.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mlp.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

static int usage(void) {
  fprintf(stderr, "usage: publisher [--socket PATH] [--name NAME] [--seed N] "
                  "[--device cpu|cuda|cuda:N]\n");
  return 2;
}

int main(int argc, char **argv) {
  const char *sock = NULL, *name = "hft_mlp", *device = "cpu";
  long seed = 42;
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) return usage();
    if (strcmp(argv[i], "--socket") == 0) sock = v;
    else if (strcmp(argv[i], "--name") == 0) name = v;
    else if (strcmp(argv[i], "--device") == 0) device = v;
    else if (strcmp(argv[i], "--seed") == 0) {
      char *end;
      seed = strtol(v, &end, 10);
      if (*end || seed < 0 || seed > 0xFFFFFF) {
        fprintf(stderr, "publisher: --seed must be 0..16777215, not %s\n", v);
        return 2;
      }
    } else return usage();
    i++;
  }

  struct sigaction sa = {.sa_handler = on_signal};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigset_t block, wait_mask;   /* blocked until sigsuspend: no lost wakeup */
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  sigprocmask(SIG_BLOCK, &block, &wait_mask);

  opd_client_t *c;
  if (opd_connect(sock, &c)) {
    fprintf(stderr, "publisher: %s\n", opd_last_error());
    return 1;
  }
  mlp_param_t p[MLP_NPARAMS];
  uint64_t bytes = mlp_layout(p), arena;
  void *base;
  int rc = mlp_weights_create(c, device, (uint32_t)seed, &arena, &base);
  if (rc) {
    fprintf(stderr, "publisher: weights on %s: %s\n", device, opd_last_error());
    opd_close(c);
    return 1;
  }
  char meta[192];
  snprintf(meta, sizeof meta,
           "{\"dtype\":\"float32\",\"shape\":[%llu],\"offset\":0,"
           "\"model\":\"hft_mlp\",\"dims\":[%d,%d,%d,%d],\"seed\":%ld}",
           (unsigned long long)(bytes / sizeof(float)), MLP_IN, MLP_HID, MLP_HID,
           MLP_OUT, seed);
  if (opd_publish(c, arena, name, meta)) {
    fprintf(stderr, "publisher: publish %s: %s\n", name, opd_last_error());
    opd_close(c);
    return 1;
  }
  printf("publisher: published %s: %llu bytes of weights on %s, meta %s\n", name,
         (unsigned long long)bytes, device, meta);
  printf("published %s\n", name);
  fflush(stdout);

  while (!stop) sigsuspend(&wait_mask);   /* the name lives as long as c */

  rc = opd_unpublish(c, name);
  opd_arena_release(c, arena);
  opd_close(c);
  printf("publisher: unpublished %s (%s), bye\n", name, rc ? opd_last_error() : "ok");
  return rc ? 1 : 0;
}
