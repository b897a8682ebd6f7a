"""Which CPU runs the daemon executes on its event loop instead of its
kernel threads (daemon/backend/cpu.c): at most --inline-bytes of tensors
always; larger runs of ops whose time their signature sets (OPD_OPF_INPLACE:
add, relu, softmax, ...; OPD_OPF_STEADY_COST: matmul, conv2d, ...) up to
16 MiB once the measured kernel time of earlier runs of the same signature
(op, dtypes, shapes, strides, attributes) is within --inline-us; never nms. STATS counts them per op ("inline"). The budgets here are
extreme (1 s, or 0) so that no machine's speed changes the answer."""
import numpy as np

import opd


def ops(c):
    return c.stats()["ops"]


def _nms_thrice(c):
    """Three runs of nms (its time follows the boxes' overlaps: never
    learnt) on 2048 identical unit boxes."""
    boxes = np.zeros((2048, 4), np.float32)
    boxes[:, 2:] = 1
    bx = c.from_numpy(boxes)
    sc = c.from_numpy(np.linspace(1, 0, 2048, dtype=np.float32))
    for _ in range(3):
        c.nms(bx, sc, iou_threshold=0.5)


def test_one_pass_ops_learn_to_run_on_the_loop(start_daemon):
    dm = start_daemon("--inline-us", "1000000", "--idle-inline-us", "0")
    with opd.connect(dm.socket) as c:
        x = c.from_numpy(np.ones((8, 1024), np.float32))     # 32 KiB: 96 with y
        y = c.empty((8, 1024))
        for _ in range(10):
            c.add(x, x, out=y)
        st = ops(c)["add"]
        # the first on the kernel threads (nothing learnt yet), then the loop
        assert st["calls"] == 10 and st["inline"] == 9, st
        np.testing.assert_array_equal(y.numpy(), 2.0)
        # another shape is learnt on its own
        z = c.from_numpy(np.full((64, 1024), -1, np.float32))
        for _ in range(3):
            c.relu(z, out=z)
        assert ops(c)["relu"]["inline"] == 2
        np.testing.assert_array_equal(z.numpy(), 0.0)
        # the same bytes in another shape, or with other attributes: a new
        # signature, first on the threads
        w = c.from_numpy(np.full((1024, 64), -1, np.float32))
        c.relu(w, out=w)
        assert ops(c)["relu"]["inline"] == 2
        c.relu(w, out=w)
        assert ops(c)["relu"]["inline"] == 3
        g = c.empty((64, 1024))
        for approximate in ("none", "tanh", "tanh", "none"):
            c.gelu(z, approximate=approximate, out=g)
        assert ops(c)["gelu"]["inline"] == 2
        # a time its shapes set (matmul: steady_cost), learnt the same way
        a = c.from_numpy(np.eye(64, dtype=np.float32))       # 3 x 16 KiB
        m = c.empty((64, 64))
        for _ in range(5):
            c.matmul(a, a, out=m)
        assert ops(c)["matmul"]["inline"] == 4
        np.testing.assert_array_equal(m.numpy(), np.eye(64))
        # a time the values set (nms): on the threads, however fast
        _nms_thrice(c)
        assert ops(c)["nms"]["calls"] == 3 and ops(c)["nms"]["inline"] == 0
        # 16 MiB and more: past the size classes, on the threads
        big = c.zeros((1024, 4096))
        for _ in range(3):
            c.relu(big, out=big)
        assert ops(c)["relu"]["inline"] == 3


def test_inline_us_0_keeps_them_on_the_threads(start_daemon):
    dm = start_daemon("--inline-us", "0", "--idle-inline-us", "0")
    with opd.connect(dm.socket) as c:
        x = c.from_numpy(np.ones((8, 1024), np.float32))
        y = c.empty((8, 1024))
        for _ in range(5):
            c.add(x, x, out=y)
        assert ops(c)["add"] == dict(ops(c)["add"], calls=5, inline=0)


def test_small_runs_go_inline_by_their_bytes(start_daemon):
    dm = start_daemon("--inline-us", "0", "--idle-inline-us", "0")  # bytes alone
    with opd.connect(dm.socket) as c:
        x = c.from_numpy(np.ones((1, 1024), np.float32))     # 3 x 4 KiB
        y = c.empty((1, 1024))
        for _ in range(4):
            c.add(x, x, out=y)
        assert ops(c)["add"]["calls"] == 4 and ops(c)["add"]["inline"] == 4
        a = c.from_numpy(np.eye(32, dtype=np.float32))       # 3 x 4 KiB
        m = c.empty((32, 32))
        c.matmul(a, a, out=m)                                # any op, by bytes
        assert ops(c)["matmul"]["inline"] == 1


