"""Strided tensors through the daemon: every op takes a strided view
(transpose, permute, step slices, stride-0 broadcasts) as input and writes
into a strided out= (a slice of a bigger tensor); the CPU kernels of the
ops marked cpu_strided (element-wise, softmax, the norms) read the
strides themselves, the daemon copies around the kernels of the others,
in the same run, and counts those copies in STATS ("strided"). Results
against numpy."""
import numpy as np
import pytest

import opd
from opd.tensor import Tensor


def softmax_np(a, axis=-1):
    e = np.exp(a - a.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def layernorm_np(a, w, b, eps=1e-5):
    m = a.mean(-1, keepdims=True)
    v = ((a - m) ** 2).mean(-1, keepdims=True)
    return (a - m) / np.sqrt(v + eps) * w + b


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def strided_stats(c):
    s = c.stats()["strided"]
    return s["copies"], s["bytes"]


def test_transposed_input_softmax(c):
    a = rand(33, 70)
    x = c.from_numpy(a)
    n0, b0 = strided_stats(c)
    y = c.softmax(x.T)
    assert y.shape == (70, 33) and y.is_contiguous()
    np.testing.assert_allclose(y.numpy(), softmax_np(a.T), rtol=1e-5, atol=1e-6)
    assert strided_stats(c) == (n0, b0)          # read in tiles: no copy
    ops = c.ops()
    assert ops["softmax"]["cpu_strided"] and ops["relu"]["cpu_strided"]
    assert not ops["matmul"]["cpu_strided"]


def test_transposed_inputs_matmul(c):
    a, b = rand(40, 24, seed=1), rand(56, 40, seed=2)
    xa, xb = c.from_numpy(a), c.from_numpy(b)
    n0, b0 = strided_stats(c)
    y = c.matmul(xa.T, xb.T)                      # (24, 40) @ (40, 56)
    np.testing.assert_allclose(y.numpy(), a.T @ b.T, rtol=1e-4, atol=1e-4)
    n1, b1 = strided_stats(c)                     # matmul's kernel: copies
    assert (n1 - n0, b1 - b0) == (2, a.nbytes + b.nbytes)   # two gathers


def test_permuted_input_layernorm(c):
    a = rand(2, 16, 3, 8, seed=3)                 # (B, C, T, H) read as (B, T, H, C)
    w, b = rand(16, seed=4), rand(16, seed=5)
    x = c.from_numpy(a).permute(0, 2, 3, 1)
    assert not x.is_contiguous()
    y = c.layernorm(x, c.from_numpy(w), c.from_numpy(b))
    ref = layernorm_np(a.transpose(0, 2, 3, 1), w, b)
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-4, atol=1e-5)


def test_step_slice(c):
    a = rand(20, 30, seed=6)
    x = c.from_numpy(a)
    v = x[1::3, ::4]
    assert v.shape == a[1::3, ::4].shape and (v.numpy() == a[1::3, ::4]).all()
    np.testing.assert_allclose(c.relu(v).numpy(), np.maximum(a[1::3, ::4], 0))
    np.testing.assert_allclose(c.gelu(x[::2]).numpy().shape, a[::2].shape)
    np.testing.assert_allclose(c.softmax(x[..., 2::5]).numpy(),
                               softmax_np(a[..., 2::5]), rtol=1e-5, atol=1e-6)


def test_broadcast_input(c):
    row, a = rand(1, 12, seed=7), rand(5, 12, seed=8)
    r = c.from_numpy(row).expand(5, 12)           # stride 0 on dim 0
    assert r.strides == (0, 1) and (r.numpy() == np.broadcast_to(row, (5, 12))).all()
    np.testing.assert_allclose(c.mul(r, c.from_numpy(a)).numpy(), row * a, rtol=1e-6)
    np.testing.assert_allclose(c.softmax(r).numpy(),
                               softmax_np(np.broadcast_to(row, (5, 12))), rtol=1e-5)
    col = c.from_numpy(rand(6, seed=9))[:, None].expand(-1, 4)
    assert col.strides == (1, 0)
    np.testing.assert_allclose(c.relu(col).numpy(), np.maximum(col.numpy(), 0))


