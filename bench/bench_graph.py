#!/usr/bin/env python3
"""bench_graph: the hft_server MLP (256 -> 512 -> 512 -> 1, float32) through
opd as one graph, through opd op by op, and in torch in this process, per
request, with the ratios against torch measured in the same run.

DESIGN
One model definition for every side: examples/hft_server/mlp.py (the same
weights bit for bit as mlp.h, the node list with `linear` nodes when the
daemon has the op, else matmul + add + relu; the header says which).
Single-process mode, per batch (--batch, default 1,32):
  lang=c       build/bench/bench_graph run as a child on the same daemon
               (graph_prepared, graph_run, graph_rotate, ops_prepared: see
               bench_graph.c);
               its lines are copied here;
  lang=python  graph: g.run(x, out=y) on the same host x and y every time
               (the hot path); ops: each node a c.prepare'd run;
               graph_dev (a device only): g.run(dx, out=dy, wait=True) on
               x and y in device memory, answered when done;
  lang=torch   eager: the model with torch.nn.functional.linear under
               no_grad (CPU: torch.set_num_threads(--threads, default 1));
               on CUDA also graph: torch.cuda.CUDAGraph replay +
               synchronize on device-resident x and y (the in-process best
               case), and graph_io: the same with x copied in from pinned
               host memory and y copied out, as opd's host x and y are.
The Python and torch cases take turns in BLOCKS blocks (a shared
machine's drift lands on all alike); every case's answer is checked
against mlp.reference (a mismatch fails the run, exit 1). Then one ratio
line per opd case: p50 over the baseline's p50 (torch graph on CUDA, torch
eager on the CPU) and the case's own p99 / p50.

--procs P: P processes at once for --seconds each, batch 1, one request
at a time per process: first P C clients (bench_graph.c --procs), then P
Python opd clients (each attaches the weights published once by this
process and runs its own graph on them), then P torch processes (each with its own copy of the weights, replaying its own
CUDA graph; on the CPU running eager with one thread). Printed: each
side's total requests per second, their ratio, and on CUDA the GPU memory
nvidia-smi shows while each side runs (the daemon's process for opd, the
sum of the P torch processes for torch, and memory.used of the card).

Usage: python3 bench/bench_graph.py [--socket PATH] [--device cpu|cuda]
       [--batch 1,32] [-n N] [--threads 1] [--c-bench PATH|none]
       [--procs P --seconds S]
Needs numpy, torch and this checkout's build (libopd, bench_graph).
"""
import argparse
import datetime
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# this checkout's opd package, unless $PYTHONPATH names one
if not any(os.path.exists(os.path.join(p, "opd", "__init__.py"))
           for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p):
    sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, os.path.join(REPO, "examples", "hft_server"))
import mlp  # noqa: E402
import opd  # noqa: E402

BLOCKS = 10
SEED = 42
PUB_NAME = "bench_graph_mlp"


def pcts(ns):
    """(p50, p99, p99.9, mean) in µs of a list of ns, nearest rank."""
    v = sorted(ns)
    at = [v[max(int(np.ceil(q * len(v))), 1) - 1] / 1e3 for q in (0.5, 0.99, 0.999)]
    return at + [statistics.fmean(v) / 1e3]


def line(lang, device, batch, case, ns, err):
    p50, p99, p999, mean = pcts(ns)
    print("graph lang=%s device=%s batch=%d case=%s n=%d p50_us=%.2f p99_us=%.2f "
          "p999_us=%.2f mean_us=%.2f check=%s" % (lang, device, batch, case, len(ns), p50,
                                                  p99, p999, mean,
                                                  "ok" if err <= 1 else "MISMATCH"),
          flush=True)
    return {"p50": p50, "p99": p99, "ok": err <= 1}


# ---- the model on each side -------------------------------------------------
class OpdSide:
    """The model through opd from Python: one graph and (by_ops) the same
    nodes as prepared runs, on host x and y."""

    def __init__(self, c, wt, batch, linear, device, by_ops=True):
        self.linear, self.batch = linear, batch
        params = mlp.param_tensors(wt, linear)
        self.g = mlp.define(c, params, batch, linear, device)
        nl, xshape = mlp.nodes(linear, batch)
        self.x = c.empty(xshape, "float32")
        self.y = c.empty(nl[-1][3], "float32")
        vals = [self.x] + params
        self.ops = []
        for k, (op, ins, act, shape) in enumerate(nl if by_ops else ()):
            out = self.y if k == len(nl) - 1 else c.empty(shape, "float32", device=device)
            kw = {"act": act} if act else {}
            self.ops.append(c.prepare(op, *[vals[i] for i in ins], out=out,
                                      device=device, **kw))
            vals.append(out)

    def set_events(self, ev):
        np.asarray(self.x)[...] = mlp.x_layout(ev, self.linear)

    def answer(self):
        return np.asarray(self.y).reshape(-1).copy()

    def poison(self):
        np.asarray(self.y)[...] = np.nan

    def graph(self):
        self.g.run(self.x, out=self.y)

    def by_ops(self):
        for p in self.ops:
            p()


