"""torch CPU interop: DLPack views of tensors anywhere in an arena,
c.from_torch, and operators on torch CPU tensors, against torch itself.

DESIGN
The tensors a Client allocates share arenas (64-byte blocks carved out
of one memfd), so most tensors are at a non-zero offset. Every test puts
several tensors in one arena on purpose (checked, not assumed) and looks
at all of them: a DLPack export whose `data` is the arena base with the
place in `byte_offset` reads right through numpy, which adds it, but
torch versions that ignore byte_offset (Debian's python3-torch 1.13)
view, and write, the arena's start. A "sentinel" tensor at offset 0
catches writes that land there. Needs torch (CI installs Debian's
python3-torch); skipped with the reason otherwise.
"""
import gc

import numpy as np
import pytest

import opd

torch = pytest.importorskip("torch", reason="torch is not installed (Debian's "
                            "python3-torch): torch CPU interop not tested")
F = torch.nn.functional

SENTINEL = np.arange(1000, 1016, dtype=np.float32)


def sentinel(c):
    """The first tensor of a fresh connection's first arena: offset 0."""
    s = c.from_numpy(SENTINEL)
    assert s.offset == 0, "the first tensor of a fresh client is not at offset 0"
    return s


def assert_sentinel(s):
    np.testing.assert_array_equal(s.numpy(), SENTINEL,
                                  err_msg="the tensor at the arena's start "
                                  "was overwritten")


def test_from_dlpack_views_each_tensor_of_one_arena(c):
    s = sentinel(c)
    ts = [c.from_numpy(np.arange(k * 100, k * 100 + 6, dtype=np.float32)
                       .reshape(2, 3)) for k in range(1, 5)]
    assert all(t.arena is s.arena for t in ts)
    assert sorted({t.offset for t in ts}) == [t.offset for t in ts] and ts[0].offset > 0
    views = [torch.from_dlpack(t) for t in ts]
    for k, (t, v) in enumerate(zip(ts, views), 1):
        assert v.data_ptr() == t.data_ptr()
        assert v.shape == (2, 3) and v.dtype == torch.float32
        assert v.tolist() == [[k * 100 + j + 3 * i for j in range(3)] for i in range(2)]
    # torch's writes reach opd and touch nothing else
    views[1][1, 2] = -7
    views[2].fill_(0.5)
    assert ts[1].numpy()[1, 2] == -7 and (ts[2].numpy() == 0.5).all()
    assert ts[0].numpy()[0, 0] == 100 and ts[3].numpy()[0, 0] == 400
    assert_sentinel(s)
    # opd's writes (numpy, and a daemon operator's output) reach torch
    ts[3].numpy()[0, 1] = 42
    assert views[3][0, 1].item() == 42
    c.relu(c.from_numpy(np.full((2, 3), -1, np.float32)), out=ts[0])
    assert (views[0] == 0).all()
    assert_sentinel(s)


def test_views_of_views_at_offsets(c):
    s = sentinel(c)
    a = np.arange(48, dtype=np.float32).reshape(4, 12)
    t = c.from_numpy(a)
    assert t.offset > 0
    for view, ref in ((t[1:], a[1:]), (t[2], a[2]), (t[3:4], a[3:4]),
                      (t.T, a.T), (t[1:3].T, a[1:3].T),
                      (t.reshape(8, 6)[5], a.reshape(8, 6)[5])):
        for tv in (torch.from_dlpack(view), view.torch()):
            assert tv.data_ptr() == view.data_ptr()
            assert tv.shape == ref.shape
            np.testing.assert_array_equal(tv.numpy(), ref)
    assert_sentinel(s)


@pytest.mark.parametrize("dt", ["float16", "bfloat16", "float64", "int8",
                                "uint8", "int32", "int64", "bool"])
def test_other_dtypes_at_offsets(c, dt):
    s = sentinel(c)
    x = (torch.arange(24) % 5 - 2).to(getattr(torch, dt)).reshape(4, 6)
    t = c.from_torch(x)
    assert t.dtype == dt and t.offset > 0 and t.arena is s.arena
    assert torch.equal(t.torch(), x) and t.torch().data_ptr() == t.data_ptr()
    assert torch.equal(t[2:].torch(), x[2:]) and torch.equal(t.T.torch(), x.T)
    if dt != "bool":                  # DLPack < 0.8 (torch 1.13) has no bool
        assert torch.equal(torch.from_dlpack(t[1:]), x[1:])
    assert_sentinel(s)


def test_from_torch_lands_where_it_says(c):
    s = sentinel(c)
    before = c.from_numpy(np.full(16, 3, np.float32))
    xs = [torch.randn(5, 7), torch.arange(12, dtype=torch.float32), torch.ones(3, 3)]
    ts = [c.from_torch(x) for x in xs]
    after = c.from_numpy(np.full(16, 4, np.float32))
    for x, t in zip(xs, ts):
        assert t.arena is s.arena and t.offset > 0
        assert t.shape == tuple(x.shape) and t.dtype == "float32"
        np.testing.assert_array_equal(t.numpy(), x.numpy())
        # a copy: changing the torch source leaves the opd tensor alone
        x.add_(1)
        assert not np.array_equal(t.numpy(), x.numpy())
    assert_sentinel(s)
    assert (before.numpy() == 3).all() and (after.numpy() == 4).all()


