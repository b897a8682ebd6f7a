"""Graphs from Python (Client.graph, opd._graph) on the CPU backend of a
real daemon: an MLP built, defined and run equals the same ops run one by
one bit for bit; given outputs take one prepared request, reused while the
tensors are the same (and another for other tensors); the builder's
inputs (opd Tensors, numpy, torch CPU), constants (arrays, published
tensors), multi-output ops, submit; and bad input: an unknown op, a shape
mismatch (the node and both shapes named), a cycle (through libopd's
builder directly, which can name a value before its node), another
session's graph id, a use after close, and graphs freed on close. A
cycle cannot be built through libopd (values are numbered in order); the
daemon's cycle check is tested in C (tests/integration/test_graph.c)."""
import ctypes
import time

import numpy as np
import pytest

import opd
from opd import _lib, protocol


def _has(c, op):
    return op in c.ops()


def _mlp_weights(rng, sizes=(16, 32, 32, 4)):
    ws = []
    for k, n in zip(sizes, sizes[1:]):
        ws.append(((rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32),
                   rng.standard_normal(n).astype(np.float32)))
    return ws


def _layer(g, h, w, b, act):
    """One layer in the graph: linear where the daemon has it, else
    matmul + add (+ relu)."""
    if _has(g._c, "linear"):
        return g.linear(h, w, b, act=act)
    h = g.add(g.matmul(h, np.ascontiguousarray(w.T)), b)
    return g.relu(h) if act == "relu" else h


def _layer_ops(c, x, w, b, act):
    """The same layer as single runs (the per-op reference)."""
    if _has(c, "linear"):
        return c.linear(x, c.from_numpy(w), c.from_numpy(b), act=act)
    h = c.add(c.matmul(x, c.from_numpy(np.ascontiguousarray(w.T))),
              c.from_numpy(b))
    return c.relu(h) if act == "relu" else h


def _mlp(c, ws, batch, name="mlp"):
    with c.graph(name=name) as g:
        h = g.input("x", (batch, ws[0][0].shape[1]), "float32")
        for i, (w, b) in enumerate(ws):
            h = _layer(g, h, w, b, "relu" if i < len(ws) - 1 else "none")
        g.output(h)
    return g


def _mlp_ops(c, ws, x):
    h = c.from_numpy(x)
    for i, (w, b) in enumerate(ws):
        h = _layer_ops(c, h, w, b, "relu" if i < len(ws) - 1 else "none")
    return h.numpy()


def test_mlp_equals_the_ops_one_by_one_bit_for_bit(c, rng):
    ws = _mlp_weights(rng)
    g = _mlp(c, ws, 8)
    assert g.id is not None and g.outputs == [((8, 4), "float32")]
    assert g.outputs[0].shape == (8, 4) and g.outputs[0].dtype == "float32"
    for _ in range(3):
        x = rng.standard_normal((8, 16)).astype(np.float32)
        y = g.run(x)                               # numpy in, own outputs
        ref = _mlp_ops(c, ws, x)
        assert y.numpy().tobytes() == ref.tobytes()
        # the reference within float tolerance of numpy, to be sure the
        # ops compute the model at all
        h = x
        for i, (w, b) in enumerate(ws):
            h = h @ w.T + b
            h = np.maximum(h, 0) if i < len(ws) - 1 else h
        np.testing.assert_allclose(y.numpy(), h, rtol=1e-5, atol=1e-5)
    assert g.run(x) is y                           # allocated once
    g.close()


