"""The reduce part of torch's semantics through a real daemon (CPU
backend), against numpy: sum / mean / amax over any dims with keepdim
(integer sums in int64), softmax and log_softmax on any dim and with
dtype=, layernorm and rmsnorm over several trailing dims, add and sub
with alpha; and bad input, each error naming what was wrong."""
import numpy as np
import pytest

import opd


def rand(rng, shape, scale=3.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def close(got, ref, atol=1e-5, rtol=1e-5):
    got = got.numpy() if isinstance(got, opd.Tensor) else got
    np.testing.assert_allclose(got, ref, atol=atol, rtol=rtol)


def raises(cls, name, f, *words):
    with pytest.raises(cls) as e:
        f()
    assert e.value.name == name, e.value
    for w in words:
        assert w in e.value.message, e.value


CASES = [((7,), None), ((3, 5), [0]), ((3, 5), [-1]), ((4, 1023), [1]),
         ((2, 3, 17), [0, 2]), ((2, 3, 17), [1]), ((5, 1, 4, 6), [1, 3]),
         ((64, 64), [0, 1]), ((2, 3, 4, 5), [-3, -1]), ((3, 0, 2), [2])]


@pytest.mark.parametrize("shape,dims", CASES)
@pytest.mark.parametrize("keep", [False, True])
def test_sum_mean_amax(c, rng, shape, dims, keep):
    a = rand(rng, shape)
    x = c.from_numpy(a)
    ax = None if dims is None else tuple(dims)
    kw = {} if dims is None else {"dims": dims}
    s = c.sum(x, keepdim=keep, **kw)
    assert s.dtype == "float32"
    close(s, a.astype(np.float64).sum(axis=ax, keepdims=keep), atol=1e-4)
    close(c.mean(x, keepdim=keep, **kw),
          a.astype(np.float64).mean(axis=ax, keepdims=keep), atol=1e-5)
    if a.size:
        close(c.amax(x, keepdim=keep, **kw), a.max(axis=ax, keepdims=keep), 0, 0)


def test_sum_of_ints_is_int64(c):
    for dt in (np.int8, np.uint8, np.int32, np.int64, np.bool_):
        a = (np.arange(24).reshape(2, 3, 4) % 5).astype(dt)
        s = c.sum(a, dims=[1])
        assert s.dtype == "int64"
        assert (s.numpy() == a.astype(np.int64).sum(axis=1)).all()
    big = np.full(4, 2**31 - 1, np.int32)
    assert c.sum(big).numpy() == 4 * (2**31 - 1)


def test_amax_nan_and_mean_of_nothing(c):
    a = np.array([[1, np.nan, 3], [4, 5, 6]], np.float32)
    y = c.amax(a, dims=[1]).numpy()
    assert np.isnan(y[0]) and y[1] == 6
    y = c.amax(a, dims=[0]).numpy()
    assert y[0] == 4 and np.isnan(y[1]) and y[2] == 6
    e = np.zeros((2, 0), np.float32)
    assert (c.sum(e, dims=[1]).numpy() == 0).all()
    assert np.isnan(c.mean(e, dims=[1]).numpy()).all()


def test_reduce_bad_input(c):
    x = np.ones((2, 3), np.float32)
    raises(opd.BadArgumentError, "EATTR", lambda: c.sum(x, dims=[2]),
           "sum", "dims[0]=2", "out of range", "rank 2")
    raises(opd.BadArgumentError, "EATTR", lambda: c.mean(x, dims=[0, -2]),
           "mean", "dims[1]=-2", "twice")
    raises(opd.BadArgumentError, "ESHAPE",
           lambda: c.amax(np.ones((2, 0), np.float32), dims=[1]),
           "amax", "extent 0")
    raises(opd.BadArgumentError, "EDTYPE",
           lambda: c.mean(np.ones(3, np.int32)), "mean", "int32")
    raises(opd.BadArgumentError, "EATTR", lambda: c.sum(x, dims="0"),
           "dims")


def _softmax(a, dim):
    a = a.astype(np.float64)
    e = np.exp(a - a.max(axis=dim, keepdims=True))
    return e / e.sum(axis=dim, keepdims=True)


@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 17), (4, 70, 3), (1,)])
def test_softmax_log_softmax_every_dim(c, rng, shape):
    a = rand(rng, shape)
    for dim in range(-len(shape), len(shape)):
        ref = _softmax(a, dim)
        close(c.softmax(a, dim=dim), ref, atol=1e-6)
        close(c.log_softmax(a, dim=dim), np.log(ref), atol=1e-5)
        close(c.softmax(a, dim=dim, dtype="float32"), ref, atol=1e-6)
    close(c.log_softmax(a), np.log(_softmax(a, -1)), atol=1e-5)


