"""Multiprocessing: forked children, Pools under fork/spawn/forkserver with
zero-copy shared tensors, 16 processes at once, a worker SIGKILLed while
its request runs."""
import multiprocessing as mp
import os
import pickle
import signal
import time

import numpy as np
import pytest

import opd
import _workers
from _forks import in_child


def test_forked_child_reconnects(c):
    x = c.from_numpy(np.arange(8, dtype=np.float32))
    parent_session = c.server_info()["session"]

    def child():
        s = c.server_info()["session"]              # reconnects here
        y = c.relu(x)                               # parent's tensor, child's session
        x.numpy()[0] = 100                          # shared: the parent sees it
        return s != parent_session and y.tolist() == list(range(8))
    assert in_child(child)
    assert x.numpy()[0] == 100
    assert c.server_info()["session"] == parent_session     # parent unaffected
    assert c.relu(x).tolist()[0] == 100


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_pool_zero_copy(sock, c, method):
    ctx = mp.get_context(method)
    n, k = 16, 4
    a = np.random.default_rng(0).standard_normal((n, 100)).astype(np.float32)
    x = c.from_numpy(a)
    y = c.zeros((n, 100))
    with ctx.Pool(2, initializer=opd.pool_initializer, initargs=(sock,)) as pool:
        res = pool.starmap(_workers.softmax_rows,
                           [(x[i:i + k], y[i:i + k]) for i in range(0, n, k)])
        sums = pool.map(_workers.read_sum, [x[i] for i in range(n)])
    e = np.exp(a - a.max(-1, keepdims=True))
    np.testing.assert_allclose(y.numpy(), e / e.sum(-1, keepdims=True), atol=1e-6)
    np.testing.assert_allclose(sums, a.sum(-1), rtol=1e-5)
    sessions = {s for _, s in res}
    assert c.server_info()["session"] not in sessions
    assert len({p for p, _ in res}) <= 2


def test_client_pickles_as_its_socket(sock):
    c = opd.connect(sock, connect=False)
    c2 = pickle.loads(pickle.dumps(c))
    assert c2.socket == c.socket and not c2.closed
    c2.ping()
    c2.close()


def test_sixteen_processes_at_once(sock, c):
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_workers.many_ops, args=(sock, 30, q)) for _ in range(16)]
    for p in procs:
        p.start()
    results = [q.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    assert all(r[0] == "ok" for r in results), results
    assert all(p.exitcode == 0 for p in procs)
    with ctx.Pool(16, initializer=opd.pool_initializer, initargs=(sock,)) as pool:
        sessions = pool.map(_workers.own_session, range(64))
    assert len(set(sessions)) > 1


def test_killed_worker_is_cleaned_up(start_daemon):
    # a private daemon: what happens to it must not spill into other tests
    d = start_daemon()
    sock = d.socket
    c = opd.connect(sock)
    a = np.random.rand(4, 50).astype(np.float32)
    c.softmax(a)                                      # the parent's arena first
    base = c.stats()
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    p = ctx.Process(target=_workers.hog, args=(sock, ready))
    p.start()
    assert ready.wait(30)
    time.sleep(0.1)                                   # the matmuls are running
    during = c.stats()
    assert during["bytes_mapped"] > base["bytes_mapped"]
    assert during["sessions"] >= base["sessions"] + 1
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    assert p.exitcode == -signal.SIGKILL
    # the daemon serves others meanwhile
    assert np.allclose(c.softmax(a).numpy().sum(-1), 1, atol=1e-5)
    deadline = time.monotonic() + 20
    while True:
        st = c.stats()
        if st["bytes_mapped"] <= base["bytes_mapped"] and st["sessions"] == base["sessions"]:
            break
        assert time.monotonic() < deadline, (base, st)
        time.sleep(0.05)
    assert st["healthy"]
    c.close()
    assert d.stop() == 0, d.read_log()[-2000:]