def test_given_outputs_take_one_prepared_request_per_tensor_set(c, rng):
    ws = _mlp_weights(rng)
    g = _mlp(c, ws, 2)
    x, y = c.empty((2, 16)), c.empty((2, 4))
    x2, y2 = c.empty((2, 16)), c.empty((2, 4))
    before = c.stats()["requests"]
    for k in range(5):
        a = rng.standard_normal((2, 16)).astype(np.float32)
        x.numpy()[:] = a
        assert g.run(x, out=y) is y
        assert y.numpy().tobytes() == _mlp_ops(c, ws, a).tobytes()
    assert g.prepares == 1 and len(g._memo) == 1
    for k in range(3):                     # other tensors of the same shape
        a = rng.standard_normal((2, 16)).astype(np.float32)
        x2.numpy()[:] = a
        assert g.run(x2, out=(y2,)) is y2
        assert y2.numpy().tobytes() == _mlp_ops(c, ws, a).tobytes()
        g.run(x, out=y)                    # the first set: still memoized
    assert g.prepares == 2 and len(g._memo) == 2
    for k in range(2):                     # wait=True: its own prepared run
        a = rng.standard_normal((2, 16)).astype(np.float32)
        x.numpy()[:] = a
        assert g.run(x, out=y, wait=True) is y
        assert y.numpy().tobytes() == _mlp_ops(c, ws, a).tobytes()
    assert g.prepares == 3 and len(g._memo) == 3
    # a graph run is one request, whatever the number of nodes
    n = c.stats()["requests"]
    g.run(x, out=y)
    assert c.stats()["requests"] - n == 2  # the run and the stats call
    assert n > before
    g.close()


def test_inputs_numpy_torch_and_shared_constants(c, rng):
    torch = pytest.importorskip("torch")
    w = rng.standard_normal((8, 8)).astype(np.float32)
    pub = c.publish("graph-test-w", c.from_numpy(w))
    c2 = opd.connect(c.socket)
    try:
        wt = c2.attach("graph-test-w")             # read-only, no copy
        with c2.graph(name="shared") as g:
            x = g.input("x", (3, 8))
            g.output(g.relu(x @ g.const(wt, "w")))
        a = rng.standard_normal((3, 8)).astype(np.float32)
        ref = c2.relu(c2.matmul(c2.from_numpy(a), wt)).numpy()
        for given in (a, torch.from_numpy(a.copy()), c2.from_numpy(a)):
            assert g.run(given).numpy().tobytes() == ref.tobytes()
        c.unpublish("graph-test-w")                # the graph holds it
        assert g.run(a).numpy().tobytes() == ref.tobytes()
        with pytest.raises(opd.BadArgumentError, match=r"input 0 \(x\)"):
            g.run(a[:2])
        with pytest.raises(opd.BadArgumentError, match="takes 1 inputs"):
            g.run(a, a)
    finally:
        c2.close()
    del pub


def test_constants_and_value_arithmetic(c, rng):
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal((6,)).astype(np.float32)
    with c.graph() as g:
        x = g.input("x", (4, 6))
        y = x * b + x                    # arrays become constants
        g.output(y, g.softmax(y))
    x = c.from_numpy(a)
    y, s = g.run(x)
    ref = c.add(c.mul(x, c.from_numpy(b)), x)
    assert y.numpy().tobytes() == ref.numpy().tobytes()
    assert s.numpy().tobytes() == c.softmax(ref).numpy().tobytes()
    assert [o.shape for o in g.outputs] == [(4, 6), (4, 6)]


def test_multi_output_op_and_submit(c, rng):
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30]],
                     np.float32)
    scores = np.array([0.9, 0.8, 0.7], np.float32)
    with c.graph(name="nms") as g:
        bx, sc = g.input("boxes", (3, 4)), g.input("scores", (3,))
        keep, count = g.nms(bx, sc, iou_threshold=0.5)
        g.output(keep, count)
    keep, count = g.run(boxes, scores)
    rk, rc = c.nms(boxes, scores, 0.5), None
    assert int(count.numpy()[0]) == len(rk) == 2
    assert keep.numpy()[:2].tolist() == rk.tolist()
    req = g.submit(boxes, scores)
    k2, n2 = req.wait()
    assert k2.numpy().tolist() == keep.numpy().tolist() and k2 is not keep
    del rc


def test_an_exception_in_the_block_defines_nothing(c):
    with pytest.raises(RuntimeError):
        with c.graph() as g:
            g.output(g.relu(g.input("x", (2,))))
            raise RuntimeError("user code failed")
    assert g.id is None
    with pytest.raises(opd.ProtocolError, match="define it first"):
        g.run(np.zeros(2, np.float32))


