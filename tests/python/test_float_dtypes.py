"""float64 and float16 numpy arrays through the Client on the CPU backend:
element-wise, row-wise, reduce and matmul/linear ops give numpy's answer
in the input's dtype (float64 to double precision, float16 within its
rounding of a float32 computation); softmax's dtype= converts; a graph
runs float64 nodes; a dtype the op does not take (int8 to softmax) is
still a clear error naming what each backend takes (and advises converting
float64 to float32 only where float32 is taken)."""
import numpy as np
import pytest

from opd import errors

TOL = {"float64": dict(rtol=1e-12, atol=1e-12),
       "float16": dict(rtol=2e-3, atol=2e-3)}


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def cases(x, w, b, m):
    """(name, opd call, numpy reference in float64) on x (4, 16)."""
    x64, w64, b64, m64 = (a.astype(np.float64) for a in (x, w, b, m))
    mu = x64.mean(-1, keepdims=True)
    var = x64.var(-1, keepdims=True)
    return [
        ("relu", lambda c: c.relu(x), np.maximum(x64, 0)),
        ("tanh", lambda c: c.tanh(x), np.tanh(x64)),
        ("add", lambda c: c.add(x, b), x64 + b64),
        ("div", lambda c: c.div(x, 1.5 + np.abs(b)), x64 / (1.5 + np.abs(b64))),
        ("softmax", lambda c: c.softmax(x, dim=0), softmax(x64, 0)),
        ("log_softmax", lambda c: c.log_softmax(x), np.log(softmax(x64))),
        ("layernorm", lambda c: c.layernorm(x, b, b),
         (x64 - mu) / np.sqrt(var + 1e-5) * b64 + b64),
        ("rmsnorm", lambda c: c.rmsnorm(x),
         x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + np.finfo(np.float32).eps)),
        ("sum", lambda c: c.sum(x, dims=[1]), x64.sum(1)),
        ("mean", lambda c: c.mean(x), x64.mean()),
        ("amax", lambda c: c.amax(x, dims=[0], keepdim=True), x64.max(0, keepdims=True)),
        ("matmul", lambda c: c.matmul(x, m), x64 @ m64),
        ("linear", lambda c: c.linear(x, w, b[:8], act="relu"),
         np.maximum(x64 @ w64.T + b64[:8], 0)),
    ]


@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_numpy_float_arrays_just_work(c, rng, dtype):
    x = rng.standard_normal((4, 16)).astype(dtype)
    w = rng.standard_normal((8, 16)).astype(dtype)
    b = rng.standard_normal(16).astype(dtype)
    m = rng.standard_normal((16, 5)).astype(dtype)
    for name, run, want in cases(x, w, b, m):
        got = run(c).numpy()
        assert got.dtype == np.dtype(dtype), name
        if dtype == "float16":
            # the float32 result rounded once to float16 (wider for the
            # sums of 16 float16 products, whose inputs are exact)
            tol = dict(rtol=2e-3, atol=2e-3 * max(1.0, float(np.abs(want).max())))
        else:
            tol = TOL[dtype]
        np.testing.assert_allclose(got.astype(np.float64), want, err_msg=name, **tol)


def test_float64_keeps_double_precision(c):
    # 1 + 1e-12 is 1 in float32: only a float64 kernel keeps the difference
    x = np.array([1.0 + 1e-12, 1.0], np.float64)
    d = c.sub(x, np.array([1.0, 1.0])).numpy()
    assert d.dtype == np.float64 and abs(d[0] - 1e-12) < 1e-16 and d[1] == 0


def test_softmax_dtype_converts(c, rng):
    x = rng.standard_normal((3, 7)).astype(np.float32)
    y = c.softmax(x, dtype="float64").numpy()
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, softmax(x.astype(np.float64)), rtol=1e-12)
    h = c.softmax(x, dtype="float16").numpy()
    assert h.dtype == np.float16
    np.testing.assert_allclose(h, softmax(x), rtol=2e-3, atol=1e-4)


def test_a_float64_graph(c, rng):
    x = rng.standard_normal((5, 12))
    w = rng.standard_normal((6, 12))
    with c.graph(name="float64") as g:
        gx = g.input("x", (5, 12), "float64")
        g.output(g.softmax(g.linear(gx, w)))
    y = g.run(x).numpy()
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, softmax(x @ w.T), rtol=1e-12)
    g.close()


def test_unsupported_dtypes_are_still_clear_errors(c):
    e = pytest.raises(errors.BadArgumentError,
                      lambda: c.softmax(np.ones((2, 4), np.int8)))
    assert "softmax: input 0 (x) has dtype int8, expected float32 or float16 or " \
        "bfloat16 or float64" in e.value.message, e.value.message
    # an op that still computes float32 only on the cpu says what each
    # backend takes, and does not offer float64
    e = pytest.raises(errors.BadArgumentError,
                      lambda: c.max_pool2d(np.ones((1, 1, 4, 4)), kernel=[2, 2]))
    msg = e.value.message
    assert "has dtype float64, expected float32 (float16 or bfloat16 on a cuda " \
        "device)" in msg and "convert float64 to float32" in msg, msg
    # float64 where no float is taken: no advice to convert to float32
    e = pytest.raises(errors.BadArgumentError,
                      lambda: c.embedding(np.ones((4, 3), np.float32), np.zeros(2)))
    msg = e.value.message
    assert "has dtype float64, expected int32 or int64" in msg and "convert" not in msg, msg
