"""Classes of service (docs/scheduling.md) against a real daemon: who may
ask for the latency class (root and the daemon's user, --latency-users,
--latency-groups; anyone else is refused by name), per session (hello
"priority") and per graph (cls=); the CPU dispatch serves a latency run
queued behind best-effort runs before them (ordering, counted by the
daemon, not timed); best-effort work still progresses under a latency
flood held to --max-inflight; the per-class histograms in STATS and on
the metrics endpoint."""
import json
import os
import shutil
import socket
import tempfile
import time
import urllib.request

import numpy as np
import pytest

import opd
from conftest import Daemon

# a best-effort matmul of 1024^3 (2 GFLOP): tens of ms on one kernel thread,
# however fast the memory-bound kernels get (a 16 MiB softmax came down
# to ~4 ms, which a loaded 2-core machine's scheduling noise can exceed)
BIG = (1024, 1024)


def _classes(c):
    return c.stats()["classes"]


def test_latency_and_best_effort_hellos(daemon):
    for prio in ("latency", "high", "best-effort", "normal", None):
        with opd.connect(daemon.socket, priority=prio) as c:
            assert c.priority == prio
            x = np.ones(3, np.float32)
            assert c.relu(x).tolist() == [1, 1, 1]
    with pytest.raises(opd.BadArgumentError) as e:
        opd.connect(daemon.socket, priority="urgent")
    assert "latency" in str(e.value)
    with opd.connect(daemon.socket) as c:
        with pytest.raises(opd.BadArgumentError):
            c.graph(cls="urgent")


def _as_other_uid(sock, uid, prio, graph_cls, w):
    """In a child: become uid (group 64124) and connect with prio (then
    define a graph of class graph_cls); writes the outcome to w."""
    os.setgroups([])
    os.setgid(64124)
    os.setuid(uid)
    out = {}
    try:
        with opd.connect(sock, priority=prio) as o:
            out["hello"] = "ok"
            if graph_cls:
                try:
                    with o.graph(cls=graph_cls) as g:
                        x = g.input("x", (4,), "float32")
                        g.output(g.relu(x))
                    out["graph"] = "ok"
                except opd.OpdError as e:
                    out["graph"] = "%s: %s" % (e.name, e)
    except opd.OpdError as e:
        out["hello"] = "%s: %s" % (e.name, e)
    os.write(w, json.dumps(out).encode())


def _run_as(sock, uid, prio, graph_cls=None):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            _as_other_uid(sock, uid, prio, graph_cls, w)
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    got = b""
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        got += b
    os.close(r)
    assert os.waitpid(pid, 0)[1] == 0, "the child failed"
    return json.loads(got.decode())


@pytest.fixture
def open_daemon():
    """Starts daemons (start(*options)) whose socket any uid may open."""
    started = []

    def start(*args):
        d = tempfile.mkdtemp(prefix="opd-classes.")
        os.chmod(d, 0o755)
        dm = Daemon(d, args)
        os.chmod(dm.socket, 0o666)
        started.append((dm, d))
        return dm
    yield start
    for dm, d in started:
        dm.stop()
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")
def test_who_may_ask_for_the_latency_class(open_daemon):
    dm = open_daemon()
    got = _run_as(dm.socket, 64123, "latency")
    assert got["hello"].startswith("EPERM"), got
    assert "uid 64123 may not ask for the latency class" in got["hello"], got
    assert "--latency-users" in got["hello"], got
    got = _run_as(dm.socket, 64123, "best-effort", graph_cls="latency")
    assert got["hello"] == "ok", got
    assert got["graph"].startswith("EPERM") and "--latency-users" in got["graph"], got
    got = _run_as(dm.socket, 64123, "best-effort", graph_cls="best-effort")
    assert got == {"hello": "ok", "graph": "ok"}, got

    conf = os.path.join(os.path.dirname(dm.socket), "opd.conf")
    with open(conf, "w") as f:
        f.write("latency-users = 64123\n")
    for opt in (("--latency-users", "64123"), ("--latency-groups", "64124"),
                ("--config", conf)):
        dm2 = open_daemon(*opt)
        got = _run_as(dm2.socket, 64123, "latency", graph_cls="latency")
        assert got == {"hello": "ok", "graph": "ok"}, (opt, got)


def test_a_latency_graph_on_a_best_effort_connection(daemon, c):
    before = _classes(c)["latency"]["runs"]
    with c.graph(cls="latency") as g:
        x = g.input("x", (8,), "float32")
        g.output(g.relu(x))
    a = np.arange(8, dtype=np.float32) - 4
    assert g.run(a).numpy().tolist() == np.maximum(a, 0).tolist()
    assert _classes(c)["latency"]["runs"] == before + 1


