/* A function-entry tracer for the request-path check (tests/arch/request_path.py).
 *
 * DESIGN
 * A build with TRACE=1 compiles every C file with -finstrument-functions and
 * links this file into build/opd and libopd.so: gcc then calls
 * __cyg_profile_func_enter on entry to each function. When OPD_TRACE names
 * a file, each entry is kept as (CLOCK_MONOTONIC ns, thread, object path
 * index, offset of the function in its object) in a fixed buffer, and the
 * buffer is written to OPD_TRACE.<pid> at exit (a SIGTERM'd daemon exits
 * through main's return). The checker keeps the entries inside the time
 * window of one call and maps offsets to files with addr2line. Nothing here
 * is built or linked without TRACE=1.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NOI __attribute__((no_instrument_function))
/* hidden: libopd.so binds to these, not to libc's empty ones */
#define HOOK __attribute__((no_instrument_function, visibility("hidden")))
#define CAP (4u << 20)         /* records kept; later ones are dropped */
#define MAX_OBJS 16

typedef struct entry {
  uint64_t ns;                 /* CLOCK_MONOTONIC */
  uint32_t tid;
  uint16_t obj;                /* index into objs[] (0xffff: unknown) */
  uint16_t exit;               /* 1: a return, 0: an entry */
  uint64_t off;                /* function address - object base */
} entry_t;

static entry_t *buf;
static atomic_uint n;
static int on = -1;            /* -1: not looked at OPD_TRACE yet */
static pthread_mutex_t objs_mu = PTHREAD_MUTEX_INITIALIZER;
static struct { void *base; char path[512]; } objs[MAX_OBJS];
static int n_objs;

void __cyg_profile_func_enter(void *fn, void *site) HOOK;
void __cyg_profile_func_exit(void *fn, void *site) HOOK;

static NOI void dump(void) {
  const char *path = getenv("OPD_TRACE");
  if (path == NULL || buf == NULL) return;
  char name[600];
  snprintf(name, sizeof name, "%s.%d", path, (int)getpid());
  FILE *f = fopen(name, "w");
  if (f == NULL) return;
  for (int i = 0; i < n_objs; i++) fprintf(f, "obj %d %s\n", i, objs[i].path);
  unsigned total = atomic_load(&n);
  if (total > CAP) total = CAP;
  for (unsigned i = 0; i < total; i++)
    fprintf(f, "%llu %u %c %u %llx\n", (unsigned long long)buf[i].ns, buf[i].tid,
            buf[i].exit ? '<' : '>', buf[i].obj, (unsigned long long)buf[i].off);
  fclose(f);
}

static NOI int obj_index(void *fn, uint64_t *off) {
  Dl_info info;
  if (dladdr(fn, &info) == 0 || info.dli_fname == NULL) return -1;
  *off = (uint64_t)((char *)fn - (char *)info.dli_fbase);
  pthread_mutex_lock(&objs_mu);
  int i;
  for (i = 0; i < n_objs; i++)
    if (objs[i].base == info.dli_fbase) break;
  if (i == n_objs && n_objs < MAX_OBJS) {
    objs[i].base = info.dli_fbase;
    /* the main program's dli_fname is argv[0] as given: resolve it (first
     * seen at start, before the daemon changes directory) */
    char real[512];
    if (info.dli_fname[0] == '/')
      snprintf(objs[i].path, sizeof objs[i].path, "%s", info.dli_fname);
    else if (realpath(info.dli_fname, real))
      snprintf(objs[i].path, sizeof objs[i].path, "%s", real);
    else {
      ssize_t k = readlink("/proc/self/exe", objs[i].path, sizeof objs[i].path - 1);
      objs[i].path[k > 0 ? k : 0] = '\0';
    }
    n_objs++;
  }
  pthread_mutex_unlock(&objs_mu);
  return i < MAX_OBJS ? i : -1;
}

static NOI void record(void *fn, int is_exit) {
  if (on == 0) return;
  if (on < 0) {
    on = getenv("OPD_TRACE") != NULL;
    if (!on) return;
    buf = calloc(CAP, sizeof *buf);
    if (buf == NULL) {
      on = 0;
      return;
    }
    atexit(dump);
  }
  unsigned i = atomic_fetch_add(&n, 1);
  if (i >= CAP) return;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t off = 0;
  int o = obj_index(fn, &off);
  buf[i].ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
  buf[i].tid = (uint32_t)syscall(SYS_gettid);
  buf[i].obj = o < 0 ? 0xffffu : (uint16_t)o;
  buf[i].exit = (uint16_t)is_exit;
  buf[i].off = off;
}

void __cyg_profile_func_enter(void *fn, void *site) {
  (void)site;
  record(fn, 0);
}

void __cyg_profile_func_exit(void *fn, void *site) {
  (void)site;
  record(fn, 1);
}
