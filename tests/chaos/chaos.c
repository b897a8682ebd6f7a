/* Chaos tests' measurements and raw clients; see chaos.h.
 *
 * DESIGN
 * Figures come from /proc/<pid>/ of the daemon (a child of the test
 * process), never from the daemon alone: the defects these tests catch
 * are the daemon's stats saying 0 while it still holds the memory. The
 * helpers a forked client child uses (ch_ring_client_open) report failure
 * by return value, not by criterion assertions, which belong to the test
 * process.
 */
#include "tests/chaos/chaos.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/ring.h"
#include "common/wire.h"

#define MiB (1024ull * 1024)

/* Every case starts its own daemon (th_start with its options); the
 * suite's .fini stops it also when an assertion ended the case early. */
TestSuite(chaos, .fini = th_stop_default);

double ch_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ch_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int env_on(const char *name) {
  const char *v = getenv(name);
  return v != NULL && strcmp(v, "1") == 0;
}

int ch_soak(void) { return env_on("OPD_CHAOS_SOAK"); }
int ch_verbose(void) { return ch_soak() || env_on("OPD_CHAOS_VERBOSE"); }

/* ---- /proc ----------------------------------------------------------------- */

static uint64_t status_kb(const char *status, const char *key) {
  const char *p = strstr(status, key);
  return p ? strtoull(p + strlen(key), NULL, 10) * 1024 : 0;
}

void ch_proc_read(pid_t pid, ch_proc_t *p) {
  char path[64], line[1024];
  memset(p, 0, sizeof *p);

  snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
  DIR *d = opendir(path);
  cr_assert_not_null(d, "%s: %s", path, strerror(errno));
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (e->d_name[0] != '.') p->fds++;
  closedir(d);

  snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "%s: %s", path, strerror(errno));
  while (fgets(line, sizeof line, f)) {
    unsigned long long lo, hi;
    if (strstr(line, "/memfd:") == NULL) continue;
    if (sscanf(line, "%llx-%llx", &lo, &hi) != 2) continue;
    p->memfd_maps++;
    p->memfd_bytes += hi - lo;
  }
  fclose(f);

  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  f = fopen(path, "r");
  cr_assert_not_null(f, "%s: %s", path, strerror(errno));
  char status[8192];
  size_t n = fread(status, 1, sizeof status - 1, f);
  status[n] = '\0';
  fclose(f);
  p->vm_size = status_kb(status, "VmSize:");
  p->vm_rss = status_kb(status, "VmRSS:");
  p->rss_shmem = status_kb(status, "RssShmem:");
}

double ch_cpu_seconds(pid_t pid) {
  char path[64], buf[2048];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "%s: %s", path, strerror(errno));
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  /* fields after the command name (which may hold spaces) in parentheses:
   * state is field 3, utime 14, stime 15 */
  char *p = strrchr(buf, ')');
  cr_assert_not_null(p);
  unsigned long long ut = 0, st = 0;
  int got = sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
                   &ut, &st);
  cr_assert_eq(got, 2, "cannot parse %s", path);
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

int ch_daemon_asan(void) {
  char path[64], line[1024];
  int asan = 0;
  snprintf(path, sizeof path, "/proc/%d/maps", (int)th_d.pid);
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  while (!asan && fgets(line, sizeof line, f)) asan = strstr(line, "libasan") != NULL;
  fclose(f);
  return asan;
}

/* ---- stats ----------------------------------------------------------------- */

opd_client_t *ch_connect_socket(int timeout_ms) {
  opd_client_t *c = NULL;
  for (int t = 0;; t += 10) {
    if (opd_connect_flags(th_d.sock, OPD_CONNECT_WAIT_SOCKET, &c) == 0) return c;
    if (t >= timeout_ms) break;
    ch_sleep_ms(10);
  }
  cr_assert_fail("could not connect within %d ms: %s", timeout_ms,
                 opd_last_error());
  return NULL;
}

/* The integer value of a top-level key of a JSON object, or -1. Keys of
 * nested objects (the per-op stats) are skipped. */
