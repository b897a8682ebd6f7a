"""The data movement ops through a real daemon on the CPU, against numpy:
permute, reshape, slice, cat, embedding, where, expand over the
protocol's dtypes (float32/16/64, bfloat16 as raw 16-bit values, int8,
uint8, int32, int64, bool); reshape in place; the daemon's messages for
bad input (the op, the attribute or input and the shapes named); and a
graph chaining them (embedding -> reshape -> permute -> slice -> cat ->
expand -> where, GPT-2's token/position embedding and head split)
equal to numpy and to the same ops run one by one."""
import re

import numpy as np
import pytest

import opd

DTYPES = ["float32", "float16", "float64", "int8", "uint8", "int32", "int64", "bool"]


def arr(rng, shape, dtype):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(-100 if np.dtype(dtype).kind == "i" else 0, 100, size=shape,
                        dtype=dtype)


def same(got, want):
    got = got.numpy() if isinstance(got, opd.Tensor) else got
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape,
                                                                 want.dtype, want.shape)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_permute(c, rng, dtype):
    x = arr(rng, (2, 3, 4, 5), dtype)
    for dims in ([0, 2, 1, 3], [3, 2, 1, 0], [-1, 0, -3, 2], [0, 1, 2, 3]):
        same(c.permute(x, dims=dims), np.ascontiguousarray(x.transpose(dims)))
    same(c.permute(x[0, 0], dims=[1, 0]), np.ascontiguousarray(x[0, 0].T))


@pytest.mark.parametrize("dtype", DTYPES)
def test_reshape(c, rng, dtype):
    x = arr(rng, (2, 3, 4), dtype)
    for shape in ([24], [4, -1], [-1, 2, 3, 2], [1, 24, 1]):
        same(c.reshape(x, shape=shape), x.reshape(shape))
    z = arr(rng, (0, 3), dtype)
    same(c.reshape(z, shape=[3, 0, 5]), z.reshape(3, 0, 5))


