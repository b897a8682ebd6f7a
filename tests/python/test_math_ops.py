"""neg, abs, exp, log, sqrt, rsqrt, sin, cos through the real daemon
against torch (float32 within float rounding, float64 to 1e-12), in a
graph (T5's layer norm written out: x * rsqrt(mean(x^2) + eps)), NaN
and the IEEE edges as torch gives them."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

OPS = {"neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": torch.log,
       "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "sin": torch.sin, "cos": torch.cos}


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_against_torch(c, op, dtype):
    rng = np.random.default_rng(3)
    x = rng.uniform(0.01 if op in ("log", "sqrt", "rsqrt") else -6, 6, 3001).astype(dtype)
    got = c.run(op, c.from_numpy(x)).numpy()
    want = OPS[op](torch.from_numpy(x)).numpy()
    tol = 1e-12 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_edges_as_torch(c):
    x = np.array([0.0, -0.0, -1.0, np.inf, -np.inf, np.nan], np.float32)
    for op, f in OPS.items():
        got = c.run(op, c.from_numpy(x)).numpy()
        want = f(torch.from_numpy(x)).numpy()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=op)
        ok = ~np.isnan(want)
        np.testing.assert_allclose(got[ok], want[ok], rtol=1e-6, err_msg=op)


def test_t5_layer_norm_in_a_graph(c):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    with c.graph(name="t5norm") as g:
        v = g.input("x", (3, 64))
        ms = g.node("mean", g.mul(v, v), dims=[-1], keepdim=True)
        g.output(g.mul(v, g.node("rsqrt", g.add(ms, 1e-6))))
    t = torch.from_numpy(x)
    want = (t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6)).numpy()
    np.testing.assert_allclose(g.run(c.from_numpy(x)).numpy(), want, rtol=1e-5, atol=1e-6)