static int64_t json_top_int(const char *json, const char *key) {
  size_t klen = strlen(key);
  int depth = 0;
  for (const char *p = json; *p; p++) {
    if (*p == '{' || *p == '[') depth++;
    else if (*p == '}' || *p == ']') depth--;
    else if (*p == '"') {
      const char *s = p + 1, *e = s;
      while (*e && *e != '"') e += (*e == '\\' && e[1]) ? 2 : 1;
      if (*e == '\0') return -1;
      if (depth == 1 && (size_t)(e - s) == klen && memcmp(s, key, klen) == 0 &&
          e[1] == ':')
        return strtoll(e + 2, NULL, 10);
      p = e;
    }
  }
  return -1;
}

void ch_stats_read(opd_client_t *c, ch_stats_t *st) {
  char *json;
  size_t len;
  cr_assert_eq(opd_stats_json(c, &json, &len), 0, "stats: %s", opd_last_error());
  st->sessions = json_top_int(json, "sessions");
  st->arenas = json_top_int(json, "arenas");
  st->bytes_mapped = json_top_int(json, "bytes_mapped");
  st->mappings = json_top_int(json, "mappings");
  st->mapped_bytes = json_top_int(json, "mapped_bytes");
  st->inflight = json_top_int(json, "inflight");
  opd_free(json);
}

void ch_snapshot(ch_snap_t *sn, int timeout_ms) {
  double end = ch_now() + timeout_ms / 1000.0;
  ch_proc_t prev;
  int have_prev = 0;
  for (;;) {
    opd_client_t *c = ch_connect_socket(timeout_ms);
    ch_stats_read(c, &sn->st);
    int idle = sn->st.sessions == 1 && sn->st.inflight <= 0;
    if (idle) ch_proc_read(th_d.pid, &sn->proc);
    opd_close(c);
    /* idle twice in a row with the same fds and mappings: a handle the
     * daemon closes a loop turn after its session (an eventfd's poll) is
     * gone too */
    if (idle && have_prev && prev.fds == sn->proc.fds &&
        prev.memfd_maps == sn->proc.memfd_maps)
      return;
    if (idle) prev = sn->proc, have_prev = 1;
    else have_prev = 0;
    if (ch_now() > end) break;
    ch_sleep_ms(idle ? 30 : 20);
  }
  cr_assert_fail("the daemon did not become idle within %d ms: stats "
                 "sessions %lld (1 expected: the one asking), inflight %lld, "
                 "arenas %lld", timeout_ms, (long long)sn->st.sessions,
                 (long long)sn->st.inflight, (long long)sn->st.arenas);
}

/* A matmul of n x n in arena a of c (A, B, C one after the other). */
static void submit_matmul(opd_client_t *c, uint64_t a, int n, uint64_t *req) {
  opd_tensor_t in[2] = {th_f32(a, 0, 2, (int64_t)n, (int64_t)n),
                        th_f32(a, (uint64_t)n * n * 4, 2, (int64_t)n, (int64_t)n)};
  opd_tensor_t out = th_f32(a, (uint64_t)2 * n * n * 4, 2, (int64_t)n, (int64_t)n);
  cr_assert_eq(opd_submit(c, "matmul", in, 2, &out, 1, NULL, 0, req), 0,
               "warm-up matmul: %s", opd_last_error());
}