@pytest.fixture
def one_thread(start_daemon, monkeypatch):
    """A daemon with one kernel thread and one libuv thread, every run on
    it (nothing inline)."""
    monkeypatch.setenv("UV_THREADPOOL_SIZE", "1")
    return start_daemon("--threads", "1", "--inline-bytes", "0",
                        "--inline-us", "0", "--max-inflight", "4")


def _wait_for(pred, what, limit=30):
    deadline = time.monotonic() + limit
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.002)


def test_a_latency_run_jumps_the_best_effort_queue(one_thread):
    n = 6
    be = [opd.connect(one_thread.socket) for _ in range(n)]
    lat = opd.connect(one_thread.socket, priority="latency")
    try:
        xs = [c.from_numpy(np.random.default_rng(i).standard_normal(BIG, np.float32))
              for i, c in enumerate(be)]
        small = np.linspace(-1, 1, 1024, dtype=np.float32).reshape(1, 1024)
        lat.softmax(small)                                   # warm
        done_before = _classes(lat)["best-effort"]["runs"]
        reqs = [c.submit("matmul", x, x) for c, x in zip(be, xs)]
        # all in the daemon (one running), before the latency run
        _wait_for(lambda: lat.stats()["inflight"] == n, "the best-effort runs sent")
        assert _classes(lat)["best-effort"]["waiting"] == n - 1
        y = lat.softmax(small)
        cls = _classes(lat)
        ran = cls["best-effort"]["runs"] - done_before
        # the one running when it came (and at most the next, finishing
        # while STATS was asked) completed before it; the others after
        assert ran <= 2, cls
        assert cls["best-effort"]["waiting"] >= n - 3, cls
        e = np.exp(small - small.max())
        np.testing.assert_allclose(y.numpy(), e / e.sum(), rtol=1e-5)
        for r, x in zip(reqs, xs):
            a = x.numpy()
            np.testing.assert_allclose(r.wait().numpy(), a @ a, rtol=1e-3, atol=1e-2)
        assert _classes(lat)["best-effort"]["runs"] - done_before == n
    finally:
        for c in be + [lat]:
            c.close()


def test_best_effort_progresses_under_a_latency_flood(one_thread):
    flooders = [opd.connect(one_thread.socket, priority="latency") for _ in range(3)]
    be = opd.connect(one_thread.socket)
    try:
        fx = [f.from_numpy(np.ones((1024, 1024), np.float32)) for f in flooders]
        bx = be.from_numpy(np.ones((1024, 1024), np.float32))
        start = _classes(be)["best-effort"]["runs"]
        pending = [[] for _ in flooders]
        be_req = be.submit("softmax", bx)
        be_done, most_waiting = 0, 0
        deadline = time.monotonic() + 60
        while be_done < 5:
            assert time.monotonic() < deadline, "best-effort work starved"
            for f, x, p in zip(flooders, fx, pending):
                while len(p) < 8:                  # more than --max-inflight 4
                    p.append(f.submit("softmax", x))
                p.pop(0).wait()
            most_waiting = max(most_waiting, _classes(be)["latency"]["waiting"])
            try:
                be_req.wait(timeout=0)
            except opd.OpdTimeoutError:
                continue
            be_done += 1
            be_req = be.submit("softmax", bx)
        # each flooder is held to --max-inflight 4 (one of them running)
        assert most_waiting <= 3 * 4, most_waiting
        cls = _classes(be)
        assert cls["best-effort"]["runs"] - start >= 5
        assert cls["latency"]["runs"] > cls["best-effort"]["runs"] - start, cls
        be_req.wait()
        for p in pending:
            for r in p:
                r.wait()
    finally:
        for c in flooders + [be]:
            c.close()


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_class_histograms_in_stats_and_metrics(start_daemon):
    port = _free_port()
    dm = start_daemon("--metrics-listen", "127.0.0.1:%d" % port, "--inline-bytes", "0")
    with opd.connect(dm.socket, priority="latency") as lat, opd.connect(dm.socket) as be:
        x = np.ones((64, 64), np.float32)
        for _ in range(5):
            lat.softmax(x)
        for _ in range(3):
            be.softmax(x)
        cls = _classes(be)
        for name, k in (("latency", 5), ("best-effort", 3)):
            st = cls[name]
            assert st["runs"] == k, cls
            assert st["wait"]["count"] == k and st["run"]["count"] == k, cls
            assert st["run"]["sum_ns"] > 0 and st["run"]["p99_us"] > 0, cls
            assert st["run"]["p50_us"] <= st["run"]["p99_us"], cls
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                      timeout=10).read().decode()
    assert "# TYPE opd_class_queue_wait_seconds histogram" in text
    assert "# TYPE opd_class_run_seconds histogram" in text
    assert 'opd_class_run_seconds_count{class="latency"} 5' in text, text
    assert 'opd_class_queue_wait_seconds_count{class="best-effort"} 3' in text, text
    assert 'opd_class_run_seconds_bucket{class="latency",le="+Inf"} 5' in text
    assert 'opd_class_waiting{class="best-effort"} 0' in text