def test_strided_out_slice(c):
    a = rand(8, 16, seed=10)
    big = c.from_numpy(np.full((8, 40), 7.0, np.float32))
    out = big[:, 10:26]                             # rows of 16 in rows of 40
    assert not out.is_contiguous()
    n0, b0 = strided_stats(c)
    y = c.softmax(c.from_numpy(a), out=out)
    assert y is out or y.offset == out.offset
    got = big.numpy()
    np.testing.assert_allclose(got[:, 10:26], softmax_np(a), rtol=1e-5, atol=1e-6)
    assert (got[:, :10] == 7).all() and (got[:, 26:] == 7).all()   # untouched
    n1, b1 = strided_stats(c)
    assert (n1 - n0, b1 - b0) == (0, 0)           # written by the kernel
    # a transposed out=: the result lands transposed
    t = c.zeros((16, 8))
    c.relu(c.from_numpy(a), out=t.T)
    np.testing.assert_allclose(t.numpy(), np.maximum(a, 0).T)


def test_strided_in_and_out_and_in_place(c):
    a = rand(12, 10, seed=11)
    x = c.from_numpy(a)
    v = x[::2, 1::2]                               # in place on a strided view
    ref = np.maximum(a[::2, 1::2], 0)
    c.relu(v, out=v)
    got = x.numpy()
    np.testing.assert_allclose(got[::2, 1::2], ref)
    np.testing.assert_allclose(got[1::2], a[1::2])         # rows not in v
    np.testing.assert_allclose(got[::2, ::2], a[::2, ::2])  # columns not in v
    # strided input and output of a two-input op
    b = rand(10, 12, seed=12)
    big = c.zeros((10, 36))
    c.add(x.T, c.from_numpy(b), out=big[:, ::3])
    np.testing.assert_allclose(big.numpy()[:, ::3], got.T + b, rtol=1e-6)
    assert (big.numpy()[:, 1::3] == 0).all()


def test_repeated_strided_run_uses_cache(c):
    a = rand(64, 48, seed=13)
    x = c.from_numpy(a)
    y = c.zeros((48, 64))
    hits = c.stats().get("run_cache_hits", 0)
    for k in range(4):
        c.run("softmax", x.T, out=y)
        np.testing.assert_allclose(y.numpy(), softmax_np(a.T), rtol=1e-5, atol=1e-6)
    assert c.stats()["run_cache_hits"] - hits >= 2


def test_copy_strided_to_strided(c):
    a = rand(6, 9, seed=14)
    big = c.zeros((9, 20))
    c.run("copy", c.from_numpy(a).T, out=big[:, 5:11])
    np.testing.assert_allclose(big.numpy()[:, 5:11], a.T)
    assert (big.numpy()[:, :5] == 0).all() and (big.numpy()[:, 11:] == 0).all()


def test_overlapping_output_refused(c):
    x = c.from_numpy(rand(4, 8, seed=15))
    big = c.zeros((8,))
    bad = Tensor(big.arena, big.offset, "float32", (4, 8), (0, 1))
    with pytest.raises(opd.BadArgumentError) as e:
        c.softmax(x, out=bad)
    assert e.value.name == "ELAYOUT" and "output 0" in e.value.message
    assert "overlap" in e.value.message
    inter = Tensor(big.arena, big.offset, "float32", (3, 3), (1, 2))
    with pytest.raises(opd.BadArgumentError, match="overlap"):
        c.relu(c.zeros((3, 3)), out=inter)
    with pytest.raises(opd.BadArgumentError, match="expand"):
        x.expand(5, 8)
    with pytest.raises(opd.BadArgumentError):
        x[::-1]


def test_views_match_numpy(c):
    a = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    t = c.from_numpy(a)
    for idx in [(1,), (slice(None), 2), (Ellipsis, slice(1, None, 2)),
                (None, 0, Ellipsis, None), (1, slice(None, None, 2), -1),
                (slice(0, 2, 3),), (slice(3, 1),)]:
        v = t[idx]
        assert v.shape == a[idx].shape, idx
        assert (v.numpy() == a[idx]).all(), idx
    assert (t.transpose(1, 3).numpy() == a.swapaxes(1, 3)).all()
    assert (t.permute(0, 1, 3, 2).view(6, 5, 4).numpy() ==
            a.transpose(0, 1, 3, 2).reshape(6, 5, 4)).all()
    assert (t[:, :, 1:3].view(2, 3, 10).numpy() == a[:, :, 1:3].reshape(2, 3, 10)).all()
    with pytest.raises(opd.BadArgumentError) as e:
        t.transpose(1, 2).view(2, -1)
    assert e.value.name == "ELAYOUT"
    assert (t.permute(0, 2, 1, 3).reshape(2, 4, 3, 5, 1).numpy() ==
            a.transpose(0, 2, 1, 3).reshape(2, 4, 3, 5, 1)).all()


