"""The reduce part's ops on the GPU through the daemon, against torch in
float64, every float dtype the daemon lists: sum / mean / amax over dims
(and integer sums into int64), softmax and log_softmax on any dim and
with dtype=float32, layernorm and rmsnorm over several trailing dims, add
and sub with alpha, max_pool2d, adaptive_avg_pool2d, batch_norm. Skips as
test_gpu.py does (its helpers and its module-level skip are reused)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from test_gpu import (TOL_WIDE, check, dtypes_of, gpu_daemon, randn,  # noqa: E402,F401
                      to_dev)

F = torch.nn.functional


@pytest.mark.parametrize("shape,dims", [((37, 1000), [1]), ((1000, 37), [0]),
                                        ((4, 5, 6, 7), [1, 3]), ((3000017,), None),
                                        ((4, 1000003), [1])])
def test_sum_mean_amax(c, shape, dims):
    kw = {} if dims is None else {"dims": dims}
    ax = tuple(range(len(shape))) if dims is None else tuple(dims)
    for i, dt in enumerate(dtypes_of(c, "sum")):
        xt = randn(shape, dt, 3100 + i)
        x, x64 = to_dev(c, xt), xt.double()
        n = x64.numel() // max(1, x64.sum(ax).numel())
        wide = {k: (a * n ** 0.5, r) for k, (a, r) in TOL_WIDE.items()}
        check(c.sum(x, **kw), x64.sum(ax), dt, wide)
        check(c.mean(x, keepdim=True, **kw), x64.mean(ax, keepdim=True), dt, TOL_WIDE)
        check(c.amax(x, **kw), x64.amax(ax), dt, {dt: (0, 0)})


def test_int_sum_on_the_device(c):
    xt = torch.randint(-1000, 1000, (37, 1000), dtype=torch.int32)
    y = c.sum(to_dev(c, xt), dims=[1])
    assert y.dtype == "int64"
    assert torch.equal(torch.from_dlpack(y.cpu()).clone(), xt.long().sum(1))


@pytest.mark.parametrize("shape", [(4, 7, 33), (3, 300, 70), (2, 2000, 3)])
def test_softmax_log_softmax_dims(c, shape):
    for i, dt in enumerate(dtypes_of(c, "softmax")):
        xt = randn(shape, dt, 3200 + i, scale=3.0)
        x, x64 = to_dev(c, xt), xt.double()
        for dim in range(-3, 3):
            check(c.softmax(x, dim=dim), torch.softmax(x64, dim), dt)
            check(c.log_softmax(x, dim=dim), torch.log_softmax(x64, dim), dt, TOL_WIDE)
            y = c.softmax(x, dim=dim, dtype="float32")
            assert y.dtype == "float32"
            check(y, torch.softmax(xt.float(), dim).double(), "float32")


def test_norms_over_several_dims(c):
    for i, dt in enumerate(dtypes_of(c, "layernorm")):
        xt = randn((6, 40, 70), dt, 3300 + i, scale=2.0)
        wt, bt = randn((40, 70), dt, 3400 + i), randn((40, 70), dt, 3500 + i)
        x, w, b = to_dev(c, xt), to_dev(c, wt), to_dev(c, bt)
        x64, w64, b64 = xt.double(), wt.double(), bt.double()
        check(c.layernorm(x, w, b), F.layer_norm(x64, (40, 70), w64, b64), dt, TOL_WIDE)
        check(c.layernorm(x, ndims=3), F.layer_norm(x64, (6, 40, 70)), dt, TOL_WIDE)
        eps = torch.finfo(torch.float32).eps
        rms = x64 / (x64.pow(2).mean((1, 2), keepdim=True) + eps).sqrt() * w64
        check(c.rmsnorm(x, w), rms, dt, TOL_WIDE)


def test_alpha(c):
    for i, dt in enumerate(dtypes_of(c, "add")):
        at, bt = randn((64, 257), dt, 3600 + i), randn((257,), dt, 3700 + i)
        a, b = to_dev(c, at), to_dev(c, bt)
        check(c.add(a, b, alpha=2.5), at.double() + 2.5 * bt.double(), dt, TOL_WIDE)
        check(c.sub(b, a, alpha=-0.5), bt.double() + 0.5 * at.double(), dt, TOL_WIDE)


def test_pool_and_batch_norm(c):
    for i, dt in enumerate(dtypes_of(c, "max_pool2d")):
        xt = randn((2, 64, 56, 56), dt, 3800 + i)
        x, x64 = to_dev(c, xt), xt.double()
        check(c.max_pool2d(x, kernel=3, stride=2, padding=1), F.max_pool2d(x64, 3, 2, 1), dt,
              {dt: (0, 0)})
        check(c.max_pool2d(x, kernel=[2, 3], dilation=[2, 1], ceil_mode=True),
              F.max_pool2d(x64, (2, 3), dilation=(2, 1), ceil_mode=True), dt, {dt: (0, 0)})
        check(c.adaptive_avg_pool2d(x, size=1), F.adaptive_avg_pool2d(x64, 1), dt, TOL_WIDE)
        check(c.adaptive_avg_pool2d(x, size=[5, 7]), F.adaptive_avg_pool2d(x64, (5, 7)), dt,
              TOL_WIDE)
        m, v = randn((64,), dt, 3900 + i), randn((64,), dt, 4000 + i).abs() + 0.1
        w, b = randn((64,), dt, 4100 + i), randn((64,), dt, 4200 + i)
        want = F.batch_norm(x64, m.double(), v.double(), w.double(), b.double(), eps=1e-3)
        check(c.batch_norm(x, to_dev(c, m), to_dev(c, v), to_dev(c, w), to_dev(c, b), eps=1e-3),
              want, dt, TOL_WIDE)


def _graph(c, dev, C, m, v):
    with c.graph(device=dev, name="reduce-ops-" + dev) as g:
        x = g.input("x", (2, C, 12, 12), "float32")
        h = g.batch_norm(x, m, v)
        h = g.max_pool2d(h, kernel=3, stride=2, padding=1)
        h = g.adaptive_avg_pool2d(h, size=[2, 2])            # (2, C, 2, 2)
        n = g.add(g.softmax(h, dim=1), g.log_softmax(h, dim=-1), alpha=0.5)
        n = g.layernorm(n, ndims=3)
        g.output(g.sum(n, dims=[1, 2]))
        g.output(g.amax(n, dims=[0]))
        g.output(g.mean(n))
    return g


def _host(t):
    return (t if t.device == "cpu" else t.cpu()).numpy()


def test_graph_on_the_device_equals_the_cpu_graph(c):
    """The ops as nodes of a CUDA graph (captured): every kernel there
    must neither synchronize nor cudaMalloc."""
    rng = np.random.default_rng(5)
    C = 8
    m = rng.standard_normal(C).astype(np.float32)
    v = np.abs(rng.standard_normal(C)).astype(np.float32) + 0.1
    cpu, gpu = _graph(c, "cpu", C, m, v), _graph(c, "cuda", C, m, v)
    for _ in range(3):
        a = rng.standard_normal((2, C, 12, 12)).astype(np.float32)
        for y, r in zip(gpu.run(a), cpu.run(a)):
            np.testing.assert_allclose(_host(y), _host(r), rtol=1e-4, atol=1e-4)
    gpu.close()
    cpu.close()
