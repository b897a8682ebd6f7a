/* opctl: the admin CLI of opd (ping, ops, plugins, stats, health, metrics,
 * version, info).
 *
 * DESIGN
 * A thin user of libopd: every command is one or a few library calls, so
 * opctl exercises exactly what applications use. Replies arrive as JSON
 * from libopd; opctl parses just enough of it (a tiny reader for the
 * daemon's own, well-formed output) to print tables, and `--json` prints
 * the raw JSON for scripts. `health` is for scripts and monitors: its
 * exit status alone says healthy (0), unhealthy (1), unreachable (2) or
 * permission denied (3). `metrics` fetches the daemon's Prometheus
 * endpoint (--metrics-listen) with a plain HTTP/1.0 GET.
 */
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/jread.h"
#include "opd/opd.h"


/* ---- commands -------------------------------------------------------------- */

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int cmd_ping(opd_client_t *c, int count) {
  double *t = malloc(sizeof(double) * (size_t)count);
  for (int i = 0; i < count; i++) {
    double t0 = now_us();
    int rc = opd_ping(c);
    t[i] = now_us() - t0;
    if (rc != 0) {
      fprintf(stderr, "opctl: ping: %s\n", opd_last_error());
      free(t);
      return 1;
    }
    if (count <= 10) printf("reply from opd: time=%.1f us\n", t[i]);
  }
  qsort(t, (size_t)count, sizeof *t, cmp_double);
  double sum = 0;
  for (int i = 0; i < count; i++) sum += t[i];
  printf("%d pings: min %.1f us, p50 %.1f us, p99 %.1f us, max %.1f us, "
         "mean %.1f us\n",
         count, t[0], t[count / 2], t[(int)(count * 0.99)], t[count - 1],
         sum / count);
  free(t);
  return 0;
}

static void print_io(const char *what, const jv_t *list) {
  for (int i = 0; list && i < list->n; i++) {
    const jv_t *io = list->vals[i];
    const jv_t *dts = jget(io, "dtypes");
    char dt[200];
    jtext(dts, dt, sizeof dt);
    if (dts && dts->n >= 9) snprintf(dt, sizeof dt, "any");
    const jv_t *opt = jget(io, "optional");
    printf("    %-7s %-8s %-22s %s%s\n", what, jstr(jget(io, "name")),
           jstr(jget(io, "shape")), dt,
           opt && opt->boolean ? " (optional)" : "");
  }
}

/* A JSON reply for a command: 1 (reported) when the request failed, 2
 * when --json printed it as is (done), else 0 with *text to parse (the
 * caller frees it). */
typedef int json_fn(opd_client_t *c, char **json, size_t *len);
static int fetch_json(opd_client_t *c, json_fn *fn, const char *what, int json,
                      char **text) {
  size_t len;
  if (fn(c, text, &len) != 0) {
    fprintf(stderr, "opctl: %s: %s\n", what, opd_last_error());
    return 1;
  }
  if (!json) return 0;
  printf("%s\n", *text);
  opd_free(*text);
  return 2;
}

static int cmd_ops(opd_client_t *c, int json) {
  char *text;
  int got = fetch_json(c, opd_ops_json, "ops", json, &text);
  if (got != 0) return got == 2 ? 0 : 1;
  jv_t *root = jread(text);
  jv_t *ops = jget(root, "ops");
  /* where each op comes from: the PLUGINS reply's "origins" */
  char *ptext = NULL;
  size_t plen;
  jv_t *proot = NULL;
  if (opd_plugins_json(c, &ptext, &plen) == 0) {
    proot = jread(ptext);
  }
  const jv_t *origins = jget(proot, "origins");
  printf("%d operators\n", ops ? ops->n : 0);
  for (int i = 0; ops && i < ops->n; i++) {
    const jv_t *op = ops->vals[i];
    const jv_t *inplace = jget(op, "inplace");
    printf("\n%-10s %s\n", jstr(jget(op, "name")), jstr(jget(op, "summary")));
    printf("    shape   %s%s\n", jstr(jget(op, "shape")),
           inplace && inplace->boolean ? "   (in-place allowed)" : "");
    const jv_t *origin = jget(origins, jstr(jget(op, "name")));
    printf("    origin  %s\n", origin ? jstr(origin) : "built-in");
    print_io("input", jget(op, "inputs"));
    print_io("output", jget(op, "outputs"));
    const jv_t *attrs = jget(op, "attrs");
    for (int a = 0; attrs && a < attrs->n; a++) {
      const jv_t *at = attrs->vals[a];
      const jv_t *req = jget(at, "required");
      char def[120];
      jtext(jget(at, "default"), def, sizeof def);
      const jv_t *ch = jget(at, "choices");
      printf("    attr    %-8s %-6s %s %s%s%s\n", jstr(jget(at, "name")),
             jstr(jget(at, "type")),
             req && req->boolean ? "required" : "default", 
             req && req->boolean ? "" : def,
             ch && ch->type == 's' ? "  one of " : "",
             ch && ch->type == 's' ? ch->str : "");
      const char *doc = jstr(jget(at, "doc"));
      if (doc[0]) printf("            %s\n", doc);
    }
  }
  jfree(root);
  jfree(proot);
  opd_free(text);
  opd_free(ptext);
  return 0;
}

