"""Every operator against its numpy reference (refs.py) on random shapes,
awkward ones included (1, odd, prime, large last dims, batch broadcast)."""
import os
import re

import numpy as np
import pytest

import opd
import refs

SHAPES = [(1,), (7,), (3, 5), (1, 1), (4, 1023), (2, 3, 17), (5, 1, 4097), (64, 64)]


def rand(rng, shape, scale=3.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def close(got, ref, atol=1e-5, rtol=1e-4):
    got = got.numpy() if isinstance(got, opd.Tensor) else got
    np.testing.assert_allclose(got, ref, atol=atol, rtol=rtol)


@pytest.mark.parametrize("shape", SHAPES)
def test_unary(c, rng, shape):
    a = rand(rng, shape)
    x = c.from_numpy(a)
    close(c.relu(x), np.maximum(a, 0))
    close(c.gelu(x), refs.gelu(a), atol=1e-5)
    close(c.gelu(x, approximate="tanh"), refs.gelu(a, "tanh"), atol=1e-5)
    close(c.softmax(x), refs.softmax(a), atol=1e-6)
    close(c.softmax(x, dim=len(shape) - 1), refs.softmax(a), atol=1e-6)
    y = c.copy(x)
    assert (y.numpy() == a).all() and y.arena is not None


@pytest.mark.parametrize("sa,sb", [((5,), (5,)), ((3, 4), (4,)), ((2, 1, 7), (3, 1)),
                                   ((1,), (6, 6)), ((4, 1, 3), (1, 5, 3))])
def test_binary_broadcast(c, rng, sa, sb):
    a, b = rand(rng, sa), rand(rng, sb)
    close(c.add(a, b), a + b)
    close(c.mul(c.from_numpy(a), c.from_numpy(b)), a * b)


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (4, 1023), (2, 3, 256), (1, 4097)])
def test_norms(c, rng, shape):
    a = rand(rng, shape)
    w, b = rand(rng, shape[-1:], 1.0), rand(rng, shape[-1:], 1.0)
    x = c.from_numpy(a)
    close(c.layernorm(x), refs.layernorm(a), atol=1e-4)
    close(c.layernorm(x, w), refs.layernorm(a, w), atol=1e-4)
    close(c.layernorm(x, c.from_numpy(w), c.from_numpy(b), eps=1e-3),
          refs.layernorm(a, w, b, 1e-3), atol=1e-4)
    close(c.rmsnorm(x), refs.rmsnorm(a), atol=1e-4)
    close(c.rmsnorm(x, w, eps=1e-6), refs.rmsnorm(a, w, 1e-6), atol=1e-4)


@pytest.mark.parametrize("sa,sb", [((3, 5), (5, 2)), ((1, 1), (1, 1)), ((17, 33), (33, 9)),
                                   ((2, 4, 6), (6, 3)), ((7,), (7, 4)), ((4, 7), (7,)),
                                   ((3, 1, 2, 5), (4, 5, 6)), ((64, 128), (128, 96))])
def test_matmul(c, rng, sa, sb):
    a, b = rand(rng, sa, 1.0), rand(rng, sb, 1.0)
    got = c.matmul(c.from_numpy(a), c.from_numpy(b))
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert got.shape == ref.shape
    close(got, ref, atol=1e-4 * sa[-1], rtol=1e-4)