def test_an_idle_daemon_runs_learnt_runs_on_the_loop(start_daemon):
    """--idle-inline-us: while nothing runs on the kernel threads and no
    latency-class client is connected, a run learnt to hold the loop at
    most that long runs on it (the threads helping), whatever its op's
    flags say; a latency-class client turns it off; 0 turns it off."""
    dm = start_daemon("--inline-us", "0", "--idle-inline-us", "1000000")
    with opd.connect(dm.socket) as c:
        a = c.from_numpy(np.eye(256, dtype=np.float32))      # 3 x 256 KiB
        m = c.empty((256, 256))
        for _ in range(5):
            c.matmul(a, a, out=m)
        # the first on the kernel threads (nothing learnt yet), then the loop
        assert ops(c)["matmul"] == dict(ops(c)["matmul"], calls=5, inline=4)
        np.testing.assert_array_equal(m.numpy(), np.eye(256))
        _nms_thrice(c)
        assert ops(c)["nms"]["inline"] == 0                  # never learnt
        with opd.connect(dm.socket, priority="latency") as lat:
            for _ in range(3):
                c.matmul(a, a, out=m)
            assert ops(c)["matmul"]["inline"] == 4
            assert lat.relu(np.ones(3, np.float32)).tolist() == [1, 1, 1]
        # gone (once the daemon has seen it close: over spin rings c's
        # next request may come first): on the loop again
        for _ in range(200):
            c.matmul(a, a, out=m)
            if ops(c)["matmul"]["inline"] > 4:
                break
        n = ops(c)["matmul"]["inline"]
        for _ in range(3):
            c.matmul(a, a, out=m)
        assert n > 4 and ops(c)["matmul"]["inline"] == n + 3
    dm = start_daemon("--inline-us", "0", "--idle-inline-us", "0")
    with opd.connect(dm.socket) as c:
        a = c.from_numpy(np.eye(256, dtype=np.float32))
        m = c.empty((256, 256))
        for _ in range(5):
            c.matmul(a, a, out=m)
        assert ops(c)["matmul"]["inline"] == 0


def test_a_queue_of_runs_does_not_hold_the_loop(start_daemon):
    """Runs sent without waiting queue up faster than the loop executes
    them: once a turn of the loop has spent --idle-inline-us on them, the
    rest go to the kernel threads (the loop moves on to the other
    clients' requests) instead of all running on the loop back to back."""
    dm = start_daemon("--inline-us", "0", "--idle-inline-us", "1000")
    with opd.connect(dm.socket) as c:
        a = c.from_numpy(np.eye(128, dtype=np.float32))
        m = c.empty((128, 128))
        for _ in range(100):                                 # learnt: loop
            c.matmul(a, a, out=m)
            if ops(c)["matmul"]["inline"] >= 2:
                break
        before = ops(c)["matmul"]
        assert before["inline"] >= 2, before
        reqs = [c.submit("matmul", a, a, out=m) for _ in range(300)]
        for r in reqs:
            r.wait()
        st = ops(c)["matmul"]
        assert st["calls"] == before["calls"] + 300, st
        # some of the 300 ran on the threads (without the turn's budget,
        # every one of them would have run on the loop)
        assert st["inline"] - before["inline"] < 300, (before, st)
        np.testing.assert_array_equal(m.numpy(), np.eye(128))


def test_the_schema_says_which_ops_learn(c):
    """OPS's steady_cost: the ops whose time their signature sets."""
    sch = c.ops()
    assert sch["matmul"]["steady_cost"] and sch["conv2d"]["steady_cost"]
    assert not sch["nms"]["steady_cost"] and not sch["relu"]["steady_cost"]


def test_inline_us_is_checked_and_shown():
    """A bad value is refused naming the option and its range; the
    effective value shows in --check-config (--inline-us and
    --idle-inline-us)."""
    import subprocess
    from conftest import OPD_BIN
    for opt in ("--inline-us", "--idle-inline-us"):
        for bad in ("2000000", "-1", "abc"):
            r = subprocess.run([OPD_BIN, opt, bad, "--check-config"],
                               capture_output=True, text=True, timeout=30)
            assert r.returncode == 1, (opt, bad, r.stdout, r.stderr)
            assert "%s expects a number from 0 to 1000000, got \"%s\"" % (opt, bad) \
                in r.stderr, r.stderr
        r = subprocess.run([OPD_BIN, opt, "7", "--check-config"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and "%s = 7" % opt[2:] in r.stdout, (r.stdout, r.stderr)
