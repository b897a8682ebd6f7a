"""hardtanh (F.hardtanh, F.relu6, torch.clamp with number bounds),
hardsigmoid and hardswish through the real daemon against torch: equal
bit for bit in float32 (the same formulas in the same order), float64
and float16 too, in a graph, in place, NaN kept, and a bad attribute's
message."""
import numpy as np
import pytest

import opd

torch = pytest.importorskip("torch", reason="torch is not installed")
F = torch.nn.functional


def _x(dtype=np.float32, n=4099):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(n) * 4).astype(dtype)
    x[:6] = [-3, 3, 0, -6, 6, np.nan]
    return x


CASES = [("hardsigmoid", {}, F.hardsigmoid), ("hardswish", {}, F.hardswish),
         ("hardtanh", {}, F.hardtanh),
         ("hardtanh", {"min_val": 0.0, "max_val": 6.0}, F.relu6),
         ("hardtanh", {"min_val": -0.5, "max_val": 2.0},
          lambda t: torch.clamp(t, -0.5, 2.0))]


@pytest.mark.parametrize("op,attrs,ref", CASES)
def test_equal_to_torch_in_float32(c, op, attrs, ref):
    x = _x()
    got = c.run(op, c.from_numpy(x), **attrs).numpy()
    want = ref(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_float64_and_float16(c, dtype):
    x = _x(dtype, 257)
    for op, attrs, ref in CASES:
        got = c.run(op, c.from_numpy(x), **attrs).numpy()
        want = ref(torch.from_numpy(x.astype(np.float64))).numpy()
        tol = 1e-12 if dtype == np.float64 else 2e-3
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


def test_in_a_graph_and_in_place(c):
    x = _x(n=64)
    with c.graph(name="mbv3") as g:
        v = g.input("x", (64,))
        h = g.node("hardswish", v)
        g.output(g.mul(h, g.node("hardsigmoid", h)))
    want = F.hardswish(torch.from_numpy(x))
    want = (want * F.hardsigmoid(want)).numpy()
    np.testing.assert_array_equal(g.run(c.from_numpy(x)).numpy(), want)
    t = c.from_numpy(x)
    c.run("hardtanh", t, out=t, min_val=0.0, max_val=6.0)
    np.testing.assert_array_equal(t.numpy(), F.relu6(torch.from_numpy(x)).numpy())


def test_a_bad_attribute_is_named(c):
    with pytest.raises(opd.OpdError) as e:
        c.run("hardtanh", c.from_numpy(_x(n=8)), min_val="low")
    assert "min_val" in str(e.value)
