#!/usr/bin/env python3
"""bench_latency_cpu.py: a latency client's small op on the CPU backend,
idle and while best-effort processes flood large runs, in one run. One
`key=value` line per measurement.

DESIGN
A private daemon (build/opd, or $OPD_BIN) on a temp socket, then phases:

  idle        a priority="latency" client times --calls softmax 1x1024
              float32 calls (out= preallocated; perf_counter_ns around
              each), alone: p50/p99/mean in microseconds.
  be_alone    --workers best-effort processes (spawn), each looping
              --op on --rows x 1024 float32 for --seconds: their
              aggregate runs/s.
  loaded      the same workers, and the latency client timed as in idle
              meanwhile; the workers' runs/s under it.
  loaded_be   the same, the small-op client connected as best-effort:
              what the class changes. loaded and loaded_be take turns,
              --rounds times.

The latency class jumps the kernel threads' queue and best-effort kernels
yield between slices (docs/scheduling.md); a 1x1024 softmax is below
--inline-bytes, so it runs on the loop thread and the OS scheduler decides
how much of a core it gets while the workers' kernels run. The VM is
shared and noisy: compare phases of one run only.

Usage: bench_latency_cpu.py [--calls 3000] [--workers 2] [--seconds 4]
                            [--op softmax|layernorm] [--rows 4096] [--rounds 2]
                            [-- DAEMON OPTIONS...]
Needs numpy; PYTHONPATH=python and OPD_LIB=build/libopd.so in a checkout.
"""
import argparse
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))

import numpy as np  # noqa: E402

import opd  # noqa: E402


def out(line):
    print(line, flush=True)


def pct(ts_ns):
    ts = np.sort(np.asarray(ts_ns, dtype=np.float64)) / 1e3
    return "p50_us=%.1f p99_us=%.1f mean_us=%.1f n=%d" % (
        ts[len(ts) // 2], ts[min(len(ts) - 1, int(len(ts) * 0.99))], ts.mean(), len(ts))


def small_op(sock, prio, calls):
    """Times calls softmax 1x1024 on a connection of class prio."""
    with opd.connect(sock, priority=prio) as c:
        x = c.from_numpy(np.linspace(-1, 1, 1024, dtype=np.float32).reshape(1, 1024))
        y = c.empty((1, 1024), "float32")
        for _ in range(200):
            c.softmax(x, out=y)
        pc, ts = time.perf_counter_ns, []
        for _ in range(calls):
            t0 = pc()
            c.softmax(x, out=y)
            ts.append(pc() - t0)
        return ts


def worker(sock, op, rows, ready, go, stop, q):
    """A best-effort process: loops op on rows x 1024 until stop."""
    with opd.connect(sock) as c:
        x = c.from_numpy(np.random.default_rng(os.getpid()).standard_normal(
            (rows, 1024), np.float32))
        y = c.empty((rows, 1024), "float32")
        w = c.from_numpy(np.ones(1024, np.float32))
        run = (lambda: c.softmax(x, out=y)) if op == "softmax" else \
            (lambda: c.run("layernorm", x, w, out=y))
        run()
        ready.release()
        go.wait()
        n, t0 = 0, time.perf_counter()
        while not stop.is_set():
            run()
            n += 1
        q.put(n / (time.perf_counter() - t0))


def with_workers(sock, args, during):
    """Starts args.workers best-effort processes; runs during() once they
    loop (or sleeps args.seconds); returns (during's result, runs/s)."""
    ctx = mp.get_context("spawn")
    ready, go, stop, q = ctx.Semaphore(0), ctx.Event(), ctx.Event(), ctx.Queue()
    ps = [ctx.Process(target=worker, args=(sock, args.op, args.rows, ready, go, stop, q))
          for _ in range(args.workers)]
    for p in ps:
        p.start()
    for _ in ps:
        ready.acquire()
    go.set()
    t0 = time.perf_counter()
    res = during() if during else None
    left = args.seconds - (time.perf_counter() - t0)
    if left > 0:
        time.sleep(left)
    stop.set()
    rates = [q.get(timeout=120) for _ in ps]
    for p in ps:
        p.join()
    return res, sum(rates)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=4)
    ap.add_argument("--op", default="softmax", choices=("softmax", "layernorm"))
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("daemon_args", nargs="*")
    args = ap.parse_args()
    binary = os.environ.get("OPD_BIN") or os.path.join(REPO, "build", "opd")
    d = tempfile.mkdtemp(prefix="opd-bench-latency.")
    sock = os.path.join(d, "opd.sock")
    log = open(os.path.join(d, "opd.log"), "wb")
    daemon = subprocess.Popen([binary, "--socket", sock, *args.daemon_args],
                              stdout=log, stderr=log)
    try:
        for _ in range(500):
            if os.path.exists(sock):
                break
            time.sleep(0.01)
        time.sleep(0.2)
        out("# bench_latency_cpu: nproc=%d workers=%d op=%s %dx1024 calls=%d "
            "seconds=%g daemon_args=%s" % (os.cpu_count(), args.workers, args.op,
                                          args.rows, args.calls, args.seconds,
                                          " ".join(args.daemon_args) or "-"))
        out("phase=idle class=latency %s" % pct(small_op(sock, "latency", args.calls)))
        _, rate = with_workers(sock, args, None)
        out("phase=be_alone be_runs_per_s=%.1f" % rate)
        for r in range(args.rounds):     # taking turns: the VM's drift on both
            for phase, prio in (("loaded", "latency"), ("loaded_be", "best-effort")):
                ts, rate = with_workers(sock, args, lambda: small_op(sock, prio, args.calls))
                out("phase=%s round=%d class=%s %s be_runs_per_s=%.1f" % (
                    phase, r, prio, pct(ts), rate))
        with opd.connect(sock) as c:
            for name, cl in c.stats()["classes"].items():
                out("daemon class=%s cpu_runs=%d wait_p50_us=%g wait_p99_us=%g "
                    "run_p50_us=%g run_p99_us=%g" % (
                        name, cl["runs"], cl["wait"]["p50_us"], cl["wait"]["p99_us"],
                        cl["run"]["p50_us"], cl["run"]["p99_us"]))
    finally:
        daemon.terminate()
        daemon.wait(30)
        log.close()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
