#!/usr/bin/env python3
"""bench_spin.py: what a spinning client costs the work on a host with few
cores.

DESIGN
On a host with few cores a `spin` client's busy wait and the daemon's
spinning loop can take the cores the kernels need. Two groups of figures,
each line `key=value` pairs (bench/results/README.md), every case measured
in the same run so that the ratios compare like with like:

  ops     p50 of one call (microseconds) of ops above the inline limit
          (softmax (256, 1024), relu (1 Mi), matmul (256, 256) x (256, 256),
          float32) over `adaptive` and over `spin`, in alternating blocks;
          spin/adaptive is the ratio to watch (1.0: spinning costs nothing).
  idle    the user's own CPU work (torch.mm (384, 384) x (384, 384), or
          numpy's if torch is missing) timed with no opd client, with an
          idle adaptive client connected, and with an idle spin client
          connected; the ratio against no client is what an idle
          connection costs.

It starts its own daemon (--opd, default build/opd) on a private socket,
so that two builds can be compared by running it twice.

Usage: bench_spin.py [--opd PATH] [--lib PATH] [--daemon-args "..."]
                     [-n N] [--blocks B]
Needs numpy (torch optional) and Debian's /usr/bin/python3.
"""
import argparse
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))


def p50(xs):
    s = sorted(xs)
    return s[len(s) // 2]


def start_daemon(opd_bin, sock, log, extra):
    d = subprocess.Popen([opd_bin, "-s", sock, "-l", "info"] + extra,
                         stdout=log, stderr=log)
    for _ in range(200):
        if os.path.exists(sock):
            return d
        time.sleep(0.02)
    d.kill()
    raise SystemExit("bench_spin: the daemon did not start")


def ops_case(opd, sock, n, blocks):
    clients = {w: opd.connect(sock, wait=w) for w in ("adaptive", "spin")}
    work = {}
    for w, c in clients.items():
        x = c.from_numpy(np.random.rand(256, 1024).astype(np.float32))
        y = c.empty_like(x)
        r = c.from_numpy(np.random.rand(1 << 20).astype(np.float32) - 0.5)
        ry = c.empty_like(r)
        a = c.from_numpy(np.random.rand(256, 256).astype(np.float32))
        b = c.from_numpy(np.random.rand(256, 256).astype(np.float32))
        m = c.empty((256, 256))
        work[w] = {
            "softmax": lambda c=c, x=x, y=y: c.softmax(x, out=y),
            "relu": lambda c=c, r=r, ry=ry: c.relu(r, out=ry),
            "matmul": lambda c=c, a=a, b=b, m=m: c.matmul(a, b, out=m),
        }
    times = {(w, op): [] for w in work for op in work[w]}
    clock = time.perf_counter_ns
    for _ in range(blocks):
        for w in work:
            for op, f in work[w].items():
                f()  # warm
                for _ in range(n):
                    t0 = clock()
                    f()
                    times[(w, op)].append(clock() - t0)
    for op in ("softmax", "relu", "matmul"):
        a = p50(times[("adaptive", op)]) / 1e3
        s = p50(times[("spin", op)]) / 1e3
        print("ops op=%s adaptive_p50_us=%.1f spin_p50_us=%.1f "
              "spin_over_adaptive=%.2f" % (op, a, s, s / a))
    for c in clients.values():
        c.close()


def user_work():
    try:
        import torch
        torch.set_num_threads(os.cpu_count() or 1)
        a = torch.rand(384, 384)
        b = torch.rand(384, 384)
        return "torch.mm", lambda: torch.mm(a, b)
    except ImportError:
        a = np.random.rand(384, 384).astype(np.float32)
        b = np.random.rand(384, 384).astype(np.float32)
        return "numpy.dot", lambda: np.dot(a, b)


def time_work(f, n):
    clock = time.perf_counter_ns
    ts = []
    for _ in range(n):
        t0 = clock()
        f()
        ts.append(clock() - t0)
    return p50(ts)


def idle_case(opd, sock, n, blocks):
    name, f = user_work()
    for _ in range(20):
        f()
    res = {"none": [], "adaptive": [], "spin": []}
    for _ in range(blocks):
        for w in res:
            c = None if w == "none" else opd.connect(sock, wait=w)
            time.sleep(0.05)  # the daemon settles into its wait
            res[w].append(time_work(f, n))
            if c is not None:
                c.close()
            time.sleep(0.05)
    base = p50(res["none"])
    for w in ("adaptive", "spin"):
        t = p50(res[w])
        print("idle work=%s client=%s work_p50_us=%.1f none_p50_us=%.1f "
              "over_none=%.2f" % (name, w, t / 1e3, base / 1e3, t / base))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--opd", default=os.path.join(HERE, "..", "build", "opd"))
    ap.add_argument("--lib", default=None, help="libopd.so (default: $OPD_LIB)")
    ap.add_argument("--daemon-args", default="",
                    help="extra daemon options, e.g. \"--spin always\"")
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--blocks", type=int, default=5)
    args = ap.parse_args()
    if args.lib:
        os.environ["OPD_LIB"] = args.lib
    import opd
    print("# bench_spin %s, %s, %d CPUs, opd %s %s" % (
        time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), platform.node(),
        os.cpu_count(), os.path.abspath(args.opd), args.daemon_args))
    tmp = tempfile.mkdtemp(prefix="opd-bench-spin.")
    sock = os.path.join(tmp, "opd.sock")
    log = open(os.path.join(tmp, "opd.log"), "w")
    d = start_daemon(args.opd, sock, log, args.daemon_args.split())
    try:
        ops_case(opd, sock, args.n, args.blocks)
        idle_case(opd, sock, max(args.n // 4, 20), args.blocks)
    finally:
        d.send_signal(signal.SIGTERM)
        d.wait()
        log.close()
        with open(os.path.join(tmp, "opd.log")) as f:
            for line in f:
                if "spin asked" in line:
                    print("# daemon: " + line.strip())


if __name__ == "__main__":
    main()