@pytest.mark.parametrize("n,ch,h,w,k,r,s,stride,padding,dilation,bias", [
    (1, 1, 5, 5, 1, 3, 3, 1, 0, 1, False),
    (2, 3, 8, 7, 4, 3, 3, 1, 1, 1, True),
    (1, 2, 9, 11, 3, 3, 2, 2, (1, 0), 1, True),
    (2, 2, 10, 10, 2, 3, 3, (2, 1), 2, 2, False),
    (1, 5, 7, 6, 6, 1, 1, 1, 0, 1, True),
])
def test_conv2d(c, rng, n, ch, h, w, k, r, s, stride, padding, dilation, bias):
    x, wt = rand(rng, (n, ch, h, w), 1.0), rand(rng, (k, ch, r, s), 1.0)
    b = rand(rng, (k,), 1.0) if bias else None
    got = c.conv2d(x, wt, b, stride=stride, padding=padding, dilation=dilation)
    ref = refs.conv2d(x, wt, b, stride, padding, dilation)
    assert got.shape == ref.shape
    close(got, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("n,thr", [(1, 0.5), (7, 0.3), (50, 0.5), (200, 0.7), (0, 0.5)])
def test_nms(c, rng, n, thr):
    xy = rng.uniform(0, 50, (n, 2))
    wh = rng.uniform(1, 20, (n, 2))
    boxes = np.concatenate([xy, xy + wh], axis=1).astype(np.float32)
    scores = rng.permutation(n).astype(np.float32) / max(n, 1)   # no ties
    keep = c.nms(c.from_numpy(boxes), c.from_numpy(scores), iou_threshold=thr)
    assert keep.dtype == "int64"
    np.testing.assert_array_equal(keep.numpy(), refs.nms(boxes, scores, thr))
    k2, count = c.run("nms", boxes, scores, iou_threshold=thr)
    assert count.numpy()[0] == len(keep) and k2.shape == (n,)
    assert (k2.numpy()[len(keep):] == -1).all()


def test_noop_and_copy_strided(c, rng):
    assert c.noop() is None and c.run("noop") is None
    a = rand(rng, (3, 4, 5))
    x = c.from_numpy(a)
    assert c.noop(x, x) is None
    p = x.permute(2, 0, 1)
    assert not p.is_contiguous()
    y = c.copy(p)
    assert y.shape == (5, 3, 4) and y.is_contiguous()
    np.testing.assert_array_equal(y.numpy(), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(c.copy(x.T).numpy(), a.T)


def test_out_and_inplace(c, rng):
    a = rand(rng, (6, 33))
    x, y = c.from_numpy(a), c.empty((6, 33))
    assert c.softmax(x, out=y) is y
    close(y, refs.softmax(a), atol=1e-6)
    assert c.run("softmax", x, out=y) is y
    # in place: out is the input itself
    for op, ref in [("relu", np.maximum(a, 0)), ("gelu", refs.gelu(a)),
                    ("softmax", refs.softmax(a)), ("layernorm", refs.layernorm(a)),
                    ("rmsnorm", refs.rmsnorm(a))]:
        t = c.from_numpy(a)
        assert c.run(op, t, out=t) is t
        close(t, ref, atol=1e-4)
    b = rand(rng, (33,))
    t = c.from_numpy(a)
    assert c.add(t, b, out=t) is t
    close(t, a + b)
    # multi-output op: out is a tuple
    boxes = np.array([[0, 0, 1, 1], [0, 0, 1, 1.05], [3, 3, 4, 4]], np.float32)
    scores = np.array([0.9, 0.8, 0.7], np.float32)
    keep, count = c.empty(3, "int64"), c.empty(1, "int64")
    kept = c.nms(boxes, scores, iou_threshold=0.5, out=(keep, count))
    assert kept.tolist() == [0, 2] and count.tolist() == [2] and kept.arena is keep.arena
    # output written in a sub-range of a bigger tensor (a view)
    big = c.zeros((4, 6, 33))
    c.softmax(x, out=big[2])
    close(big[2], refs.softmax(a), atol=1e-6)
    assert (big.numpy()[[0, 1, 3]] == 0).all()


def test_submit_wait_pipelined(c, rng):
    a = rand(rng, (4, 100))
    x = c.from_numpy(a)
    reqs = [c.submit("softmax", x) for _ in range(20)]
    for r in reqs:
        close(r.wait(), refs.softmax(a), atol=1e-6)
    y = c.from_numpy(a)
    reqs = [c.submit("relu", y, out=y), c.submit("softmax", y, out=y)]  # in order
    for r in reqs:
        r.wait()
    close(y, refs.softmax(np.maximum(a, 0)), atol=1e-6)


def registry_ops():
    """The X(<op>) lines of OPD_OPS in kernels/runtime/registry.c: the registry."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "kernels", "runtime", "registry.c")
    names, inside = [], False
    with open(path) as f:
        for line in f:
            if line.startswith("#define OPD_OPS(X)"):
                inside = True
                continue
            if not inside:
                continue
            m = re.match(r"\s*X\(([a-z0-9_]+)\)", line)
            if m:
                names.append(m.group(1))
            if "\\" not in line:
                break
    return names


def test_infer_and_schemas(c):
    ops = c.ops()
    names = registry_ops()
    assert len(names) >= 12
    for name in names:
        assert name in ops and name in dir(c)
    assert "approximate" in c.gelu.__doc__ and "eps" in c.layernorm.__doc__
    x = c.empty((2, 3, 8, 8))
    w = c.empty((4, 3, 3, 3))
    assert c.infer("conv2d", x, w, padding=1) == [("float32", (2, 4, 8, 8))]
    assert c.infer("matmul", c.empty((5, 3)), c.empty(3)) == [("float32", (5,))]
    with pytest.raises(AttributeError):
        c.not_an_op