def test_numpy_views_of_arena_memory(c):
    a = rand(8, 12, seed=16)
    t = c.from_numpy(a)
    n = t.numpy()
    v = n[1::2, ::3].T                             # numpy's strided view of t
    n0, _ = strided_stats(c)
    np.testing.assert_allclose(c.relu(v).numpy(), np.maximum(v, 0))
    assert strided_stats(c)[0] == n0               # sent as it is, read so
    big = c.zeros((8, 30))
    out = big.numpy()[:, 5:17]                     # numpy's view as out=
    assert c.softmax(t, out=out) is out
    np.testing.assert_allclose(big.numpy()[:, 5:17], softmax_np(a), rtol=1e-5, atol=1e-6)
    assert (big.numpy()[:, :5] == 0).all() and (big.numpy()[:, 17:] == 0).all()
    with pytest.raises(opd.BadArgumentError, match="ndarray"):
        c.relu(t, out=np.zeros((8, 12), np.float32))   # not in an arena


def test_metrics_count_the_copies(start_daemon):
    import socket
    import urllib.request
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    d = start_daemon("--metrics-listen", "127.0.0.1:%d" % port)
    c = opd.connect(d.socket)
    x = c.from_numpy(rand(16, 32, seed=17))
    c.softmax(x.T)          # (softmax and relu read strides: no copy)
    c.relu(x, out=c.zeros((16, 64))[:, ::2])
    c.matmul(x.T, c.from_numpy(rand(16, 32, seed=18)))  # a gather
    c.matmul(x, c.from_numpy(rand(32, 32, seed=19)), out=c.zeros((16, 64))[:, ::2])
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
    vals = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
            if line.startswith("opd_strided_")}
    assert vals == {"opd_strided_copies_total": 2,
                    "opd_strided_copy_bytes_total": 2 * 16 * 32 * 4}, vals
    assert c.stats()["strided"] == {"copies": 2, "bytes": 2 * 16 * 32 * 4}
    c.close()


def test_unsqueeze_and_contiguous(c):
    a = rand(3, 4, seed=18)
    t = c.from_numpy(a)
    assert t.unsqueeze(0).shape == (1, 3, 4) and t.unsqueeze(-1).shape == (3, 4, 1)
    assert (t.unsqueeze(1).numpy() == a[:, None]).all()
    assert t.contiguous() is t
    u = t.T.contiguous()
    assert u.is_contiguous() and (u.numpy() == a.T).all()
    with pytest.raises(opd.BadArgumentError):
        t.unsqueeze(3)


