/* Prometheus metrics: counters and histograms kept by the loop, served as
 * the text exposition format over HTTP by libmicrohttpd; see metrics.h.
 *
 * DESIGN
 * The loop thread owns every number (it is the only writer: runs reply
 * there, sessions are accepted there), so counting costs an add and no
 * lock. The HTTP side runs on libmicrohttpd's one internal thread, never
 * touches the server: it asks the loop for a fresh rendering (uv_async)
 * and waits for it at most RENDER_WAIT_MS, and a rendering younger than
 * RENDER_MIN_MS is served as it is, so a flood of scrapes costs the loop
 * at most 1000 / RENDER_MIN_MS renderings a second. Connections are
 * bounded (MAX_CONNS, PER_IP_CONNS, each with a timeout and a small
 * memory pool), so a flood holds a bounded amount of threads and memory.
 * The listening socket is ours (bound before libmicrohttpd starts), so
 * "address in use" is a start-up error naming the address.
 *
 * Latency histograms are request-to-reply (the request taken off the
 * socket or ring, to its reply queued), per op and transport, with
 * fixed bucket bounds from 10 us to 10 s.
 */
#include "common/clock.h" /* opd__now_ns */
#include "common/ring.h"
#include "daemon/backend/backend.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/options.h"
#include "daemon/sched.h"
#include "daemon/types.h"
#include "kernels/runtime/registry.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>


#define N_TRANSPORTS 3           /* socket, adaptive ring, spin ring */
#define N_STATUS 32              /* 0 and OPD_E* down to -31 */
static const double bounds[] = {1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3,
                                2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25,
                                0.5, 1, 2.5, 5, 10};
#define N_BOUNDS ((int)(sizeof bounds / sizeof bounds[0]))

typedef struct {
  uint64_t n[N_BOUNDS + 1];      /* per bucket (not cumulative); last: +Inf */
  uint64_t count;
  double sum;                    /* seconds */
} hist_t;

int opd__metrics_on;

static struct {
  hist_t *lat;                   /* [op][transport] */
  uint64_t *by_status;           /* [op][status] */
  int n_ops;
  uint64_t refused;
} m;

static const char *transport_name(int t) {
  return t == 0 ? "socket" : opd__ring_mode_name(t);
}

static const char *status_name(int i) {
  static const char *const names[N_STATUS] = {
      [0] = "ok",
#define X(name, val, msg) [-(val)] = #name,
      OPD_ERRNO_MAP(X)
#undef X
  };
  return i >= 0 && i < N_STATUS && names[i] ? names[i] : "other";
}

static int ensure(void) {
  if (m.lat) return 0;
  m.lat = calloc((size_t)opd__n_ops * N_TRANSPORTS, sizeof *m.lat);
  m.by_status = calloc((size_t)opd__n_ops * N_STATUS, sizeof *m.by_status);
  if (!m.lat || !m.by_status) {
    free(m.lat);
    free(m.by_status);
    m.lat = NULL;
    m.by_status = NULL;
    return -1;
  }
  m.n_ops = opd__n_ops;
  return 0;
}

void opd__metrics_run(int op, int transport, int status, uint64_t ns) {
  if (ensure() != 0 || op < 0 || op >= m.n_ops) return;
  int t = transport >= 0 && transport < N_TRANSPORTS ? transport : 0;
  int st = -status >= 0 && -status < N_STATUS ? -status : N_STATUS - 1;
  m.by_status[op * N_STATUS + st]++;
  hist_t *h = &m.lat[op * N_TRANSPORTS + t];
  double s = (double)ns * 1e-9;
  int b = 0;
  while (b < N_BOUNDS && s > bounds[b]) b++;
  h->n[b]++;
  h->count++;
  h->sum += s;
}

void opd__metrics_rejected(int op, int status) {
  if (ensure() != 0 || op < 0 || op >= m.n_ops) return;
  int st = -status > 0 && -status < N_STATUS ? -status : N_STATUS - 1;
  m.by_status[op * N_STATUS + st]++;
}

void opd__metrics_refused(void) { m.refused++; }

/* ---- rendering (loop thread) ------------------------------------------------ */

/* a label value: backslash, quote and newline escaped */
static void label(FILE *f, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '\\' || s[i] == '"') fputc('\\', f);
    if (s[i] == '\n') fputs("\\n", f);
    else fputc(s[i], f);
  }
}

/* one sample per device, from the backend's device list (the same that
 * `opctl stats` shows): [{device, name, memory, compute}] */
