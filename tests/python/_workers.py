"""Functions the multiprocessing tests run in child processes (importable
by name, so they work under spawn and forkserver too)."""
import os
import time

import numpy as np

import opd


def softmax_rows(x, y):
    """Worker: y = softmax(x) through the worker's own connection, in the
    parent's memory. Returns (pid, session id)."""
    c = opd.client()
    c.softmax(x, out=y)
    return os.getpid(), c.server_info()["session"]


def read_sum(x):
    return float(np.asarray(x).sum())


def own_session(i):
    """Worker: a fresh tensor, a checked op, its session id."""
    c = opd.client()
    a = np.full((64, 257), i, np.float32)
    y = c.softmax(c.from_numpy(a))
    assert np.allclose(y.numpy(), 1 / 257)
    return c.server_info()["session"]


def many_ops(sock, n, q):
    """Process body for the 16-at-once test: n checked runs, then report."""
    try:
        with opd.connect(sock) as c:
            rng = np.random.default_rng(os.getpid())
            for _ in range(n):
                a = rng.standard_normal((8, 300)).astype(np.float32)
                y = c.softmax(a)
                e = np.exp(a - a.max(-1, keepdims=True))
                assert np.allclose(y.numpy(), e / e.sum(-1, keepdims=True), atol=1e-6)
        q.put(("ok", os.getpid()))
    except BaseException as e:  # report, never hang the parent
        q.put(("error", repr(e)))


def hog(sock, ready):
    """Maps its own arenas, then runs big matmuls until killed."""
    c = opd.connect(sock)
    a = c.from_numpy(np.ones((1400, 1400), np.float32))
    outs = [c.empty((1400, 1400)) for _ in range(3)]
    reqs = [c.submit("matmul", a, a, out=o) for o in outs]
    ready.set()
    for r in reqs:
        r.wait()
    time.sleep(60)