static int cmd_plugins(opd_client_t *c, int json) {
  char *text;
  int got = fetch_json(c, opd_plugins_json, "plugins", json, &text);
  if (got != 0) return got == 2 ? 0 : 1;
  jv_t *root = jread(text);
  const jv_t *list = jget(root, "plugins");
  int n = list ? list->n : 0;
  printf("%d plugin%s\n", n, n == 1 ? "" : "s");
  for (int i = 0; i < n; i++) {
    const jv_t *p = list->vals[i];
    const jv_t *ops = jget(p, "ops");
    char names[1024];
    size_t k = 0;
    names[0] = '\0';
    for (int j = 0; ops && j < ops->n && k < sizeof names; j++)
      k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", j ? ", " : "",
                            jstr(ops->vals[j]));
    printf("\n%-10s version %s (operator ABI %s)\n", jstr(jget(p, "name")),
           jstr(jget(p, "version")), jstr(jget(p, "abi")));
    printf("    file    %s\n", jstr(jget(p, "path")));
    printf("    ops     %s\n", names);
  }
  jfree(root);
  opd_free(text);
  return 0;
}

static void print_num(const char *label, const jv_t *v) {
  printf("  %-16s %s\n", label, jstr(v));
}

/* One line per CUDA device of the hello: index, UUID, name, memory. */
static void print_devices(opd_client_t *c) {
  char *info;
  size_t len;
  if (opd_server_info(c, &info, &len) != 0) return;
  jv_t *root = jread(info);
  const jv_t *devs = jget(root, "devices");
  for (int i = 0; devs && i < devs->n; i++) {
    const jv_t *d = devs->vals[i], *mem = jget(d, "memory"), *mps = jget(d, "mps");
    printf("    %-8s %s  %s, %.1f GiB, compute %s%s\n", jstr(jget(d, "device")),
           jstr(jget(d, "uuid")), jstr(jget(d, "name")),
           mem ? mem->num / 1073741824.0 : 0.0, jstr(jget(d, "compute")),
           mps && mps->boolean ? ", MPS" : "");
  }
  jfree(root);
  opd_free(info);
}

/* The classes of service: runs (CPU and GPU), waiting for a kernel
 * thread and running there now, and the p50/p99 of their queue wait and
 * kernel time (bucket bounds, us); then the GPU's best-effort bound. */
static void print_classes(const jv_t *cl, const jv_t *dq) {
  if (cl == NULL) return; /* an older daemon */
  printf("\n  %-12s %10s %8s %8s %10s %10s %10s %10s\n", "class", "runs",
         "waiting", "running", "wait p50", "wait p99", "run p50", "run p99");
  for (int i = 0; i < cl->n; i++) {
    const jv_t *c = cl->vals[i], *w = jget(c, "wait"), *r = jget(c, "run");
    printf("  %-12s %10s %8s %8s %8s us %7s us %7s us %7s us\n", cl->keys[i],
           jstr(jget(c, "runs")), jstr(jget(c, "waiting")), jstr(jget(c, "running")),
           jstr(jget(w, "p50_us")), jstr(jget(w, "p99_us")),
           jstr(jget(r, "p50_us")), jstr(jget(r, "p99_us")));
  }
  if (dq == NULL) return; /* an older daemon */
  const jv_t *on = jget(dq, "active"), *be = jget(dq, "be_inflight"),
             *wt = jget(dq, "waiting");
  printf("  gpu best-effort bound %s per device (now %s), deferred %s times\n",
         jstr(jget(dq, "bound")), on && on->boolean ? "active" : "off: no latency client",
         jstr(jget(dq, "deferred")));
  for (int d = 0; be != NULL && d < be->n; d++)
    printf("    cuda:%d: %s best-effort in flight, %s sessions waiting\n", d,
           jstr(be->vals[d]), wt && d < wt->n ? jstr(wt->vals[d]) : "0");
}

