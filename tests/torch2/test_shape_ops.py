"""The data movement ops as torch.ops.opd.* (torch >= 2.4): permute,
reshape, slice, cat, embedding, where, expand, gather pass torch.library.opcheck
(schema, fake implementation against the real one, PT2 tracing) on CPU
tensors (and CUDA ones where the daemon has a GPU), with int and bool
dtypes too; their results equal torch's own ops; bad input raises the
daemon's message; and a torch.compile(fullgraph=True) trace through their
fake implementations runs."""
import pytest

torch = pytest.importorskip("torch")

import opd  # noqa: E402

try:
    import opd.torch as ot
except ImportError as e:  # torch < 2.4
    pytest.skip(str(e), allow_module_level=True)

F = torch.nn.functional
BIG = 2 ** 63 - 1


def samples(dev):
    """[(name, args, kwargs, torch's result)] of calls of each op on dev."""
    g = torch.Generator().manual_seed(0)

    def r(*shape, dtype=torch.float32):
        if dtype == torch.bool:
            return (torch.rand(*shape, generator=g) < 0.5).to(dev)
        if dtype.is_floating_point:
            return torch.randn(*shape, generator=g).to(dtype).to(dev)
        return torch.randint(-50, 50, shape, generator=g).to(dtype).to(dev)

    x, xi, xb = r(2, 3, 4), r(2, 3, 4, dtype=torch.int64), r(2, 3, 4, dtype=torch.bool)
    w, idx = r(10, 6), torch.randint(0, 10, (2, 5), generator=g).to(dev)
    cond, a, b = r(3, 4, dtype=torch.bool), r(2, 1, 4), r(4)
    col = r(3, 1, dtype=torch.float16)
    gi = torch.randint(0, 3, (2, 5, 4), generator=g).to(dev)     # along x's dim 1
    return [
        ("permute", (x,), {"dims": [2, 0, 1]}, x.permute(2, 0, 1)),
        ("permute", (xi,), {"dims": [-1, 1, 0]}, xi.permute(-1, 1, 0)),
        ("reshape", (x,), {"shape": [4, -1]}, x.reshape(4, -1)),
        ("reshape", (xb,), {"shape": [24]}, xb.reshape(24)),
        ("slice", (x,), {"dim": 1, "start": 1, "end": BIG, "step": 1}, x[:, 1:]),
        ("slice", (xi,), {"dim": -1, "start": -3, "end": -1, "step": 2}, xi[..., -3:-1:2]),
        ("cat", ([x, x[:, :1]],), {"dim": 1}, torch.cat([x, x[:, :1]], 1)),
        ("cat", ([xi, xi, xi],), {}, torch.cat([xi, xi, xi])),
        ("embedding", (w, idx), {}, F.embedding(idx, w)),
        ("embedding", (w, idx.int()), {}, F.embedding(idx, w)),
        ("where", (cond, a, b), {}, torch.where(cond, a, b)),
        ("where", (cond, xi[0, :, 0:1], xi[1, 0]), {}, torch.where(cond, xi[0, :, 0:1], xi[1, 0])),
        ("expand", (col,), {"shape": [2, -1, 5]}, col.expand(2, -1, 5)),
        ("gather", (x, gi), {"dim": 1}, torch.gather(x, 1, gi)),
        ("gather", (xi, gi[:1, :, :2]), {"dim": -2}, torch.gather(xi, -2, gi[:1, :, :2])),
        ("gather", (xb, gi[:, :2] % 4), {"dim": 2}, torch.gather(xb, 2, gi[:, :2] % 4)),
    ]


def test_opcheck_the_shape_ops(tc, devs):
    ran = set()
    for dev in devs:
        for name, args, kwargs, _ in samples(dev):
            args = tuple([t.contiguous() for t in a] if isinstance(a, list) else a.contiguous()
                         for a in args)
            torch.library.opcheck(getattr(torch.ops.opd, name).default, args, kwargs)
            ran.add(name)
    assert ran == {"permute", "reshape", "slice", "cat", "embedding", "where", "expand",
                   "gather"}


def test_results_equal_torch(tc, devs):
    for dev in devs:
        for name, args, kwargs, want in samples(dev):
            args = tuple([t.contiguous() for t in a] if isinstance(a, list) else a.contiguous()
                         for a in args)
            got = getattr(torch.ops.opd, name)(*args, **kwargs)
            assert got.dtype == want.dtype and got.device == want.device, name
            torch.testing.assert_close(got, want.contiguous(), rtol=0, atol=0, msg=name)


def test_bad_input_raises_the_daemons_message(tc):
    with pytest.raises(opd.BadArgumentError, match=r"permute: dims \[0,0\] repeats dim 0"):
        torch.ops.opd.permute(torch.zeros(2, 3), dims=[0, 0])
    with pytest.raises(opd.BadArgumentError, match=r"cat: input 1 is int64 but input 0 is "
                       "float32"):
        torch.ops.opd.cat([torch.zeros(2), torch.zeros(2, dtype=torch.int64)])
    with pytest.raises(opd.BadArgumentError, match=r"embedding: indices\[2\] \(flat\) = 7 is "
                       r"out of range \[0, 5\)"):
        torch.ops.opd.embedding(torch.zeros(5, 3), torch.tensor([0, 1, 7]))
    with pytest.raises(opd.BadArgumentError, match=r"gather: index\[1\] \(flat\) = 3 is "
                       r"out of range \[0, 3\) of x's dim 1"):
        torch.ops.opd.gather(torch.zeros(2, 3), torch.tensor([[0, 3]]), dim=1)
    with pytest.raises(opd.BadArgumentError, match=r"gather: index \[3,2\] is larger than x "
                       r"\[2,3\] on dim 0"):
        torch.ops.opd.gather(torch.zeros(2, 3), torch.zeros(3, 2, dtype=torch.int64), dim=1)


def test_compiled_trace_through_the_fakes(tc):
    def f(w, idx):
        h = torch.ops.opd.embedding(w, idx)                              # (B, T, C)
        q = torch.ops.opd.permute(torch.ops.opd.reshape(h, shape=[2, 5, 2, 3]),
                                  dims=[0, 2, 1, 3])                     # (B, H, T, D)
        return torch.ops.opd.cat([q, torch.ops.opd.slice(q, dim=-1, start=1)], dim=-1)

    g = torch.compile(f, fullgraph=True, backend="aot_eager")
    w, idx = torch.randn(10, 6), torch.randint(0, 10, (2, 5))
    q = F.embedding(idx, w).reshape(2, 5, 2, 3).permute(0, 2, 1, 3)
    torch.testing.assert_close(g(w, idx), torch.cat([q, q[..., 1:]], -1))
