#!/usr/bin/env python3
"""bench_latency_gpu.py: issue 39's workload on the GPU machine. A latency
client's request p50/p99, idle and while best-effort processes fill the
GPU, and the best-effort throughput with and without it, for each daemon
configuration named, in one run; optionally the same with per-process
torch (under MPS when --mps). One `key=value` line per measurement.

DESIGN
For each --config (daemon options; ";" between configurations), a
private daemon (build/opd or $OPD_BIN) on a temp socket, then phases:

  idle       the latency client (priority="latency") times --calls
             requests alone: --latency mlp: the hft_server MLP as one
             graph on device x and y, g.run(dx, out=dy, wait=True),
             answered when done (bench_graph.py's graph_dev); softmax:
             a 1x1024 float32 softmax on device tensors + synchronize.
  be_alone   --workers best-effort processes (spawn) for --seconds: even
             ones loop softmax 8192x1024 float32, odd ones bf16 matmul
             4096^3, on device tensors. --mode wait: each run followed by
             synchronize (one at a time per worker); async: runs enqueued
             without waiting (synchronize every 32). Their runs/s per op.
  loaded     the same workers and the latency client timed meanwhile;
             the workers' runs/s under it and as a share of be_alone.
For each mode of --modes. Then, with --torch, the same phases with torch
in each process (its own CUDA context; the MLP in eager + synchronize for
the latency side), under MPS with --mps (bench_gpu.start_mps).

The targets (issue 39): loaded p50 <= 1.1x idle p50 and p99 <= 1.3x idle
p99; best-effort throughput >= 85% of be_alone. The ratio lines print
both. The daemon's STATS "device_queue" and "classes" are printed after
each configuration.

Usage: bench_latency_gpu.py [--latency mlp|softmax] [--calls 3000]
       [--workers 15] [--seconds 6] [--modes wait,async]
       [--config "--device-be-inflight 4;--device-be-inflight 0"]
       [--torch] [--mps]
Needs numpy and this checkout's build (libopd, opd); torch for --torch.
"""
import argparse
import multiprocessing as mp
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, os.path.join(REPO, "examples", "hft_server"))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import opd  # noqa: E402

SM_ROWS, SM_COLS = 8192, 1024
MM = 4096


def out(line):
    print(line, flush=True)


