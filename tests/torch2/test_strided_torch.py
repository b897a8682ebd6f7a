"""torch.ops.opd.* on strided torch tensors (transposes, step slices,
expands, permutes) as inputs, strided out= tensors and in-place forms on
strided views, on the CPU and (when there is one) on CUDA, against torch
itself. Run with a torch >= 2.4 (tests/torch2/conftest.py)."""
import pytest

torch = pytest.importorskip("torch")
try:
    import opd.torch as ot
except ImportError as e:           # torch < 2.4: one clear error
    pytest.skip(str(e), allow_module_level=True)
F = torch.nn.functional


def test_strided_inputs(tc, devs):
    for dev in devs:
        g = torch.Generator().manual_seed(3)
        big = torch.randn(24, 40, generator=g).to(dev)
        for name, x in {"transpose": big.t(), "step": big[1::3, ::4],
                        "expand": big[:1].expand(5, 40),
                        "column": big[:, 7:8]}.items():
            torch.testing.assert_close(torch.ops.opd.softmax(x), torch.softmax(x, -1),
                                       msg=lambda m: "%s %s: %s" % (dev, name, m))
            torch.testing.assert_close(torch.ops.opd.relu(x), torch.relu(x))
        a, b = big[:, :16], big[:8, 16:]             # (24, 16), (8, 24) views
        torch.testing.assert_close(torch.ops.opd.matmul(a.t(), b.t()), a.t() @ b.t(),
                                   rtol=1e-4, atol=1e-4)
        x4 = torch.randn(2, 8, 3, 5, generator=g).to(dev).permute(0, 2, 3, 1)
        w, bb = torch.randn(8, generator=g).to(dev), torch.randn(8, generator=g).to(dev)
        torch.testing.assert_close(torch.ops.opd.layernorm(x4, w, bb, eps=1e-5),
                                   F.layer_norm(x4, (8,), w, bb, 1e-5),
                                   rtol=1e-4, atol=1e-5)


def test_strided_out_and_in_place(tc, devs):
    for dev in devs:
        g = torch.Generator().manual_seed(4)
        x = torch.randn(6, 10, generator=g).to(dev)
        big = torch.full((6, 30), 7.0, device=dev)
        torch.ops.opd.softmax_out(x, out=big[:, 10:20])
        torch.testing.assert_close(big[:, 10:20], torch.softmax(x, -1))
        assert (big[:, :10] == 7).all() and (big[:, 20:] == 7).all()
        yt = torch.zeros(10, 6, device=dev)
        torch.ops.opd.relu_out(x, out=yt.t())
        torch.testing.assert_close(yt.t(), torch.relu(x))
        z = x.clone()
        v = z[::2, 1::2]
        want = torch.relu(v)
        torch.ops.opd.relu_(v)
        torch.testing.assert_close(z[::2, 1::2], want)
        torch.testing.assert_close(z[1::2], x[1::2])            # rows not in v
        torch.testing.assert_close(z[::2, ::2], x[::2, ::2])    # columns not in v