void ch_baseline(ch_snap_t *base) {
  static const uint32_t modes[] = {OPD_CONNECT_WAIT_SOCKET,
                                   OPD_CONNECT_WAIT_ADAPTIVE,
                                   OPD_CONNECT_WAIT_SPIN};
  enum { N = 6, RUNS = 2, SIZE = 384 };
  opd_client_t *c[N];
  uint64_t a[N], req[N][RUNS];
  for (int i = 0; i < N; i++) {
    cr_assert_eq(opd_connect_flags(th_d.sock, modes[i % 3], &c[i]), 0,
                 "warm-up connect: %s", opd_last_error());
    void *mem;
    a[i] = th_arena(c[i], (uint64_t)3 * SIZE * SIZE * 4, &mem);
  }
  /* matmuls of six sessions at once, twice: every thread that runs
   * kernels calls the BLAS at the same time as the others (OpenBLAS maps
   * a 32 MiB buffer for each concurrent caller and keeps it: a few hundred
   * MiB of address space, once), the BLAS threads start, the allocator has
   * its per-thread arenas */
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < N; i++)
      for (int r = 0; r < RUNS; r++) submit_matmul(c[i], a[i], SIZE, &req[i][r]);
    for (int i = 0; i < N; i++)
      for (int r = 0; r < RUNS; r++)
        cr_assert_eq(opd_wait(c[i], req[i][r], 30000), 0, "warm-up: %s",
                     opd_last_error());
  }
  for (int i = 0; i < N; i++) { /* and an inline run */
    opd_tensor_t x = th_f32(a[i], 0, 1, (int64_t)16),
                 y = th_f32(a[i], 64, 1, (int64_t)16);
    cr_assert_eq(opd_run(c[i], "softmax", &x, 1, &y, 1, NULL, 0), 0, "%s",
                 opd_last_error());
    cr_assert_eq(opd_arena_release(c[i], a[i]), 0, "%s", opd_last_error());
    opd_close(c[i]);
  }
  ch_snapshot(base, 10000);
}

/* Why these tolerances:
 * - fds and memfd mappings: exact. Every one belongs to a session or to
 *   the daemon itself; the snapshot is taken with the same single
 *   socket-only session on both sides.
 * - RssShmem: 1 MiB. Resident pages of client memfds the daemon has
 *   touched while they were mapped; once every client mapping is gone only
 *   what the baseline had remains. The slack is for the kernel's
 *   accounting of a page or two in flight, far below one leaked arena of
 *   the cases (each touches MiBs).
 * - VmRSS: 8 MiB. Freed session buffers (a 64 KiB-1 MiB read buffer, the
 *   write buffer) may stay in glibc's free lists of the thread arena that
 *   freed them, below the trim threshold, and a bounded pool of jobs may
 *   stay; every case leaks 100+ MiB on a daemon that keeps memory. An ASan
 *   daemon keeps freed memory in its quarantine (256 MiB by default) and
 *   in redzones: 320 MiB more there, which leaves the RSS checks to the
 *   release build (the exact fd and mapping checks still apply).
 * - VmSize: 64 MiB: one more glibc thread arena (a 64 MiB reservation) may
 *   appear when threads first contend; one leaked 64 GiB sparse arena or
 *   20,000 leaked 4 KiB ones are far above it. ASan's allocator maps its
 *   size classes lazily: 256 MiB more there. */
ch_tol_t ch_tol_default(void) {
  ch_tol_t t = {.rss = 8 * MiB, .shmem = 1 * MiB, .vm = 64 * MiB};
  if (ch_daemon_asan()) {
    t.rss += 320 * MiB;
    t.vm += 256 * MiB;
  }
  return t;
}

#define MB(x) ((double)(x) / (double)MiB)

void ch_expect_stats_true(const char *what, const ch_snap_t *sn) {
  cr_expect(sn->st.mappings >= 0 && sn->st.mapped_bytes >= 0,
            "%s: stats lack \"mappings\"/\"mapped_bytes\" (the host mappings "
            "the daemon holds)", what);
  if (sn->st.mappings < 0) return;
  cr_expect_eq(sn->st.mappings, sn->proc.memfd_maps,
               "%s: stats say %lld mappings, /proc/%d/maps has %ld memfd "
               "mappings", what, (long long)sn->st.mappings, (int)th_d.pid,
               sn->proc.memfd_maps);
  cr_expect_eq((uint64_t)sn->st.mapped_bytes, sn->proc.memfd_bytes,
               "%s: stats say %lld mapped bytes, /proc/%d/maps has %llu in "
               "memfd mappings", what, (long long)sn->st.mapped_bytes,
               (int)th_d.pid, (unsigned long long)sn->proc.memfd_bytes);
}

