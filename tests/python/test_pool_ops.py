"""max_pool2d, adaptive_avg_pool2d and batch_norm (inference) through a
real daemon (CPU backend) against numpy references written here, as
graph nodes (bit for bit the ops run one by one), and bad input, each
error naming what was wrong."""
import numpy as np
import pytest

import opd


def rand(rng, shape, scale=3.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def raises(cls, name, f, *words):
    with pytest.raises(cls) as e:
        f()
    assert e.value.name == name, e.value
    for w in words:
        assert w in e.value.message, e.value


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _out_len(n, k, s, p, d, ceil):
    num = n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil else 0)
    o = num // s + 1
    if ceil and (o - 1) * s >= n + p:
        o -= 1
    return o


def max_pool2d(x, kernel, stride=None, padding=0, dilation=1, ceil_mode=False):
    (kh, kw), (ph, pw), (dh, dw) = _pair(kernel), _pair(padding), _pair(dilation)
    sh, sw = _pair(stride) if stride is not None else (kh, kw)
    H, W = x.shape[-2:]
    OH = _out_len(H, kh, sh, ph, dh, ceil_mode)
    OW = _out_len(W, kw, sw, pw, dw, ceil_mode)
    xp = np.full(x.shape[:-2] + (H + 2 * ph + kh * dh, W + 2 * pw + kw * dw), -np.inf,
                 np.float32)
    xp[..., ph:ph + H, pw:pw + W] = x
    y = np.full(x.shape[:-2] + (OH, OW), -np.inf, np.float32)
    for i in range(kh):
        for j in range(kw):
            h0, w0 = i * dh, j * dw
            y = np.maximum(y, xp[..., h0:h0 + sh * (OH - 1) + 1:sh, w0:w0 + sw * (OW - 1) + 1:sw])
    return y


def adaptive_avg_pool2d(x, size):
    OH, OW = _pair(size)
    H, W = x.shape[-2:]
    y = np.zeros(x.shape[:-2] + (OH, OW), np.float64)
    for i in range(OH):
        h0, h1 = i * H // OH, -((-(i + 1) * H) // OH)
        for j in range(OW):
            w0, w1 = j * W // OW, -((-(j + 1) * W) // OW)
            y[..., i, j] = x[..., h0:h1, w0:w1].astype(np.float64).mean(axis=(-2, -1))
    return y


@pytest.mark.parametrize("shape,kw", [
    ((2, 3, 9, 11), dict(kernel=3, stride=2, padding=1)),
    ((1, 2, 10, 7), dict(kernel=[2, 3], stride=[1, 2], padding=[0, 1], dilation=[2, 1],
                         ceil_mode=True)),
    ((3, 8, 8), dict(kernel=2)),
    ((2, 4, 15, 15), dict(kernel=5, stride=3, padding=2, ceil_mode=True)),
])
def test_max_pool2d(c, rng, shape, kw):
    a = rand(rng, shape)
    ref = max_pool2d(a, **kw)
    y = c.max_pool2d(a, **kw)
    assert y.shape == ref.shape
    np.testing.assert_array_equal(y.numpy(), ref)


@pytest.mark.parametrize("size", [1, [3, 3], [4, 5], [7, 7], [20, 13]])
def test_adaptive_avg_pool2d(c, rng, size):
    a = rand(rng, (2, 3, 14, 13))
    np.testing.assert_allclose(c.adaptive_avg_pool2d(a, size=size).numpy(),
                               adaptive_avg_pool2d(a, size), rtol=1e-5, atol=1e-6)
    u = a[0]                                                    # unbatched
    np.testing.assert_allclose(c.adaptive_avg_pool2d(u, size=size).numpy(),
                               adaptive_avg_pool2d(u, size), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(8, 5), (4, 5, 9), (3, 5, 7, 6)])
def test_batch_norm(c, rng, shape):
    a = rand(rng, shape)
    C = shape[1]
    m, v = rand(rng, (C,), 1.0), np.abs(rand(rng, (C,), 1.0)) + 0.1
    w, b = rand(rng, (C,), 1.0), rand(rng, (C,), 1.0)
    bc = (1, C) + (1,) * (len(shape) - 2)
    ref = (a.astype(np.float64) - m.reshape(bc)) / np.sqrt(v.reshape(bc) + 1e-3)
    np.testing.assert_allclose(c.batch_norm(a, m, v, eps=1e-3).numpy(), ref,
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(c.batch_norm(a, m, v, w, b, eps=1e-3).numpy(),
                               ref * w.reshape(bc) + b.reshape(bc), rtol=1e-5, atol=1e-5)


def test_pool_bad_input(c):
    x = np.ones((1, 1, 4, 4), np.float32)
    raises(opd.BadArgumentError, "EATTR", lambda: c.max_pool2d(x),
           "max_pool2d", "kernel", "required")
    raises(opd.BadArgumentError, "EATTR", lambda: c.max_pool2d(x, kernel=2, padding=2),
           "padding=[2, 2]", "half the kernel")
    raises(opd.BadArgumentError, "ESHAPE", lambda: c.max_pool2d(x, kernel=5),
           "too small")
    raises(opd.BadArgumentError, "ESHAPE",
           lambda: c.max_pool2d(np.ones((4, 4), np.float32), kernel=2),
           "(N, C, H, W)")
    raises(opd.BadArgumentError, "EATTR",
           lambda: c.adaptive_avg_pool2d(x, size=[0, 2]), "size=[0, 2]")
    raises(opd.BadArgumentError, "ESHAPE",
           lambda: c.batch_norm(x, np.zeros(2, np.float32), np.ones(1, np.float32)),
           "batch_norm", "mean", "[2]", "dim 1")
    raises(opd.BadArgumentError, "EARITY",
           lambda: c.batch_norm(x, np.zeros(1, np.float32)), "batch_norm")


def test_graph_of_pool_and_batch_norm(c, rng):
    C = 4
    m, v = rand(rng, (C,), 1.0), np.abs(rand(rng, (C,), 1.0)) + 0.1
    w, b = rand(rng, (C,), 1.0), rand(rng, (C,), 1.0)
    with c.graph(name="pool-bn") as g:
        x = g.input("x", (2, C, 13, 12), "float32")
        h = g.batch_norm(x, m, v, w, b)
        h = g.max_pool2d(h, kernel=3, stride=2, padding=1)
        g.output(g.adaptive_avg_pool2d(h, size=[2, 3]))
    for _ in range(2):
        a = rand(rng, (2, C, 13, 12))
        y = g.run(a)
        h = c.batch_norm(a, m, v, w, b)
        h = c.max_pool2d(h, kernel=3, stride=2, padding=1)
        ref = c.adaptive_avg_pool2d(h, size=[2, 3]).numpy()
        assert y.numpy().tobytes() == ref.tobytes()
        bn = (a - m.reshape(1, C, 1, 1)) / np.sqrt(v.reshape(1, C, 1, 1) + 1e-5)
        bn = bn * w.reshape(1, C, 1, 1) + b.reshape(1, C, 1, 1)
        want = adaptive_avg_pool2d(max_pool2d(bn.astype(np.float32), 3, 2, 1), [2, 3])
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)
    g.close()