def test_from_torch_of_any_layout(c):
    s = sentinel(c)
    big = torch.arange(240, dtype=torch.float32).reshape(12, 20)
    sources = {
        "transposed": big.t(),
        "slice with a storage offset": big[3:7, 5:15],
        "column": big[:, 7],
        "step": big[::3, 1::4],
        "expanded (stride 0)": torch.arange(4.0).expand(3, 4),
        "0-d": torch.tensor(2.5),
        "empty": torch.empty(0, 5),
        "requires_grad": torch.linspace(-1, 1, 9, requires_grad=True),
        "channels_last": torch.arange(2 * 3 * 4 * 5, dtype=torch.float32)
        .reshape(2, 3, 4, 5).to(memory_format=torch.channels_last),
    }
    for name, x in sources.items():
        t = c.from_torch(x)
        assert t.is_contiguous(), name
        assert t.shape == tuple(x.shape), name
        assert torch.equal(t.torch(), x.detach()), name
    assert_sentinel(s)
    assert big[0, 0] == 0 and big[11, 19] == 239     # the sources are untouched


def test_ops_on_torch_cpu_tensors(c):
    s = sentinel(c)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(6, 33, generator=g)
    y = torch.randn(6, 33, generator=g)
    w = torch.randn(33, 17, generator=g)
    gamma, beta = torch.randn(33, generator=g), torch.randn(33, generator=g)
    cases = {
        "softmax": (c.softmax(x, dim=-1), torch.softmax(x, dim=-1)),
        "add": (c.add(x, y), x + y),
        "mul": (c.mul(x, y), x * y),
        "matmul": (c.matmul(x, w), x @ w),
        "relu": (c.relu(x), torch.relu(x)),
        "gelu": (c.gelu(x), F.gelu(x)),
        "gelu tanh": (c.gelu(x, approximate="tanh"), F.gelu(x, approximate="tanh")),
        "layernorm": (c.layernorm(x, gamma, beta, eps=1e-5),
                      F.layer_norm(x, (33,), gamma, beta, eps=1e-5)),
        # torch inputs that are views: a transpose, a slice of a bigger one
        "matmul of views": (c.matmul(w.t()[2:9], x.t()), w.t()[2:9] @ x.t()),
        "add, opd + torch": (c.add(c.from_torch(x), y[:, :]), x + y),
        "add, numpy + torch": (c.add(x.numpy(), y), x + y),
    }
    for name, (got, ref) in cases.items():
        assert isinstance(got, opd.Tensor), name
        assert got.shape == tuple(ref.shape), name
        torch.testing.assert_close(got.torch(), ref, atol=1e-5, rtol=1e-4,
                                   msg=lambda m, name=name: "%s: %s" % (name, m))
    assert_sentinel(s)
    # the torch inputs are read, never written
    assert torch.equal(x, torch.randn(6, 33, generator=torch.Generator().manual_seed(7)))


def test_op_into_opd_output_seen_by_torch(c):
    s = sentinel(c)
    x = torch.randn(4, 10)
    y = c.empty((4, 10))
    assert y.offset > 0
    view = y.torch()
    assert c.softmax(x, out=y) is y
    torch.testing.assert_close(view, torch.softmax(x, -1))
    c.add(view, view, out=y)               # a torch view of y as an input
    torch.testing.assert_close(view, 2 * torch.softmax(x, -1))
    assert_sentinel(s)


def test_torch_cpu_output_is_refused(c):
    x = torch.randn(3, 4)
    out = torch.zeros(3, 4)
    with pytest.raises(opd.BadArgumentError) as e:
        c.softmax(x, out=out)
    assert e.value.name == "EINVAL" and "CPU torch tensors" in str(e.value)
    assert (out == 0).all()


def test_cpu_dtype_refusal_names_the_dtype(c):
    s = sentinel(c)
    with pytest.raises(opd.BadArgumentError) as e:
        c.max_pool2d(torch.randn(1, 1, 4, 4).half(), kernel=[2, 2])
    assert e.value.name == "EDTYPE" and "float16" in str(e.value)
    assert_sentinel(s)


def test_torch_view_keeps_the_tensor_alive(c):
    s = sentinel(c)
    t = c.from_numpy(np.arange(64, dtype=np.float32))
    v = torch.from_dlpack(t[8:])
    ptr = t.data_ptr()
    del t
    gc.collect()
    fresh = [c.full((64,), -1.0) for _ in range(4)]   # reuses freed blocks
    assert all(f.data_ptr() != ptr for f in fresh)
    assert v.tolist() == [float(i) for i in range(8, 64)]
    assert_sentinel(s)