class OpdDevSide:
    """The graph on x and y in device memory (opd device tensors): run with
    wait=True, answered when done (one round trip), as torch's graph case
    replays on device-resident x and y and synchronizes."""

    def __init__(self, c, o, device):
        self.c, self.o = c, o
        self.dx = c.empty(o.x.shape, "float32", device=device)
        self.dy = c.empty(o.y.shape, "float32", device=device)

    def set_events(self, ev):
        self.o.set_events(ev)
        self.c.run("copy", self.o.x, out=self.dx)
        self.c.synchronize()

    def graph_dev(self):
        self.o.g.run(self.dx, out=self.dy, wait=True)

    def answer(self):
        self.c.run("copy", self.dy, out=self.o.y)
        self.c.synchronize()
        return self.o.answer()

    def poison(self):
        self.o.poison()
        self.c.run("copy", self.o.y, out=self.dy)
        self.c.synchronize()


class TorchSide:
    """The model in torch on `device` ("cpu" or "cuda"), with its CUDA graph
    on CUDA."""

    def __init__(self, w, batch, device):
        self.dev = torch.device(device)
        self.cuda = self.dev.type == "cuda"
        self.w = [torch.from_numpy(w[n]).to(self.dev) for n, *_ in mlp.PARAMS]
        self.x = torch.zeros(batch, mlp.IN, device=self.dev)
        self.y = None
        if self.cuda:
            self.x_host = torch.zeros(batch, mlp.IN).pin_memory()
            self.y_host = torch.zeros(batch, mlp.OUT).pin_memory()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s), torch.no_grad():
                for _ in range(3):
                    self.forward()
            torch.cuda.current_stream().wait_stream(s)
            self.cg = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.cg), torch.no_grad():
                self.gy = self.forward()

    def forward(self):
        w1, b1, w2, b2, w3, b3 = self.w
        h = F.relu(F.linear(self.x, w1, b1))
        h = F.relu(F.linear(h, w2, b2))
        return F.linear(h, w3, b3)

    def set_events(self, ev):
        self.x.copy_(torch.from_numpy(ev))
        if self.cuda:
            self.x_host.copy_(torch.from_numpy(ev))

    def eager(self):
        with torch.no_grad():
            self.y = self.forward()
        if self.cuda:
            torch.cuda.synchronize()

    def graph(self):
        self.cg.replay()
        torch.cuda.synchronize()
        self.y = self.gy

    def graph_io(self):
        self.x.copy_(self.x_host, non_blocking=True)
        self.cg.replay()
        self.y_host.copy_(self.gy, non_blocking=True)
        torch.cuda.synchronize()
        self.y = self.y_host

    def answer(self):
        return self.y.reshape(-1).cpu().numpy().copy()

    def poison(self):
        self.y = None
        if self.cuda:
            self.gy.fill_(float("nan"))
            self.y_host.fill_(float("nan"))