static void gpu_memory(const opd_server_t *srv, FILE *f) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  opd__backend_dev.describe((opd_server_t *)srv, &pk);
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  if (msgpack_unpack_next(&u, sb.data, sb.size, NULL) == MSGPACK_UNPACK_SUCCESS &&
      u.data.type == MSGPACK_OBJECT_ARRAY) {
    for (uint32_t i = 0; i < u.data.via.array.size; i++) {
      const msgpack_object *d = &u.data.via.array.ptr[i];
      if (d->type != MSGPACK_OBJECT_MAP) continue;
      const msgpack_object_str *dev = NULL, *name = NULL;
      uint64_t mem = 0;
      for (uint32_t k = 0; k < d->via.map.size; k++) {
        const msgpack_object_kv *kv = &d->via.map.ptr[k];
        if (kv->key.type != MSGPACK_OBJECT_STR) continue;
        const msgpack_object_str *key = &kv->key.via.str;
        if (kv->val.type == MSGPACK_OBJECT_STR && key->size == 6 &&
            memcmp(key->ptr, "device", 6) == 0) dev = &kv->val.via.str;
        else if (kv->val.type == MSGPACK_OBJECT_STR && key->size == 4 &&
                 memcmp(key->ptr, "name", 4) == 0) name = &kv->val.via.str;
        else if (kv->val.type == MSGPACK_OBJECT_POSITIVE_INTEGER && key->size == 6 &&
                 memcmp(key->ptr, "memory", 6) == 0) mem = kv->val.via.u64;
      }
      if (dev == NULL) continue;
      fputs("opd_gpu_memory_total_bytes{device=\"", f);
      label(f, dev->ptr, dev->size);
      fputs("\",name=\"", f);
      if (name) label(f, name->ptr, name->size);
      fprintf(f, "\"} %llu\n", (unsigned long long)mem);
    }
  }
  msgpack_unpacked_destroy(&u);
  msgpack_sbuffer_destroy(&sb);
}