def test_unknown_op_is_refused_at_define(c):
    g = c.graph(name="bad")
    x = g.input("x", (2, 2))
    g.output(g.node("no_such_op", x))
    with pytest.raises(opd.BadArgumentError, match="no_such_op"):
        g.define()
    assert g.id is None
    with pytest.raises(AttributeError, match="no_such_op"):
        g.no_such_op
    c.ping()                                       # still serving


def test_a_shape_mismatch_names_the_node_and_both_shapes(c):
    g = c.graph(name="mismatch")
    x = g.input("x", (4, 16))
    h = g.relu(x)
    g.output(g.matmul(h, np.zeros((8, 3), np.float32)))
    with pytest.raises(opd.BadArgumentError) as e:
        g.define()
    msg = str(e.value)
    assert "node 1 (matmul)" in msg, msg
    assert "[4,16]" in msg and "[8,3]" in msg, msg
    with pytest.raises(opd.BadArgumentError):       # an attribute's type
        c.graph().softmax(g.input("y", (2,)), dim="last")


def _raw_def(lib, build):
    d = lib.opd_graph_def_new()
    assert d
    try:
        return build(d)
    finally:
        lib.opd_graph_def_free(d)


def test_libopd_refuses_a_value_not_yet_defined(c):
    """libopd's builder numbers values in order, so no cycle can be built
    through it (nor through Graph, which only hands it existing values):
    a node naming a later value is refused there. The daemon's own cycle
    check, for a hand-written GRAPH_DEFINE, is tested in C
    (tests/integration/test_graph.c, cycle_is_refused_naming_its_nodes)."""
    lib = _lib.load()

    def build(d):
        shape = (ctypes.c_int64 * 1)(4)
        x = lib.opd_graph_input(d, b"x", protocol.DTYPE_CODES["float32"], 1, shape)
        assert x == 0
        # node 0 would read value 2, node 1's output: not there yet
        a = lib.opd_graph_node(d, b"add", (ctypes.c_int * 2)(x, 2), 2, None, 0, 1)
        return a, lib.opd_last_error().decode()
    rc, msg = _raw_def(lib, build)
    assert rc == protocol.ERROR_CODES["EINVAL"], msg
    assert "2" in msg, msg
    c.ping()


def test_another_sessions_graph_is_refused(c, rng):
    g = _mlp(c, _mlp_weights(rng), 1)
    x, y = c.zeros((1, 16)), c.empty((1, 4))
    g.run(x, out=y)
    c2 = opd.connect(c.socket)
    try:
        lib = c2._lib
        ins = (_lib.TensorDesc * 1)(c2._runner.desc(x))
        outs = (_lib.TensorDesc * 1)(c2._runner.desc(y))
        rc = lib.opd_graph_run(c2._handle(), g.id, ins, 1, outs, 1)
        assert rc == protocol.ERROR_CODES["ENOENT"]
        msg = lib.opd_last_error().decode()
        assert ("graph %d" % g.id) in msg and "session" in msg, msg
        assert lib.opd_graph_destroy(c2._handle(), g.id) < 0
    finally:
        c2.close()
    assert g.run(x, out=y) is y                    # still its owner's


def _graphs(c, want=None):
    """The daemon's live graphs; with `want`, once they are that many (a
    closed session is reaped by the daemon after the close returns, on
    the ring transports), or what they are after 10 s."""
    deadline = time.monotonic() + 10
    while True:
        n = c.stats()["graphs"]["live"]
        if want is None or n == want or time.monotonic() > deadline:
            return n
        time.sleep(0.01)


