#!/usr/bin/env python3
"""client.py: one Python worker of examples/hft_server. Attaches the
published weights, defines the MLP as one graph on them, answers R
requests and prints the latency of a request (p50 / p99 / p99.9).

    PYTHONPATH=python python3 examples/hft_server/client.py \
        --socket /tmp/opd.sock [--name hft_mlp] [--id 3] [--requests 20000] \
        [--device cpu|cuda|cuda:N] [--check-every 64] [--seed 42]

DESIGN
As client.c: the attach, the graph (c.graph: the daemon checks every node
once), the input x and output y are made before the loop; a request is
writing the market event into x (a numpy view of the shared memory: no
copy through the socket) and g.run(x, out=y), the hot path that allocates
and copies nothing, then reading y. The events are made up front (numpy
in bulk) so the timer covers the request, not the event generator. The
graph uses `linear` nodes when the daemon has the op, else matmul + add +
relu (mlp.py); the line printed says which. Every --check-every-th answer
is checked against mlp.reference on weights rebuilt here from --seed (the
publisher's; run.sh passes the same to both). Client.attach types the
publication from the dtype and shape in its meta: one float32 vector of
all the weights, which mlp.param_tensors views without copying.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mlp  # noqa: E402  (this example's model, beside this file)

import opd  # noqa: E402


def positive(s):
    v = int(s)
    if v < 1:
        raise argparse.ArgumentTypeError("must be a positive integer, not %s" % s)
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--socket", default=None)
    ap.add_argument("--name", default="hft_mlp")
    ap.add_argument("--id", type=positive, default=3)
    ap.add_argument("--requests", type=positive, default=20000)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--check-every", type=positive, default=64)
    ap.add_argument("--seed", type=int, default=42,
                    help="the publisher's seed, for the reference (default 42)")
    a = ap.parse_args()

    c = opd.connect(a.socket)
    raw = c.attach(a.name)                    # the daemon's copy: read-only
    if raw.dtype != "float32" or raw.nbytes != mlp.layout()[1]:
        sys.exit("client c%d: %s is not an hft_mlp publication (%s %s)"
                 % (a.id, a.name, raw.dtype, raw.shape))
    ref_w = mlp.weights(a.seed)

    linear = mlp.has_linear(c)
    g = mlp.define(c, mlp.param_tensors(raw, linear), 1, linear, a.device)
    x = c.empty(mlp.nodes(linear, 1)[1], "float32")
    xs = np.asarray(x).reshape(-1)            # a view of x's shared memory
    warm = min(a.requests // 10, 200)
    ev = mlp.events(a.id, 0, warm + a.requests)
    shape, dtype = g.outputs[0]               # what the daemon inferred at define
    y = c.empty(shape, dtype)                 # host memory, also for a cuda graph
    ys = np.asarray(y).reshape(-1)

    lat = np.empty(a.requests, np.int64)
    worst, checked = 0.0, 0
    clock = time.perf_counter_ns
    for r in range(-warm, a.requests):
        e = ev[r + warm]
        t0 = clock()
        xs[:] = e
        g.run(x, out=y)
        answer = float(ys[0])
        t1 = clock()
        if r >= 0:
            lat[r] = t1 - t0
        if r == 0 or r == a.requests - 1 or (r > 0 and r % a.check_every == 0):
            worst = max(worst, mlp.error(answer, mlp.reference(ref_w, e[None, :])))
            checked += 1
    lat.sort()

    def pct(q):          # nearest rank, as client.c
        return lat[max(int(np.ceil(q * len(lat))), 1) - 1] / 1e3

    ok = worst <= 1.0
    print("client name=c%d lang=python path=%s device=%s requests=%d p50_us=%.1f "
          "p99_us=%.1f p999_us=%.1f max_us=%.1f checked=%d err_over_tol=%.3g result=%s"
          % (a.id, "linear" if linear else "matmul+add+relu", a.device, a.requests,
             pct(0.50), pct(0.99), pct(0.999), lat[-1] / 1e3, checked, worst,
             "ok" if ok else "MISMATCH"), flush=True)
    g.close()
    c.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