void ch_expect_near(const char *what, const ch_snap_t *b, const ch_snap_t *n,
                    const ch_tol_t *tol) {
  const ch_proc_t *pb = &b->proc, *pn = &n->proc;
  cr_expect_eq(pn->memfd_maps, pb->memfd_maps,
               "%s: the daemon maps %ld client memfds, %ld at the baseline "
               "(%+.1f MiB of them)", what, pn->memfd_maps, pb->memfd_maps,
               MB(pn->memfd_bytes) - MB(pb->memfd_bytes));
  cr_expect_eq(pn->memfd_bytes, pb->memfd_bytes,
               "%s: memfd mappings span %.1f MiB, %.1f MiB at the baseline",
               what, MB(pn->memfd_bytes), MB(pb->memfd_bytes));
  cr_expect_eq(pn->fds, pb->fds, "%s: the daemon has %ld fds open, %ld at "
               "the baseline", what, pn->fds, pb->fds);
  cr_expect(pn->rss_shmem <= pb->rss_shmem + tol->shmem,
            "%s: RssShmem %.1f MiB, %.1f MiB at the baseline (tolerance "
            "%.1f MiB)", what, MB(pn->rss_shmem), MB(pb->rss_shmem),
            MB(tol->shmem));
  cr_expect(pn->vm_rss <= pb->vm_rss + tol->rss,
            "%s: VmRSS %.1f MiB, %.1f MiB at the baseline (tolerance "
            "%.1f MiB)", what, MB(pn->vm_rss), MB(pb->vm_rss), MB(tol->rss));
  cr_expect(pn->vm_size <= pb->vm_size + tol->vm,
            "%s: VmSize %.1f MiB, %.1f MiB at the baseline (tolerance "
            "%.1f MiB)", what, MB(pn->vm_size), MB(pb->vm_size), MB(tol->vm));
  cr_expect_eq(n->st.arenas, b->st.arenas, "%s: stats say %lld arenas, %lld "
               "at the baseline", what, (long long)n->st.arenas,
               (long long)b->st.arenas);
  cr_expect_eq(n->st.bytes_mapped, b->st.bytes_mapped,
               "%s: stats say %lld bytes mapped, %lld at the baseline", what,
               (long long)n->st.bytes_mapped, (long long)b->st.bytes_mapped);
  cr_expect(n->st.inflight == 0, "%s: stats \"inflight\" is %lld (0 "
            "expected; -1: not reported)", what, (long long)n->st.inflight);
  ch_expect_stats_true(what, b);
  ch_expect_stats_true(what, n);
}

void ch_print(const char *what, const ch_snap_t *b, const ch_snap_t *n,
              double seconds) {
  const ch_snap_t *s[2] = {b, n};
  printf("%s (%.1f s)\n", what, seconds);
  printf("  %-9s %6s %10s %12s %10s %10s %10s | stats: %8s %6s %12s %8s %12s "
         "%8s\n", "", "fds", "memfd_maps", "memfd_MiB", "VmSize_MiB",
         "VmRSS_MiB", "Shmem_MiB", "sessions", "arenas", "bytes_mapped",
         "mappings", "mapped_bytes", "inflight");
  for (int i = 0; i < 2; i++)
    printf("  %-9s %6ld %10ld %12.1f %10.1f %10.1f %10.1f | stats: %8lld "
           "%6lld %12lld %8lld %12lld %8lld\n", i ? "after" : "baseline",
           s[i]->proc.fds, s[i]->proc.memfd_maps, MB(s[i]->proc.memfd_bytes),
           MB(s[i]->proc.vm_size), MB(s[i]->proc.vm_rss),
           MB(s[i]->proc.rss_shmem), (long long)s[i]->st.sessions,
           (long long)s[i]->st.arenas, (long long)s[i]->st.bytes_mapped,
           (long long)s[i]->st.mappings, (long long)s[i]->st.mapped_bytes,
           (long long)s[i]->st.inflight);
  fflush(stdout);
}

/* ---- raw ring client ----------------------------------------------------- */

size_t ch_frame_empty(unsigned char *buf, int type, uint64_t id) {
  unsigned char *p = buf + OPD_FRAME_HEADER;
  *p++ = 0x93;
  p = opd__mp_put_uint(p, (uint64_t)type);
  p = opd__mp_put_uint(p, id);
  *p++ = 0x80; /* {} */
  size_t len = (size_t)(p - buf);
  opd__frame_put_len(buf, (uint32_t)(len - OPD_FRAME_HEADER));
  return len;
}