def test_elementwise_ops_on_one_dense_layout_copy_nothing(c):
    """relu / add / a 3-D permute with every tensor laid out alike (a
    transpose of contiguous) run on flat memory: no strided copy in the
    stats; the Client lays a functional result out as its input."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((48, 80)).astype(np.float32)
    b = rng.standard_normal((48, 80)).astype(np.float32)
    xt = c.from_numpy(np.ascontiguousarray(a.T)).T
    bt = c.from_numpy(np.ascontiguousarray(b.T)).T
    before = c.stats()["strided"]["copies"]
    y = c.empty((80, 48)).T
    c.run("relu", xt, out=y)
    np.testing.assert_array_equal(y.numpy(), np.maximum(a, 0))
    z = c.run("add", xt, bt)                       # functional: laid out as xt
    assert z.strides == xt.strides
    np.testing.assert_array_equal(z.numpy(), a + b)
    p = rng.standard_normal((3, 5, 7)).astype(np.float32)
    xp = c.from_numpy(np.ascontiguousarray(p.transpose(2, 0, 1))).permute(1, 2, 0)
    g = c.run("gelu", xp)
    assert g.strides == xp.strides
    np.testing.assert_allclose(g.numpy(), c.run("gelu", c.from_numpy(p)).numpy(), rtol=1e-6)
    assert c.stats()["strided"]["copies"] == before
    c.run("add", xt, c.from_numpy(b), out=c.empty((48, 80)))   # layouts differ:
    assert c.stats()["strided"]["copies"] == before             # read in tiles


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_cpu_strided_ops_read_numpy_views_without_copies(c, dtype):
    """The ops whose CPU kernels read strides (cpu_strided: element-wise,
    softmax, the norms) on numpy views of arena memory (a transpose, a
    3-D permute, a step slice, a stride-0 broadcast) and into out= slices
    of a bigger arena array: numpy's answer, no strided copy counted."""
    tol = {"float32": 1e-5, "float64": 1e-12, "float16": 3e-3}[dtype]
    rng = np.random.default_rng(21)

    def arena(shape):
        return c.from_numpy(rng.standard_normal(shape).astype(dtype)).numpy()

    base, p3, wide = arena((300, 40)), arena((6, 4, 290)), arena((40, 600))
    w, b = arena((300,)), arena((300,))
    views = {"transpose": base.T,                         # (40, 300)
             "permute": p3.transpose(2, 0, 1)[:40, 1, :],  # (40, 4) of (290, 6, 4)
             "step": wide[:, ::2],                        # (40, 300)
             "broadcast": np.broadcast_to(base[:, :1], (300, 40)).T}  # rows of stride 0
    n0 = c.stats()["strided"]["copies"]
    for name, x in views.items():
        assert not x.flags.c_contiguous, name
        x64 = x.astype(np.float64)
        C = x.shape[-1]
        big = c.zeros((x.shape[0], C + 7), dtype).numpy()
        out = big[:, 3:3 + C]                              # an out= slice
        mu, var = x64.mean(-1, keepdims=True), x64.var(-1, keepdims=True)
        wC, bC = w[:C], b[:C]
        w64, b64 = wC.astype(np.float64), bC.astype(np.float64)
        refs = [  # (op, inputs, attrs, numpy's answer)
            ("relu", (x,), {}, np.maximum(x64, 0)),
            ("gelu", (x,), {"approximate": "tanh"},
             0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64 ** 3)))),
            ("add", (x, x[0]), {}, x64 + x64[0]),
            ("mul", (x, x), {}, x64 * x64),
            ("softmax", (x,), {}, softmax_np(x64)),
            ("softmax", (x,), {"dim": 0}, softmax_np(x64, 0)),
            ("log_softmax", (x,), {}, np.log(softmax_np(x64))),
            ("layernorm", (x, wC, bC), {}, (x64 - mu) / np.sqrt(var + 1e-5) * w64 + b64),
            ("rmsnorm", (x, wC), {},
             x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + np.finfo(np.float32).eps) * w64),
        ]
        for op, ins, attrs, want in refs:
            what = "%s%s of %s (%s)" % (op, attrs, name, dtype)
            big[...] = 9
            getattr(c, op)(*ins, out=out, **attrs)
            np.testing.assert_allclose(out.astype(np.float64), want, rtol=tol, atol=tol,
                                       err_msg=what)
            assert (big[:, :3] == 9).all() and (big[:, 3 + C:] == 9).all(), what
            y = getattr(c, op)(*ins, **attrs)             # functional
            np.testing.assert_allclose(y.numpy().astype(np.float64), want, rtol=tol,
                                       atol=tol, err_msg=what)
    assert c.stats()["strided"]["copies"] == n0       # read in tiles, no copy


def test_cpu_strided_in_place_on_a_view(c):
    a = rand(40, 300, seed=22)
    t = c.from_numpy(a).numpy()
    v = t[::2].T                                      # (300, 20), strided
    c.softmax(v, dim=0, out=v)
    np.testing.assert_allclose(t[::2].T, softmax_np(a[::2].T, 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(t[1::2], a[1::2])   # rows not in the view
    c.layernorm(t.T, out=t.T)                         # normalize the columns
    ref = t.copy()
    np.testing.assert_allclose(ref.mean(0), 0, atol=1e-5)