def test_reshape_in_place(c, rng):
    x = c.from_numpy(rng.standard_normal((4, 6)).astype(np.float32))
    want = x.numpy().copy()
    assert c.reshape(x, shape=[4, 6], out=x) is x
    same(x, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_slice_like_python(c, rng, dtype):
    x = arr(rng, (3, 10, 2), dtype)
    big = 2 ** 63 - 1
    for dim in (1, -2):
        for start, end, step in ((0, big, 1), (2, 7, 1), (-3, big, 1), (1, -1, 3),
                                 (-100, 100, 2), (7, 2, 1), (10, 12, 1), (0, 10, 20)):
            want = x[:, slice(start, None if end == big else end, step)]
            same(c.slice(x, dim=dim, start=start, end=end, step=step), np.ascontiguousarray(want))
    same(c.slice(x, start=1), np.ascontiguousarray(x[1:]))          # dim 0, to the end
    same(c.slice(x, dim=-1, start=1, end=2), np.ascontiguousarray(x[..., 1:2]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_cat(c, rng, dtype):
    a, b, e = arr(rng, (2, 3, 4), dtype), arr(rng, (2, 5, 4), dtype), arr(rng, (2, 0, 4), dtype)
    same(c.cat(a, e, b, dim=1), np.concatenate([a, e, b], 1))
    same(c.cat(a, b, dim=-2), np.concatenate([a, b], 1))
    same(c.cat(a, a, a), np.concatenate([a, a, a], 0))
    same(c.cat(a, a, dim=2), np.concatenate([a, a], 2))
    same(c.cat(a), a)
    xs = [arr(rng, (3, k + 1), dtype) for k in range(15)]            # the most inputs
    same(c.cat(*xs, dim=1), np.concatenate(xs, 1))


@pytest.mark.parametrize("dtype", DTYPES)
def test_expand(c, rng, dtype):
    x = arr(rng, (3, 1), dtype)
    same(c.expand(x, shape=[2, 3, 4]), np.ascontiguousarray(np.broadcast_to(x, (2, 3, 4))))
    same(c.expand(x, shape=[-1, 5]), np.ascontiguousarray(np.broadcast_to(x, (3, 5))))
    same(c.expand(x, shape=[3, 1]), x)
    same(c.expand(x, shape=[0, 3, 0]), np.zeros((0, 3, 0), dtype))


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int32"])
@pytest.mark.parametrize("itype", ["int32", "int64"])
def test_embedding(c, rng, dtype, itype):
    w = arr(rng, (50, 8), dtype)
    for shape in ((7,), (2, 5), (2, 3, 4), ()):
        i = rng.integers(0, 50, size=shape).astype(itype)
        same(c.embedding(w, i), w[i])


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather(c, rng, dtype):
    """np.take_along_axis is torch.gather where index has x's extents off
    dim; torch also lets them be smaller (x cut to them first)."""
    x = arr(rng, (3, 6, 4), dtype)
    for dim, ishape in ((1, (3, 9, 4)), (0, (5, 6, 4)), (-1, (3, 6, 2)), (1, (2, 4, 3))):
        i = rng.integers(0, x.shape[dim], size=ishape).astype(np.int64)
        cut = tuple(slice(None) if d == dim % 3 else slice(0, ishape[d]) for d in range(3))
        same(c.gather(x, i, dim=dim), np.take_along_axis(x[cut], i, axis=dim))


@pytest.mark.parametrize("dtype", DTYPES)
def test_where(c, rng, dtype):
    x, y = arr(rng, (2, 1, 5), dtype), arr(rng, (3, 1), dtype)
    for cond in (rng.random((3, 5)) < 0.5, (rng.random((5,)) < 0.5).astype(np.uint8),
                 np.array(True)):
        same(c.where(cond, x, y), np.where(cond.astype(bool), x, y))


def test_bad_input_names_what_was_wrong(c):
    x = np.zeros((2, 3, 4), np.float32)
    cases = [
        (lambda: c.permute(x, dims=[1, 0]), "permute: dims [1,0] has 2 entries but x [2,3,4] "
         "has rank 3"),
        (lambda: c.permute(x, dims=[0, 1, 1]), "permute: dims [0,1,1] repeats dim 1"),
        (lambda: c.permute(x, dims=[0, 1, 3]), "permute: dims[2] = 3 is out of range"),
        (lambda: c.reshape(x, shape=[5, 5]), "reshape: cannot reshape x [2,3,4] (24 elements) "
         "into [5,5] (25 elements)"),
        (lambda: c.reshape(x, shape=[-1, -1]), "reshape: shape [-1,-1] has more than one -1"),
        (lambda: c.slice(x, dim=3), "slice: dim 3 is out of range for x [2,3,4]"),
        (lambda: c.slice(x, step=0), "slice: step must be >= 1, got 0"),
        (lambda: c.cat(x, np.zeros((2, 3, 5), np.float32)), "cat: input 1 has shape [2,3,5] "
         "but input 0 has [2,3,4]; they must match except on dim 0"),
        (lambda: c.cat(x, x.astype(np.float16)), "cat: input 1 is float16 but input 0 is "
         "float32"),
        (lambda: c.cat(x, dim=-4), "cat: dim -4 is out of range"),
        (lambda: c.expand(x, shape=[2, 5, 4]), "expand: cannot expand x [2,3,4] to [2,5,4]"),
        (lambda: c.expand(x, shape=[3, 4]), "expand: shape [3,4] has 2 dims, fewer than x"),
        (lambda: c.embedding(np.zeros((4, 2), np.float32), np.array([0, 4])),
         "embedding: indices[1] (flat) = 4 is out of range [0, 4)"),
        (lambda: c.embedding(np.zeros((4, 2), np.float32), np.array([-1])),
         "embedding: indices[0] (flat) = -1 is out of range"),
        (lambda: c.embedding(np.zeros(4, np.float32), np.array([0])),
         "embedding: weight has shape [4]; expected (V, D)"),
        (lambda: c.embedding(np.zeros((4, 2), np.float32), np.array([0.0], np.float32)),
         "embedding: input 1 (indices) has dtype float32, expected int32 or int64"),
        (lambda: c.where(np.ones(3, bool), x, x.astype(np.float16)),
         "where: x is float32 but y is float16"),
        (lambda: c.where(np.ones(3, bool), np.ones(4, np.float32), np.ones(3, np.float32)),
         "where: cond [3], x [4] and y [3] do not broadcast together"),
        (lambda: c.where(np.ones(3, np.float32), x, x), "where: input 0 (cond) has dtype "
         "float32, expected uint8 or bool"),
    ]
    for f, msg in cases:
        with pytest.raises(opd.BadArgumentError, match=re.escape(msg)):
            f()


def test_a_graph_of_the_shape_ops(c, rng):
    """GPT-2's input side and head split as one graph: token + position
    embeddings, (B, T, C) -> (B, H, T, D), a causal mask from where, and
    a cat and slice on the way; equal to numpy, and to the ops one by one."""
    B, T, V, C, H = 2, 6, 40, 16, 4
    D = C // H
    wte = rng.standard_normal((V, C)).astype(np.float32)
    wpe = rng.standard_normal((T, C)).astype(np.float32)
    pos = np.arange(T, dtype=np.int64)
    tri = np.tril(np.ones((T, T), bool))
    with c.graph(name="shape-ops") as g:
        idx = g.input("idx", (B, T), "int64")
        h = g.add(g.embedding(wte, idx), g.embedding(wpe, pos))            # (B, T, C)
        q = g.permute(g.reshape(h, shape=[B, T, H, D]), dims=[0, 2, 1, 3])  # (B, H, T, D)
        kv = g.cat(q, g.slice(q, dim=-1, start=1, step=2), dim=-1)         # (B, H, T, D + D/2)
        m = g.where(tri, g.expand(g.reshape(g.slice(h, dim=2, end=1), shape=[B, 1, T, 1]),
                                  shape=[B, H, T, T]), np.float32(-1e9) * np.ones((1,),
                                                                             np.float32))
        g.output(kv, m)
    for _ in range(2):
        ix = rng.integers(0, V, size=(B, T))
        got_kv, got_m = g.run(ix)
        hh = wte[ix] + wpe[pos]
        qq = hh.reshape(B, T, H, D).transpose(0, 2, 1, 3)
        want_kv = np.concatenate([qq, qq[..., 1::2]], -1)
        want_m = np.where(tri, np.broadcast_to(hh[:, :, :1].reshape(B, 1, T, 1), (B, H, T, T)),
                          np.float32(-1e9))
        np.testing.assert_allclose(got_kv.numpy(), want_kv, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(got_m.numpy(), want_m, rtol=1e-6, atol=1e-6)
        # the same ops one by one give the same bits
        h1 = c.add(c.embedding(wte, ix), c.embedding(wpe, pos))
        q1 = c.permute(c.reshape(h1, shape=[B, T, H, D]), dims=[0, 2, 1, 3])
        kv1 = c.cat(q1, c.slice(q1, dim=-1, start=1, step=2), dim=-1)
        assert kv1.numpy().tobytes() == got_kv.numpy().tobytes()
    g.close()


def test_a_graph_refuses_a_bad_node_naming_it(c):
    g = c.graph(name="shape-bad")
    x = g.input("x", (2, 3), "float32")
    g.output(g.reshape(g.permute(x, dims=[1, 0]), shape=[4, 2]))
    with pytest.raises(opd.BadArgumentError) as e:
        g.define()
    assert "reshape" in str(e.value) and "cannot reshape x [3,2] (6 elements) into [4,2]" in \
        str(e.value), str(e.value)
