"""torch.ops.opd.* of the reduce part (sum, mean, amax, log_softmax, and
the new attributes of softmax, layernorm, rmsnorm, add and sub) under
torch.library.opcheck (schema, fake implementation against the real
one, PT2 tracing) and against torch's own ops, on CPU tensors and, where
the daemon has a GPU, CUDA tensors."""
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import opd  # noqa: E402

try:
    import opd.torch as ot
except ImportError as e:           # torch < 2.4
    pytest.skip(str(e), allow_module_level=True)


def cases(dev):
    """[(op, args, kwargs, torch reference)]"""
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g).to(dev)

    x, x4 = r(3, 5, 7), r(2, 3, 4, 5)
    w, b = r(4, 5), r(4, 5)
    return [
        ("sum", (x,), {"dims": [1]}, x.sum(1)),
        ("sum", (x,), {}, x.sum()),
        ("sum", (x,), {"dims": [0, 2], "keepdim": True}, x.sum((0, 2), keepdim=True)),
        ("mean", (x,), {"dims": [-1]}, x.mean(-1)),
        ("mean", (x4,), {"dims": [1, 3], "keepdim": True}, x4.mean((1, 3), keepdim=True)),
        ("amax", (x,), {"dims": [0]}, x.amax(0)),
        ("amax", (x,), {}, x.amax()),
        ("softmax", (x,), {"dim": 1}, torch.softmax(x, 1)),
        ("softmax", (x,), {"dim": 0, "dtype": "float32"}, torch.softmax(x, 0, torch.float32)),
        ("log_softmax", (x,), {"dim": -1}, torch.log_softmax(x, -1)),
        ("log_softmax", (x,), {"dim": 0}, torch.log_softmax(x, 0)),
        ("layernorm", (x4, w, b), {}, F.layer_norm(x4, (4, 5), w, b)),
        ("layernorm", (x4, None, None), {"ndims": 3}, F.layer_norm(x4, (3, 4, 5))),
        ("rmsnorm", (x4, w), {}, F.rms_norm(x4, (4, 5), w)),
    ]


@pytest.mark.parametrize("i", range(14))
def test_opcheck_and_results(tc, i, devs):
    for dev in devs:
        name, args, kwargs, want = cases(dev)[i]
        op = getattr(torch.ops.opd, name)
        torch.library.opcheck(op.default, args, kwargs)
        torch.testing.assert_close(op(*args, **kwargs), want, rtol=1e-5, atol=1e-5)


def test_alpha(tc, devs):
    for dev in devs:
        a, b = torch.randn(4, 7, device=dev), torch.randn(7, device=dev)
        for name, ref in (("add", torch.add), ("sub", torch.sub)):
            op = getattr(torch.ops.opd, name)
            torch.library.opcheck(op.default, (a, b), {"alpha": 2.5})
            torch.testing.assert_close(op(a, b, alpha=2.5), ref(a, b, alpha=2.5))
            torch.testing.assert_close(op(a, b), ref(a, b))


def test_int_sum_is_int64(tc):
    x = torch.arange(24, dtype=torch.int32).reshape(2, 3, 4)
    torch.library.opcheck(torch.ops.opd.sum.default, (x,), {"dims": [1]})
    y = torch.ops.opd.sum(x, dims=[1])
    assert y.dtype == torch.int64 and torch.equal(y, x.sum(1))


def test_bad_input_names_it(tc):
    with pytest.raises(opd.BadArgumentError, match=r"sum: dims\[0\]=3 is out of range"):
        torch.ops.opd.sum(torch.zeros(2, 3), dims=[3])
    with pytest.raises(opd.BadArgumentError, match="softmax: dim=2 is out of range"):
        torch.ops.opd.softmax(torch.zeros(2, 3), dim=2)


def test_pool_and_batch_norm(tc, devs):
    for dev in devs:
        x = torch.randn(2, 3, 13, 12, device=dev)
        m, v = torch.randn(3, device=dev), torch.rand(3, device=dev) + 0.1
        w, b = torch.randn(3, device=dev), torch.randn(3, device=dev)
        for name, args, kwargs, want in [
            ("max_pool2d", (x,), {"kernel": [3], "stride": [2], "padding": [1]},
             F.max_pool2d(x, 3, 2, 1)),
            ("max_pool2d", (x,), {"kernel": [2, 3], "dilation": [2, 1], "ceil_mode": True},
             F.max_pool2d(x, (2, 3), dilation=(2, 1), ceil_mode=True)),
            ("adaptive_avg_pool2d", (x,), {"size": [5, 7]}, F.adaptive_avg_pool2d(x, (5, 7))),
            ("adaptive_avg_pool2d", (x[0],), {"size": [1]}, F.adaptive_avg_pool2d(x[0], 1)),
            ("batch_norm", (x, m, v, w, b), {"eps": 1e-3},
             F.batch_norm(x, m, v, w, b, training=False, eps=1e-3)),
            ("batch_norm", (x[:, :, 0], m, v), {}, F.batch_norm(x[:, :, 0], m, v)),
        ]:
            op = getattr(torch.ops.opd, name)
            torch.library.opcheck(op.default, args, kwargs)
            torch.testing.assert_close(op(*args, **kwargs), want, rtol=1e-5, atol=1e-5)