def test_graphs_are_freed_on_close_and_with_their_client(c, rng, daemon):
    c2 = opd.connect(daemon.socket)
    base = _graphs(c2)
    for _ in range(500):          # earlier tests' sessions, reaped by now
        time.sleep(0.02)
        if _graphs(c2) == base:
            break
        base = _graphs(c2)
    g = _mlp(c2, _mlp_weights(rng), 1)
    g2 = _mlp(c2, _mlp_weights(rng), 1)
    assert _graphs(c, base + 2) == base + 2
    g.close()
    assert _graphs(c, base + 1) == base + 1
    with pytest.raises(opd.ProtocolError, match="closed"):
        g.run(np.zeros((1, 16), np.float32))
    g.close()                                      # twice is fine
    x = np.zeros((1, 16), np.float32)
    g2.run(x)
    c2.close()                                     # the session takes g2
    with pytest.raises(opd.OpdError):
        g2.run(x)
    assert _graphs(c, base) == base
    # a graph the garbage collector takes is destroyed at the next stats()
    g3 = _mlp(c, _mlp_weights(rng), 1)
    assert _graphs(c, base + 1) == base + 1
    del g3
    import gc
    gc.collect()
    assert _graphs(c, base) == base


def test_a_forked_child_defines_the_graph_again(c, rng):
    from _forks import in_child
    ws = _mlp_weights(rng)
    g = _mlp(c, ws, 2)
    x, y = c.from_numpy(rng.standard_normal((2, 16)).astype(np.float32)), \
        c.empty((2, 4))
    g.run(x, out=y)
    ref = y.numpy().copy()

    def child():
        y.numpy()[:] = 0
        g.run(x, out=y)                            # a new session: defined again
        return y.numpy().tobytes() == ref.tobytes() and g.id is not None
    assert in_child(child)
    assert g.run(x, out=y) is y                    # the parent's graph still runs
    assert y.numpy().tobytes() == ref.tobytes()


def test_a_device_graph_equals_the_ops_on_the_device(c, rng):
    if not c.devices():
        pytest.skip("the daemon has no CUDA device")
    ws = _mlp_weights(rng)
    with c.graph(device="cuda", name="mlp-gpu") as g:
        h = g.input("x", (4, 16))
        for i, (w, b) in enumerate(ws):     # constants packed on the device
            h = _layer(g, h, w, b, "relu" if i < len(ws) - 1 else "none")
        g.output(h)
    a = rng.standard_normal((4, 16)).astype(np.float32)
    x, y = c.from_numpy(a).to("cuda"), c.empty((4, 4), device="cuda")
    for _ in range(3):
        assert g.run(x, out=y) is y
    h = x
    for i, (w, b) in enumerate(ws):
        h = _layer_ops(c, h, w.copy(), b.copy(),
                       "relu" if i < len(ws) - 1 else "none")
    assert y.numpy().tobytes() == h.numpy().tobytes()
    np.testing.assert_array_equal(g.run(a).numpy(), y.numpy())   # host in, staged
    # wait=True: answered when done, so y is final with no synchronize()
    y2 = c.empty((4, 4), device="cuda")
    for _ in range(3):
        assert g.run(x, out=y2, wait=True) is y2
        assert not c._runner.unsynced
    assert y2.numpy().tobytes() == h.numpy().tobytes()


def test_builder_misuse_is_refused_with_what_was_wrong(c):
    g, other = c.graph(name="a"), c.graph(name="b")
    x, y = g.input("x", (2, 3)), other.input("y", (2, 3))
    with pytest.raises(opd.BadArgumentError, match="value of another graph"):
        g.relu(y)
    with pytest.raises(opd.BadArgumentError, match="not a value of this graph"):
        g.output(y)
    with pytest.raises(opd.BadArgumentError, match="has no outputs"):
        g.define()
    with pytest.raises(opd.BadArgumentError, match="input 1 is None"):
        g.layernorm(x, None, np.ones(3, np.float32))
    with pytest.raises(opd.BadArgumentError, match="shape"):
        g.input("z", (-1, 3))
    g.output(g.relu(x))
    g.define()
    with pytest.raises(opd.ProtocolError, match="no longer be changed"):
        g.relu(x)
    with pytest.raises(opd.BadArgumentError, match="writes 1 outputs, 2 given"):
        g.run(np.zeros((2, 3), np.float32), out=(c.empty((2, 3)), c.empty((2, 3))))
    with pytest.raises(opd.BadArgumentError, match="output 0 must be an opd Tensor"):
        g.run(np.zeros((2, 3), np.float32), out=np.zeros((2, 3), np.float32))
    assert "relu" in g.relu.__doc__ and "Value" in g.relu.__doc__