def measure(cases, n, warm):
    """Runs each (name, fn, side) in turns of BLOCKS blocks; returns
    {name: (ns list, its answer)}: each case is run once more at the end
    on a NaN-filled output (side.poison) and side.answer() read, so a
    case that wrote nothing cannot pass on another's answer."""
    clock = time.perf_counter_ns
    for _, fn, _ in cases:
        for _ in range(warm):
            fn()
    lat = {name: [] for name, _, _ in cases}
    per = max(n // BLOCKS, 1)
    for _ in range(BLOCKS):
        for name, fn, _ in cases:
            out = lat[name]
            for _ in range(per):
                t0 = clock()
                fn()
                out.append(clock() - t0)
    got = {}
    for name, fn, side in cases:
        side.poison()
        fn()
        got[name] = (lat[name], side.answer())
    return got


# ---- single process ---------------------------------------------------------
def run_c_bench(a, device):
    """The C client's lines (bench_graph.c) on this daemon: {(batch, case): figures}."""
    exe = a.c_bench
    if exe == "none":
        return {}
    if not os.path.exists(exe):
        print("# bench_graph (C): %s not built, skipped (make %s)" % (exe, exe), flush=True)
        return {}
    cmd = [exe, "--device", device, "--batch", a.batch, "-n", str(a.n)]
    if a.socket:
        cmd += ["--socket", a.socket]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    out = {}
    for ln in r.stdout.splitlines():
        if ln.startswith("# bench_graph:") or ln.startswith("graph "):
            print(ln, flush=True)
        if ln.startswith("graph "):
            kv = dict(f.split("=", 1) for f in ln.split()[1:])
            out[(int(kv["batch"]), "c_" + kv["case"])] = {
                "p50": float(kv["p50_us"]), "p99": float(kv["p99_us"]),
                "ok": kv["check"] == "ok"}
    if r.returncode:
        print(r.stderr, file=sys.stderr)
        sys.exit("bench_graph: %s failed (exit %d)" % (shlex.join(cmd), r.returncode))
    return out


def single(a, c, device, linear, w, wt):
    res = run_c_bench(a, device)
    for batch in [int(b) for b in a.batch.split(",")]:
        ev = mlp.events(1, 0, batch)
        want = mlp.reference(w, ev).reshape(-1)
        o, t = OpdSide(c, wt, batch, linear, device), TorchSide(w, batch, device)
        o.set_events(ev)
        t.set_events(ev)
        cases = [("python_graph", o.graph, o), ("python_ops", o.by_ops, o),
                 ("torch_eager", t.eager, t)]
        if t.cuda:
            d = OpdDevSide(c, o, device)
            d.set_events(ev)
            cases += [("python_graph_dev", d.graph_dev, d),
                      ("torch_graph", t.graph, t), ("torch_graph_io", t.graph_io, t)]
        got = measure(cases, a.n, max(a.n // 10, 20))
        for nm, (ns, ans) in got.items():
            lang, case = nm.split("_", 1)
            res[(batch, nm)] = line(lang, device, batch, case, ns, mlp.error(ans, want))
        base = "torch_graph" if t.cuda else "torch_eager"
        for (b, nm), r in sorted(res.items()):
            if b != batch or nm.startswith("torch"):
                continue
            print("ratio device=%s batch=%d case=%s vs=%s p50_ratio=%.2f p99_over_p50=%.2f"
                  % (device, batch, nm, base, r["p50"] / res[(batch, base)]["p50"],
                     r["p99"] / r["p50"]), flush=True)
        o.g.close()
    return all(r["ok"] for r in res.values())


# ---- --procs: many processes at once ----------------------------------------
def _opd_worker(sock, device, seconds, barrier, q):
    c = opd.connect(sock)
    linear = mlp.has_linear(c)
    o = OpdSide(c, c.attach(PUB_NAME), 1, linear, device, by_ops=False)
    ev = mlp.events(os.getpid() & 0xFFFF, 0, 1)
    o.set_events(ev)
    for _ in range(50):
        o.graph()
    ok = mlp.error(o.answer(), mlp.reference(mlp.weights(SEED), ev)) <= 1
    barrier.wait()
    n, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        o.graph()
        n += 1
    q.put((n, ok))
    barrier.wait()


def _torch_worker(device, threads, seconds, barrier, q):
    torch.set_num_threads(threads)
    w = mlp.weights(SEED)
    t = TorchSide(w, 1, device)
    ev = mlp.events(os.getpid() & 0xFFFF, 0, 1)
    t.set_events(ev)
    fn = t.graph if t.cuda else t.eager
    for _ in range(50):
        fn()
    ok = mlp.error(t.answer(), mlp.reference(w, ev)) <= 1
    barrier.wait()
    n, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        fn()
        n += 1
    q.put((n, ok))
    barrier.wait()


def gpu_memory(pids=None):
    """(MiB used by pids, or when None by every compute process but this
    one (the daemon's, in the opd phase); memory.used of GPU 0), None
    where nvidia-smi cannot tell."""
    def smi(args):
        try:
            r = subprocess.run(["nvidia-smi"] + args + ["--format=csv,noheader,nounits"],
                               capture_output=True, text=True, timeout=20)
            return r.stdout.splitlines() if r.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired):
            return None
    apps = smi(["--query-compute-apps=pid,used_memory"])
    total = smi(["--query-gpu=memory.used"])
    used = None
    if apps:
        rows = [(int(p), int(m)) for p, m in (ln.split(",") for ln in apps if "," in ln)]
        used = sum(m for p, m in rows if (p != os.getpid() if pids is None else p in pids))
        used = used or None
    return used, (int(total[0]) if total else None)


def c_procs(a, device):
    """bench_graph.c --procs: P C clients at once; their requests/s, or None."""
    if a.c_bench == "none" or not os.path.exists(a.c_bench):
        return None
    cmd = [a.c_bench, "--device", device, "--procs", str(a.procs), "--seconds",
           str(a.seconds), "--socket", a.socket]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.seconds + 600)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("procs ")]
    for ln in lines:
        print(ln, flush=True)
    if r.returncode or not lines:
        print(r.stderr, file=sys.stderr)
        sys.exit("bench_graph: %s failed (exit %d)" % (shlex.join(cmd), r.returncode))
    return float(dict(f.split("=", 1) for f in lines[0].split()[1:])["req_per_s"])