def pct(ts_ns):
    ts = np.sort(np.asarray(ts_ns, dtype=np.float64)) / 1e3
    return ts[len(ts) // 2], ts[min(len(ts) - 1, int(len(ts) * 0.99))], ts.mean()


# ---- the latency side --------------------------------------------------------

def opd_latency(sock, kind, calls):
    """Times calls requests of the latency class; returns their ns."""
    import mlp
    with opd.connect(sock, priority="latency") as c:
        if kind == "mlp":
            linear = mlp.has_linear(c)
            wt = c.from_numpy(mlp.pack(mlp.weights(42)), device="cuda")
            g = mlp.define(c, mlp.param_tensors(wt, linear), 1, linear, "cuda")
            nl, xshape = mlp.nodes(linear, 1)
            dx = c.empty(xshape, "float32", device="cuda")
            dy = c.empty(nl[-1][3], "float32", device="cuda")

            def step():
                g.run(dx, out=dy, wait=True)
        else:
            dx = c.from_numpy(np.linspace(-1, 1, 1024, dtype=np.float32).reshape(1, 1024),
                              device="cuda")
            dy = c.empty((1, 1024), "float32", device="cuda")

            def step():
                c.softmax(dx, out=dy)
                c.synchronize()
        return timed(step, calls)


def torch_latency(kind, calls):
    import torch
    import torch.nn.functional as F
    dev = torch.device("cuda")
    if kind == "mlp":
        import mlp
        w = [torch.from_numpy(mlp.weights(42)[n]).to(dev) for n, *_ in mlp.PARAMS]
        x = torch.zeros(1, mlp.IN, device=dev)

        def step():
            with torch.no_grad():
                h = F.relu(F.linear(x, w[0], w[1]))
                h = F.relu(F.linear(h, w[2], w[3]))
                F.linear(h, w[4], w[5])
            torch.cuda.synchronize()
    else:
        x = torch.linspace(-1, 1, 1024, device=dev).reshape(1, 1024)

        def step():
            torch.softmax(x, -1)
            torch.cuda.synchronize()
    return timed(step, calls)


def timed(step, calls, warm=200):
    for _ in range(warm):
        step()
    pc, ts = time.perf_counter_ns, []
    for _ in range(calls):
        t0 = pc()
        step()
        ts.append(pc() - t0)
    return ts


# ---- the best-effort side ----------------------------------------------------

def be_worker(impl, sock, idx, mode, ready, go, stop, q):
    """A best-effort process: softmax (even idx) or bf16 matmul (odd) on
    device tensors until stop; puts (op, runs/s) or ("error", why)."""
    op = "softmax" if idx % 2 == 0 else "matmul"
    try:
        if impl == "opd":
            c = opd.connect(sock)
            if op == "softmax":
                x = c.from_numpy(np.random.default_rng(idx).standard_normal(
                    (SM_ROWS, SM_COLS), np.float32), device="cuda")
                y = c.empty((SM_ROWS, SM_COLS), "float32", device="cuda")
                run = lambda: c.softmax(x, out=y)  # noqa: E731
            else:
                a = c.empty((MM, MM), "bfloat16", device="cuda")
                b = c.empty((MM, MM), "bfloat16", device="cuda")
                y = c.empty((MM, MM), "bfloat16", device="cuda")
                run = lambda: c.run("matmul", a, b, out=y)  # noqa: E731
            sync = c.synchronize
        else:
            import torch
            if op == "softmax":
                x = torch.randn((SM_ROWS, SM_COLS), device="cuda")
                run = lambda: torch.softmax(x, -1)  # noqa: E731
            else:
                a = torch.zeros((MM, MM), device="cuda", dtype=torch.bfloat16)
                run = lambda: torch.matmul(a, a)  # noqa: E731
            sync = torch.cuda.synchronize
        for _ in range(5):
            run()
        sync()
        ready.release()
        go.wait()
        n, t0 = 0, time.perf_counter()
        while not stop.is_set():
            run()
            n += 1
            if mode == "wait" or n % 32 == 0:
                sync()
        sync()
        q.put((op, n / (time.perf_counter() - t0)))
    except BaseException as e:  # reported, never a hang of the parent
        ready.release()
        q.put(("error", "%s: %s" % (type(e).__name__, e)))


def with_workers(impl, sock, args, mode, during, env=None):
    """Runs args.workers best-effort processes; during() once they loop (or
    sleeps args.seconds); returns (during's result, {op: runs/s})."""
    ctx = mp.get_context("spawn")
    ready, go, stop, q = ctx.Semaphore(0), ctx.Event(), ctx.Event(), ctx.Queue()
    old = dict(os.environ)
    if env:
        os.environ.update(env)
    try:
        ps = [ctx.Process(target=be_worker, args=(impl, sock, i, mode, ready, go, stop, q))
              for i in range(args.workers)]
        for p in ps:
            p.start()
    finally:
        os.environ.clear()
        os.environ.update(old)
    for _ in ps:
        ready.acquire(timeout=180)
    go.set()
    t0 = time.perf_counter()
    res = during() if during else None
    left = args.seconds - (time.perf_counter() - t0)
    if left > 0:
        time.sleep(left)
    stop.set()
    rates = {}
    for _ in ps:
        op, r = q.get(timeout=180)
        if op == "error":
            raise RuntimeError("a best-effort worker failed: " + r)
        rates[op] = rates.get(op, 0.0) + r
    for p in ps:
        p.join(30)
    return res, rates


# ---- one side, all phases ------------------------------------------------------

def phases(label, impl, sock, args, latency, env=None):
    """idle, then per mode be_alone and loaded; prints the lines and ratios."""
    idle = pct(latency())
    out("side=%s phase=idle p50_us=%.1f p99_us=%.1f mean_us=%.1f" % ((label,) + idle))
    for mode in args.modes.split(","):
        _, alone = with_workers(impl, sock, args, mode, None, env)
        out("side=%s mode=%s phase=be_alone %s" % (label, mode, " ".join(
            "%s_runs_per_s=%.1f" % kv for kv in sorted(alone.items()))))
        ts, loaded = with_workers(impl, sock, args, mode, latency, env)
        lp = pct(ts)
        share = min(loaded[k] / alone[k] for k in alone if alone[k] > 0)
        out("side=%s mode=%s phase=loaded p50_us=%.1f p99_us=%.1f mean_us=%.1f %s "
            "be_share_min=%.3f" % ((label, mode) + lp + (" ".join(
                "%s_runs_per_s=%.1f" % kv for kv in sorted(loaded.items())), share)))
        out("ratio side=%s mode=%s p50_x_idle=%.2f p99_x_idle=%.2f be_share=%.3f "
            "targets=1.1,1.3,0.85" % (label, mode, lp[0] / idle[0], lp[1] / idle[1], share))


def start_daemon(extra):
    binary = os.environ.get("OPD_BIN") or os.path.join(REPO, "build", "opd")
    d = tempfile.mkdtemp(prefix="opd-bench-lat-gpu.")
    sock = os.path.join(d, "opd.sock")
    log = open(os.path.join(d, "opd.log"), "wb")
    p = subprocess.Popen([binary, "--socket", sock, "--max-arena-bytes", str(1 << 42),
                          "--max-session-bytes", str(1 << 42)] + shlex.split(extra),
                         stdout=log, stderr=log)
    for _ in range(1000):
        if os.path.exists(sock):
            break
        if p.poll() is not None:
            raise RuntimeError("opd exited at start: see %s" % log.name)
        time.sleep(0.01)
    time.sleep(0.3)
    return p, d, sock, log


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--latency", default="mlp", choices=("mlp", "softmax"))
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--workers", type=int, default=15)
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--modes", default="wait,async")
    ap.add_argument("--config", default="--device-be-inflight 4;--device-be-inflight 0")
    ap.add_argument("--torch", action="store_true")
    ap.add_argument("--mps", action="store_true")
    args = ap.parse_args()
    out("# bench_latency_gpu: latency=%s calls=%d workers=%d (softmax %dx%d f32 / "
        "matmul %d^3 bf16) seconds=%g modes=%s" % (args.latency, args.calls, args.workers,
                                                  SM_ROWS, SM_COLS, MM, args.seconds,
                                                  args.modes))
    try:
        name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
        out("# card: %s" % name.splitlines()[0])
    except Exception:
        pass
    for extra in [c.strip() for c in args.config.split(";")]:
        p, d, sock, log = start_daemon(extra)
        label = "opd[%s]" % (extra or "defaults")
        try:
            phases(label.replace(" ", ""), "opd", sock, args,
                   lambda: opd_latency(sock, args.latency, args.calls))
            with opd.connect(sock) as c:
                st = c.stats()
                out("daemon config=%r device_queue=%s" % (extra, st.get("device_queue")))
                for nm, cl in st["classes"].items():
                    out("daemon config=%r class=%s runs=%d wait_p50_us=%g wait_p99_us=%g "
                        "run_p50_us=%g run_p99_us=%g" % (
                            extra, nm, cl["runs"], cl["wait"]["p50_us"],
                            cl["wait"]["p99_us"], cl["run"]["p50_us"], cl["run"]["p99_us"]))
        finally:
            p.terminate()
            p.wait(60)
            log.close()
            shutil.rmtree(d, ignore_errors=True)
    if args.torch:
        env = None
        if args.mps:
            import bench_gpu
            env = bench_gpu.start_mps()
        try:
            old = dict(os.environ)
            os.environ.update(env or {})
            # the latency side in a child: this process keeps no CUDA context
            ctx = mp.get_context("spawn")
            with ctx.Pool(1) as pool:
                lat = lambda: pool.apply(torch_latency, (args.latency, args.calls))  # noqa: E731
                phases("torch" + ("_mps" if env else ""), "torch", None, args, lat, env)
            os.environ.clear()
            os.environ.update(old)
        finally:
            if env:
                bench_gpu.stop_mps(env)


if __name__ == "__main__":
    main()
