#!/usr/bin/env python3
"""bench_python.py: what the opd Python package costs, and what it saves.

DESIGN
Two groups of figures, each line `key=value` pairs (bench/results/README.md):

  latency   Round trips timed one at a time with perf_counter_ns, cases
            taking turns in 10 blocks so drift hits all alike:
              ctypes_version  opd_version() through ctypes: the floor of any
                              ctypes call (no I/O)
              ctypes_noop     opd_run(noop) straight through ctypes
              py_noop         client.run("noop"): the package's whole path
              py_softmax_out  client.softmax(x, out=y), x (8, 64)
            p50/p99 in ns; py_noop's overhead over ctypes_noop is what the
            package adds to a request.
  handoff   Giving an array to another (already running) process and getting
            a result back, at 4 KiB, 1 MiB, 64 MiB and 256 MiB:
              opd_ref   the worker gets a pickled tensor reference and acks
              opd_relu  ... and runs relu through its own opd connection into
                        an output tensor the parent reads: zero copy
              pipe      the array pickled through multiprocessing.Pipe, relu
                        by numpy in the worker, the result pickled back
            Per size: p50 per round trip in microseconds, and input MB/s.

Usage: bench_python.py [--socket PATH] [-n N] [--sizes 4K,1M,64M,256M]
Needs numpy and a running daemon ($OPD_SOCKET); bench/run.sh runs it.
"""
import argparse
import ctypes
import datetime
import multiprocessing as mp
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import opd  # noqa: E402


def pct(ns, p):
    s = sorted(ns)
    return s[min(len(s) - 1, max(0, int(round(p / 100 * len(s) + 0.5)) - 1))]


def latency(c, n):
    lib = opd._lib.load()
    h = c._handle()
    x = c.from_numpy(np.random.rand(8, 64).astype(np.float32))
    y = c.empty_like(x)
    cases = {
        "ctypes_version": lib.opd_version,
        "ctypes_noop": lambda: lib.opd_run(h, b"noop", None, 0, None, 0, None, 0),
        "py_noop": lambda: c.run("noop"),
        "py_softmax_out": lambda: c.softmax(x, out=y),
    }
    times = {k: [] for k in cases}
    clock = time.perf_counter_ns
    for f in cases.values():                    # warm up
        for _ in range(max(100, n // 20)):
            f()
    for _ in range(10):
        for k, f in cases.items():
            t = times[k]
            for _ in range(n // 10):
                t0 = clock()
                f()
                t.append(clock() - t0)
    base = pct(times["ctypes_noop"], 50)
    for k, t in times.items():
        print("latency case=%s n=%d p50_ns=%d p99_ns=%d mean_ns=%d ctypes_noop_p50_ns=%d"
              % (k, len(t), pct(t, 50), pct(t, 99), sum(t) // len(t), base))


def transports(sock, n):
    """The noop round trip from Python over each transport (rings with spin
    or adaptive waiting, the socket), next to a bare ctypes call measured in
    the same run: `latency transport=... p50_ns=...` lines."""
    lib = opd._lib.load()
    clock = time.perf_counter_ns
    bare = []
    for _ in range(n):
        t0 = clock()
        lib.opd_version()
        bare.append(clock() - t0)
    bare_p50 = pct(bare, 50)
    for wait in ("spin", "adaptive", "socket"):
        if wait == "spin" and (os.cpu_count() or 1) < 2:
            continue
        try:
            c = opd.connect(sock, wait=wait)
        except opd.OpdError as e:
            print("error transport=%s reason=%r" % (wait, str(e)))
            continue
        for _ in range(max(100, n // 20)):
            c.run("noop")
        t = []
        for _ in range(n):
            t0 = clock()
            c.run("noop")
            t.append(clock() - t0)
        print("latency transport=%s from=python case=noop n=%d p50_ns=%d "
              "p99_ns=%d p999_ns=%d ctypes_call_p50_ns=%d" % (
                  wait, n, pct(t, 50), pct(t, 99), pct(t, 99.9), bare_p50))
        run = c.prepare("noop")
        for _ in range(max(100, n // 20)):
            run()
        t = []
        for _ in range(n):
            t0 = clock()
            run()
            t.append(clock() - t0)
        run.close()
        c.close()
        print("latency transport=%s from=python case=noop_prepared n=%d p50_ns=%d "
              "p99_ns=%d p999_ns=%d ctypes_call_p50_ns=%d" % (
                  wait, n, pct(t, 50), pct(t, 99), pct(t, 99.9), bare_p50))


def worker(conn, sock):
    opd.set_default_socket(sock)
    c = opd.client()
    while True:
        msg = conn.recv()
        if msg is None:
            return
        kind, payload = msg
        if kind == "ref":
            conn.send(True)
        elif kind == "relu":
            x, y = payload
            c.relu(x, out=y)
            conn.send(True)
        else:
            conn.send(np.maximum(payload, 0))


def handoff(c, sizes, ctx):
    parent, child = ctx.Pipe()
    p = ctx.Process(target=worker, args=(child, c.socket))
    p.start()
    try:
        for label, nbytes in sizes:
            reps = max(3, min(2000, (64 << 20) // nbytes))
            a = np.random.rand(nbytes // 4).astype(np.float32) - 0.5
            x = c.from_numpy(a)
            y = c.empty_like(x)
            ref = np.maximum(a, 0)
            res = {}
            for case in ("opd_ref", "opd_relu", "pipe"):
                ts, out = [], None
                for i in range(reps + 1):
                    t0 = time.perf_counter_ns()
                    if case == "opd_ref":
                        parent.send(("ref", x))
                        parent.recv()
                    elif case == "opd_relu":
                        parent.send(("relu", (x, y)))
                        parent.recv()
                        out = y.numpy()
                    else:
                        parent.send(("pipe", a))
                        out = parent.recv()
                    if i >= 1:                      # the first: warm-up
                        ts.append(time.perf_counter_ns() - t0)
                if case != "opd_ref":
                    assert np.array_equal(out, ref), case
                res[case] = ts
                out = None
            for case, ts in res.items():
                p50 = pct(ts, 50)
                print("handoff size=%s bytes=%d case=%s n=%d p50_us=%.1f p99_us=%.1f "
                      "mb_per_s=%.0f" % (label, nbytes, case, len(ts), p50 / 1e3,
                                         pct(ts, 99) / 1e3, nbytes / 1e6 / (p50 / 1e9)))
            print("handoff size=%s speedup_relu_vs_pipe=%.2f" % (
                label, pct(res["pipe"], 50) / pct(res["opd_relu"], 50)))
            del x, y, a, ref
    finally:
        parent.send(None)
        p.join(30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", default=None)
    ap.add_argument("-n", type=int, default=20000, help="round trips per latency case")
    ap.add_argument("--sizes", default="4K,1M,64M,256M")
    args = ap.parse_args()
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    sizes = [(s, int(s[:-1]) * units[s[-1]]) for s in args.sizes.split(",")]
    c = opd.connect(args.socket)
    print("# bench_python date=%s machine=%s cpu=%s nproc=%d python=%s numpy=%s "
          "libopd=%s start=fork" % (
              datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
              platform.node(), platform.machine(), os.cpu_count(),
              platform.python_version(), np.__version__, opd.lib_version()))
    latency(c, args.n)
    transports(args.socket, args.n)
    handoff(c, sizes, mp.get_context("fork"))
    c.close()


if __name__ == "__main__":
    main()