def procs(a, c, device, wt):
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    c_rate = c_procs(a, device)
    c.publish(PUB_NAME, wt)
    sides = {}
    for side in ("opd", "torch"):
        barrier, q = ctx.Barrier(a.procs + 1), ctx.Queue()
        if side == "opd":
            ps = [ctx.Process(target=_opd_worker, args=(c.socket, device, a.seconds, barrier, q))
                  for _ in range(a.procs)]
        else:
            ps = [ctx.Process(target=_torch_worker,
                              args=(device, a.threads, a.seconds, barrier, q))
                  for _ in range(a.procs)]
        for p in ps:
            p.start()
        barrier.wait(timeout=600)
        t0 = time.perf_counter()
        time.sleep(a.seconds / 2)
        mem = gpu_memory(None if side == "opd" else {p.pid for p in ps}) \
            if device != "cpu" else (None, None)
        got = [q.get(timeout=a.seconds + 600) for _ in ps]
        wall = time.perf_counter() - t0
        barrier.wait(timeout=600)
        for p in ps:
            p.join()
        n = sum(g[0] for g in got)
        ok = all(g[1] for g in got) and all(p.exitcode == 0 for p in ps)
        sides[side] = (n / wall, mem, ok)
        print("procs side=%s lang=python device=%s procs=%d seconds=%.1f requests=%d "
              "req_per_s=%.0f gpu_mem_mib=%s gpu_used_mib=%s check=%s"
              % (side, device, a.procs, wall, n, n / wall, mem[0], mem[1],
                 "ok" if ok else "MISMATCH"), flush=True)
    (ro, mo, oko), (rt, mt, okt) = sides["opd"], sides["torch"]
    mem_ratio = "%.3f" % (mo[0] / mt[0]) if mo[0] and mt[0] else "n/a"
    print("procs ratio device=%s procs=%d throughput_opd_over_torch=%.2f "
          "c_throughput_opd_over_torch=%s gpu_mem_opd_over_torch=%s"
          % (device, a.procs, ro / rt, "%.2f" % (c_rate / rt) if c_rate else "n/a",
             mem_ratio), flush=True)
    c.unpublish(PUB_NAME)
    return oko and okt


def header(a, c, device, linear):
    print("# bench_graph.py: %s" % " ".join(shlex.quote(x) for x in [sys.executable] + sys.argv))
    print("# date: %s" % datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    card = torch.cuda.get_device_name(torch.device(device).index or 0) \
        if device != "cpu" else "none (CPU backend)"
    print("# machine: %s; cpu: %s; nproc: %d; card: %s" % (platform.node(), _cpu(),
                                                           os.cpu_count(), card))
    print("# torch %s (threads %d on the CPU), numpy %s, python %s; opd graph form: %s; "
          "transport %s" % (torch.__version__, a.threads, np.__version__,
                            platform.python_version(),
                            "linear" if linear else "matmul+add+relu", c.transport), flush=True)


def _cpu():
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                if ln.startswith("model name"):
                    return ln.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--socket", default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", default="1,32")
    ap.add_argument("-n", type=int, default=5000, help="requests per case (default 5000)")
    ap.add_argument("--threads", type=int, default=1, help="torch's CPU threads (default 1)")
    ap.add_argument("--c-bench", default=os.path.join(REPO, "build", "bench", "bench_graph"))
    ap.add_argument("--procs", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=10.0)
    a = ap.parse_args()
    try:
        bs = [int(b) for b in a.batch.split(",")]
        assert all(1 <= b <= 4096 for b in bs)
    except (ValueError, AssertionError):
        ap.error("--batch expects sizes 1..4096 separated by commas, got %r" % a.batch)
    if a.n < BLOCKS:
        ap.error("-n must be at least %d" % BLOCKS)
    if a.procs < 0 or a.seconds <= 0 or a.threads < 1:
        ap.error("--procs must be >= 0, --seconds > 0, --threads >= 1")
    device = a.device
    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        ap.error("--device is cpu, cuda or cuda:N, not %r" % device)
    if device != "cpu" and not torch.cuda.is_available():
        sys.exit("bench_graph: --device %s but torch sees no CUDA device" % device)
    torch.set_num_threads(a.threads)

    c = opd.connect(a.socket)
    a.socket = c.socket
    linear = mlp.has_linear(c)
    header(a, c, device, linear)
    w = mlp.weights(SEED)
    wt = c.from_numpy(mlp.pack(w))
    if device != "cpu":
        wt = wt.to(device, client=c)
    ok = procs(a, c, device, wt) if a.procs else single(a, c, device, linear, w, wt)
    c.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