static int send_all(int fd, const void *buf, size_t len, const int *fds,
                    int n_fds) {
  union {
    char b[CMSG_SPACE(2 * sizeof(int))];
    struct cmsghdr align;
  } cbuf;
  struct iovec iov = {(void *)buf, len};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
  if (n_fds > 0) {
    memset(&cbuf, 0, sizeof cbuf);
    msg.msg_control = cbuf.b;
    msg.msg_controllen = CMSG_SPACE((size_t)n_fds * sizeof(int));
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN((size_t)n_fds * sizeof(int));
    memcpy(CMSG_DATA(cm), fds, (size_t)n_fds * sizeof(int));
  }
  return sendmsg(fd, &msg, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

int ch_read_frame(int fd, int timeout_ms, int *type, int *code, char *msg,
                  size_t cap) {
  static __thread unsigned char buf[1 << 16];
  size_t got = 0, need = OPD_FRAME_HEADER;
  if (cap > 0) msg[0] = '\0';
  while (got < need) {
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (poll(&pfd, 1, timeout_ms) <= 0) return -1;
    ssize_t n = read(fd, buf + got, need - got);
    if (n <= 0) return -1;
    got += (size_t)n;
    if (got == OPD_FRAME_HEADER) {
      need += opd__frame_get_len(buf);
      if (need > sizeof buf) return -1;
    }
  }
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  int rc = -1;
  if (msgpack_unpack_next(&u, (const char *)buf + OPD_FRAME_HEADER,
                          need - OPD_FRAME_HEADER, &off) == MSGPACK_UNPACK_SUCCESS &&
      u.data.type == MSGPACK_OBJECT_ARRAY && u.data.via.array.size == 4) {
    msgpack_object *o = u.data.via.array.ptr, body = o[3];
    *type = (int)o[0].via.u64;
    *code = (int)o[2].via.i64;
    for (uint32_t i = 0; body.type == MSGPACK_OBJECT_MAP && i < body.via.map.size;
         i++) {
      msgpack_object k = body.via.map.ptr[i].key, v = body.via.map.ptr[i].val;
      if (k.type == MSGPACK_OBJECT_STR && k.via.str.size == 7 &&
          memcmp(k.via.str.ptr, "message", 7) == 0 &&
          v.type == MSGPACK_OBJECT_STR && cap > 0) {
        size_t n = v.via.str.size < cap - 1 ? v.via.str.size : cap - 1;
        memcpy(msg, v.via.str.ptr, n);
        msg[n] = '\0';
      }
    }
    rc = 0;
  }
  msgpack_unpacked_destroy(&u);
  return rc;
}

/* Reads one frame and returns its code, or 1 on EOF, timeout or garbage. */
static int read_code(int fd, int timeout_ms) {
  int type, code;
  return ch_read_frame(fd, timeout_ms, &type, &code, NULL, 0) == 0 ? code : 1;
}

int ch_raw_connect_nc(void) {
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  if (strlen(th_d.sock) >= sizeof addr.sun_path) return -1;
  memcpy(addr.sun_path, th_d.sock, strlen(th_d.sock) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

size_t ch_frame_hello(unsigned char *buf) {
  unsigned char *p = buf + OPD_FRAME_HEADER;
  *p++ = 0x93;
  p = opd__mp_put_uint(p, OPD_MSG_HELLO);
  p = opd__mp_put_uint(p, 1);
  *p++ = 0x81;
  *p++ = 0xa8;
  memcpy(p, "protocol", 8);
  p += 8;
  p = opd__mp_put_uint(p, OPD_PROTOCOL_VERSION);
  opd__frame_put_len(buf, (uint32_t)(p - buf - OPD_FRAME_HEADER));
  return (size_t)(p - buf);
}

int ch_ring_client_open(ch_ring_client_t *rc, uint32_t cq_slots,
                        uint32_t cq_slot_size, char *err, size_t errlen) {
  const uint32_t sq_slots = 16, sq_slot = 2048;
  opd_ring_t sq, cq;
  int code;
  memset(rc, 0, sizeof *rc);
  rc->memfd = rc->efd = -1;
  rc->base = MAP_FAILED;
  if ((rc->fd = ch_raw_connect_nc()) < 0) {
    snprintf(err, errlen, "connect: %s", strerror(errno));
    goto fail;
  }
  unsigned char hello[32];
  if (send_all(rc->fd, hello, ch_frame_hello(hello), NULL, 0) != 0 ||
      (code = read_code(rc->fd, 5000)) != 0) {
    snprintf(err, errlen, "hello failed");
    goto fail;
  }
  size_t off = (opd__ring_bytes(sq_slots, sq_slot) + 4095) & ~(size_t)4095;
  rc->size = (off + opd__ring_bytes(cq_slots, cq_slot_size) + 4095) & ~(size_t)4095;
  rc->memfd = memfd_create("chaos-rings", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (rc->memfd < 0 || ftruncate(rc->memfd, (off_t)rc->size) != 0 ||
      fcntl(rc->memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0 ||
      (rc->base = mmap(NULL, rc->size, PROT_READ | PROT_WRITE, MAP_SHARED,
                       rc->memfd, 0)) == MAP_FAILED) {
    snprintf(err, errlen, "ring memfd: %s", strerror(errno));
    goto fail;
  }
  if (opd__ring_init(rc->base, off, sq_slots, sq_slot, &sq) != 0 ||
      opd__ring_init((char *)rc->base + off, rc->size - off, cq_slots,
                     cq_slot_size, &cq) != 0) {
    snprintf(err, errlen, "ring geometry");
    goto fail;
  }
  if ((rc->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
    snprintf(err, errlen, "eventfd: %s", strerror(errno));
    goto fail;
  }
  th_pack_t pk;
  th_pack_init(&pk);
  msgpack_pack_array(&pk.pk, 3);
  msgpack_pack_uint32(&pk.pk, OPD_MSG_RING_SETUP);
  msgpack_pack_uint32(&pk.pk, 2);
  msgpack_pack_map(&pk.pk, 6);
  th_pack_str(&pk, "size");
  msgpack_pack_uint64(&pk.pk, rc->size);
  th_pack_str(&pk, "sq_slots");
  msgpack_pack_uint32(&pk.pk, sq_slots);
  th_pack_str(&pk, "sq_slot_size");
  msgpack_pack_uint32(&pk.pk, sq_slot);
  th_pack_str(&pk, "cq_slots");
  msgpack_pack_uint32(&pk.pk, cq_slots);
  th_pack_str(&pk, "cq_slot_size");
  msgpack_pack_uint32(&pk.pk, cq_slot_size);
  th_pack_str(&pk, "wait");
  th_pack_str(&pk, "adaptive");
  unsigned char frame[512];
  opd__frame_put_len(frame, (uint32_t)pk.sb.size);
  memcpy(frame + OPD_FRAME_HEADER, pk.sb.data, pk.sb.size);
  int fds[2] = {rc->memfd, rc->efd};
  int rs = send_all(rc->fd, frame, OPD_FRAME_HEADER + pk.sb.size, fds, 2);
  th_pack_free(&pk);
  if (rs != 0 || (code = read_code(rc->fd, 5000)) != 0) {
    snprintf(err, errlen, "ring_setup failed (%s)",
             rs ? strerror(errno) : code > 0 ? "no reply" : opd_errname(code));
    goto fail;
  }
  return 0;
fail:
  ch_ring_client_close(rc);
  return -1;
}

void ch_ring_client_close(ch_ring_client_t *rc) {
  if (rc->base != MAP_FAILED && rc->base != NULL) munmap(rc->base, rc->size);
  if (rc->memfd >= 0) close(rc->memfd);
  if (rc->efd >= 0) close(rc->efd);
  if (rc->fd >= 0) close(rc->fd);
  rc->base = MAP_FAILED;
  rc->fd = rc->memfd = rc->efd = -1;
}