static int cmd_stats(opd_client_t *c, int json) {
  char *text;
  int got = fetch_json(c, opd_stats_json, "stats", json, &text);
  if (got != 0) return got == 2 ? 0 : 1;
  jv_t *root = jread(text);
  const jv_t *h = jget(root, "healthy");
  printf("opd daemon: %s\n", h && h->boolean ? "healthy" : "UNHEALTHY");
  print_num("cuda devices", jget(root, "devices"));
  print_devices(c);
  print_num("sessions", jget(root, "sessions"));
  print_num("sessions total", jget(root, "sessions_total"));
  print_num("requests", jget(root, "requests"));
  print_num("errors", jget(root, "errors"));
  print_num("arenas", jget(root, "arenas"));
  print_num("bytes mapped", jget(root, "bytes_mapped"));
  print_num("host mappings", jget(root, "mappings"));
  print_num("mapped bytes", jget(root, "mapped_bytes"));
  print_num("runs in flight", jget(root, "inflight"));
  print_num("async runs", jget(root, "async"));   /* answered at enqueue */
  print_num("async peak", jget(root, "async_peak"));
  print_num("cuda imports", jget(root, "imports"));
  const jv_t *sc = jget(root, "strided"); /* an older daemon: none */
  if (sc != NULL) { /* contiguous copies of strided tensors around kernels */
    print_num("strided copies", jget(sc, "copies"));
    print_num("strided bytes", jget(sc, "bytes"));
  }
  /* inputs clients copied into shared memory first (their fallback) */
  print_num("staging copies", jget(jget(root, "staging"), "copies"));
  print_num("staging bytes", jget(jget(root, "staging"), "bytes"));
  print_num("shm arenas", jget(jget(root, "shm"), "mapped"));
  print_num("shm faults", jget(jget(root, "shm"), "faults"));
  print_num("users", jget(root, "uids"));
  const jv_t *up = jget(root, "uptime_ns");
  printf("  %-16s %.1f s\n", "uptime", up ? up->num / 1e9 : 0.0);
  const jv_t *ops = jget(root, "ops");
  printf("\n  %-10s %10s %8s %10s %12s %10s\n", "op", "calls", "errors",
         "on loop", "kernel ms", "mean us");
  for (int i = 0; ops && i < ops->n; i++) {
    const jv_t *o = ops->vals[i];
    const jv_t *calls = jget(o, "calls"), *ns = jget(o, "ns");
    const jv_t *inl = jget(o, "inline"); /* an older daemon: none */
    double nc = calls ? calls->num : 0, t = ns ? ns->num : 0;
    printf("  %-10s %10.0f %8s %10.0f %12.3f %10.2f\n", ops->keys[i], nc,
           jstr(jget(o, "errors")), inl ? inl->num : 0.0, t / 1e6,
           nc > 0 ? t / nc / 1e3 : 0.0);
  }
  const jv_t *g = jget(root, "graphs"); /* an older daemon: none */
  if (g != NULL) {
    const jv_t *gr = jget(g, "runs"), *gn = jget(g, "ns"), *gi = jget(g, "inline");
    double nr = gr ? gr->num : 0, t = gn ? gn->num : 0;
    printf("  %-10s %10.0f %8s %10.0f %12.3f %10.2f   (%s live, %s defined)\n",
           "(graphs)", nr, jstr(jget(g, "errors")), gi ? gi->num : 0.0, t / 1e6,
           nr > 0 ? t / nr / 1e3 : 0.0, jstr(jget(g, "live")), jstr(jget(g, "defined")));
  }
  print_classes(jget(root, "classes"), jget(root, "device_queue"));
  int healthy = h && h->boolean;
  jfree(root);
  opd_free(text);
  return healthy ? 0 : 1;
}

/* health: one line, and the exit status of opctl(1)'s table */
enum { H_OK = 0, H_UNHEALTHY = 1, H_UNREACHABLE = 2, H_DENIED = 3 };