def test_softmax_bad_input(c):
    x = np.ones((2, 3), np.float32)
    raises(opd.BadArgumentError, "EATTR", lambda: c.softmax(x, dim=2),
           "softmax", "dim=2", "out of range")
    raises(opd.BadArgumentError, "EATTR",
           lambda: c.log_softmax(x, dtype="int32"), "dtype", "float16")
    # another dtype= converts x and writes that dtype (float16 computed in
    # float32, rounded once)
    y = c.softmax(x, dtype="float16").numpy()
    assert y.dtype == np.float16 and np.all(y == np.float16(1 / 3))


def _norm(a, k, w=None, b=None, eps=1e-5, rms=False):
    a = a.astype(np.float64)
    ax = tuple(range(a.ndim - k, a.ndim))
    mu = 0 if rms else a.mean(axis=ax, keepdims=True)
    y = (a - mu) / np.sqrt(((a - mu) ** 2).mean(axis=ax, keepdims=True) + eps)
    if w is not None:
        y = y * w
    return y + b if b is not None else y


def test_norms_over_several_dims(c, rng):
    a = rand(rng, (3, 4, 5, 6))
    w, b = rand(rng, (5, 6), 1.0), rand(rng, (5, 6), 1.0)
    close(c.layernorm(a, w, b), _norm(a, 2, w, b), atol=1e-4)
    close(c.layernorm(a, ndims=3), _norm(a, 3), atol=1e-4)
    close(c.layernorm(a), _norm(a, 1), atol=1e-4)
    eps = float(np.finfo(np.float32).eps)
    close(c.rmsnorm(a, w), _norm(a, 2, w, eps=eps, rms=True), atol=1e-4)
    close(c.rmsnorm(a, ndims=4), _norm(a, 4, eps=eps, rms=True), atol=1e-4)
    raises(opd.BadArgumentError, "ESHAPE",
           lambda: c.layernorm(a, np.ones((6, 5), np.float32)),
           "weight", "[6,5]", "[5,6]", "last 2 dims")
    raises(opd.BadArgumentError, "EATTR", lambda: c.rmsnorm(a, ndims=5),
           "ndims=5", "out of range")


def test_add_sub_alpha(c, rng):
    a, b = rand(rng, (4, 7)), rand(rng, (7,))
    for al in (1.0, 2.5, -0.5, 0.0):
        close(c.add(a, b, alpha=al), a + np.float32(al) * b, 1e-6, 1e-6)
        close(c.sub(a, b, alpha=al), a - np.float32(al) * b, 1e-6, 1e-6)
        close(c.sub(b, a, alpha=al), b - np.float32(al) * a, 1e-6, 1e-6)
    close(c.add(a, b, alpha=2), a + 2 * b, 1e-6, 1e-6)       # an int alpha
    raises(opd.BadArgumentError, "EATTR", lambda: c.mul(a, b, alpha=2.0),
           "alpha")
    raises(opd.BadArgumentError, "EATTR", lambda: c.add(a, b, alpha="x"),
           "alpha")
