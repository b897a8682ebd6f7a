"""Strided views of device tensors (and staged host ones) on the CUDA
backend: every op takes them as inputs and as out=, the daemon copying
around its kernels on the session's stream (daemon/backend/cuda/strided.c);
results against numpy. Skips without a CUDA device in the daemon (the GPU
machine runs it: tests/gpu/run.sh with PYTEST_GPU=1)."""
import numpy as np
import pytest

import opd


@pytest.fixture(scope="module", autouse=True)
def gpu_daemon(daemon):
    with opd.connect(daemon.socket) as c:
        if not c.devices():
            pytest.skip("the daemon under test reports no CUDA device")


def softmax_np(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_device_views(c):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((48, 80)).astype(np.float32)
    x = c.from_numpy(a, device="cuda")
    for name, v, ref in (("transpose", x.T, a.T), ("step", x[1::3, ::2], a[1::3, ::2]),
                         ("expand", x[:1].expand(6, 80), np.broadcast_to(a[:1], (6, 80))),
                         ("permute", x.view(6, 8, 80).permute(1, 2, 0),
                          a.reshape(6, 8, 80).transpose(1, 2, 0))):
        np.testing.assert_allclose(c.softmax(v).numpy(), softmax_np(np.ascontiguousarray(ref)),
                                   rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(c.relu(v).numpy(), np.maximum(ref, 0), err_msg=name)
    b = rng.standard_normal((80, 48)).astype(np.float32)
    np.testing.assert_allclose(c.matmul(x.T, c.from_numpy(b, device="cuda").T).numpy(),
                               a.T @ b.T, rtol=1e-3, atol=1e-3)


def test_device_strided_out_and_in_place(c):
    rng = np.random.default_rng(6)
    a = rng.standard_normal((16, 24)).astype(np.float32)
    x = c.from_numpy(a, device="cuda")
    big = c.from_numpy(np.full((16, 60), 5.0, np.float32), device="cuda")
    c.softmax(x, out=big[:, 20:44])
    got = big.numpy()
    np.testing.assert_allclose(got[:, 20:44], softmax_np(a), rtol=1e-5, atol=1e-6)
    assert (got[:, :20] == 5).all() and (got[:, 44:] == 5).all()
    v = x[::2, 1::2]
    c.relu(v, out=v)
    got = x.numpy()
    np.testing.assert_allclose(got[::2, 1::2], np.maximum(a[::2, 1::2], 0))
    np.testing.assert_allclose(got[1::2], a[1::2])


def test_staged_host_strided_out(c):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((10, 30)).astype(np.float32)
    hx = c.from_numpy(a)
    hbig = c.from_numpy(np.full((10, 70), 3.0, np.float32))
    out = hbig.T[5:35]                       # (30, 10): columns 5..34, transposed
    c.softmax(hx.T, out=out, device="cuda")  # host tensors staged
    got = hbig.numpy()
    np.testing.assert_allclose(got.T[5:35], softmax_np(a.T), rtol=1e-5, atol=1e-6)
    assert (got[:, :5] == 3).all() and (got[:, 35:] == 3).all()
