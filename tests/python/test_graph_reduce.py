"""The reduce part's ops as graph nodes (daemon/graph, CPU backend): a
graph holding sum, mean, amax, softmax and log_softmax on a non-last dim
with dtype=, a layernorm over two dims and add / sub with alpha gives,
bit for bit, what the same ops give run one by one, and what numpy
gives within float tolerance; a node with a bad attribute is refused
when the graph is defined, naming the node's op and what was wrong."""
import numpy as np
import pytest

import opd


def _build(c, w, b):
    with c.graph(name="reduce-ops") as g:
        x = g.input("x", (4, 6, 5), "float32")
        s = g.softmax(x, dim=1, dtype="float32")
        ls = g.log_softmax(x, dim=0)
        n = g.layernorm(x, w, b)                    # over (6, 5)
        t = g.add(n, s, alpha=0.5)
        u = g.sub(t, ls, alpha=2.0)
        g.output(g.sum(u, dims=[1]))
        g.output(g.mean(u, dims=[0, 2], keepdim=True))
        g.output(g.amax(u))
    return g


def _ops(c, a, w, b):
    x = c.from_numpy(a)
    s = c.softmax(x, dim=1, dtype="float32")
    ls = c.log_softmax(x, dim=0)
    n = c.layernorm(x, c.from_numpy(w), c.from_numpy(b))
    u = c.sub(c.add(n, s, alpha=0.5), ls, alpha=2.0)
    return [c.sum(u, dims=[1]).numpy(), c.mean(u, dims=[0, 2], keepdim=True).numpy(),
            c.amax(u).numpy()]


def _numpy(a, w, b):
    a = a.astype(np.float64)
    e = np.exp(a - a.max(1, keepdims=True))
    s = e / e.sum(1, keepdims=True)
    ls = a - a.max(0, keepdims=True)
    ls = ls - np.log(np.exp(ls).sum(0, keepdims=True))
    mu = a.mean((1, 2), keepdims=True)
    n = (a - mu) / np.sqrt(((a - mu) ** 2).mean((1, 2), keepdims=True) + 1e-5) * w + b
    u = n + 0.5 * s - 2.0 * ls
    return [u.sum(1), u.mean((0, 2), keepdims=True), u.max()]


def test_graph_equals_the_ops_one_by_one(c, rng):
    w = rng.standard_normal((6, 5)).astype(np.float32)
    b = rng.standard_normal((6, 5)).astype(np.float32)
    g = _build(c, w, b)
    assert [tuple(o.shape) for o in g.outputs] == [(4, 5), (1, 6, 1), ()]
    for _ in range(2):
        a = rng.standard_normal((4, 6, 5)).astype(np.float32)
        got = g.run(a)
        ref = _ops(c, a, w, b)
        for y, r, n in zip(got, ref, _numpy(a, w, b)):
            assert y.numpy().tobytes() == r.tobytes()
            np.testing.assert_allclose(y.numpy(), n, rtol=1e-4, atol=1e-4)
    g.close()


def test_graph_refuses_a_bad_attribute_naming_it(c):
    with pytest.raises(opd.OpdError) as e:
        with c.graph(name="bad-dims") as g:
            x = g.input("x", (2, 3), "float32")
            g.output(g.sum(x, dims=[4]))
    assert "sum" in str(e.value) and "dims[0]=4" in str(e.value), e.value