static void render(const opd_server_t *srv, FILE *f) {
  double now = (double)opd__now_ns() * 1e-9;
#define HEAD(name, type, help) \
  fprintf(f, "# HELP " name " " help "\n# TYPE " name " " type "\n")
  HEAD("opd_build_info", "gauge", "The daemon's version and protocol.");
  fprintf(f, "opd_build_info{version=\"%s\",protocol=\"%d\"} 1\n", OPD_VERSION,
          OPD_PROTOCOL_VERSION);
  HEAD("opd_healthy", "gauge", "1 unless a GPU context is poisoned.");
  fprintf(f, "opd_healthy %d\n", srv->healthy ? 1 : 0);
  HEAD("opd_uptime_seconds", "gauge", "Seconds since the daemon started.");
  fprintf(f, "opd_uptime_seconds %.3f\n", now - (double)srv->start_ns * 1e-9);
  HEAD("opd_sessions", "gauge", "Sessions open.");
  fprintf(f, "opd_sessions %u\n", srv->n_sessions);
  HEAD("opd_sessions_total", "counter", "Connections accepted.");
  fprintf(f, "opd_sessions_total %llu\n", (unsigned long long)srv->sessions_total);
  HEAD("opd_refused_connections_total", "counter",
       "Connections refused (limits, allow-lists).");
  fprintf(f, "opd_refused_connections_total %llu\n", (unsigned long long)m.refused);
  HEAD("opd_requests_total", "counter", "Requests of every kind.");
  fprintf(f, "opd_requests_total %llu\n", (unsigned long long)srv->requests);
  HEAD("opd_request_errors_total", "counter", "Requests answered with an error.");
  fprintf(f, "opd_request_errors_total %llu\n", (unsigned long long)srv->errors);
  HEAD("opd_runs_inflight", "gauge", "Runs queued or running (the queue depth).");
  fprintf(f, "opd_runs_inflight %u\n", srv->inflight);
  HEAD("opd_arenas", "gauge", "Arenas registered.");
  fprintf(f, "opd_arenas %llu\n", (unsigned long long)srv->arenas);
  HEAD("opd_mapped_bytes", "gauge", "Bytes of client memory the daemon maps.");
  fprintf(f, "opd_mapped_bytes %llu\n", (unsigned long long)srv->host_bytes);
  HEAD("opd_published_names", "gauge", "Arenas published under a name.");
  fprintf(f, "opd_published_names %u\n", srv->n_pubs);
  HEAD("opd_cuda_devices", "gauge", "CUDA devices in use.");
  fprintf(f, "opd_cuda_devices %d\n", srv->n_devices);
  HEAD("opd_accept_pauses_total", "counter",
       "Times accepting paused for lack of file descriptors.");
  fprintf(f, "opd_accept_pauses_total %llu\n",
          (unsigned long long)srv->fd_short_count);
  HEAD("opd_strided_copies_total", "counter",
       "Contiguous copies of strided tensors made around kernels.");
  fprintf(f, "opd_strided_copies_total %llu\n",
          (unsigned long long)srv->strided_copies);
  HEAD("opd_strided_copy_bytes_total", "counter",
       "Bytes of those copies.");
  fprintf(f, "opd_strided_copy_bytes_total %llu\n",
          (unsigned long long)srv->strided_bytes);

  HEAD("opd_gpu_memory_total_bytes", "gauge", "Memory of each CUDA device in use.");
  gpu_memory(srv, f);
  opd__sched_render(srv, f); /* per class of service */

  HEAD("opd_op_kernel_seconds_total", "counter", "Kernel time by operator.");
  for (int i = 0; i < opd__n_ops; i++)
    if (srv->op_stats[i].calls)
      fprintf(f, "opd_op_kernel_seconds_total{op=\"%s\"} %.9f\n",
              opd__ops[i]->name, (double)srv->op_stats[i].ns * 1e-9);
  HEAD("opd_runs_total", "counter",
       "Runs answered, by operator and status (refused by their checks "
       "included).");
  for (int i = 0; i < m.n_ops; i++)
    for (int st = 0; st < N_STATUS; st++)
      if (m.by_status[i * N_STATUS + st])
        fprintf(f, "opd_runs_total{op=\"%s\",status=\"%s\"} %llu\n",
                opd__ops[i]->name, status_name(st),
                (unsigned long long)m.by_status[i * N_STATUS + st]);
  HEAD("opd_run_latency_seconds", "histogram",
       "Request to reply, by operator and transport.");
  for (int i = 0; i < m.n_ops; i++)
    for (int t = 0; t < N_TRANSPORTS; t++) {
      const hist_t *h = &m.lat[i * N_TRANSPORTS + t];
      if (h->count == 0) continue;
      const char *op = opd__ops[i]->name, *tr = transport_name(t);
      uint64_t cum = 0;
      for (int b = 0; b < N_BOUNDS; b++) {
        cum += h->n[b];
        fprintf(f, "opd_run_latency_seconds_bucket{op=\"%s\",transport=\"%s\","
                "le=\"%g\"} %llu\n", op, tr, bounds[b], (unsigned long long)cum);
      }
      fprintf(f, "opd_run_latency_seconds_bucket{op=\"%s\",transport=\"%s\","
              "le=\"+Inf\"} %llu\n", op, tr, (unsigned long long)h->count);
      fprintf(f, "opd_run_latency_seconds_sum{op=\"%s\",transport=\"%s\"} %.9f\n",
              op, tr, h->sum);
      fprintf(f, "opd_run_latency_seconds_count{op=\"%s\",transport=\"%s\"} "
              "%llu\n", op, tr, (unsigned long long)h->count);
    }
#undef HEAD
}

#ifdef OPD_HAVE_MICROHTTPD
#include <microhttpd.h>

#define RENDER_MIN_MS 100
#define RENDER_WAIT_MS 1000
#define MAX_CONNS 16
#define PER_IP_CONNS 4
#define CONN_TIMEOUT_S 5

