#!/usr/bin/env python3
"""multiprocess_workers.py: a Pool of N workers running operators through opd
on shared tensors, checked, timed against two baselines in the same run.

DESIGN
The parent fills one batch x (R, C) in shared memory and allocates the
outputs once; each task is a slice of rows. Three ways of doing the same
work (softmax, layernorm with weight and bias, matmul by W (C, K)) per
slice are timed:

  opd     workers get pickled tensor references (a few hundred bytes),
          run the three ops through their own opd connection, and write
          into the parent's output tensors: no copy in either direction.
  numpy   workers get the same references but compute with numpy
          themselves (zero-copy views): what opd replaces.
  queue   the rows are pickled to workers through multiprocessing
          queues/pipes (Pool.map arguments), computed with numpy, and the
          results pickled back: the usual multiprocessing pattern.

Results of all three are checked against a numpy reference in the parent.
Output: one `key=value` line per method (rows/s, MB/s of input).

Usage: python3 examples/multiprocess_workers.py [--socket PATH] [--workers N]
           [--rows R] [--cols C] [--rounds K]
Needs numpy and a running daemon (make run starts one).
"""
import argparse
import multiprocessing as mp
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import opd  # noqa: E402


def ref_softmax(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def ref_layernorm(a, w, b, eps=1e-5):
    mu = a.mean(-1, keepdims=True)
    var = a.var(-1, keepdims=True)
    return (a - mu) / np.sqrt(var + eps) * w + b


def work_opd(x, w, b, W, y_sm, y_ln, y_mm):
    c = opd.client()              # the worker's connection (pool_initializer)
    c.softmax(x, out=y_sm)
    c.layernorm(x, w, b, eps=1e-5, out=y_ln)
    c.matmul(x, W, out=y_mm)
    return x.shape[0]


def work_numpy_shared(x, w, b, W, y_sm, y_ln, y_mm):
    a = x.numpy()
    y_sm.numpy()[:] = ref_softmax(a)
    y_ln.numpy()[:] = ref_layernorm(a, w.numpy(), b.numpy())
    np.matmul(a, W.numpy(), out=y_mm.numpy())
    return x.shape[0]


_consts = None


def init_queue(w, b, W):
    global _consts
    _consts = (w, b, W)


def work_queue(a):
    w, b, W = _consts
    return ref_softmax(a), ref_layernorm(a, w, b), a @ W


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--socket", default=None)
    ap.add_argument("--workers", type=int, default=max(2, os.cpu_count() or 2))
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=1024)
    ap.add_argument("--out-cols", type=int, default=256)
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    R, C, K, k = args.rows, args.cols, args.out_cols, args.chunk

    rng = np.random.default_rng(0)
    c = opd.connect(args.socket)
    x = c.from_numpy(rng.standard_normal((R, C)).astype(np.float32))
    w = c.from_numpy(rng.standard_normal(C).astype(np.float32))
    b = c.from_numpy(rng.standard_normal(C).astype(np.float32))
    W = c.from_numpy((rng.standard_normal((C, K)) / np.sqrt(C)).astype(np.float32))
    outs = [c.empty((R, C)), c.empty((R, C)), c.empty((R, K))]
    a = x.numpy()
    ref = (ref_softmax(a), ref_layernorm(a, w.numpy(), b.numpy()), a @ W.numpy())
    tasks = [(x[i:i + k], w, b, W) + tuple(o[i:i + k] for o in outs)
             for i in range(0, R, k)]
    mb = R * C * 4 / 1e6
    print("# multiprocess_workers: workers=%d rows=%d cols=%d out_cols=%d chunk=%d "
          "rounds=%d socket=%s" % (args.workers, R, C, K, k, args.rounds, c.socket))

    def check(name, got):
        for g, r, what in zip(got, ref, ("softmax", "layernorm", "matmul")):
            if not np.allclose(g, r, atol=2e-4, rtol=1e-3):
                raise SystemExit("%s: %s results differ from numpy (max err %g)"
                                 % (name, what, np.abs(g - r).max()))

    def report(name, secs):
        print("method=%s rows_per_s=%.0f input_mb_per_s=%.1f seconds=%.3f"
              % (name, R * args.rounds / secs, mb * args.rounds / secs, secs))

    with mp.Pool(args.workers, initializer=opd.pool_initializer,
                 initargs=(c.socket,)) as pool:
        for name, fn in (("opd", work_opd), ("numpy", work_numpy_shared)):
            for o in outs:
                o.numpy()[:] = 0
            pool.starmap(fn, tasks[:args.workers])          # warm up
            t = time.perf_counter()
            for _ in range(args.rounds):
                assert sum(pool.starmap(fn, tasks)) == R
            report(name, time.perf_counter() - t)
            check(name, [o.numpy() for o in outs])

    with mp.Pool(args.workers, initializer=init_queue,
                 initargs=(w.numpy().copy(), b.numpy().copy(), W.numpy().copy())) as pool:
        chunks = [a[i:i + k].copy() for i in range(0, R, k)]
        pool.map(work_queue, chunks[:args.workers])
        t = time.perf_counter()
        for _ in range(args.rounds):
            res = pool.map(work_queue, chunks)
        report("queue", time.perf_counter() - t)
        check("queue", [np.concatenate([r[j] for r in res]) for j in range(3)])
    print("all results match the numpy reference")
    c.close()


if __name__ == "__main__":
    main()