static int cmd_health(const char *sock) {
  opd_client_t *c;
  char path[256] = "";
  opd_socket_path(sock, path, sizeof path);
  int rc = opd_connect(sock, &c);
  if (rc == OPD_EPERM) {
    printf("permission denied: %s\n", opd_last_error());
    return H_DENIED;
  }
  if (rc != 0) {
    printf("unreachable: %s\n", opd_last_error());
    return H_UNREACHABLE;
  }
  char *text;
  size_t len;
  if (opd_stats_json(c, &text, &len) != 0) {
    printf("unhealthy: %s answers but not its stats: %s\n", path,
           opd_last_error());
    opd_close(c);
    return H_UNHEALTHY;
  }
  jv_t *root = jread(text);
  const jv_t *h = jget(root, "healthy"), *n = jget(root, "sessions");
  int ok = h && h->boolean;
  if (ok)
    printf("healthy: opd at %s, %s session(s)\n", path, jstr(n));
  else
    printf("unhealthy: opd at %s reports its GPU context poisoned (it "
           "restarts)\n", path);
  jfree(root);
  opd_free(text);
  opd_close(c);
  return ok ? H_OK : H_UNHEALTHY;
}

/* metrics-listen from a config file, or "" */
static void conf_metrics(const char *file, char *out, size_t cap) {
  FILE *f = fopen(file, "r");
  char line[512];
  out[0] = '\0';
  while (f && fgets(line, sizeof line, f)) {
    char *p = line + strspn(line, " \t");
    if (strncmp(p, "metrics-listen", 14) != 0) continue;
    p += 14 + strspn(p + 14, " \t");
    if (*p != '=' && *p != ':') continue;
    p++;
    p += strspn(p, " \t\"");
    size_t n = strcspn(p, " \t\r\n;#\"");
    snprintf(out, cap, "%.*s", (int)n, p);
  }
  if (f) fclose(f);
}

static int cmd_metrics(const char *given) {
  char addr[128], host[96], port[16];
  const char *conf = getenv("OPD_CONFIG") ? getenv("OPD_CONFIG") : "/etc/opd/opd.conf";
  if (given) snprintf(addr, sizeof addr, "%s", given);
  else if (getenv("OPD_METRICS")) snprintf(addr, sizeof addr, "%s", getenv("OPD_METRICS"));
  else conf_metrics(conf, addr, sizeof addr);
  if (addr[0] == '\0') {
    fprintf(stderr, "opctl: metrics: no address: give ADDR:PORT, set "
            "OPD_METRICS, or set metrics-listen in %s (the daemon serves "
            "metrics only when that is set)\n", conf);
    return 1;
  }
  const char *colon = strrchr(addr, ':');
  const char *h = addr;
  size_t hl = colon ? (size_t)(colon - addr) : 0;
  if (hl >= 2 && addr[0] == '[' && colon[-1] == ']') h++, hl -= 2;
  if (colon == NULL || hl == 0 || hl >= sizeof host || strlen(colon + 1) >= sizeof port) {
    fprintf(stderr, "opctl: metrics: \"%s\" is not ADDR:PORT\n", addr);
    return 2;
  }
  memcpy(host, h, hl);
  host[hl] = '\0';
  strcpy(port, colon + 1);
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
  int g = getaddrinfo(host, port, &hints, &ai);
  if (g != 0) {
    fprintf(stderr, "opctl: metrics: %s: %s\n", addr, gai_strerror(g));
    return 1;
  }
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    fprintf(stderr, "opctl: metrics: cannot connect to %s: %s (is "
            "metrics-listen set to it?)\n", addr, strerror(errno));
    freeaddrinfo(ai);
    if (fd >= 0) close(fd);
    return 1;
  }
  freeaddrinfo(ai);
  char req[256];
  int n = snprintf(req, sizeof req, "GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n", addr);
  if (write(fd, req, (size_t)n) != n) {
    fprintf(stderr, "opctl: metrics: %s: %s\n", addr, strerror(errno));
    close(fd);
    return 1;
  }
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  ssize_t r;
  while (buf && (r = read(fd, buf + len, cap - len - 1)) > 0) {
    len += (size_t)r;
    if (len + 1 == cap) {
      char *nb = realloc(buf, cap *= 2);
      if (nb == NULL) break;
      buf = nb;
    }
  }
  close(fd);
  if (buf == NULL) return 1;
  buf[len] = '\0';
  char *body = strstr(buf, "\r\n\r\n");
  int ok = strncmp(buf, "HTTP/1.", 7) == 0 && strncmp(buf + 8, " 200", 4) == 0;
  if (!ok || body == NULL) {
    fprintf(stderr, "opctl: metrics: %s answered: %.*s\n", addr,
            (int)strcspn(buf, "\r\n"), buf);
    free(buf);
    return 1;
  }
  fputs(body + 4, stdout);
  free(buf);
  return 0;
}