static struct {
  struct MHD_Daemon *d;
  uv_async_t async;              /* HTTP thread -> loop: render now */
  int async_on;
  opd_server_t *srv;
  pthread_mutex_t lock;          /* guards what follows */
  pthread_cond_t done;
  char *text;                    /* the last rendering */
  size_t len;
  uint64_t at_ns;                /* when it was made */
  uint64_t gen;                  /* bumped per rendering */
} h = {.lock = PTHREAD_MUTEX_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

static void on_render(uv_async_t *a) {
  (void)a;
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (f == NULL) return;
  if (ensure() == 0) render(h.srv, f);
  fclose(f);
  pthread_mutex_lock(&h.lock);
  free(h.text);
  h.text = text;
  h.len = len;
  h.at_ns = opd__now_ns();
  h.gen++;
  pthread_cond_broadcast(&h.done);
  pthread_mutex_unlock(&h.lock);
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code,
                             const char *type, const char *body, size_t len) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
  if (r == NULL) return MHD_NO;
  MHD_add_response_header(r, "Content-Type", type);
  enum MHD_Result rc = MHD_queue_response(c, code, r);
  MHD_destroy_response(r);
  return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  (void)cls, (void)version, (void)upload, (void)con_cls;
  if (*upload_size) return MHD_NO; /* no bodies here */
  if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
    static const char msg[] = "only GET /metrics\n";
    return reply(c, 405, "text/plain", msg, sizeof msg - 1);
  }
  if (strcmp(url, "/metrics") != 0 && strcmp(url, "/") != 0) {
    static const char msg[] = "not found: the metrics are at /metrics\n";
    return reply(c, 404, "text/plain", msg, sizeof msg - 1);
  }
  pthread_mutex_lock(&h.lock);
  if (h.text == NULL || opd__now_ns() - h.at_ns > RENDER_MIN_MS * 1000000ull) {
    uint64_t gen = h.gen;
    uv_async_send(&h.async);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += RENDER_WAIT_MS / 1000;
    while (h.gen == gen &&
           pthread_cond_timedwait(&h.done, &h.lock, &until) != ETIMEDOUT) {
    }
  }
  enum MHD_Result rc;
  if (h.text == NULL) {
    static const char msg[] = "the event loop did not answer\n";
    rc = reply(c, 503, "text/plain", msg, sizeof msg - 1);
  } else {
    rc = reply(c, 200, "text/plain; version=0.0.4; charset=utf-8", h.text, h.len);
  }
  pthread_mutex_unlock(&h.lock);
  return rc;
}

/* Our own listening socket on addr ("host:port"), or -1 (logged). */
static int listen_addr(const char *addr) {
  char host[64];
  int port, fd = -1;
  struct sockaddr_storage ss = {0};
  socklen_t len;
  if (opd__addr_split(addr, host, sizeof host, &port) != 0) return -1;
  if (addr[0] == '[') {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    a->sin6_family = AF_INET6;
    a->sin6_port = htons((uint16_t)port);
    inet_pton(AF_INET6, host, &a->sin6_addr);
    len = sizeof *a;
  } else {
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, strcmp(host, "localhost") == 0 ? "127.0.0.1" : host,
              &a->sin_addr);
    len = sizeof *a;
  }
  fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 64) != 0) {
    LOG_ERROR("metrics-listen %s: %s", addr, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

int opd__metrics_start(opd_server_t *srv) {
  const char *addr = srv->cfg.svc.metrics_listen;
  if (ensure() != 0) {
    LOG_ERROR("metrics: out of memory");
    return -1;
  }
  int fd = listen_addr(addr);
  if (fd < 0) return -1;
  h.srv = srv;
  uv_async_init(srv->loop, &h.async, on_render);
  uv_unref((uv_handle_t *)&h.async);
  h.async_on = 1;
  h.d = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
      on_request, NULL, MHD_OPTION_LISTEN_SOCKET, fd,
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)MAX_CONNS,
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)PER_IP_CONNS,
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONN_TIMEOUT_S,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)32768, MHD_OPTION_END);
  if (h.d == NULL) {
    LOG_ERROR("metrics-listen %s: libmicrohttpd did not start", addr);
    close(fd);
    return -1;
  }
  opd__metrics_on = 1;
  LOG_INFO("metrics: http://%s/metrics", addr);
  return 0;
}

void opd__metrics_stop(opd_server_t *srv) {
  (void)srv;
  opd__metrics_on = 0;
  if (h.d) {
    /* wake a request waiting on a loop that will not render again */
    pthread_mutex_lock(&h.lock);
    h.gen++;
    pthread_cond_broadcast(&h.done);
    pthread_mutex_unlock(&h.lock);
    MHD_stop_daemon(h.d); /* joins its thread, closes the socket */
    h.d = NULL;
  }
  if (h.async_on) {
    uv_close((uv_handle_t *)&h.async, NULL);
    h.async_on = 0;
  }
  free(h.text);
  h.text = NULL;
}
#else
int opd__metrics_start(opd_server_t *srv) {
  LOG_ERROR("metrics-listen %s: opd was built without libmicrohttpd "
            "(install libmicrohttpd-dev and rebuild)",
            srv->cfg.svc.metrics_listen);
  (void)render;
  return -1;
}

void opd__metrics_stop(opd_server_t *srv) { (void)srv; }
#endif
