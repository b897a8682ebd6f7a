"""Graph limits and daemon options, end to end on the CPU backend: a graph
of OPD_MAX_GRAPH_NODES nodes is taken and one more node is refused naming
the limit (by libopd's builder, before a request), the same for constants; --graph-inline-us 0 sends every graph
run to the pool (stats' "inline" stays 0) and the result is unchanged; a
reshape node of an intermediate shares its memory (the graph's
intermediates take less than a copy would) and the result equals numpy's."""
import numpy as np
import pytest

import opd


def _chain(c, n_nodes, n_consts=1):
    """x + c0 + c1 + ... as a chain of n_nodes add nodes over n_consts
    constants (used in turn)."""
    consts = [np.full((4,), k + 1, np.float32) for k in range(n_consts)]
    with c.graph(name="chain") as g:
        h = g.input("x", (4,))
        cv = [g.const(a) for a in consts]
        for k in range(n_nodes):
            h = g.add(h, cv[k % n_consts])
        g.output(h)
    want = sum(float(consts[k % n_consts][0]) for k in range(n_nodes))
    return g, want


def test_the_node_limit_is_taken_and_one_more_is_refused(c):
    g, want = _chain(c, 1024)
    x = c.from_numpy(np.zeros(4, np.float32))
    np.testing.assert_allclose(g.run(x).numpy(), np.full(4, want), rtol=1e-6)
    g.close()
    with pytest.raises(opd.LimitError) as e:      # libopd's builder refuses it
        _chain(c, 1025)
    assert "at most 1024 nodes" in str(e.value)


def test_the_const_limit_is_taken_and_one_more_is_refused(c):
    g, want = _chain(c, 1024, 1024)
    x = c.from_numpy(np.zeros(4, np.float32))
    np.testing.assert_allclose(g.run(x).numpy(), np.full(4, want), rtol=1e-6)
    g.close()
    with pytest.raises(opd.LimitError) as e:
        _chain(c, 1025, 1025)
    assert "at most 1024 constants" in str(e.value)


def test_graph_inline_us_0_runs_every_graph_on_the_pool(start_daemon):
    dm = start_daemon("--graph-inline-us", "0", "--idle-inline-us", "0")
    with opd.connect(dm.socket) as c:
        g, want = _chain(c, 8)
        x, y = c.from_numpy(np.ones(4, np.float32)), c.empty((4,))
        for _ in range(20):
            g.run(x, out=y)
        np.testing.assert_array_equal(y.numpy(), np.full(4, want + 1, np.float32))
        st = c.stats()["graphs"]
        assert st["runs"] >= 20 and st["inline"] == 0, st


def test_reshape_of_an_intermediate_shares_its_memory(c):
    if "reshape" not in c.ops():
        pytest.skip("the daemon has no reshape op")
    a = np.arange(24, dtype=np.float32).reshape(2, 12)
    with c.graph(name="views") as g:
        x = g.input("x", (2, 12))
        h = g.relu(x)                          # an intermediate [2, 12]
        v = g.reshape(h, shape=[2, 3, 4])      # shares h's memory
        w = g.reshape(v, shape=[6, 4])         # and so does this
        g.output(g.add(w, g.const(np.float32(1))))
    out = g.run(c.from_numpy(a)).numpy()
    np.testing.assert_array_equal(out, np.maximum(a, 0).reshape(6, 4) + 1)
    # one intermediate buffer of 96 bytes (h), not three
    assert g.temp_bytes <= 256, g.temp_bytes