static int cmd_info(opd_client_t *c) {
  char *text;
  size_t len;
  if (opd_server_info(c, &text, &len) != 0) {
    fprintf(stderr, "opctl: info: %s\n", opd_last_error());
    return 1;
  }
  printf("%s\n", text);
  opd_free(text);
  return 0;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: opctl [--socket PATH] [--json] COMMAND\n"
          "\n"
          "commands:\n"
          "  ping [-c N]   round trips to the daemon (N, default 5) with times\n"
          "  ops           the operators with their inputs, outputs, attributes\n"
          "                and origin (built-in or the plugin file)\n"
          "  plugins       the operator plugins loaded: name, version, file, ops\n"
          "  stats         sessions, requests, errors, bytes mapped, per-op counts\n"
          "                (exit status 1 when the daemon is unhealthy)\n"
          "  health        one line; exit status 0 healthy, 1 unhealthy,\n"
          "                2 unreachable, 3 permission denied\n"
          "  metrics [ADDR:PORT]\n"
          "                the Prometheus metrics (default: $OPD_METRICS, else\n"
          "                metrics-listen in /etc/opd/opd.conf or $OPD_CONFIG)\n"
          "  info          the daemon's hello: version, backends, limits (JSON)\n"
          "  version       opctl's and the daemon's versions\n"
          "\n"
          "  -s, --socket PATH   daemon socket (default: $OPD_SOCKET, else\n"
          "                      /run/opd/opd.sock when it exists, else\n"
          "                      $XDG_RUNTIME_DIR/opd.sock)\n"
          "  -j, --json          print raw JSON (ops, plugins, stats)\n");
}

int main(int argc, char **argv) {
  static const struct option opts[] = {{"socket", required_argument, 0, 's'},
                                       {"json", no_argument, 0, 'j'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  const char *sock = NULL;
  int json = 0, c;
  while ((c = getopt_long(argc, argv, "+s:jh", opts, NULL)) != -1) {
    switch (c) {
      case 's': sock = optarg; break;
      case 'j': json = 1; break;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  if (optind >= argc) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[optind];
  int count = 5;
  if (strcmp(cmd, "ping") == 0 && optind + 2 < argc + 0 &&
      strcmp(argv[optind + 1], "-c") == 0) {
    count = atoi(argv[optind + 2]);
    if (count < 1 || count > 10000000) {
      fprintf(stderr, "opctl: ping -c expects 1 to 10000000\n");
      return 2;
    }
  }
  if (strcmp(cmd, "health") == 0) return cmd_health(sock);
  if (strcmp(cmd, "metrics") == 0)
    return cmd_metrics(optind + 1 < argc ? argv[optind + 1] : NULL);
  if (strcmp(cmd, "ping") && strcmp(cmd, "ops") && strcmp(cmd, "stats") &&
      strcmp(cmd, "plugins") &&
      strcmp(cmd, "info") && strcmp(cmd, "version")) {
    fprintf(stderr, "opctl: unknown command \"%s\"\n", cmd);
    usage(stderr);
    return 2;
  }
  opd_client_t *cl;
  if (opd_connect(sock, &cl) != 0) {
    if (strcmp(cmd, "version") == 0)
      printf("opctl %s (protocol %d); daemon: not reachable\n", opd_version(),
             OPD_PROTOCOL_VERSION);
    fprintf(stderr, "opctl: %s\n", opd_last_error());
    return 1;
  }
  int rc = 0;
  if (strcmp(cmd, "ping") == 0) rc = cmd_ping(cl, count);
  else if (strcmp(cmd, "ops") == 0) rc = cmd_ops(cl, json);
  else if (strcmp(cmd, "stats") == 0) rc = cmd_stats(cl, json);
  else if (strcmp(cmd, "plugins") == 0) rc = cmd_plugins(cl, json);
  else if (strcmp(cmd, "info") == 0) rc = cmd_info(cl);
  else {
    char *text;
    size_t len;
    printf("opctl %s (protocol %d)\n", opd_version(), OPD_PROTOCOL_VERSION);
    if (opd_server_info(cl, &text, &len) == 0) {
      jv_t *root = jread(text);
      printf("opd %s (protocol %s) at session %s\n",
             jstr(jget(root, "version")), jstr(jget(root, "protocol")),
             jstr(jget(root, "session")));
      jfree(root);
      opd_free(text);
    }
  }
  opd_close(cl);
  return rc;
}
